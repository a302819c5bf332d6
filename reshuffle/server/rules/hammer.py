r"""Two defences of orthogonal principle in one rule: a history that removes, then clipping and trimming that bound.

Hammer and Anvil (Fenaux, Wang, Yan, Chung & Kerschbaum, 2025) sort backdoor
updates by their deviation δ from the mean update. Large-δ rows are what
outlier removal and robust aggregation (the *anvil*) stop; a row of small δ
passes them, and only a defence that removes it by another principle (the
*hammer*) does. A defence of one type leaves the other regime open to an
attacker who knows it; the principled combination applies both, so that no δ
is left to choose.

Here the anvil is clip-trim (clipping to the median norm, then the
coordinate-wise trimmed mean): it bounds what any row, however large, does in
one round. The hammer is a per-pseudonym history: a push small enough to pass
the anvil must be repeated, round after round, on the same coordinates to add
up, and colluders who must all push one payload accumulate alike; the history
(FoolsGold on each pseudonym's accumulated deviation from the round's median)
sees what no round shows (``kinship``: FoolsGold's histories, judged by each
pseudonym's closest kin). The paper's hammer (clipped super fine-tuning) needs
data on the server, which the PS has not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_f, check_pseudonyms, check_round, check_updates, clip_factors, decide_in_context,
    identical_rows,
)
from reshuffle.server.rules.compose import Composite
from reshuffle.server.rules.coordinate import kept_by_rank
from reshuffle.server.rules.registry import make_rule, register_rule

#: The hammer's defaults: kinship (FoolsGold's histories of deviations from the round's median, remembered over
#: about 10 rounds, alike histories sharing one row's weight) and no bans: a ban or a cut aimed at an honest
#: pseudonym (an attacker copies its rows) would take all its weight, while sharing takes half.
HAMMER = ("kinship", {})


def weighted_trim(V: np.ndarray, alpha: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Per coordinate, drop the t smallest and t largest values of *all* rows, then the α-weighted mean of the rest.

    The trimmed count is t whatever the weights: a row of weight 0 still holds its
    place in each coordinate's order, so weights (which attackers may shape) never
    lower the trimming. Returns (aggregate, the (n, d) kept mask); a coordinate whose
    kept rows all weigh 0 aggregates to 0. With every α = 1 this is :func:`trim_columns`.

    >>> import numpy as np
    >>> V = np.array([[0.0], [1.0], [2.0], [3.0], [100.0]])
    >>> weighted_trim(V, np.array([1.0, 0.0, 1.0, 1.0, 0.0]), 1)[0].tolist()   # rows 1..3 kept, row 1 weighs 0
    [2.5]
    """
    kept = kept_by_rank(V, t)
    w = kept * alpha[:, None]
    den = w.sum(axis=0)
    w *= V  # w·V, in place
    agg = np.divide(w.sum(axis=0), den, out=np.zeros(V.shape[1]), where=den > 0)
    return agg, kept


