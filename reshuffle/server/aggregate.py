"""The FL step: from the models a round recovered to the next global model.

One place for what ``reshuffle simulate`` and the Flower ServerApp do with a
round's models (docs/protocol.md §5, step 6):

1. sort the models into a canonical order (by hash: the result cannot depend on
   the order in which the shuffle delivered them);
2. form the rows U = W − W_g;
3. let the rule decide (which rows it accepts, with what weight, and the aggregate Δ), given what it
   takes besides the rows: each row's pseudonym (rules with a per-pseudonym history), W_g; then make
   the state that decision computed the rule's own (:meth:`Rule.commit`);
4. let the server optimiser step: W_g ← opt(W_g, Δ); running statistics (BatchNorm's
   mean and variance, where the FL step was told which entries they are) take
   W_g + Δ instead: they are estimates, not parameters, and a momentum or a step
   above 1 would overshoot them (a running variance below 0);
5. apply the model step, if any, to the new W_g (CRFL's clipping and noise,
   :mod:`reshuffle.server.model_step`);
6. count the rows flagged, honest and malicious, where the caller knows which is which.

The rule, the optimiser and the model step are built once per run and kept in the :class:`FLStep`,
so a rule or optimiser that carries state from round to round behaves the same
in every driver.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.model_step import CRFL
from reshuffle.server.optimizers import ServerOptimizer
from reshuffle.server.rules import Decision, Rule
from reshuffle.server.rules.base import decide_in_context, pack_json, unpack_json

__all__ = ["FLStep", "StepResult", "canonical_order", "influence", "row_counts"]

#: Prefix of the rule's arrays in :meth:`FLStep.state` (the optimiser's names never start with it).
RULE = "rule."
#: The rule's JSON data, packed as a uint8 array, in :meth:`FLStep.state`.
RULE_JSON = "rule.json"


def canonical_order(models: Sequence[np.ndarray]) -> list[int]:
    """Row order by SHA-256 of each model's bytes: independent of who sent what."""
    return sorted(range(len(models)), key=lambda i: hashlib.sha256(models[i].tobytes()).digest())


#: Below this share of the median honest row's weight, an honest row counts as down-weighted.
DOWNWEIGHTED = 0.6


def influence(decision: Decision, U: np.ndarray, m_rows: list[int], h_rows: list[int]) -> dict:
    r"""How much of the aggregate the attackers' rows made, after clipping: not their share of the weight.

    A rule's weight for a row already folds in its clipping factor, so a row sent
    at 64 times the median norm shows a weight of 1/64 although it contributes a
    full clipped row. Here row i contributes :math:`w_i u_i` (weight times row):

    * ``malicious_influence``: :math:`\sum_{mal} w_i\lVert u_i\rVert / \sum_i w_i\lVert u_i\rVert`,
      the attackers' share of what the rows put into the aggregate;
    * ``attack_projection``: :math:`(a - \bar h)\cdot\hat d / s`, how far the
      aggregate a moved from the honest rows' weighted mean :math:`\bar h` along
      the attack's direction :math:`\hat d` (the unit difference of the
      attackers' and the honest rows' means), in median honest norms s;
    * ``honest_downweighted`` / ``honest_zeroed``: honest rows weighted below
      :data:`DOWNWEIGHTED` times the median honest weight / at 0 (banned, cut).

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.0], [1.0, 0.2], [64.0, 0.0]])
    >>> d = Decision(np.array([4 / 3, 0.1]), (0, 1, 2), np.array([1.0, 1.0, 1 / 64]))
    >>> round(influence(d, U, [2], [0, 1])["malicious_influence"], 3)   # weight share 0.008; a full row of three
    0.331
    """
    w = np.asarray(decision.weights, dtype=np.float64)
    mass = w * np.linalg.norm(U, axis=1)
    total = float(mass.sum())
    out: dict = {"malicious_influence": float(mass[m_rows].sum()) / total if m_rows and total > 0 else None,
                 "attack_projection": None, "honest_downweighted": None, "honest_zeroed": None}
    if h_rows:
        hw = w[h_rows]
        med = float(np.median(hw))
        out["honest_downweighted"] = int((hw < DOWNWEIGHTED * med).sum()) if med > 0 else len(h_rows)
        out["honest_zeroed"] = int((hw <= 0).sum())
    if m_rows and h_rows:
        H = U[h_rows]
        hbar = (hw @ H) / hw.sum() if hw.sum() > 0 else H.mean(axis=0)
        direction = U[m_rows].mean(axis=0) - H.mean(axis=0)
        dn, s = float(np.linalg.norm(direction)), float(np.median(np.linalg.norm(H, axis=1)))
        if dn > 0 and s > 0:
            out["attack_projection"] = float((np.asarray(decision.aggregate) - hbar) @ direction) / dn / s
    return out


