"""Krum and Multi-Krum (Blanchard et al., NeurIPS 2017)."""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import Rule, check_f, check_updates, pairwise_sq_distances


def krum_scores(U: np.ndarray, f: int) -> np.ndarray:
    """score(i) = Σ_{j ∈ N_i} ‖u_i − u_j‖², N_i the n − f − 2 nearest other rows.

    Requires n > 2f + 2 (Blanchard et al.'s condition, under which n − f − 2 ≥ f + 1
    neighbours include at least one honest row); rejected otherwise, never clamped.
    """
    n = U.shape[0]
    if n <= 2 * f + 2:
        raise ConfigError(f"Krum needs n > 2f + 2 updates; got n={n} with f={f}")
    D = pairwise_sq_distances(U)
    np.fill_diagonal(D, np.inf)  # a row is not its own neighbour
    m = n - f - 2
    nearest = np.partition(D, m - 1, axis=1)[:, :m]
    return nearest.sum(axis=1)


class Krum(Rule):
    r"""Select the single row with the lowest Krum score.

    .. math:: \mathrm{score}(i) = \sum_{j \in N_i} \lVert u_i - u_j \rVert^2,

    where :math:`N_i` holds the :math:`n - f - 2` rows nearest to :math:`u_i`
    (other than itself), n the number of rows and f the number of Byzantine rows
    tolerated; this is Blanchard et al.'s convention (Flower's too; ByzFL uses
    n − f − 1). Ties go to the lowest index.

    >>> import numpy as np
    >>> U = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 10.0]])
    >>> Krum(f=0).select(U)  # scores: 1, 1, 181
    [0]
    """

    name = "krum"

    def __init__(self, f: int) -> None:
        self.f = check_f(f)

    def select(self, updates: np.ndarray) -> list[int]:
        U = check_updates(updates)
        return [int(np.argmin(krum_scores(U, self.f)))]


class MultiKrum(Rule):
    r"""Average the m rows with the lowest Krum scores (m = n − f by default).

    Scores as in :class:`Krum` (n − f − 2 nearest neighbours). Ties are broken
    by the lower index.

    >>> import numpy as np
    >>> U = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [9.0, 9.0]])
    >>> MultiKrum(f=0, m=3).select(U)  # scores: 2, 3, 3, 290
    [0, 1, 2]
    >>> MultiKrum(f=0, m=3)(U).tolist()
    [0.3333333333333333, 0.3333333333333333]
    """

    name = "multi-krum"

    def __init__(self, f: int, m: int | None = None) -> None:
        self.f = check_f(f)
        if m is not None and (not isinstance(m, int) or m < 1):
            raise ConfigError(f"MultiKrum m must be a positive int or None, got {m!r}")
        self.m = m

    def select(self, updates: np.ndarray) -> list[int]:
        U = check_updates(updates)
        n = U.shape[0]
        m = n - self.f if self.m is None else self.m
        if m > n:
            raise ConfigError(f"MultiKrum m={m} exceeds the n={n} updates")
        scores = krum_scores(U, self.f)
        return sorted(int(i) for i in np.argsort(scores, kind="stable")[:m])
