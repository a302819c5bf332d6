"""FLAME (Nguyen et al., USENIX Security 2022): HDBSCAN on cosine distances, adaptive clipping, noise."""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_round, check_seed, check_updates, clip_factors, round_rng,
)
from reshuffle.server.rules.registry import register_rule


def norms_and_cosines(U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(‖u_i‖, cos(u_i, u_j)) from one Gram matrix (one pass over U); cos is 0 where a row is zero."""
    G = U @ U.T
    norms = np.sqrt(np.maximum(np.diag(G), 0.0))
    outer = norms[:, None] * norms[None, :]
    cos = np.divide(G, outer, out=np.zeros_like(G), where=outer > 0)
    return norms, np.clip(cos, -1.0, 1.0)


def cosine_distances(U: np.ndarray) -> np.ndarray:
    """1 − cos(u_i, u_j) for all pairs, in [0, 2]; a zero row is at distance 1 from all others."""
    D = 1.0 - norms_and_cosines(U)[1]
    np.fill_diagonal(D, 0.0)
    return D


def majority_cluster(D: np.ndarray) -> np.ndarray:
    """Rows of the largest HDBSCAN cluster (min cluster size ⌊n/2⌋ + 1); empty when all are noise."""
    n = D.shape[0]
    if n == 1:
        return np.array([0])
    from sklearn.cluster import HDBSCAN  # scikit-learn costs seconds to import; only FLAME needs it

    labels = HDBSCAN(min_cluster_size=n // 2 + 1, min_samples=1, metric="precomputed", copy=True,
                     allow_single_cluster=True).fit_predict(D)
    found = labels[labels >= 0]
    if found.size == 0:
        return np.array([], dtype=np.int64)
    sizes = np.bincount(found)
    return np.flatnonzero(labels == int(np.argmax(sizes)))


@register_rule("flame")
class FLAME(Rule):
    r"""FLAME: keep the majority cosine cluster, clip to the median norm, add Gaussian noise.

    1. Filtering: HDBSCAN (min cluster size ⌊n/2⌋ + 1, min samples 1) on the
       cosine distances :math:`c_{ij} = 1 - \cos(u_i, u_j)`; the rows of the
       largest cluster are accepted, all others (outliers) rejected. The paper
       clusters the local models W_i; their cosines are dominated by the shared
       W_g, so this rule clusters the updates u_i = W_i − W_g.
    2. Adaptive clipping: :math:`S = \mathrm{median}_{i \le n} \lVert u_i \rVert`
       (over all rows), accepted rows scaled by :math:`\min(1, S/\lVert u_i \rVert)`.
    3. Noise: :math:`\mathrm{agg} = \frac{1}{|A|} \sum_{i \in A} u_i \min(1, S/\lVert u_i\rVert) + N(0, (\lambda S)^2 I)`,
       λ = ``noise``, drawn from the rule's (seed, round) stream.

    Weights: the clipping factor for accepted rows, 0 for rejected ones. With
    no cluster at all, nothing is accepted and the aggregate is the noise alone.

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.0], [2.0, 0.0], [4.0, 0.0], [3.0, 0.0], [-1.0, 0.0]])
    >>> d = FLAME(noise=0.0, seed=0).decide(U)   # S = median norm = 2
    >>> d.accepted, d.weights.round(3).tolist(), d.aggregate.tolist()
    ((0, 1, 2, 3), [1.0, 1.0, 0.5, 0.667, 0.0], [1.75, 0.0])
    """

    randomized = True

    def __init__(self, noise: float = 0.001, seed: int | None = None) -> None:
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise < float("inf"):
            raise ConfigError(f"FLAME noise lambda must be a non-negative number, got {noise!r}")
        self.noise = float(noise)
        self.seed = check_seed(seed)

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        rng = round_rng(self.seed, check_round(round), self.name)
        U = check_updates(updates)
        n, d = U.shape
        accepted = majority_cluster(cosine_distances(U))
        norms = np.linalg.norm(U, axis=1)
        S = float(np.median(norms))
        k = clip_factors(norms, S) if S > 0 else np.ones(n)
        weights = np.zeros(n)
        weights[accepted] = k[accepted]
        agg = (k[accepted] @ U[accepted]) / accepted.size if accepted.size else np.zeros(d)
        if self.noise > 0:
            agg = agg + rng.normal(0.0, self.noise * S, size=d)
        return Decision(agg, tuple(accepted.tolist()), weights)
