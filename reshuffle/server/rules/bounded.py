r"""Rules that bound every row's influence instead of judging it: norm bounding (with noise), clipped trimming,
a robust learning rate.

Neither flags a row (``detects = False``: TPR = FPR = 0); what each row keeps
of itself is in ``weights``, and the attackers' share of the aggregate's
weight is what a grid cell reports for them.
"""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_f, check_non_negative, check_positive, check_round, check_seed, check_updates, clip_factors,
    round_rng,
)
from reshuffle.server.rules.coordinate import trim_columns
from reshuffle.server.rules.registry import register_rule


def _bound(U: np.ndarray, bound: float | None) -> tuple[np.ndarray, float]:
    """(per-row clipping factors, the bound S): S = ``bound``, or the median row norm."""
    norms = np.linalg.norm(U, axis=1)
    S = float(np.median(norms)) if bound is None else bound
    return clip_factors(norms, S), S


@register_rule("norm-bound")
class NormBound(Rule):
    r"""Norm bounding with weak differential-privacy noise (Sun, Kairouz, Suresh & McMahan, 2019).

    .. math:: a = \frac1n \sum_i u_i \min\Big(1, \frac{S}{\lVert u_i\rVert}\Big) + N(0, (\sigma S)^2 I)

    S = ``bound``, or the median row norm (over all rows, so f < n/2 long rows
    cannot move it far); σ = ``noise`` per coordinate, relative to S (FLAME's
    convention; 0: none), drawn from the rule's (seed, round) stream. Weights:
    the clipping factors.

    >>> import numpy as np
    >>> d = NormBound().decide(np.array([[3.0, 4.0], [0.6, 0.8], [1.2, 1.6]]))   # S = 2
    >>> d.weights.round(3).tolist(), d.aggregate.round(3).tolist()
    ([0.4, 1.0, 1.0], [1.0, 1.333])
    """

    detects = False
    randomized = True

    def __init__(self, bound: float | None = None, noise: float = 0.0, seed: int | None = None) -> None:
        self.bound = None if bound is None else check_positive(bound, "norm-bound bound")
        self.noise = check_non_negative(noise, "norm-bound noise")
        self.seed = check_seed(seed)

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        rng = round_rng(self.seed, check_round(round), self.name)
        U = check_updates(updates)
        k, S = _bound(U, self.bound)
        agg = (k @ U) / len(U)
        if self.noise > 0:
            agg = agg + rng.normal(0.0, self.noise * S, size=U.shape[1])
        return Decision(agg, tuple(range(len(U))), k)


@register_rule("clip-trim")
class ClipTrim(Rule):
    r"""Norm bounding, then the coordinate-wise trimmed mean: each row bounded in length and in every coordinate.

    1. Every row is clipped to S, the median row norm (``bound`` fixes it):
       :math:`v_i = u_i \min(1, S/\lVert u_i\rVert)`. A boosted row counts
       no more than a median one.
    2. Per coordinate, the ``trim`` largest and ``trim`` smallest of the
       :math:`v_{ij}` are dropped and the rest averaged (``trim`` defaults to
       the run's f; needs n > 2·trim). A row can move a coordinate only as far
       as the honest values around it reach, so a backdoor spread over few
       coordinates gets little of its length through, and no row needs to be
       judged.
    3. Optionally N(0, (σ S)²) per coordinate is added (σ = ``noise``, 0 by
       default), from the rule's (seed, round) stream.

    Weights: the clipping factor times the share of coordinates in which the
    row is kept. No row is flagged (``detects = False``).

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 2.0], [40.0, -40.0], [1.0, 1.0]])
    >>> d = ClipTrim(trim=1, seed=0).decide(U)   # S = median norm = 2: row 3 clipped to (1.41, −1.41)
    >>> d.aggregate.round(3).tolist(), d.weights.round(3).tolist()
    ([1.138, 0.631], [1.0, 0.447, 0.0, 0.018, 1.0])
    """

    detects = False
    randomized = True
    f_param = "trim"

    def __init__(self, trim: int = 0, bound: float | None = None, noise: float = 0.0, seed: int | None = None) -> None:
        self.trim = check_f(trim, "clip-trim trim")
        self.bound = None if bound is None else check_positive(bound, "clip-trim bound")
        self.noise = check_non_negative(noise, "clip-trim noise")
        self.seed = check_seed(seed)

    def min_rows(self) -> int:
        return 2 * self.trim + 1

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        rng = round_rng(self.seed, check_round(round), self.name)
        U = check_updates(updates)
        n = len(U)
        if n <= 2 * self.trim:
            raise ConfigError(f"clip-trim needs n > 2·trim updates; got n={n} with trim={self.trim}")
        k, S = _bound(U, self.bound)
        agg, kept = trim_columns(U * k[:, None], self.trim)
        if self.noise > 0:
            agg = agg + rng.normal(0.0, self.noise * S, size=U.shape[1])
        return Decision(agg, tuple(range(n)), k * kept.mean(axis=1))


@register_rule("robust-lr")
class RobustLR(Rule):
    r"""Robust learning rate (Ozdayi, Kantarcioglu & Gel, AAAI 2021), on norm-bounded rows.

    Rows are clipped to S (``bound``, or the median row norm; ``clip=False``
    leaves them as they are). Per coordinate j, the server's learning rate is
    +1 where the rows' signs agree, :math:`|\sum_i \mathrm{sign}(u_{ij})| \ge \theta`,
    and ``flip`` (−1, the paper's; 0 drops the coordinate) elsewhere:

    .. math:: a_j = \eta_j \cdot \frac1n \sum_i u_{ij} \min(1, S/\lVert u_i\rVert)

    θ = ``theta``, by default f + 1 (the paper's condition θ > f: the f
    attackers alone cannot make a coordinate agree). Weights: the clipping
    factors.

    >>> import numpy as np
    >>> U = np.array([[1.0, 1.0], [1.0, -1.0], [1.0, 1.0], [1.0, -1.0]])
    >>> RobustLR(f=1, clip=False).decide(U).aggregate.tolist()   # votes 4 and 0; θ = 2
    [1.0, -0.0]
    """

    detects = False
    f_param = "f"

    def __init__(self, f: int = 0, theta: int | None = None, flip: float = -1.0, bound: float | None = None,
                 clip: bool = True) -> None:
        self.f = check_f(f)
        if theta is not None and (isinstance(theta, bool) or not isinstance(theta, int) or theta < 1):
            raise ConfigError(f"robust-lr theta must be a positive int or None (f + 1), got {theta!r}")
        self.theta = self.f + 1 if theta is None else theta
        if flip not in (-1, -1.0, 0, 0.0) or isinstance(flip, bool):
            raise ConfigError(f"robust-lr flip must be -1 (reverse) or 0 (drop), got {flip!r}")
        self.flip = float(flip)
        self.bound = None if bound is None else check_positive(bound, "robust-lr bound")
        if not isinstance(clip, bool):
            raise ConfigError(f"robust-lr clip must be true or false, got {clip!r}")
        self.clip = clip

    def min_rows(self) -> int:
        return self.theta

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        check_round(round)
        U = check_updates(updates)
        n = len(U)
        if self.theta > n:
            raise ConfigError(f"robust-lr theta={self.theta} cannot be reached by {n} rows")
        k = _bound(U, self.bound)[0] if self.clip else np.ones(n)
        mean = (k @ U) / n
        votes = np.abs(np.sign(U).sum(axis=0))  # clipping keeps signs
        return Decision(np.where(votes >= self.theta, 1.0, self.flip) * mean, tuple(range(n)), k)
