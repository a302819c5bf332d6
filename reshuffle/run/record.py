"""What one round of a simulated or Flower federation records (``metrics.json``'s ``rounds``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class RoundRecord:
    """One round's outcome.

    ``tpr`` and ``fpr`` are this round's per-row rates: flagged malicious rows
    over malicious rows delivered, flagged honest rows over honest rows
    delivered (``fpr`` is recorded on clean runs too; ``tpr`` is None when no
    malicious row arrived). The four ``*_rows``/``*_flagged`` counts are what
    they are computed from, so runs can be pooled row by row.
    """

    round: int
    accuracy: float | None
    attack_success: float | None
    tpr: float | None
    fpr: float | None
    seconds: dict[str, float]
    bytes: dict[str, float]
    models_received: int
    models_accepted: int
    dropped: list[int] = field(default_factory=list)
    #: client → why its model is missing from this round ("dropout at <phase>", "no slot", "blamed: ...").
    lost: dict[int, str] = field(default_factory=dict)
    #: client → what the protocol named it for in this round, with its evidence (never an honest client).
    blamed: dict[int, str] = field(default_factory=dict)
    #: The global model after this round has NaN/Inf parameters or outputs on the test set; such
    #: outputs predict no class (they count as wrong and never as the backdoor target).
    diverged: bool = False
    honest_rows: int = 0
    honest_flagged: int = 0
    malicious_rows: int = 0
    malicious_flagged: int = 0
    #: Mean Decision weight of the honest / malicious rows delivered (1: used in full; below 1:
    #: clipped, trust-scored or dropped; None when no such row arrived or the round was skipped).
    honest_weight: float | None = None
    malicious_weight: float | None = None
    #: The attackers' share of the aggregate's weight: the Decision weights of the malicious rows over
    #: all rows' (None without attackers or when the round was skipped).
    malicious_share: float | None = None
    #: The attackers' influence on the aggregate after clipping (:func:`reshuffle.server.aggregate.influence`):
    #: their share of what the rows put in, the aggregate's move along the attack's direction (in median honest
    #: norms), honest rows down-weighted and zeroed (None where the round was skipped or had no such rows).
    malicious_influence: float | None = None
    attack_projection: float | None = None
    honest_downweighted: int | None = None
    honest_zeroed: int | None = None
    #: What a rule-aware attack chose this round (its ``choices()``), or None.
    attack_choices: dict | None = None
    #: Why the global model was left unchanged this round (too few models delivered, or the rule
    #: refused them); None when it was updated.
    skipped: str | None = None
    #: Accuracy and attack success measured on this many test samples (the fixed evaluation
    #: subset, or the whole test set).
    eval_samples: int | None = None
    #: Clients sampled for this round (its cohort: every client without sampling), and the
    #: attackers among them (None where unknown, as on Flower).
    sampled: int | None = None
    malicious_sampled: int | None = None
    #: The passive cross-round linker over rounds 1..this one (``linker`` runs only): the bound (a linker
    #: that knows the true chains) and the linker's success, as
    #: :class:`reshuffle.adversaries.crossround.Figures` fields.
    linking: dict | None = None
    #: Client-side DP: ε (at the run's ``dp_delta``) of the client that has uploaded most often so far.
    dp_epsilon: float | None = None


def finite_or_none(v):
    """``v`` with NaN/±Inf floats replaced by None, recursively (JSON has no NaN)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: finite_or_none(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite_or_none(x) for x in v]
    return v
