"""SignGuard (Xu, Huang, Lai & Yang, ICDCS 2022): norm filter, sign-statistics clustering, norm clipping."""

from __future__ import annotations

import math

import numpy as np
from sklearn.cluster import MeanShift, estimate_bandwidth

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_positive, check_round, check_seed, check_updates, clip_factors, round_rng,
)
from reshuffle.server.rules.registry import register_rule


def sign_statistics(X: np.ndarray) -> np.ndarray:
    """(n, 3): per row, the shares of positive, zero and negative coordinates."""
    s = np.sign(X)
    return np.stack([(s > 0).mean(axis=1), (s == 0).mean(axis=1), (s < 0).mean(axis=1)], axis=1)


def largest_meanshift_cluster(F: np.ndarray) -> np.ndarray:
    """Rows of the largest Mean-Shift cluster of the features F (ties: the lowest label); all rows if F has no spread.

    The bandwidth is the mean distance of a row to its ⌊n/2⌋-th nearest row: a
    majority's spread sets it, so a tight minority cannot shrink it enough to
    split the majority.
    """
    n = F.shape[0]
    bw = estimate_bandwidth(F, quantile=0.5) if n > 1 else 0.0
    if not bw > 0:
        return np.arange(n)
    labels = MeanShift(bandwidth=bw).fit_predict(F)
    return np.flatnonzero(labels == int(np.argmax(np.bincount(labels))))


@register_rule("signguard")
class SignGuard(Rule):
    r"""SignGuard: accept rows with a plausible norm and the majority's sign statistics.

    1. Norm filter: :math:`S_1 = \{i : L \le \lVert u_i \rVert / \mathrm{med}_j \lVert u_j \rVert \le R\}`
       (``lower`` = L, ``upper`` = R).
    2. Sign filter: on a random share ``fraction`` of the coordinates (drawn from
       the rule's (seed, round) stream), each row's features are the shares of
       its positive, zero and negative entries; Mean-Shift (bandwidth estimated
       from the features) clusters them and :math:`S_2` is the largest cluster.
    3. Accepted: :math:`A = S_1 \cap S_2`; each accepted row is clipped to the
       median norm and the aggregate is their mean:
       :math:`\mathrm{agg} = \frac{1}{|A|}\sum_{i \in A} u_i \min(1, \mathrm{med}_j \lVert u_j \rVert / \lVert u_i \rVert)`.

    Weights: the clipping factor for accepted rows, 0 for the others.

    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> honest = 1.0 + 0.5 * rng.normal(size=(6, 400))
    >>> U = np.vstack([honest, -honest[:2]])   # two sign-flipped rows
    >>> SignGuard(seed=0).select(U, round=1)
    [0, 1, 2, 3, 4, 5]
    """

    randomized = True

    def __init__(self, lower: float = 0.1, upper: float = 3.0, fraction: float = 0.1, seed: int | None = None) -> None:
        self.lower = check_positive(lower, "SignGuard lower norm ratio")
        self.upper = check_positive(upper, "SignGuard upper norm ratio")
        if self.lower >= self.upper:
            raise ConfigError(f"SignGuard needs lower < upper, got lower={lower} and upper={upper}")
        self.fraction = check_positive(fraction, "SignGuard coordinate fraction")
        if self.fraction > 1:
            raise ConfigError(f"SignGuard coordinate fraction must lie in (0, 1], got {fraction!r}")
        self.seed = check_seed(seed)

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        rng = round_rng(self.seed, check_round(round), self.name)
        U = check_updates(updates)
        n, d = U.shape
        norms = np.linalg.norm(U, axis=1)
        med = float(np.median(norms))
        if med > 0:
            ratio = norms / med
            s1 = (ratio >= self.lower) & (ratio <= self.upper)
        else:
            s1 = norms == 0
        cols = np.sort(rng.choice(d, size=max(1, math.ceil(self.fraction * d)), replace=False))
        s2 = np.zeros(n, dtype=bool)
        s2[largest_meanshift_cluster(sign_statistics(U[:, cols]))] = True
        accepted = np.flatnonzero(s1 & s2)
        k = clip_factors(norms, med) if med > 0 else np.ones(n)
        weights = np.zeros(n)
        weights[accepted] = k[accepted]
        agg = (k[accepted] @ U[accepted]) / accepted.size if accepted.size else np.zeros(d)
        return Decision(agg, tuple(accepted.tolist()), weights)
