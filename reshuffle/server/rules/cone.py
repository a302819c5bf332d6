r"""Cone-clip: the majority cosine cluster widened to its own cone, near-copies counted once, median-norm clipping.

1. Cluster: HDBSCAN on cosine distances (as FLAME, min cluster size ⌊n/2⌋ + 1)
   gives the majority cluster C; without one, C is every row.
2. Cone: c is the mean direction of C's unit rows, :math:`\delta_i = 1 - \cos(u_i, c)`
   each row's angle to it, and the radius is
   :math:`r = \mathrm{med}(\delta) + \kappa \cdot 1.4826\,\mathrm{MAD}(\delta)` over all rows
   (median and MAD move little while fewer than half the rows are malicious).
   C's rows count in full; every other row within r of c is accepted at weight
   ``trust`` (0.1), rows outside the cone are rejected. On non-IID data honest
   rows are spread out and HDBSCAN leaves some of them outside C although they
   point the way C does; the cone takes them back, so clean runs flag few honest
   rows, while a colluding group outside the majority cluster (a backdoor)
   keeps only a tenth of its weight.
3. Multiplicity: accepted rows much closer to each other than honest rows are to
   their nearest neighbours share one row's weight. Each accepted row's trust is
   divided by :math:`m_i = \sum_j \exp(-(D_{ij}/h)^2)` over the accepted rows j,
   D the cosine distances and :math:`h = \texttt{dedup} \cdot \mathrm{med}_i
   \min_{j \ne i} D_{ij}` (0.5 of the median nearest-neighbour distance; with
   h = 0 exact copies count once). Honest clients train on different data, so
   their rows are never copies; ``mimic``'s colluders upload one honest row f
   times to weigh its client's data f + 1 times, and count once here.
4. Clipping: every accepted row is shortened to :math:`S = \mathrm{median}_i \lVert u_i\rVert`
   (over all rows, so at most f < n/2 rows cannot move it far), and the
   aggregate is :math:`\sum_i t_i k_i u_i / \sum_i t_i` with weight t_i (trust
   over multiplicity) and clipping factor k_i. A scaled row (model replacement,
   constrain-and-scale) thus counts no more than an honest row of median length,
   whatever its factor.

Accepted means "inside the cone"; trust and clipping are reported in ``weights``,
not as flags (``honest_weight`` in metrics.json shows what they cost honest rows).
"""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import Decision, Rule, check_round, check_updates, clip_factors
from reshuffle.server.rules.flame import majority_cluster, norms_and_cosines
from reshuffle.server.rules.registry import register_rule


@register_rule("cone-clip")
class ConeClip(Rule):
    """Majority cluster in full, the rest of its cosine cone at ``trust``, near-copies once, clipped to the median norm.

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.1], [1.0, -0.1], [2.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    >>> d = ConeClip().decide(U)   # the last row points away; S = median norm = 1; all others clustered
    >>> d.accepted, d.weights.round(2).tolist()   # rows 2 and 3 point the same way: one row's weight
    ((0, 1, 2, 3), [1.0, 1.0, 0.25, 0.5, 0.0])
    """

    def __init__(self, kappa: float = 3.0, trust: float = 0.1, dedup: float = 0.5) -> None:
        if isinstance(kappa, bool) or not isinstance(kappa, (int, float)) or not 0 < kappa < float("inf"):
            raise ConfigError(f"cone-clip kappa must be a positive number, got {kappa!r}")
        if isinstance(trust, bool) or not isinstance(trust, (int, float)) or not 0 < trust <= 1:
            raise ConfigError(f"cone-clip trust must be a number in (0, 1], got {trust!r}")
        if isinstance(dedup, bool) or not isinstance(dedup, (int, float)) or not 0 <= dedup < float("inf"):
            raise ConfigError(f"cone-clip dedup must be a number >= 0 (0: off), got {dedup!r}")
        self.kappa = float(kappa)
        self.trust = float(trust)
        self.dedup = float(dedup)

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        check_round(round)
        U = check_updates(updates)
        n, d = U.shape
        # Everything but the aggregate comes from the n×n cosines (one pass over U, one more for the sum).
        norms, cos = norms_and_cosines(U)
        D = 1.0 - cos
        np.fill_diagonal(D, 0.0)
        C = majority_cluster(D) if n > 2 else np.arange(n)
        if C.size == 0:
            C = np.arange(n)
        # c = mean of C's unit rows: ⟨v_i, c⟩ and ‖c‖² are means of cosines.
        zero = norms == 0
        cos_c = np.where(zero, 0.0, cos[:, C].mean(axis=1))
        c_sq = float(cos[np.ix_(C, C)].mean()) if not zero[C].all() else 0.0
        dist = 1.0 - cos_c / np.sqrt(c_sq) if c_sq > 0 else np.ones(n)
        med = float(np.median(dist))
        radius = med + self.kappa * 1.4826 * float(np.median(np.abs(dist - med)))
        t = np.where(dist <= radius + 1e-12, self.trust, 0.0)
        t[C] = 1.0
        accepted = np.flatnonzero(t > 0)
        if self.dedup > 0 and accepted.size > 1:
            t[accepted] /= self.multiplicity(D[np.ix_(accepted, accepted)])
        weights = clip_factors(norms, float(np.median(norms))) * t
        agg = (weights @ U) / t.sum()
        return Decision(agg, tuple(accepted.tolist()), weights)

    def multiplicity(self, D: np.ndarray) -> np.ndarray:
        """m_i = Σ_j exp(−(D_ij/h)²), h = dedup × the median nearest-neighbour distance (h = 0: exact copies)."""
        nearest = np.where(np.eye(D.shape[0], dtype=bool), np.inf, D).min(axis=1)
        h = self.dedup * float(np.median(nearest))
        if h <= 0:
            return (D <= 1e-12).sum(axis=1).astype(float)
        return np.exp(-((D / h) ** 2)).sum(axis=1)
