"""One simulated federation: local training, attacks, the Re-Shuffle round, detection, evaluation.

Per round T (docs/protocol.md §5), on the loop every driver shares
(:class:`reshuffle.run.round.FLRound`):

0. the round's cohort is sampled (every client without sampling): whole stable
   anonymity sets by default (:mod:`reshuffle.run.sets`: the clients are partitioned
   once per run, and the partition is checkpointed), else clients one by one; every
   client of it trains from W_g^T and forms its local model W_i^T (malicious clients on
   their poisoned data; all clients at once when training is batched);
   malicious clients replace their update U_i = W_i − W_g with the attack's
   output (:mod:`reshuffle.sim.training`, :mod:`reshuffle.sim.attackers`);
1–5. the models go through the shuffle's channel (:mod:`reshuffle.run.delivery`:
   ``real``: the protocol, in process; ``ideal``: its ideal functionality;
   ``none``: plaintext, in client order). Every channel carries Dec(Enc(W_i)), so
   a real round that recovers every model gives bit-identical results to
   ``none``; each model a round loses is listed in ``RoundRecord.lost`` with its
   cause. A model with NaN/Inf values (local training diverged, or an attack's
   output overflowed float32) cannot be encoded: its client takes no part in the
   round (a setup dropout) and the cause says why; so does a client the protocol
   named in an earlier round. With stable sets a set delivers all its members'
   models or none: a member missing takes its set's models with it (the FL
   round applies the rule to every channel's delivery, :mod:`reshuffle.run.federation`;
   in the real round the set's honest members already refuse to unmask);
6. the FL step (:class:`reshuffle.server.aggregate.FLStep`, the same as the
   Flower ServerApp's): the PS sorts the recovered models into a canonical order
   (by hash, so the result cannot depend on the shuffle's permutation), forms
   U = W − W_g, runs the rule, and the server optimiser steps from its aggregate:
   W_g^{T+1} = opt(W_g^T, rule(U)) (``sgd`` with step 1: W_g^T + rule(U)),
   then CRFL's clipping and noise on W_g^{T+1} where ``model_clip`` or
   ``model_noise`` asks for them; then the global model is evaluated
   (:mod:`reshuffle.sim.evaluation`).

The channel turns the ground truth (who is malicious) into one label per
delivered row, which only the evaluator reads, to score the rule's choice; the
rule itself sees the anonymous rows alone.

A round never ends the run. When fewer models are delivered than the shuffle
needs (fewer than max(2, t) participants alive: every client diverged, dropped,
was banned or blamed; the same rule in every shuffle mode) or the rule refuses
the rows it gets, the global model stays and the record's ``skipped`` says why.
A diverged global model is a result: the run goes on to its last round and
``metrics.json`` names the first diverged round (``diverged_at``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np
import torch

from reshuffle.attacks import make_attack
from reshuffle.clients import Dataset, load_dataset
from reshuffle.errors import ConfigError
from reshuffle.privacy.dp import ClientDP, epsilon
from reshuffle.protocol.params import RoundParams, smallest_round
from reshuffle.protocol.schedule import STAGES
from reshuffle.run.config import SimConfig
from reshuffle.run.delivery import Uploads, make_channel
from reshuffle.run.plugins import load_plugins
from reshuffle.run.provenance import provenance
from reshuffle.run.record import RoundRecord
from reshuffle.run.report import metrics
from reshuffle.run.federation import Federation
from reshuffle.run.pseudonyms import EpochBook
from reshuffle.run.round import FLRound, make_step
from reshuffle.run.sampling import DROPOUT, SETUP, SetSampler, seed_of
from reshuffle.run.sets import StableSets, check_simulation as check_sets, set_losses
from reshuffle.server.aggregate import canonical_order
from reshuffle.sim.attackers import Attackers, observed_updates, unencodable
from reshuffle.sim.evaluation import Evaluator
from reshuffle.sim.feasible import check_feasible
from reshuffle.sim.headline import headline
from reshuffle.sim.linking import LinkingMetric
from reshuffle.sim.notices import run_notices
from reshuffle.sim.training import Training

__all__ = ["RoundRecord", "Simulation", "canonical_order", "observed_updates"]

#: Checkpoint arrays of the clients' and the PS's local entries: ``local.client<i>.<name>``, ``local.server.<name>``.
LOCAL = "local."

_EPSILONS: dict[tuple[float, int, float], float] = {}


def _epsilon(noise: float, k: int, delta: float) -> float | None:
    """ε after k uploads (cached: the accountant takes a moment); None where it is infinite (no noise)."""
    key = (noise, k, delta)
    if key not in _EPSILONS:
        _EPSILONS[key] = epsilon(noise, k, delta)
    e = _EPSILONS[key]
    return e if np.isfinite(e) else None


class Simulation:
    """A federation built from a :class:`SimConfig`; ``run()`` yields one RoundRecord per round.

    Its parts: ``training`` (the clients: data, models, local training),
    ``attackers``, ``evaluator``, ``channel`` (how models reach the PS) and
    ``rounds`` (the FL round every driver shares: W_g, the FL step, sampling,
    the banned clients, and ``rounds.federation``: stable sets, epochs and
    pseudonyms); with the options that ask for them, ``dp`` (client-side
    differential privacy on the honest clients' updates) and ``linking`` (the
    passive cross-round linker as a metric).
    """

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg.validated()
        self.plugins = load_plugins(cfg.plugins)  # name → SHA-256 of the source imported (already imported)
        data: Dataset = load_dataset(cfg.dataset, cfg.data_dir)
        attack = make_attack(cfg.attack, **cfg.attack_options)
        attack.prepare(cfg.clients, data.x_train)
        rng = np.random.default_rng(seed_of(cfg.seed, SETUP))
        malicious = sorted(rng.choice(cfg.clients, size=cfg.n_malicious, replace=False).tolist())
        root = rng.choice(len(data.y_train), size=min(cfg.root_samples, len(data.y_train)), replace=False)
        self.attackers = Attackers(attack, cfg.attack, malicious, cfg.seed)
        self.training = Training(cfg, data, attack, malicious, root)
        self.evaluator = Evaluator(cfg, self.training, self.attackers)
        t = self.training
        fl = make_step(cfg, reference=lambda: t.reference(self.W_g, self.rounds.round + 1),
                       statistics=t.layout.statistics(t.model), layout=t.layout.entries)
        check_feasible(cfg, fl.rule)
        check_sets(cfg)
        # Formed once per run; a resumed run takes the checkpoint's partition instead (restore).
        sets = StableSets.form(cfg.clients, cfg.set_size, cfg.seed) if cfg.stable_sets else None
        federation = Federation(sets=sets, book=EpochBook(cfg.group), seed=cfg.seed)
        self.rounds = FLRound(fl, cfg.sampler(), t.layout.get(t.model), federation)
        self.rounds.sampler = self._sampler()
        self.channel = make_channel(cfg.shuffle, cfg.seed, cfg.group, cfg.group_size, epochs=federation.book)
        # Rule-aware attackers replay the deployed rule under the names it sees (one source for both).
        self.attackers.names = self.pseudonym_of
        # The rows rule-aware attackers test pass through the protocol's encoding (among a round's cohort).
        # (An ideal or plain shuffle may have a cohort smaller than the real protocol's smallest round.)
        self.codec = RoundParams.default(max(cfg.cohort_size, smallest_round()), self.W_g.size, group=cfg.group).codec
        self.linking = LinkingMetric(cfg.seed) if cfg.linker else None
        self.dp = None if cfg.dp_clip is None else ClientDP(cfg.dp_clip, cfg.dp_noise)  # noise from OS randomness
        self.dp_uploads: dict[int, int] = {}  # client → models it privatised so far (its DP compositions)
        #: Settings this run ignores, rounds or changes, one line each (the command line adds its own).
        self.notices: list[str] = run_notices(self)

    # --- the parts' state, by the names a reader looks for --------------------------------
    @property
    def W_g(self) -> np.ndarray:
        return self.rounds.W_g

    @property
    def fl(self):
        return self.rounds.fl

    @property
    def rule(self):
        return self.rounds.fl.rule

    @property
    def malicious(self) -> list[int]:
        return self.attackers.malicious

    @property
    def data(self) -> Dataset:
        return self.training.data

    @property
    def sets(self) -> StableSets | None:
        """The run's stable anonymity sets (the federation's; None without sets)."""
        return self.rounds.federation.sets

    def _sampler(self):
        """Whole stable sets where the run has them, else the clients one by one (the sampler every driver uses)."""
        if self.sets is None:
            return self.cfg.sampler()
        return SetSampler(self.cfg.seed, self.sets.sets, self.cfg.fraction, self.cfg.clients_per_round)

    # --- one round ----------------------------------------------------------------------
    def _adversaries(self, cohort: list[int]) -> list:
        """The protocol adversary of this round, its participants numbered within ``cohort``."""
        if self.cfg.adversary == "none":
            return []
        from reshuffle.adversaries import make_adversary

        opts = dict(self.cfg.adversary_options)
        b = make_adversary(self.cfg.adversary, **opts)
        if b.role != "participant":
            return [b]
        pids = tuple(opts.pop("pids", (self.malicious[0] if self.malicious else 0,)))
        if set(pids) & set(self.rounds.banned):
            return []  # a named participant takes no part any more
        local = {i: j for j, i in enumerate(cohort)}
        if not set(pids) <= set(local):
            return []  # not sampled this round
        return [make_adversary(self.cfg.adversary, pids=tuple(local[i] for i in pids), **opts)]

    def _dropouts(self, T: int, cohort: list[int]) -> dict[str, list[int]]:
        """stage → clients of ``cohort`` that drop out at it (``dropout`` of the cohort, at random stages)."""
        rng = np.random.default_rng(seed_of(self.cfg.seed, T, DROPOUT))
        # Of the cohort drawn (whole stable sets vary in size); without sets it is always cfg.cohort_size.
        who = rng.choice(len(cohort), size=int(self.cfg.dropout * len(cohort)), replace=False)
        out: dict[str, list[int]] = {}
        for j in sorted(who.tolist()):
            out.setdefault(STAGES[int(rng.integers(len(STAGES)))], []).append(cohort[j])
        return out

    def uploads(self, T: int, cohort: list[int]) -> tuple[Uploads, dict[str, float], bool]:
        """What the cohort hands to the channel in round T: (uploads, training seconds, every training diverged).

        Trained models, the attackers' rows in place of theirs, the round's
        dropouts, and the clients withheld with their cause (named by the protocol
        in an earlier round, or holding no encodable model).
        """
        W_g, banned = self.W_g, self.rounds.banned
        who = self.attackers.trained(cohort)
        trained, per_client, total = self.training.train(T, who, W_g)
        models = {i: trained[i] if i in trained else W_g.copy() for i in cohort}
        broken = unencodable(models, "local training diverged")
        # Every client that trained diverged: the run has diverged even if W_g itself is finite.
        all_diverged = len(broken) > 0 and len(broken) == len(who)
        broken.update(self.attackers.apply(models, T, W_g, broken, self.rule, self.codec, self.training))
        for i in broken:
            # Never sent (a setup dropout sends nothing); the protocol's participant refuses NaN/Inf models.
            models[i] = W_g
        self._privatize(models, cohort, broken)
        withheld = {i: f"banned: blamed in round {banned[i]}" for i in cohort if i in banned}
        withheld.update(broken)
        up = Uploads(T, W_g, models, self._dropouts(T, cohort), withheld, self.attackers.ground_truth(),
                     self._adversaries(cohort) if self.cfg.shuffle == "real" else (),
                     self.sets.within(cohort) if self.sets else ())
        return up, {"training": per_client, "training_total": total}, all_diverged

    def pseudonym_of(self, client: int) -> bytes:
        """The epoch pseudonym a row of ``client`` carries to the rule in the coming round (the federation's:
        the one it holds from the real channel's issuance, else the ideal one)."""
        return self.rounds.federation.pseudonym_of(client, self.rounds.round + 1)

    def _privatize(self, models: dict[int, np.ndarray], cohort: list[int], broken: dict[int, str]) -> None:
        """Client-side DP on every honest, encodable model of the cohort (attackers send what they like)."""
        if self.dp is None:
            return
        mal = set(self.malicious) if self.attackers.attacked else set()
        for i in cohort:
            if i not in mal and i not in broken:
                models[i] = self.dp.privatize(models[i], self.W_g)
                self.dp_uploads[i] = self.dp_uploads.get(i, 0) + 1

    def _privacy_figures(self, delivery) -> tuple[dict, dict | None, float | None]:
        """(seconds, linking figures, ε of the most frequent uploader) of this round, where asked for."""
        seconds, linking, eps = {}, None, None
        if self.linking is not None:
            t0 = time.perf_counter()
            rows = {int(c): r for r, c in enumerate(delivery.senders or ())}
            linking = self.linking.observe(delivery.models, rows, delivery.groups)
            seconds["linking"] = time.perf_counter() - t0
        if self.dp is not None:
            eps = _epsilon(self.cfg.dp_noise, max(self.dp_uploads.values(), default=0), self.cfg.dp_delta)
        return seconds, linking, eps

    def step(self) -> RoundRecord:
        """Run one round and return its record."""
        T = self.rounds.round + 1
        cohort = self.rounds.cohort(T, range(self.cfg.clients))
        up, seconds, all_diverged = self.uploads(T, cohort)
        # As the FL round takes it (all or none per set, the rows' pseudonyms), so that the linker sees the same.
        delivery = self.rounds.receive(self.channel.deliver(up), cohort)
        malicious = len(set(cohort) & set(self.malicious)) if self.attackers.attacked else 0
        extra_s, linking, eps = self._privacy_figures(delivery)
        rec = self.rounds.step(T, delivery, lambda W_g: self.evaluator(W_g, T, all_diverged), sampled=len(cohort),
                               seconds={**seconds, **extra_s}, malicious_sampled=malicious,
                               attack_choices=self.attackers.choices, cohort=cohort)
        return dataclasses.replace(rec, linking=linking, dp_epsilon=eps) if linking or eps is not None else rec

    def run(self, on_round: Callable[[RoundRecord], None] | None = None,
            records: list[RoundRecord] | None = None) -> list[RoundRecord]:
        """Run the remaining rounds; ``on_round`` is called after each with its record.

        ``records`` holds the rounds already run (a resumed run) and is extended in
        place before each ``on_round`` call, so a callback that holds the list sees
        every record so far (to write metrics or a checkpoint after each round).
        """
        records = [] if records is None else records
        while self.rounds.round < self.cfg.rounds:
            rec = self.step()
            records.append(rec)
            if on_round:
                on_round(rec)
        return records

    # --- checkpoint ---------------------------------------------------------------------
    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """What the next round depends on beyond the configuration: (arrays, JSON data).

        The round's (:meth:`FLRound.state`: W_g, ``opt.<name>``, round, banned, the
        federation's sets, epochs and pseudonyms) and the clients' and the PS's local entries (``local.<who>.<name>``). Every other
        attribute is rebuilt from the configuration, and each round's randomness
        from ``(seed, T, ...)``; :mod:`reshuffle.run.checkpoint` saves this.
        """
        arrays, data = self.rounds.state()
        for who, local in self.training.local_states().items():
            arrays.update({f"{LOCAL}{who}.{k}": v.cpu().numpy().copy() for k, v in local.items()})
        if self.dp is not None:
            data["dp_uploads"] = {str(i): k for i, k in self.dp_uploads.items()}
        data["notices"] = list(self.notices)  # a resumed run's metrics.json keeps the command line's too
        if self.linking is not None:
            more, extra = self.linking.state()
            arrays.update(more)
            data.update(extra)
        return arrays, data

    def restore(self, arrays: dict[str, np.ndarray], state: dict) -> None:
        """Continue after round ``state["round"]`` (checked by :func:`reshuffle.run.checkpoint.restore_simulation`)."""
        for who, local in self.training.local_states().items():
            for name in local:
                if f"{LOCAL}{who}.{name}" not in arrays:
                    raise ConfigError(f"checkpoint lacks {LOCAL}{who}.{name}, the local state this model keeps")
        self.rounds.restore(arrays, state)
        self.rounds.sampler = self._sampler()  # over the checkpoint's sets
        for who, local in self.training.local_states().items():
            for name, t in local.items():
                t.copy_(torch.from_numpy(np.asarray(arrays[f"{LOCAL}{who}.{name}"])).to(t.device))
        if self.dp is not None:
            self.dp_uploads = {int(i): k for i, k in state.get("dp_uploads", {}).items()}
        notices = state.get("notices")
        if isinstance(notices, list) and all(isinstance(n, str) for n in notices):
            self.notices = list(notices)
        if self.linking is not None:
            self.linking.restore(arrays, state)

    def result(self, records: list[RoundRecord]) -> dict:
        """The metrics.json object for ``records``."""
        extra = {"malicious_clients": self.malicious, "model_size": int(self.W_g.size),
                 "device": str(self.training.device), "provenance": provenance(self.plugins)}
        if self.sets is not None:
            extra["stable_sets"] = set_losses(self.sets, records)
        extra["notices"] = list(self.notices)
        data = metrics(self.cfg.as_dict(), records, extra)
        data["headline"] = headline(data, self.data.num_classes, int(self.W_g.size))
        return data
