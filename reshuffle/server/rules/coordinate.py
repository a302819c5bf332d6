"""Baselines that accept every row: FedAvg, coordinate-wise median and trimmed mean.

These rules flag no row (``detects = False``: TPR = FPR = 0 by construction).
Their ``weights`` say how much of each row reaches the aggregate: the fraction
of coordinates in which the row's value is kept (trimmed mean) or is a middle
value (median).
"""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import Decision, Rule, check_f, check_round, check_updates, column_median
from reshuffle.server.rules.registry import register_rule


def coordinate_ranks(U: np.ndarray) -> np.ndarray:
    """rank[i, k] = position of U[i, k] in column k sorted ascending (ties by row index)."""
    order = np.argsort(U, axis=0, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(U.shape[0])[:, None], axis=0)
    return ranks


def trim_columns(U: np.ndarray, trim: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean of each column without its ``trim`` smallest and ``trim`` largest values, the (n, d) kept mask).

    Ties are broken by row index as in a stable sort (the lower index ranks lower). Needs n > 2·trim.
    """
    kept = kept_by_rank(U, trim)
    return np.where(kept, U, 0.0).sum(axis=0) / (U.shape[0] - 2 * trim), kept


def kept_by_rank(U: np.ndarray, trim: int) -> np.ndarray:
    """The (n, d) mask of the values ranked ``trim`` .. n − 1 − ``trim`` in their column (ties by row index).

    From one sort down the columns: where the values ranked ``trim`` and n − 1 − ``trim`` are each unique
    in their column, the kept values are exactly those between them (inclusive); only the columns with a
    tie at either edge need the ranks (a stable argsort of those columns alone, several times slower).
    """
    n = U.shape[0]
    if trim == 0:
        return np.ones(U.shape, dtype=bool)
    if n <= 2 * trim:  # nothing is kept; the ranks say so
        ranks = coordinate_ranks(U)
        return (ranks >= trim) & (ranks < n - trim)
    S = np.sort(U, axis=0)
    lo, hi = S[trim], S[n - 1 - trim]
    tie = (S[trim - 1] == lo) | (S[trim + 1] == lo) | (S[n - 2 - trim] == hi) | (S[n - trim] == hi)
    kept = (U >= lo) & (U <= hi)
    cols = np.flatnonzero(tie)
    if cols.size:
        ranks = coordinate_ranks(U[:, cols])
        kept[:, cols] = (ranks >= trim) & (ranks < n - trim)
    return kept


@register_rule("fedavg")
class FedAvg(Rule):
    """Unweighted mean of all rows (McMahan et al., 2017), no detection.

    >>> import numpy as np
    >>> FedAvg()(np.array([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [2.0, 3.0]
    """

    detects = False

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        check_round(round)
        U = check_updates(updates)
        return Decision.mean_of(U, range(U.shape[0]))


@register_rule("median")
class Median(Rule):
    """Coordinate-wise median (Yin et al., ICML 2018); every row is accepted.

    >>> import numpy as np
    >>> Median()(np.array([[1.0, 9.0], [2.0, 0.0], [100.0, 1.0]])).tolist()
    [2.0, 1.0]
    """

    detects = False

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        check_round(round)
        U = check_updates(updates)
        n = U.shape[0]
        ranks = coordinate_ranks(U)
        middle = (ranks == (n - 1) // 2) | (ranks == n // 2)
        return Decision(column_median(U), tuple(range(n)), middle.mean(axis=1))


@register_rule("trimmed-mean")
class TrimmedMean(Rule):
    r"""Coordinate-wise β-trimmed mean (Yin et al., ICML 2018) with β = ``trim`` rows per side.

    For each coordinate, the ``trim`` largest and ``trim`` smallest values are
    dropped and the rest averaged; needs n > 2·trim. ``trim`` defaults to the run's f.

    >>> import numpy as np
    >>> TrimmedMean(trim=1)(np.array([[0.0], [1.0], [2.0], [100.0]])).tolist()
    [1.5]
    """

    detects = False
    f_param = "trim"

    def __init__(self, trim: int) -> None:
        self.trim = check_f(trim, "trim")

    def min_rows(self) -> int:
        return 2 * self.trim + 1

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        check_round(round)
        U = check_updates(updates)
        n = U.shape[0]
        if n <= 2 * self.trim:
            raise ConfigError(f"trimmed mean needs n > 2·trim updates; got n={n} with trim={self.trim}")
        agg, kept = trim_columns(U, self.trim)
        return Decision(agg, tuple(range(n)), kept.mean(axis=1))