@register_rule("hammer-anvil")
class HammerAnvil(Composite):
    r"""A pseudonymous hammer that weighs, then clip-trim (the anvil) on every row, always trimming f.

    1. The hammer (``hammer``, a pseudonymous rule; by default ``kinship``,
       whose alike histories share one row's weight, options in
       ``hammer_options``) gives each row a weight :math:`\alpha_i` and a set
       of accepted rows; optionally a per-round filter (``filter``, e.g.
       ``alignins`` or ``freqfed``) must accept a row too (α = 0 otherwise);
       each rule in ``signals`` (``concentration``, ``label-groups``, ``energy``,
       ``persistence``: :mod:`reshuffle.server.rules.signals`; options in
       ``signal_options``, one table each) multiplies α by its weights.
    2. The anvil: the rows whose histories the hammer found kin (a copy and
       its original, colluders alike) merged into one row of weight at most 1
       (:func:`merge_groups`: one source, one place in the trimming and in
       the median norm), and so are rows identical in the round; each of the n' rows clipped to S, their median norm,
       :math:`v_i = u_i \min(1, S/\lVert u_i\rVert)`; per coordinate the
       t = min(f, ⌊(n' − 1)/2⌋) smallest and largest values are dropped and the
       rest averaged with the rows' weights (:func:`weighted_trim`).

    The hammer takes weight from the rows it judges and nothing else: neither
    its flags, nor its bans (``ban_after`` in ``hammer_options``), nor its
    history change S or t, which depend on the delivered rows alone. A rule
    that trimmed fewer rows once it had banned some could be switched off by
    attackers who get honest pseudonyms banned alongside their own (by copying
    their rows), and then push at full clipped norm.

    Weights: :math:`\alpha_i` times the clipping factor times the share of
    coordinates kept. Accepted: the hammer's (and the filter's). The hammer's
    history is this rule's state.

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    >>> r = HammerAnvil(f=1, hammer_options={"center": "none", "decay": 1.0})
    >>> d = r.decide(U, pseudonyms=["a", "b", "c", "d", "e"], round=1)   # c and d alike: one row
    >>> d.weights.round(3).tolist(), d.aggregate.round(3).tolist()
    ([0.0, 0.333, 0.333, 0.333, 0.707], [0.354, 0.354, 0.0])
    """

    f_param = "f"

    def __init__(self, f: int = 0, hammer: str = HAMMER[0], hammer_options: dict | None = None,
                 filter: str | None = None, filter_options: dict | None = None, signals=(),
                 signal_options: dict | None = None, seed: int | None = None) -> None:
        self.f = check_f(f)
        opts = {**HAMMER[1], **(hammer_options or {})} if hammer == HAMMER[0] else dict(hammer_options or {})
        self.hammer = make_rule(hammer, f, seed=seed, **opts)
        if "pseudonyms" not in self.hammer.context:
            raise ConfigError(f"hammer-anvil's hammer must keep a history per pseudonym; {hammer!r} does not")
        self.filter = None if filter is None else make_rule(filter, f, seed=seed, **(filter_options or {}))
        if self.filter is not None and not self.filter.detects:
            raise ConfigError(f"hammer-anvil's filter must remove rows; {filter!r} accepts every row")
        if isinstance(signals, str) or not all(isinstance(x, str) for x in signals):
            raise ConfigError(f"hammer-anvil signals must be a list of rule names, got {signals!r}")
        self.signals = [make_rule(x, f, seed=seed, **dict((signal_options or {}).get(x, {}))) for x in signals]
        for sig in self.signals:  # only their weights are read here: their own anvils would be computed for nothing
            sig.weights_only = True
        self._set_parts([self.hammer] + ([self.filter] if self.filter is not None else []) + self.signals)

    def min_rows(self) -> int:
        return 1

    def decide(self, updates: np.ndarray, *, round: int = 0, **context: Any) -> Decision:
        check_round(round)
        U = check_updates(updates)
        n = U.shape[0]
        check_pseudonyms(context.get("pseudonyms"), n, self.name)
        hd = decide_in_context(self.hammer, U, round, **context)
        keep = np.zeros(n, dtype=bool)
        keep[list(hd.accepted)] = True
        alpha = np.clip(np.asarray(hd.weights, dtype=np.float64), 0.0, 1.0)
        if self.filter is not None:
            ok = np.zeros(n, dtype=bool)
            ok[list(decide_in_context(self.filter, U, round, **context).accepted)] = True
            keep &= ok
            alpha = np.where(ok, alpha, 0.0)
        for sig in self.signals:  # each only takes weight: its own weights (not its anvil's) multiply
            decide_in_context(sig, U, round, **context)
            alpha = alpha * np.clip(np.asarray(sig.alpha, dtype=np.float64), 0.0, 1.0)
        # Kin by history, or the very same row this round (a copy whose target changed has no kin history yet).
        group = join_groups(kin_groups(self.hammer, n), identical_rows(U))
        M, wM, share = merge_groups(U, alpha, group)
        # Clipped after merging: copies do not move the bound S either.
        norms = np.linalg.norm(M, axis=1)
        k = clip_factors(norms, float(np.median(norms)))
        M *= k[:, None]  # clipped in place (M is this call's own array)
        agg, kept = weighted_trim(M, wM, min(self.f, (len(M) - 1) // 2))
        w = np.clip(share * (k * kept.mean(axis=1))[group], 0.0, 1.0)
        return Decision(agg, tuple(np.flatnonzero(keep).tolist()), w)


#: Kin strength (1: a copy) from which two histories count as one source and their rows merge into one.
MERGE = 0.9


def kin_groups(hammer: Rule, n: int) -> np.ndarray:
    """Each row's group: rows whose histories the hammer found kin (strength ≥ :data:`MERGE`, linked
    transitively) share a group; every other row is a group of its own. Labels 0..g−1 in first-row order."""
    labels = np.arange(n)
    kin, judged = getattr(hammer, "kin", None), getattr(hammer, "judged", None)
    if kin is not None and judged is not None and kin.shape == (len(judged), len(judged)) and len(judged) > 1:
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        _, comp = connected_components(csr_matrix(kin >= MERGE), directed=False)
        first = {}
        for j, c in zip(judged, comp):
            labels[j] = first.setdefault(int(c), int(j))
    _, out = np.unique(labels, return_inverse=True)
    return out


def join_groups(*labelings: np.ndarray) -> np.ndarray:
    """Rows in one group under any labelling share a group (transitively); labels 0..g−1 in first-row order.

    >>> import numpy as np
    >>> join_groups(np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2])).tolist()
    [0, 0, 0, 1]
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(labelings[0])
    rows, cols, offset = [], [], n
    for lab in labelings:
        rows.append(np.arange(n))
        cols.append(offset + lab)
        offset += int(lab.max()) + 1 if n else 0
    r, c = np.concatenate(rows), np.concatenate(cols)
    _, comp = connected_components(coo_matrix((np.ones(len(r)), (r, c)), shape=(offset, offset)), directed=False)
    _, first = np.unique(comp[:n], return_index=True)
    order = {int(comp[i]): k for k, i in enumerate(sorted(first))}
    return np.array([order[int(x)] for x in comp[:n]])


def merge_groups(V: np.ndarray, alpha: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""One row per group: :math:`\sum_{i \in G} \alpha_i v_i / \sum_{i \in G} \alpha_i` (the plain mean when every α
    is 0), of weight :math:`\min(1, \sum_{i \in G} \alpha_i)`; and each row's share of its group's weight.

    Copies carry one source's information once: a copy of an honest row merged with its original is that
    row, once, at full weight; colluders who upload alike take one place in the trimming, not one each.

    >>> import numpy as np
    >>> V = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> M, w, share = merge_groups(V, np.array([0.5, 0.5, 1.0]), np.array([0, 0, 1]))
    >>> M.tolist(), w.tolist(), share.tolist()
    ([[1.0, 0.0], [0.0, 1.0]], [1.0, 1.0], [0.5, 0.5, 1.0])
    """
    g = int(group.max()) + 1 if group.size else 0
    total = np.bincount(group, weights=alpha, minlength=g)
    count = np.bincount(group, minlength=g)
    # Each group's sums added row by row from 0.0 in row order (as np.add.at would, several times faster).
    M = _group_sums(V, group, g, alpha)
    some = total > 0
    if some.all():
        M /= total[:, None]
    else:  # groups of weight 0: the plain mean of their rows
        M[some] /= total[some, None]
        none = ~some
        M[none] = _group_sums(V, group, g, rows=none[group])[none] / count[none, None]
    wM = np.minimum(1.0, total)
    share = np.divide(alpha * wM[group], total[group], out=np.zeros_like(alpha), where=total[group] > 0)
    return M, wM, share


def _group_sums(X: np.ndarray, group: np.ndarray, g: int, alpha: np.ndarray | None = None,
                rows: np.ndarray | None = None) -> np.ndarray:
    """Per group, 0.0 plus its rows of X (each times its α, if given) one after another in row order; only the
    rows where ``rows`` is True, if given (the other groups' sums are left 0)."""
    out = np.zeros((g, X.shape[1]))
    row = np.empty(X.shape[1]) if alpha is not None else None
    for i, k in enumerate(group.tolist()):
        if rows is None or rows[i]:
            np.add(out[k], X[i] if alpha is None else np.multiply(X[i], alpha[i], out=row), out=out[k])
    return out


@register_rule("hammer-signals")
class HammerSignals(HammerAnvil):
    """``hammer-anvil`` whose weights also take the per-round signals ``concentration`` and ``label-groups`` and
    the ``persistence`` history (each a factor in [0, 1]; the trimmed count stays f)."""

    def __init__(self, f: int = 0, signals=("concentration", "label-groups", "persistence"),
                 signal_options: dict | None = None, hammer_options: dict | None = None, seed: int | None = None) -> None:
        super().__init__(f, hammer_options=hammer_options, signals=signals, signal_options=signal_options, seed=seed)
