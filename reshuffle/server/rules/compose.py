r"""Composition: pre-aggregators in front of a rule, and rules that intersect their filters.

A pre-aggregator maps the n original rows to n' rows (NNM: n mixtures;
Bucketing: ⌈n/s⌉ bucket means; clipping: n shortened rows). Detection is still
reported on the original rows through an *ownership* matrix O (n' × n):
O[j, i] says that output row j speaks for original row i.

* NNM: mixture j owns row j only (the row it is centred on). Ownership by every
  neighbour would mark nearly every row accepted, since each row sits in many
  mixtures.
* Bucketing: bucket j owns the rows averaged into it.
* Clipping: row j owns row j.

:class:`Pipeline` composes the ownerships of its stages; an original row is
accepted when at least one final row it owns is accepted, so a row is rejected
when none of the buckets/mixtures it speaks through is accepted.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import Decision, Rule, check_f, check_round, check_updates, decide_in_context


@dataclass(frozen=True)
class Mixed:
    """A pre-aggregator's output: ``rows`` (n', d), ``owners`` (n', n) bool, ``scale`` (n',) in (0, 1].

    ``scale[j]`` is the factor by which output row j was shortened (clipping);
    1 for pure mixing.
    """

    rows: np.ndarray
    owners: np.ndarray
    scale: np.ndarray

    def __post_init__(self) -> None:
        k = self.rows.shape[0]
        if self.owners.ndim != 2 or self.owners.shape[0] != k or self.scale.shape != (k,):
            raise ConfigError(f"Mixed: {k} rows need a ({k}, n) owners matrix and {k} scales, "
                              f"got {self.owners.shape} and {self.scale.shape}")
        if not self.owners.any(axis=0).all():
            raise ConfigError("Mixed: every original row must be owned by at least one output row")


class PreAggregator:
    """Maps (n, d) updates to a :class:`Mixed`; configured in ``__init__``, applied in ``__call__``."""

    name: ClassVar[str] = "pre"
    randomized: ClassVar[bool] = False
    f_param: ClassVar[str | None] = None

    def min_rows(self) -> int:
        """The fewest rows ``__call__`` accepts."""
        return 1

    def rows_out(self, n: int) -> int:
        """How many rows it maps n rows to."""
        return n

    def __call__(self, updates: np.ndarray, *, round: int = 0) -> Mixed:
        raise NotImplementedError

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


class Composite(Rule):
    """A rule made of rules (``parts``): it takes the context any part takes, and commits, saves and restores
    every part's state (part k's arrays and data under the key prefix ``k.``)."""

    parts: list[Rule]

    def _set_parts(self, parts: Sequence[Rule]) -> None:
        self.parts = list(parts)
        self.context = frozenset().union(*(r.context for r in self.parts))

    def commit(self) -> None:
        for r in self.parts:
            r.commit()

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        arrays, data = {}, {}
        for k, r in enumerate(self.parts):
            a, j = r.state()
            arrays.update({f"{k}.{name}": v for name, v in a.items()})
            if j:
                data[str(k)] = j
        return arrays, data

    def restore(self, arrays: dict[str, np.ndarray], data: dict[str, Any]) -> None:
        stray = [name for name in arrays if name.split(".", 1)[0] not in {str(k) for k in range(len(self.parts))}]
        if stray or set(data) - {str(k) for k in range(len(self.parts))}:
            raise ConfigError(f"{self.name}: state for parts it does not have: {sorted(stray) or sorted(data)}")
        for k, r in enumerate(self.parts):
            pre = f"{k}."
            r.restore({name[len(pre):]: v for name, v in arrays.items() if name.startswith(pre)}, data.get(str(k), {}))


class Pipeline(Composite):
    r"""Pre-aggregators :math:`P_1, \dots, P_k` in order, then ``rule`` on the last rows.

    With ownerships :math:`O_1 \in \{0,1\}^{n_1 \times n}, \dots, O_k`, the final
    rows own :math:`O = O_k \cdots O_1` (boolean product) of the originals, and

    .. math:: \mathrm{accepted} = \{ i : \exists j \in A,\ O_{ji} \},
              \qquad w_i = \max_{j : O_{ji}} w^{\mathrm{rule}}_j\, c_j,

    where A and :math:`w^{\mathrm{rule}}` are the rule's decision on the final
    rows and :math:`c_j` the clipping factor row j carries (a row's factor is its
    stage's scale times the mean factor of the rows it mixes). The aggregate is
    the rule's.

    >>> import numpy as np
    >>> from reshuffle.server.rules import MultiKrum, Clip
    >>> U = np.array([[1.0, 0.0], [0.9, 0.1], [1.0, 0.1], [1.1, -0.1], [-40.0, 0.0]])
    >>> d = Pipeline([Clip(bound=2.0)], MultiKrum(f=1)).decide(U)
    >>> d.accepted, d.weights.round(3).tolist()
    ((0, 1, 2, 3), [1.0, 1.0, 1.0, 1.0, 0.0])
    """

    name = "pipeline"

    def __init__(self, pres: Sequence[PreAggregator], rule: Rule) -> None:
        pres = list(pres)
        if not all(isinstance(p, PreAggregator) for p in pres):
            raise ConfigError(f"Pipeline stages must be PreAggregators, got {pres!r}")
        if not isinstance(rule, Rule):
            raise ConfigError(f"Pipeline needs a Rule after its pre-aggregators, got {rule!r}")
        self.pres = pres
        self.rule = rule
        self.detects = rule.detects
        self._set_parts([rule])

    def min_rows(self) -> int:
        def fits(n: int) -> bool:
            for pre in self.pres:
                if n < pre.min_rows():
                    return False
                n = pre.rows_out(n)
            return n >= self.rule.min_rows()
        n = max([1, *(p.min_rows() for p in self.pres)])
        while not fits(n):  # rows_out never decreases with n (bucketing: ⌈n/s⌉)
            n += 1
        return n

    def decide(self, updates: np.ndarray, *, round: int = 0, **context: Any) -> Decision:
        check_round(round)
        X = check_updates(updates)
        n = X.shape[0]
        owners = np.eye(n, dtype=bool)
        carried = np.ones(n)
        for pre in self.pres:
            mixed = pre(X, round=round)
            if mixed.owners.shape[1] != X.shape[0]:
                raise ConfigError(f"{pre!r} returned owners for {mixed.owners.shape[1]} rows, got {X.shape[0]}")
            O = mixed.owners
            carried = mixed.scale * (O @ carried) / O.sum(axis=1)
            owners = (O.astype(np.int64) @ owners.astype(np.int64)) > 0
            X = mixed.rows
        if context.get("pseudonyms") is not None and not np.array_equal(owners, np.eye(n, dtype=bool)):
            # Mixed rows speak for several pseudonyms at once: no history can be kept per row.
            raise ConfigError(f"the pre-aggregators {[p.name for p in self.pres]} mix rows, so the rule behind them "
                              "cannot keep a history per pseudonym")
        inner = decide_in_context(self.rule, X, round, **context)
        ok = np.zeros(X.shape[0], dtype=bool)
        ok[list(inner.accepted)] = True
        accepted = np.flatnonzero((owners & ok[:, None]).any(axis=0))
        w_final = inner.weights * carried
        weights = np.where(owners, w_final[:, None], 0.0).max(axis=0)
        return Decision(inner.aggregate, tuple(int(i) for i in accepted), np.clip(weights, 0.0, 1.0))


class AllOf(Composite):
    r"""Accept the rows every component rule accepts; average them, each shrunk by its smallest weight.

    .. math:: A = \bigcap_k A_k, \qquad w_i = \min_k w^{(k)}_i, \qquad
              \mathrm{agg} = \frac{1}{|A|} \sum_{i \in A} w_i u_i

    (the zero update when A is empty). A row is flagged when any rule flags it,
    so the detected set is the union of the components'; a row one rule clips
    enters shortened. This is how defenses with complementary blind spots (say,
    SignGuard's sign statistics and FLAME's cosine clusters) are chained; on the
    CLI, ``--rule signguard+flame``.

    >>> import numpy as np
    >>> from reshuffle.server.rules import MultiKrum, CosineFilter
    >>> U = np.array([[1.0, 1.0], [1.0, 0.9], [0.9, 1.0], [1.1, 1.0], [-1.0, -1.0]])
    >>> AllOf([MultiKrum(f=1), CosineFilter()]).select(U)
    [0, 1, 2, 3]
    """

    name = "all-of"

    def __init__(self, rules: Sequence[Rule]) -> None:
        rules = list(rules)
        if len(rules) < 2 or not all(isinstance(r, Rule) for r in rules):
            raise ConfigError(f"AllOf needs at least two Rules, got {rules!r}")
        self.rules = rules
        self.detects = any(r.detects for r in rules)
        self._set_parts(rules)

    def min_rows(self) -> int:
        return max(r.min_rows() for r in self.rules)

    def decide(self, updates: np.ndarray, *, round: int = 0, **context: Any) -> Decision:
        check_round(round)
        U = check_updates(updates)
        decisions = [decide_in_context(r, U, round, **context) for r in self.rules]
        accepted = sorted(set.intersection(*(set(d.accepted) for d in decisions)))
        weights = np.min(np.stack([d.weights for d in decisions]), axis=0)
        agg = (weights[accepted] @ U[accepted]) / len(accepted) if accepted else np.zeros(U.shape[1])
        return Decision(agg, tuple(accepted), weights)


def with_f(rule: Rule, f: int) -> Rule:
    """A copy of ``rule`` that assumes f attackers (``rule`` itself when it takes no f)."""
    if rule.f_param is None or not hasattr(rule, rule.f_param):
        return rule
    out = copy.copy(rule)
    setattr(out, rule.f_param, check_f(f, rule.f_param))
    return out


class Chain(Composite):
    r"""Filters in sequence: each stage sees only the rows every earlier stage accepted.

    With rows :math:`R_0 = \{1, \dots, n\}` and budget :math:`f_0 = f`, stage k
    decides on the rows :math:`R_{k-1}` assuming :math:`f_{k-1}` attackers and
    accepts :math:`A_k`; then

    .. math:: R_k = A_k, \qquad f_k = \max(0,\ f_{k-1} - |R_{k-1} \setminus A_k|):

    rows an earlier stage removed are counted against the attackers the later
    stages still expect (a stage's f is its ``f_param``; stages without one run
    as configured). Accepted: the last stage's accepted rows; weights: the
    last stage's for the rows that reached it, 0 for rows removed on the way;
    the aggregate is the last stage's. On the CLI, ``--rule signguard:multi-krum``.

    Unlike :class:`AllOf`, a rule that cannot tell honest rows from attackers
    (Multi-Krum always drops f rows) no longer drops honest rows once an
    earlier stage has removed the attackers.

    >>> import numpy as np
    >>> from reshuffle.server.rules import MultiKrum, CosineFilter
    >>> U = np.array([[1.0, 1.0], [1.0, 0.9], [0.9, 1.0], [1.1, 1.0], [1.0, 1.1], [-1.0, -1.0]])
    >>> Chain([CosineFilter(), MultiKrum(f=1)], f=1).select(U)  # the budget is spent on row 5
    [0, 1, 2, 3, 4]
    """

    name = "chain"

    def __init__(self, rules: Sequence[Rule], f: int) -> None:
        rules = list(rules)
        if len(rules) < 2 or not all(isinstance(r, Rule) for r in rules):
            raise ConfigError(f"Chain needs at least two Rules, got {rules!r}")
        self.rules = rules
        self.f = check_f(f)
        self.detects = any(r.detects for r in rules)
        self._set_parts(rules)

    def min_rows(self) -> int:
        # Every stage may see all n rows with the whole budget (when the stages before it remove none).
        return max(with_f(r, self.f).min_rows() for r in self.rules)

    def decide(self, updates: np.ndarray, *, round: int = 0, **context: Any) -> Decision:
        check_round(round)
        U = check_updates(updates)
        n = U.shape[0]
        rows = np.arange(n)
        labels = context.get("pseudonyms")
        budget = self.f
        weights = np.zeros(n)
        agg = np.zeros(U.shape[1])
        for rule in self.rules:
            if rows.size == 0:
                break
            # A later stage sees the pseudonyms of the rows that reach it (and the whole context otherwise).
            here = {**context, "pseudonyms": None if labels is None else [labels[i] for i in rows]}
            d = decide_in_context(with_f(rule, budget), U[rows], round, **here)
            weights = np.zeros(n)
            weights[rows] = d.weights
            agg = d.aggregate
            budget = max(0, budget - (rows.size - len(d.accepted)))
            rows = rows[list(d.accepted)]
        return Decision(agg if rows.size else np.zeros(U.shape[1]), tuple(rows.tolist()), weights)
