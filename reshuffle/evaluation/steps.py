r"""What the attackers' rows do to a rule's step: its length and direction, with them and without them.

A rule can cost accuracy without turning the aggregate: rows that shorten it
slow every round down. Per round, against the honest rows' mean
:math:`\bar u_H` (FedAvg had the attackers sent nothing),

- ``length`` = :math:`\lVert a(U)\rVert / \lVert \bar u_H\rVert` and
  ``cosine`` = :math:`\cos(a(U), \bar u_H)`, for the rule's aggregate of every row;
- ``honest_length`` and ``honest_cosine``, for the same rule (the same f) on the
  honest rows alone;
- ``fedavg_length``, the plain mean of every row (zero rows from f of n give
  exactly (n − f)/n).

The rule is built afresh each round from the run's settings, so rules that keep a
history per pseudonym are refused: a fresh copy would decide without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.evaluation.recorder import delivered_rounds


@dataclass(frozen=True)
class StepRound:
    """One round's aggregate, relative to the honest rows' mean."""

    round: int
    length: float
    cosine: float
    honest_length: float
    honest_cosine: float
    fedavg_length: float


def _relative(a: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(|a| / |ref|, cos(a, ref)); a zero aggregate has cosine 0."""
    na, nr = float(np.linalg.norm(a)), float(np.linalg.norm(ref))
    return na / nr, (float(a @ ref) / (na * nr) if na > 0 else 0.0)


def step_round(fresh: Callable[[], Any], updates: np.ndarray, malicious: np.ndarray, round: int,
               **context: Any) -> StepRound:
    """A rule's step (``fresh()`` builds it) on ``updates``, rows flagged ``malicious``, and on the honest rows
    alone; ``context`` is what the run hands the rule besides the rows (``global_model``, ``layout``)."""
    from reshuffle.server.rules.base import decide_in_context

    U = np.asarray(updates, dtype=np.float64)
    mal = np.asarray(malicious, dtype=bool)
    if mal.shape != (len(U),) or not (~mal).any():
        raise ConfigError("a step needs one label per row and at least one honest row")
    ref = U[~mal].mean(axis=0)
    if not np.linalg.norm(ref) > 0:
        raise ConfigError(f"round {round}: the honest rows' mean is zero; no step to compare with")
    length, cosine = _relative(decide_in_context(fresh(), U, round, **context).aggregate, ref)
    h_length, h_cosine = _relative(decide_in_context(fresh(), U[~mal], round, **context).aggregate, ref)
    return StepRound(round, length, cosine, h_length, h_cosine, _relative(U.mean(axis=0), ref)[0])


def probe(settings: dict[str, Any]) -> list[StepRound]:
    """Simulate ``settings`` (a SimConfig mapping) and measure its rule's step in each round that delivered
    honest rows."""
    from reshuffle.run.config import from_mapping
    from reshuffle.server import make_rule

    cfg = from_mapping(settings, source="step probe")

    def fresh():
        return make_rule(cfg.rule, cfg.rule_f, seed=cfg.seed, pre=cfg.pre, pre_options=cfg.pre_options,
                         **cfg.rule_options)

    if "pseudonyms" in fresh().context:
        raise ConfigError(f"rule {cfg.rule!r} keeps a history per pseudonym; a fresh copy each "
                          "round would decide without it")
    out = []
    for sim, d in delivered_rounds(settings, "step probe"):
        if (~d.malicious).any():
            out.append(step_round(fresh, d.updates, d.malicious, d.round, global_model=d.W_g,
                                  layout=sim.training.layout.entries))
    return out
