"""The FL round of every driver: a delivery in, the FL step, the round's record out.

``reshuffle simulate`` and the Flower ServerApp run the same loop; only how the
models arrive and how the new global model is evaluated differ:

1. :meth:`FLRound.cohort`: round T's clients, drawn by the run's sampler from the
   population that can take part (clients, or the nodes connected);
2. the driver has their models delivered (a :class:`~reshuffle.run.delivery.Delivery`:
   the in-process channels, or the Flower grid);
3. :meth:`FLRound.step`: with at least two rows the FL step
   (:class:`reshuffle.server.aggregate.FLStep`: canonical order, rule, server
   optimiser, model step) forms W_g^{T+1}, and the rows' labels score the rule;
   with fewer, W_g stays and the record's ``skipped`` says why; then the driver
   evaluates the global model and the round's :class:`RoundRecord` is built.

A round never ends the run. :class:`FLRound` keeps what the next round depends on:
W_g, the FL step's state (the server optimiser's arrays, checkpointed as
``opt.<name>``), the last round run, the clients the protocol named with
evidence (``banned``: a driver withholds them from later rounds), and the
federation's cross-round state (:class:`~reshuffle.run.federation.Federation`:
stable sets, epochs, pseudonyms), whose all-or-none rule it applies to every
delivery before the FL step. Drivers hand deliveries in as their channel made
them and read the sets, epochs and pseudonyms from it; none amends a delivery.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.run.delivery import PSEUDONYM, Delivery
from reshuffle.run.federation import STATE as FEDERATION, Federation
from reshuffle.run.record import RoundRecord
from reshuffle.run.sampling import Sampler
from reshuffle.server.aggregate import FLStep, row_counts

#: Checkpoint array of the global model, and the name prefix of the server optimiser's arrays.
GLOBAL = "global_model"
OPT = "opt."
#: A round needs this many rows: a shuffle of one model hides no one, and no rule compares one row.
MIN_MODELS = 2


def non_finite(W: np.ndarray) -> int:
    """Number of NaN/Inf values in ``W`` (the fixed-point encoding cannot carry any)."""
    return int(W.size - np.count_nonzero(np.isfinite(W)))


@dataclass(frozen=True)
class Evaluation:
    """The global model after a round, as the driver measured it.

    ``diverged``: W_g has NaN/Inf parameters, or outputs that predict no class.
    """

    accuracy: float | None
    attack_success: float | None = None
    diverged: bool = False
    samples: int | None = None

    @classmethod
    def of(cls, W_g: np.ndarray, preds: Sequence[np.ndarray], y: np.ndarray, attack_success: float | None = None,
           diverged: bool = False) -> "Evaluation":
        """From the test labels ``y`` and one prediction per evaluator (a negative label: no class predicted).

        Accuracy is the mean over the evaluators.
        """
        accuracy = float(np.mean([np.mean(p == y) for p in preds]))
        bad = diverged or non_finite(W_g) > 0 or any(bool(np.any(p < 0)) for p in preds)
        return cls(accuracy, attack_success, bad, len(y))


def make_step(cfg, reference: Callable[[], np.ndarray] | None = None,
              statistics: np.ndarray | None = None, layout=None) -> FLStep:
    """The run's FL step from its settings (a :class:`~reshuffle.run.config.SimConfig`), built once.

    The rule assumes ``cfg.rule_f`` attackers; ``reference`` is FLTrust's server
    update (None where the driver has no root dataset); ``statistics`` marks the
    entries of W that are running statistics (BatchNorm's mean and variance),
    which take the rule's aggregate as it is, outside the server optimiser's step;
    ``layout`` the flat model's (name, shape) entries, for rules that read layers.
    """
    from reshuffle.server import make_rule
    from reshuffle.server.optimizers import make_server_optimizer

    rule = make_rule(cfg.rule, cfg.rule_f, reference=reference, seed=cfg.seed, pre=cfg.pre,
                     pre_options=cfg.pre_options, **cfg.rule_options)
    return FLStep(rule, make_server_optimizer(cfg.server_opt, cfg.server_lr, **cfg.server_options), cfg.rule,
                  cfg.model_step(), statistics=statistics, layout=layout)


def loss_summary(lost: dict[int, str]) -> str:
    """'3 local training diverged, 2 dropout at setup' from client → cause."""
    kinds: dict[str, int] = {}
    for cause in lost.values():
        kind = cause.split(":")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))


def skip_reason(d: Delivery) -> str:
    """Why a delivery of fewer than :data:`MIN_MODELS` rows leaves W_g unchanged."""
    n = len(d.models)
    head = "no model delivered" if n == 0 else f"{n} model delivered, a round needs {MIN_MODELS}"
    why = loss_summary(d.lost) or ("" if d.failure else "no client sent one")
    if d.failure:
        return f"{head}: {d.failure}" + (f" ({why})" if why else "")
    return f"{head} ({why})"




class FLRound:
    """The PS's side of a run: the round loop over deliveries, and the state it carries between rounds.

    Parameters
    ----------
    fl : the run's FL step (:func:`make_step`).
    sampler : draws each round's cohort (:mod:`reshuffle.run.sampling`).
    W_g : the initial global model (flat float32).
    federation : the state the run keeps across rounds (default: no sets, one epoch).
    """

    def __init__(self, fl: FLStep, sampler: Sampler, W_g: np.ndarray, federation: Federation | None = None) -> None:
        self.fl, self.sampler, self.W_g = fl, sampler, W_g
        self.federation = federation if federation is not None else Federation()
        self.round = 0  # the last round run
        self.banned: dict[int, int] = {}  # client → round in which the protocol named it

    def cohort(self, T: int, population: Sequence[int]) -> list[int]:
        """Round T's cohort out of ``population``, as the run's sampler draws it over its sets (sorted)."""
        return self.federation.cohort(self.sampler, T, population)

    def receive(self, delivery: Delivery, cohort: Sequence[int] | None = None) -> Delivery:
        """``delivery`` as the FL step takes it (:meth:`Federation.receive`: all or none per set); idempotent,
        so a driver that reads the delivery first (to measure it) hands :meth:`step` the same."""
        return self.federation.receive(delivery, cohort)

    def step(self, T: int, delivery: Delivery, evaluate: Callable[[np.ndarray], Evaluation], *, sampled: int,
             seconds: dict[str, float] | None = None, malicious_sampled: int | None = None,
             attack_choices: dict | None = None, cohort: Sequence[int] | None = None) -> RoundRecord:
        """Finish round T from ``delivery``: the all-or-none rule, the FL step, the driver's ``evaluate(W_g)``,
        the record.

        ``sampled`` is the cohort's size (``cohort`` the cohort, where the driver has it); ``seconds`` the driver's own times before the
        delivery (training); ``malicious_sampled`` and ``attack_choices`` what the
        driver knows of the attack (None where it knows nothing).
        """
        if T <= self.round:
            raise ConfigError(f"round {T} after round {self.round}: round numbers only go up")
        delivery = self.receive(delivery, cohort)
        secs = {**(seconds or {}), **delivery.seconds}
        for i in delivery.blamed:
            self.banned.setdefault(i, T)
        if len(delivery.models) < MIN_MODELS:
            skipped, accepted, counts = skip_reason(delivery), 0, row_counts(None, ())
        else:
            t0 = time.perf_counter()
            res = self.fl(self.W_g, delivery.models, T, delivery.labels, pseudonyms=delivery.meta.get(PSEUDONYM))
            skipped, accepted, counts, self.W_g = res.skipped, len(res.accepted), res.counts, res.W_g
            secs["detection"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ev = evaluate(self.W_g)
        secs["evaluation"] = time.perf_counter() - t0
        self.round = T
        return RoundRecord(
            round=T, accuracy=ev.accuracy, attack_success=ev.attack_success,
            tpr=counts["malicious_flagged"] / counts["malicious_rows"] if counts["malicious_rows"] else None,
            fpr=counts["honest_flagged"] / counts["honest_rows"] if counts["honest_rows"] else None,
            seconds=secs, bytes=dict(delivery.bytes), models_received=len(delivery.models), models_accepted=accepted,
            dropped=sorted(delivery.dropped), lost=dict(delivery.lost), blamed=dict(delivery.blamed),
            diverged=ev.diverged, skipped=skipped, eval_samples=ev.samples, sampled=sampled,
            malicious_sampled=malicious_sampled, attack_choices=attack_choices, **counts,
        )

    def interrupted(self, T: int, why: str, evaluation: Evaluation) -> RoundRecord:
        """The record of round T, lost before it delivered (its driver stopped): W_g kept."""
        self.round = max(self.round, T)
        return RoundRecord(T, evaluation.accuracy, None, None, None, {}, {}, 0, 0, diverged=evaluation.diverged,
                           skipped=why, eval_samples=evaluation.samples)

    # --- checkpoint ---------------------------------------------------------------------
    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """What the next round depends on beyond the settings: (arrays, JSON data).

        Arrays: the global model and the server optimiser's ``opt.<name>``; data: the
        last round run, the banned clients and the federation's state.
        """
        arrays = {GLOBAL: self.W_g.copy(), **{OPT + k: v for k, v in self.fl.state().items()}}
        return arrays, {"round": self.round, "banned": {str(i): T for i, T in self.banned.items()},
                        FEDERATION: self.federation.state()}

    def restore(self, arrays: dict[str, np.ndarray], data: dict) -> None:
        """Continue after ``data["round"]`` from :meth:`state`'s output; a mismatch is a ConfigError."""
        W = arrays.get(GLOBAL)
        if W is None or W.dtype != self.W_g.dtype or W.shape != self.W_g.shape:
            raise ConfigError(f"no global model of {self.W_g.dtype} and shape {self.W_g.shape}")
        try:
            rnd = data["round"]
            banned = {int(i): int(T) for i, T in data.get("banned", {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"round state incomplete ({exc!r})") from None
        if not isinstance(rnd, int) or isinstance(rnd, bool) or rnd < 0:
            raise ConfigError(f"round state names round {rnd!r}")
        self.federation.restore(data)
        self.fl.restore({k[len(OPT):]: v for k, v in arrays.items() if k.startswith(OPT)})
        self.W_g = W.copy()
        self.round, self.banned = rnd, banned