def row_counts(decision: Decision | None, malicious: Sequence[bool | None], U: np.ndarray | None = None) -> dict:
    """Rows delivered and flagged (not accepted), honest and malicious, per row of ``decision``.

    ``malicious[r]`` labels row r (None: unknown, not counted). With the decision's
    weights, also the mean weight of each kind of row (how much of it reached the
    aggregate) and the malicious rows' share of all the weight; with the rows ``U``
    too, the attackers' :func:`influence` on the aggregate. Without a decision
    (the round was skipped) nothing is counted.
    """
    if decision is None:
        malicious = ()
    accepted = set(decision.accepted) if decision is not None else set()
    m_rows = [r for r, bad in enumerate(malicious) if bad is True]
    h_rows = [r for r, bad in enumerate(malicious) if bad is False]

    def mean_weight(rows):
        return float(np.mean(decision.weights[rows])) if rows and decision is not None else None

    # The attackers' share of the weight that reaches the aggregate (for weighted rules, what TPR misses).
    total = float(decision.weights.sum()) if decision is not None else 0.0
    share = float(decision.weights[m_rows].sum()) / total if m_rows and total > 0 else None
    out = {"malicious_rows": len(m_rows), "malicious_flagged": sum(r not in accepted for r in m_rows),
           "honest_rows": len(h_rows), "honest_flagged": sum(r not in accepted for r in h_rows),
           "honest_weight": mean_weight(h_rows), "malicious_weight": mean_weight(m_rows), "malicious_share": share}
    if decision is not None and U is not None:
        out.update(influence(decision, U, m_rows, h_rows))
    return out


@dataclass(frozen=True)
class StepResult:
    """One FL step's outcome.

    ``W_g`` is the new global model (the old one when ``skipped`` says why it was
    kept); row r of the rule's input was ``models[order[r]]``; ``counts`` are
    :func:`row_counts` of the labels the caller gave.
    """

    W_g: np.ndarray
    order: tuple[int, ...]
    decision: Decision | None
    skipped: str | None
    counts: dict = field(default_factory=dict)

    @property
    def accepted(self) -> tuple[int, ...]:
        return () if self.decision is None else self.decision.accepted


