r"""What the attackers' rows do to a rule's step: its length and direction, with them and without them.

A rule can cost accuracy without turning the aggregate: rows that shorten it
slow every round down. Per round, against the honest rows' mean
:math:`\bar u_H` (FedAvg had the attackers sent nothing),

- ``length`` = :math:`\lVert a\rVert / \lVert \bar u_H\rVert` and
  ``cosine`` = :math:`\cos(a, \bar u_H)`, for the run's own aggregate :math:`a`;
- ``honest_length`` and ``honest_cosine``, for a second copy of the rule (the
  same settings, the same f) given only the honest rows every round: a rule
  that keeps a history per pseudonym keeps its own, of those rows alone;
- ``fedavg_length``, the plain mean of every row (zero rows from f of n give
  exactly (n − f)/n).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def step_round(round: int, updates: np.ndarray, malicious: np.ndarray, aggregate: np.ndarray,
               honest_aggregate: np.ndarray) -> StepRound:
    """Round ``round``'s ``aggregate`` of ``updates`` (rows flagged ``malicious``) and ``honest_aggregate``,
    the rule's of the honest rows alone, against the honest rows' mean."""
    U = np.asarray(updates, dtype=np.float64)
    mal = np.asarray(malicious, dtype=bool)
    if mal.shape != (len(U),) or not (~mal).any():
        raise ConfigError("a step needs one label per row and at least one honest row")
    ref = U[~mal].mean(axis=0)
    if not np.linalg.norm(ref) > 0:
        raise ConfigError(f"round {round}: the honest rows' mean is zero; no step to compare with")
    length, cosine = _relative(np.asarray(aggregate, dtype=np.float64), ref)
    h_length, h_cosine = _relative(np.asarray(honest_aggregate, dtype=np.float64), ref)
    return StepRound(round, length, cosine, h_length, h_cosine, _relative(U.mean(axis=0), ref)[0])


def probe(settings: dict[str, Any]) -> list[StepRound]:
    """Simulate ``settings`` (a SimConfig mapping) and measure its rule's step in each round the rule decided
    with honest rows among the delivered ones."""
    from reshuffle.run.config import from_mapping
    from reshuffle.run.round import make_step
    from reshuffle.server.rules.base import decide_in_context

    cfg = from_mapping(settings, source="step probe")
    shadow = make_step(cfg).rule  # the run's rule, built as the run builds it
    out = []
    for sim, d in delivered_rounds(cfg):
        honest = ~d.malicious
        if d.aggregate is None or not honest.any():
            continue
        U = d.updates
        names = None if d.pseudonyms is None else [n for n, h in zip(d.pseudonyms, honest) if h]
        try:
            alone = decide_in_context(shadow, U[honest], d.round, pseudonyms=names, global_model=d.W_g,
                                      layout=sim.training.layout.entries)
        except ConfigError as exc:
            raise ConfigError(f"round {d.round}: rule {cfg.rule!r} refused the {int(honest.sum())} honest rows "
                              f"alone: {exc}") from None
        shadow.commit()
        out.append(step_round(d.round, U, d.malicious, d.aggregate, alone.aggregate))
    return out
