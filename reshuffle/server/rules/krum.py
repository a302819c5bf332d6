"""Krum and Multi-Krum (Blanchard et al., NeurIPS 2017), and Bulyan (El Mhamdi et al., ICML 2018)."""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_f, check_round, check_updates, column_median, pairwise_sq_distances,
)
from reshuffle.server.rules.registry import register_rule


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


@register_rule("krum")
class Krum(Rule):
    r"""Select the single row with the lowest Krum score.

    .. math:: \mathrm{score}(i) = \sum_{j \in N_i} \lVert u_i - u_j \rVert^2,

    where :math:`N_i` holds the :math:`n - f - 2` rows nearest to :math:`u_i`
    (other than itself), n the number of rows and f the number of Byzantine rows
    tolerated; this is Blanchard et al.'s convention (Flower's too; ByzFL uses
    n − f − 1). Ties go to the lowest index.

    Attackers who upload W_g unchanged win it: identical zero rows are each
    other's nearest, and nearer to non-IID honest rows than those are to each
    other, so the step is zero every round (docs/results.md, "Attackers who
    send nothing stop Krum").

    >>> import numpy as np
    >>> U = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 10.0]])
    >>> Krum(f=0).select(U)  # scores: 1, 1, 181
    [0]
    """

    f_param = "f"

    def __init__(self, f: int) -> None:
        self.f = check_f(f)

    def min_rows(self) -> int:
        return 2 * self.f + 3  # n > 2f + 2

    def select(self, updates: np.ndarray, *, round: int = 0) -> list[int]:
        check_round(round)
        U = check_updates(updates)
        return [int(np.argmin(krum_scores(U, self.f)))]


@register_rule("multi-krum")
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

    f_param = "f"

    def __init__(self, f: int, m: int | None = None) -> None:
        self.f = check_f(f)
        if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 1):
            raise ConfigError(f"MultiKrum m must be a positive int or None, got {m!r}")
        self.m = m

    def min_rows(self) -> int:
        return max(2 * self.f + 3, self.m or 1)  # Krum's scores, and m rows to keep

    def select(self, updates: np.ndarray, *, round: int = 0) -> list[int]:
        check_round(round)
        U = check_updates(updates)
        n = U.shape[0]
        m = n - self.f if self.m is None else self.m
        if m > n:
            raise ConfigError(f"MultiKrum m={m} exceeds the n={n} updates")
        scores = krum_scores(U, self.f)
        return sorted(int(i) for i in np.argsort(scores, kind="stable")[:m])


@register_rule("bulyan")
class Bulyan(Rule):
    r"""Bulyan over Krum (El Mhamdi, Guerraoui & Rouault, ICML 2018).

    1. Selection: θ = n − 2f times, pick the Krum winner of the rows not yet
       picked (scores over the remaining n' rows with max(n' − f − 2, 1)
       neighbours: the last picks run on fewer than 2f + 3 rows, where Krum's own
       count would reach 0; ties go to the row with the smaller total squared
       distance to the remaining rows). S is the set of picked rows.
    2. Aggregation: with β = θ − 2f, for each coordinate k, the mean of the β
       values of S closest to the coordinate median of S:

    .. math:: \mathrm{agg}_k = \frac{1}{\beta} \sum_{i \in B_k} u_{ik}, \qquad
              B_k = \operatorname{arg\,min}_{|B| = \beta,\ B \subseteq S}
                    \sum_{i \in B} |u_{ik} - \mathrm{med}_{j \in S}\, u_{jk}| .

    Needs n ≥ 4f + 3. ``accepted`` = S (the 2f rows not picked are detected);
    a row's weight is the share of coordinates where it is among the β kept
    (0 for the rows not picked; a picked row may also get 0 in low dimension).

    >>> import numpy as np
    >>> U = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [100.0]])
    >>> d = Bulyan(f=1).decide(U)  # θ = 5 picked, β = 3 kept around their median 3
    >>> d.accepted, d.aggregate.tolist()
    ((1, 2, 3, 4, 5), [3.0])
    """

    f_param = "f"

    def __init__(self, f: int) -> None:
        self.f = check_f(f)

    def min_rows(self) -> int:
        return 4 * self.f + 3

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        check_round(round)
        U = check_updates(updates)
        n, f = U.shape[0], self.f
        if n < 4 * f + 3:
            raise ConfigError(f"Bulyan needs n >= 4f + 3 updates; got n={n} with f={f}")
        theta, beta = n - 2 * f, n - 4 * f
        D = pairwise_sq_distances(U)
        np.fill_diagonal(D, np.inf)
        left = np.ones(n, dtype=bool)
        picked: list[int] = []
        for _ in range(theta):  # θ Krum rounds over the rows, never over coordinates
            rest = np.flatnonzero(left)
            m = max(len(rest) - f - 2, 1)
            sub = D[np.ix_(rest, rest)]
            scores = np.partition(sub, m - 1, axis=1)[:, :m].sum(axis=1) if len(rest) > 1 else np.zeros(1)
            # Mutual nearest neighbours tie when m = 1: break ties by the total distance to
            # the remaining rows, so the pick does not depend on the row order.
            total = np.where(np.isinf(sub), 0.0, sub).sum(axis=1)
            win = int(rest[np.lexsort((total, scores))[0]])
            picked.append(win)
            left[win] = False
        S = np.array(sorted(picked))
        X = U[S]
        med = column_median(X)
        closest = np.argsort(np.abs(X - med), axis=0, kind="stable")[:beta]
        agg = np.take_along_axis(X, closest, axis=0).mean(axis=0)
        weights = np.zeros(n)
        kept = np.zeros(X.shape, dtype=bool)
        np.put_along_axis(kept, closest, True, axis=0)
        weights[S] = kept.mean(axis=1)
        return Decision(agg, tuple(S.tolist()), weights)
