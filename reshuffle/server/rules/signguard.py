"""SignGuard (Xu, Huang, Lai & Yang, ICDCS 2022), and a sign-statistics outlier test of ours."""

from __future__ import annotations

import math

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_positive, check_round, check_seed, check_updates, clip_factors, pairwise_sq_distances,
    column_median, round_rng,
)
from reshuffle.server.rules.registry import register_rule


def sign_statistics(X: np.ndarray) -> np.ndarray:
    """(n, 3): per row, the shares of positive, zero and negative coordinates."""
    s = np.sign(X)
    return np.stack([(s > 0).mean(axis=1), (s == 0).mean(axis=1), (s < 0).mean(axis=1)], axis=1)


def bandwidth(F: np.ndarray) -> float:
    """Mean over rows of the distance to the row's ⌊n/2⌋-th nearest row (itself counted first).

    A majority's spread sets it, so a tight minority cannot shrink it enough to
    split the majority.
    """
    n = F.shape[0]
    k = max(n // 2, 1)
    D = np.sqrt(np.maximum(pairwise_sq_distances(F), 0.0))
    return float(np.sort(D, axis=1)[:, k - 1].mean())


def mean_shift_labels(F: np.ndarray, h: float, max_iter: int = 300) -> np.ndarray:
    """Flat-kernel Mean-Shift (Comaniciu & Meer, 2002), seeded at every row, all seeds at once.

    Each seed moves to the mean of the rows within distance h until it moves by
    less than 10⁻³·h; converged seeds are ranked by how many rows lie within h,
    and a seed within h of a better-ranked kept one is merged into it. Rows take
    the label of the nearest kept centre (labels ordered by rank).
    """
    C = F.copy()
    for _ in range(max_iter):  # all n seeds move together; n is the number of clients
        near = np.linalg.norm(C[:, None, :] - F[None, :, :], axis=2) <= h
        new = (near @ F) / near.sum(axis=1, keepdims=True)
        moved = np.linalg.norm(new - C, axis=1)
        C = new
        if (moved < 1e-3 * h).all():
            break
    count = (np.linalg.norm(C[:, None, :] - F[None, :, :], axis=2) <= h).sum(axis=1)
    order = np.argsort(-count, kind="stable")
    kept: list[int] = []
    for i in order:  # at most n seeds
        if all(np.linalg.norm(C[i] - C[j]) > h for j in kept):
            kept.append(int(i))
    centres = C[kept]
    return np.argmin(np.linalg.norm(F[:, None, :] - centres[None, :, :], axis=2), axis=1)


def largest_meanshift_cluster(F: np.ndarray) -> np.ndarray:
    """Rows of the largest Mean-Shift cluster of the features F (ties: the better-ranked); all rows if F has no spread."""
    n = F.shape[0]
    h = bandwidth(F) if n > 1 else 0.0
    if not h > 0:
        return np.arange(n)
    labels = mean_shift_labels(F, h)
    return np.flatnonzero(labels == int(np.argmax(np.bincount(labels))))


@register_rule("signguard")
class SignGuard(Rule):
    r"""SignGuard: accept rows with a plausible norm and the majority's sign statistics.

    1. Norm filter: :math:`S_1 = \{i : L \le \lVert u_i \rVert / \mathrm{med}_j \lVert u_j \rVert \le R\}`
       (``lower`` = L, ``upper`` = R).
    2. Sign filter: on a random share ``fraction`` of the coordinates (drawn from
       the rule's (seed, round) stream), each row's features are the shares of
       its positive, zero and negative entries; Mean-Shift (flat kernel, bandwidth
       from the features, :func:`mean_shift_labels`) clusters them and
       :math:`S_2` is the largest cluster.
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


@register_rule("signstat")
class SignOutliers(Rule):
    r"""Sign-statistics outliers (ours): SignGuard's features with a robust distance test instead of clustering.

    On a random share ``fraction`` of the coordinates (from the rule's (seed,
    round) stream), :math:`F_i` = the shares of positive, zero and negative
    entries of row i, as in :class:`SignGuard`. With :math:`m` the
    coordinate-wise median of the :math:`F_i` and :math:`r_i = \lVert F_i - m \rVert`,

    .. math:: A = \{ i : r_i \le \kappa \cdot \mathrm{median}_j\, r_j \},

    and the aggregate is the mean of the accepted rows. Mean-Shift's largest
    cluster splits a majority whose features spread more than a tight minority's
    (then honest rows are flagged); a median test has no such failure, and
    leaves length to other rules (it looks at signs only).

    >>> import numpy as np
    >>> U = np.array([[1.0, 1.0, -1.0, 1.0], [1.0, -1.0, 1.0, 1.0], [1.0, 1.0, 1.0, -1.0],
    ...               [-1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, 1.0]])
    >>> SignOutliers(fraction=1.0, seed=0).select(U)   # shares of + : ¾, ¾, ¾, ¾, ¼
    [0, 1, 2, 3]
    """

    randomized = True

    def __init__(self, kappa: float = 3.0, fraction: float = 0.1, seed: int | None = None) -> None:
        self.kappa = check_positive(kappa, "signstat kappa")
        self.fraction = check_positive(fraction, "signstat coordinate fraction")
        if self.fraction > 1:
            raise ConfigError(f"signstat coordinate fraction must lie in (0, 1], got {fraction!r}")
        self.seed = check_seed(seed)

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        rng = round_rng(self.seed, check_round(round), self.name)
        U = check_updates(updates)
        d = U.shape[1]
        cols = np.sort(rng.choice(d, size=max(1, math.ceil(self.fraction * d)), replace=False))
        F = sign_statistics(U[:, cols])
        r = np.linalg.norm(F - column_median(F), axis=1)
        return Decision.mean_of(U, np.flatnonzero(r <= self.kappa * float(np.median(r))))