class FLStep:
    """Rows minus W_g, the rule's decision, the server optimiser's step, the model step: ``step(W_g, models, round)``.

    ``name`` is how a refusal names the rule (the run's rule setting);
    ``model_step`` (None: none) acts on the optimiser's new W_g; ``statistics``
    (a boolean mask over W, or None) marks the running statistics, which take the
    aggregate as it is (W_g + Δ) instead of the optimiser's step; ``layout`` (the
    flat model's (name, shape) entries, or None) goes to rules that read layers.
    """

    def __init__(self, rule: Rule, optimizer: ServerOptimizer, name: str | None = None,
                 model_step: CRFL | None = None, statistics: np.ndarray | None = None,
                 layout: tuple[tuple[str, tuple[int, ...]], ...] | None = None) -> None:
        if not isinstance(rule, Rule):
            raise ConfigError(f"FLStep needs a Rule, got {rule!r}")
        if not isinstance(optimizer, ServerOptimizer):
            raise ConfigError(f"FLStep needs a ServerOptimizer, got {optimizer!r}")
        if model_step is not None and not isinstance(model_step, CRFL):
            raise ConfigError(f"FLStep's model step must be a CRFL step or None, got {model_step!r}")
        if statistics is not None:
            statistics = np.asarray(statistics)
            if statistics.dtype != bool or statistics.ndim != 1:
                raise ConfigError(f"FLStep's statistics must be a 1-D boolean mask, got {statistics.dtype} "
                                  f"of shape {statistics.shape}")
            statistics = statistics if statistics.any() else None
        self.rule, self.optimizer, self.model_step = rule, optimizer, model_step
        self.statistics = statistics
        self.name = name or rule.name
        self.layout = None if layout is None else tuple((str(n), tuple(int(x) for x in s)) for n, s in layout)

    def __call__(self, W_g: np.ndarray, models: Sequence[np.ndarray], round: int,
                 malicious: Sequence[bool | None] | None = None,
                 pseudonyms: Sequence[bytes | str] | None = None) -> StepResult:
        """One step from ``models`` (at least one, each of W_g's size); ``malicious`` labels them, in their order.

        ``pseudonyms`` gives each model's pseudonym, in the same order (None: the
        driver has none; a rule that keeps a history per pseudonym then refuses
        every round). A rule that refuses the rows (a ConfigError, e.g. Krum with
        n ≤ 2f + 2) keeps W_g and leaves the optimiser's and the rule's state as
        they were; the model step runs only in a round that stepped.
        """
        if not models:
            raise ConfigError("an FL step needs at least one model")
        if malicious is not None and len(malicious) != len(models):
            raise ConfigError(f"{len(malicious)} labels for {len(models)} models")
        if pseudonyms is not None and len(pseudonyms) != len(models):
            raise ConfigError(f"{len(pseudonyms)} pseudonyms for {len(models)} models")
        order = canonical_order(models)
        labels = [None] * len(models) if malicious is None else [malicious[j] for j in order]
        names = None if pseudonyms is None else [pseudonyms[j] for j in order]
        U = np.stack([models[j] for j in order]).astype(np.float64) - W_g
        try:
            # One call: randomized rules draw from (seed, round).
            decision = decide_in_context(self.rule, U, round, pseudonyms=names, global_model=W_g, layout=self.layout)
        except ConfigError as exc:
            return StepResult(W_g, tuple(order), None, f"rule {self.name!r} refused {len(models)} rows: {exc}",
                              row_counts(None, labels))
        self.rule.commit()
        new = self.optimizer.step(W_g, decision.aggregate)
        if self.statistics is not None:
            if self.statistics.shape != W_g.shape:
                raise ConfigError(f"FLStep's statistics mask has {self.statistics.size} entries for a model of "
                                  f"{W_g.size}")
            stats = self.statistics
            with np.errstate(over="ignore", invalid="ignore"):
                new[stats] = (W_g[stats] + decision.aggregate[stats]).astype(np.float32)
        if self.model_step is not None:
            new = self.model_step(new, round)
        return StepResult(new, tuple(order), decision, None, row_counts(decision, labels, U))

    def state(self) -> dict[str, np.ndarray]:
        """What the next step depends on beyond its configuration: the optimiser's arrays, and the rule's
        (``rule.<name>``, its JSON data packed in ``rule.json``) where it keeps a history.

        The model step keeps none: its noise is a function of (seed, round).
        """
        arrays, data = self.rule.state()
        out = dict(self.optimizer.state())
        if arrays or data:
            out.update({RULE + k: np.array(v, copy=True) for k, v in arrays.items()})
            out[RULE_JSON] = pack_json(data)
        return out

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        rule = {k[len(RULE):]: v for k, v in arrays.items() if k.startswith(RULE) and k != RULE_JSON}
        data = unpack_json(arrays[RULE_JSON]) if RULE_JSON in arrays else {}
        self.optimizer.restore({k: v for k, v in arrays.items() if not k.startswith(RULE)})
        self.rule.restore(rule, data)
