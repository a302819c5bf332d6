"""One simulated federation: local training, attacks, the Re-Shuffle round, detection, evaluation.

Per round T (docs/protocol.md §5):

0. every client trains from W_g^T and forms its local model W_i^T (malicious
   clients on their poisoned data; all clients at once when training is
   batched); malicious clients replace their update U_i = W_i − W_g with the
   attack's output;
1–5. the models go through the shuffle (``real``: the protocol, in process;
   ``ideal``: its ideal functionality; ``none``: plaintext, in client order).
   Every mode carries Dec(Enc(W_i)), the protocol's fixed-point encoding, so a
   real round that recovers every model gives bit-identical results to
   ``none``; each model a round loses is listed in ``RoundRecord.lost`` with
   its cause. A model with NaN/Inf values (local training diverged, or an
   attack's output overflowed float32) cannot be encoded: its client takes no
   part in the round (a setup dropout) and the cause says why;
6. the FL step (:class:`reshuffle.server.aggregate.FLStep`, the same as the
   Flower ServerApp's): the PS sorts the recovered models into a canonical order
   (by hash, so the result cannot depend on the shuffle's permutation), forms
   U = W − W_g, runs the rule, and the server optimiser steps from its aggregate:
   W_g^{T+1} = opt(W_g^T, rule(U)) (``sgd`` with step 1: W_g^T + rule(U)),
   then CRFL's clipping and noise on W_g^{T+1} where ``model_clip`` or
   ``model_noise`` asks for them.

Only the evaluator (``_labels``) uses the ground-truth positions, to score the
rule's choice; the rule itself sees the anonymous rows alone.

A round never ends the run. When fewer models are delivered than the shuffle
needs (fewer than max(2, t) participants alive: every client diverged, dropped,
was banned or blamed; the same rule in every shuffle mode) or the rule refuses
the rows it gets, the global model stays and the record's ``skipped`` says why.
A diverged global model is a result: the run goes on to its last round and
``metrics.json`` names the first diverged round (``diverged_at``).
"""

from __future__ import annotations

import copy
import time
from typing import Callable

import numpy as np
import torch

from reshuffle.attacks import Attack, Lab, RoundView, make_attack
from reshuffle.clients import (
    NO_LABEL, BatchedTrainer, Dataset, FlatLayout, TrainConfig, build_model, load_dataset, local_train, partition,
    predict, resolve_device,
)
from reshuffle.errors import ConfigError
from reshuffle.harness.api import ShuffleResult, ideal_round, shuffle
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.schedule import PHASES
from reshuffle.server import Rule, make_rule
from reshuffle.server.aggregate import FLStep, canonical_order, row_counts
from reshuffle.server.optimizers import make_server_optimizer
from reshuffle.server.pseudonyms import ideal_pseudonym, run_key
from reshuffle.server.rules.base import decide_in_context
from reshuffle.sim.config import SimConfig
from reshuffle.sim.feasible import check_feasible
from reshuffle.sim.plugins import load_plugins
from reshuffle.sim.provenance import provenance
from reshuffle.sim.record import RoundRecord
from reshuffle.sim.report import metrics

__all__ = ["RoundRecord", "Simulation", "canonical_order", "observed_updates"]


#: Checkpoint array-name prefix of the server optimiser's state.
OPT = "opt."
#: Checkpoint arrays of the clients' and the PS's local entries: ``local.client<i>.<name>``, ``local.server.<name>``.
LOCAL = "local."


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def observed_updates(attack: Attack, own: np.ndarray, honest: np.ndarray) -> np.ndarray:
    """The simulation hook through which attacks see updates.

    Omniscient attacks get the honest clients' updates of this round (what
    colluders who know the honest distribution would have); all others get only
    the attackers' own updates.
    """
    return honest if attack.omniscient else own


def loss_causes(r: ShuffleResult, clients: int, dropouts: dict[str, list[int]]) -> dict[int, str]:
    """Why each client's model is missing from a real round's output.

    A client dropped at some phase (its model survives a drop at ``unmask``);
    blamed by the protocol (with the PS's reason); with recorded participant
    errors; otherwise it held no valid position at upload ("no slot": its
    reservation did not settle within R_max, or the PS discarded its position).
    """
    dropped_at = {i: ph for ph, ids in dropouts.items() for i in ids}
    group_of = {i: j for j, g in enumerate(r.groups or ()) for i in g}
    out = {}
    for i in range(clients):
        if i in r.positions:
            continue
        if group_of.get(i) in r.failed_groups:
            out[i] = f"group {group_of[i]} failed: {r.failed_groups[group_of[i]]}"
        elif i in dropped_at:
            out[i] = f"dropout at {dropped_at[i]}"
        elif i in r.blamed:
            out[i] = f"blamed: {r.blamed[i]}"
        elif r.participant_errors.get(i):
            out[i] = f"participant error: {r.participant_errors[i][0]}"
        else:
            out[i] = "no slot"
    return out


def non_finite(W: np.ndarray) -> int:
    """Number of NaN/Inf values in ``W`` (the fixed-point encoding cannot carry any)."""
    return int(W.size - np.count_nonzero(np.isfinite(W)))


def unencodable(models: dict[int, np.ndarray], why: str) -> dict[int, str]:
    """client → cause, for the models in ``models`` (client → model) that hold NaN/Inf values."""
    out = {}
    for i, W in models.items():
        k = non_finite(W)
        if k:
            out[i] = f"{why}: {k} of {W.size} values non-finite, not encodable"
    return out


def _loss_summary(lost: dict[int, str]) -> str:
    """'3 local training diverged, 2 dropout at setup' from client → cause."""
    kinds: dict[str, int] = {}
    for cause in lost.values():
        kind = cause.split(":")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])) or "no client sent one"


class Simulation:
    """A federation built from a :class:`SimConfig`; ``run()`` yields one RoundRecord per round."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg.validated()
        self.plugins = load_plugins(cfg.plugins)  # name → SHA-256 of the source imported (already imported)
        self.data: Dataset = load_dataset(cfg.dataset, cfg.data_dir)
        self.parts = partition(self.data.y_train, cfg.clients, cfg.partition, cfg.seed, cfg.alpha,
                               classes_per_client=cfg.classes_per_client, shards_per_client=cfg.shards_per_client,
                               natural_ids=self.data.natural_ids)
        self.device = resolve_device(cfg.device)
        self.model = build_model(cfg.model, self.data.input_shape, self.data.num_classes, seed=cfg.seed).to(self.device)
        self.layout = FlatLayout.of(self.model, cfg.local_bn)
        self.W_g = self.layout.get(self.model)
        # What each client keeps between rounds (integer buffers; BatchNorm under local_bn), and the PS's own
        # copy for the model it trains on its root dataset (FLTrust).
        start = self.layout.get_local(self.model)
        self.local = {i: {k: v.clone() for k, v in start.items()} for i in range(cfg.clients)} if start else None
        self.server_local = start or None
        self.train_cfg = TrainConfig(cfg.local_epochs, cfg.batch_size, cfg.lr, cfg.optimizer)
        self.attack = make_attack(cfg.attack, **cfg.attack_options)
        self.attack.prepare(cfg.clients, self.data.x_train)
        rng = np.random.default_rng(_seed(cfg.seed, 1))
        self.malicious = sorted(rng.choice(cfg.clients, size=cfg.n_malicious, replace=False).tolist())
        self.root = rng.choice(len(self.data.y_train), size=min(cfg.root_samples, len(self.data.y_train)), replace=False)
        self.rule: Rule = make_rule(cfg.rule, cfg.rule_f, reference=self._fltrust_reference, seed=cfg.seed,
                                    pre=cfg.pre, pre_options=cfg.pre_options, **cfg.rule_options)
        check_feasible(cfg, self.rule)
        optimizer = make_server_optimizer(cfg.server_opt, cfg.server_lr, **cfg.server_options)
        self.fl = FLStep(self.rule, optimizer, cfg.rule, cfg.model_step())
        # The protocol runs among a round's cohort (every client without sampling).
        params = RoundParams.default(cfg.cohort_size, self.W_g.size, group=cfg.group)
        self.codec, self.threshold = params.codec, max(2, params.t)
        self.eval_idx = self._eval_subset()
        self.pool_x, self.pool_y, self.client_idx = self._client_data()
        self.trainer = self._trainer()
        self._round = 0
        self.banned: dict[int, int] = {}  # client → round in which the protocol named it
        self._choices: dict | None = None  # what a rule-aware attack chose in the current round

    def _eval_subset(self) -> np.ndarray | None:
        """A fixed test subset for every round but the last (``eval_subset``), or None: the whole test set."""
        k, n = self.cfg.eval_subset, len(self.data.y_test)
        if k is None or k >= n:
            return None
        return np.sort(np.random.default_rng(_seed(self.cfg.seed, 8)).choice(n, size=k, replace=False))

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
        if set(pids) & set(self.banned):
            return []  # a named participant takes no part any more
        local = {i: j for j, i in enumerate(cohort)}
        if not set(pids) <= set(local):
            return []  # not sampled this round
        return [make_adversary(self.cfg.adversary, pids=tuple(local[i] for i in pids), **opts)]

    def _client_data(self) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """One sample pool and each client's indices into it.

        The pool is the training set followed by the malicious clients' poisoned
        copies of their own data (poisoned once, before round 1); honest
        clients index the training set itself.
        """
        xs, ys, idx = [self.data.x_train], [self.data.y_train], [p.copy() for p in self.parts]
        if self.cfg.attack == "none" or not self.attack.uses_own_training:
            return xs[0], ys[0], idx
        at = len(self.data.y_train)
        for rank, i in enumerate(self.malicious):
            rng = np.random.default_rng(_seed(self.cfg.seed, 7, i))
            x, y = self.attack.poison_data(self.data.x_train[idx[i]], self.data.y_train[idx[i]], rank,
                                           len(self.malicious), self.data.num_classes, rng)
            if len(x) != len(y) or x.shape[1:] != self.data.x_train.shape[1:]:
                raise ConfigError(f"attack {self.cfg.attack!r} returned poisoned data of shapes {x.shape}, {y.shape}")
            xs.append(x.astype(np.float32, copy=False))
            ys.append(y.astype(np.int64, copy=False))
            idx[i] = np.arange(at, at + len(y))
            at += len(y)
        return np.concatenate(xs), np.concatenate(ys), idx

    def _trainer(self) -> BatchedTrainer | None:
        mode = self.cfg.training
        if mode == "auto":
            ok = BatchedTrainer.supports(self.model, self.train_cfg) and BatchedTrainer.pays_off(self.model, self.device)
            mode = "batched" if ok else "sequential"
        if mode == "sequential":
            return None
        if not BatchedTrainer.supports(self.model, self.train_cfg):
            raise ConfigError(f"training='batched' needs optimizer 'sgd' and a model without dropout (got "
                              f"{self.cfg.optimizer!r}, {type(self.model).__name__})")
        return BatchedTrainer(self.model, self.pool_x, self.pool_y, self.train_cfg, self.layout)

    @property
    def attacked(self) -> bool:
        return bool(self.malicious) and self.cfg.attack != "none"

    def _fltrust_reference(self) -> np.ndarray:
        """g₀: the PS trains the current global model on its root dataset."""
        x, y = self.data.x_train[self.root], self.data.y_train[self.root]
        return local_train(self.model, self.W_g, x, y, self.train_cfg, _seed(self.cfg.seed, self._round, 2),
                           layout=self.layout, local=self.server_local) - self.W_g

    def _cohort(self, T: int) -> list[int]:
        """The clients sampled for round T (sorted); every client without sampling."""
        n, m = self.cfg.clients, self.cfg.cohort_size
        if m == n:
            return list(range(n))
        return sorted(np.random.default_rng(_seed(self.cfg.seed, T, 9)).choice(n, size=m, replace=False).tolist())

    def _trained(self, cohort: list[int]) -> list[int]:
        """The clients of ``cohort`` that train locally (attackers whose attack ignores its own training do not)."""
        skip = set(self.malicious) if self.attacked and not self.attack.uses_own_training else set()
        return [i for i in cohort if i not in skip]

    def _train(self, T: int, cohort: list[int]) -> tuple[dict[int, np.ndarray], float, float]:
        """Local models of the cohort's clients; (client → model, seconds per client, total seconds).

        Seconds per client is the slowest client's time when training is
        sequential, the batched computation's time divided by the clients in it
        otherwise (an estimate of one client's time in a deployment).
        """
        who = self._trained(cohort)
        seeds = [_seed(self.cfg.seed, T, 3, i) for i in who]
        models = {i: self.W_g.copy() for i in cohort}
        t_all = time.perf_counter()
        if self.trainer is not None:
            locals_ = None if self.local is None else [self.local[i] for i in who]
            for i, W in zip(who, self.trainer.train(self.W_g, [self.client_idx[i] for i in who], seeds, locals_)):
                models[i] = W
            total = time.perf_counter() - t_all
            return models, total / max(len(who), 1), total
        slowest = 0.0
        for i, seed in zip(who, seeds):
            t0 = time.perf_counter()
            idx = self.client_idx[i]
            models[i] = local_train(self.model, self.W_g, self.pool_x[idx], self.pool_y[idx], self.train_cfg, seed,
                                    layout=self.layout, local=None if self.local is None else self.local[i])
            slowest = max(slowest, time.perf_counter() - t0)
        return models, slowest, time.perf_counter() - t_all

    def _apply_attack(self, models: dict[int, np.ndarray], T: int, broken: dict[int, str]) -> dict[int, str]:
        """Replace the sampled attackers' models by the attack's; return client → cause for those it cannot form.

        The attack sees the updates of this round's cohort (the keys of ``models``)
        only. Clients in ``broken`` (their training diverged) take no part: the
        attack sees neither their updates nor runs for them. An attack output
        that is non-finite in float32 (e.g. a scaled update beyond its range)
        is reported, like a diverged model, as not encodable.
        """
        if not self.attacked:
            return {}
        mal = [i for i in self.malicious if i in models and i not in broken]
        honest = [i for i in models if i not in set(self.malicious) and i not in broken]
        if not mal:
            return {}
        if self.attack.omniscient and len(honest) < 2:
            return {i: f"attack not run: {len(honest)} finite honest updates to observe" for i in mal}
        U_own = np.stack([models[i] - self.W_g for i in mal])
        U_honest = np.stack([models[i] - self.W_g for i in honest]) if honest else U_own[:0]
        rng = np.random.default_rng(_seed(self.cfg.seed, T, 4))
        try:
            if self.attack.rule_aware:
                bad = self.attack.craft(self._round_view(U_own, U_honest, T, mal, honest), rng)
                self._choices = self.attack.choices()
            else:
                bad = self.attack(observed_updates(self.attack, U_own, U_honest), len(mal), rng)
        except ConfigError as exc:
            # The round's rows do not fit the attack's assumptions (e.g. Fang's Krum attack needs n > 2f + 2).
            return {i: f"attack not run: {exc}" for i in mal}
        if bad.shape != (len(mal), self.W_g.size):
            raise ConfigError(f"attack {self.cfg.attack!r} returned {bad.shape} (need {(len(mal), self.W_g.size)})")
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is recorded as a cause below
            for row, i in enumerate(mal):
                models[i] = (self.W_g + bad[row]).astype(np.float32)
        return {i: c for i, c in unencodable(models, "attack output").items() if i in set(mal)}

    def _lab(self, mal: list[int]) -> Lab:
        """The colluders' model copy and their own clean data (what they hold in a deployment)."""
        idx = [self.parts[i] for i in mal]
        owner = np.concatenate([np.full(len(p), k) for k, p in enumerate(idx)]) if idx else np.zeros(0, np.int64)
        pool = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        return Lab(copy.deepcopy(self.model), self.W_g.copy(), self.data.x_train[pool], self.data.y_train[pool], owner,
                   self.data.num_classes, self.train_cfg, self.layout)

    def _round_view(self, U_own: np.ndarray, U_honest: np.ndarray, T: int, mal: list[int],
                    honest: list[int]) -> RoundView:
        """What rule-aware colluders see: both sets of updates and the deployed rule, on their own copy.

        The copy is the run's rule with its configuration, pre-aggregators and
        seed (the strongest colluders know all of it); the rows they test pass
        through the same fixed-point encoding as real uploads.
        """
        rule = copy.deepcopy(self.rule)
        W_g, codec = self.W_g, self.codec
        last: dict[str, np.ndarray] = {}

        def decide(U: np.ndarray, pseudonyms=None):
            U = np.array(U, dtype=np.float64)
            # Rows equal to the previous call's keep their rounded form (searches vary a few rows per call).
            prev = last.get("in")
            todo = ~(U == prev).all(axis=1) if prev is not None and prev.shape == U.shape else np.ones(len(U), bool)
            rows = last["out"] if prev is not None and prev.shape == U.shape else np.empty_like(U)
            if todo.any():
                W = U[todo] + W_g
                # The encoding clips to ±clip anyway; clipping first keeps float32 from overflowing.
                W = np.clip(W, -codec.clip, codec.clip, out=W).astype(np.float32)
                rows[todo] = codec.roundtrip(W.ravel()).reshape(W.shape).astype(np.float64) - W_g
            last["in"], last["out"] = U, rows
            return decide_in_context(rule, rows.copy(), T, pseudonyms=pseudonyms, global_model=W_g)

        names = ([self._pseudonym(i, T) for i in mal], [self._pseudonym(i, T) for i in honest])
        return RoundView(own=U_own, honest=U_honest, decide=decide, round=T, global_model=W_g.copy(),
                         lab=self._lab(mal), pseudonyms=names if "pseudonyms" in rule.context else None)

    def _dropouts(self, T: int, cohort: list[int]) -> dict[str, list[int]]:
        """phase → clients of ``cohort`` that drop out at it (``dropout`` of the cohort, at random phases)."""
        rng = np.random.default_rng(_seed(self.cfg.seed, T, 5))
        who = rng.choice(len(cohort), size=self.cfg.n_dropout, replace=False)
        out: dict[str, list[int]] = {}
        for j in sorted(who.tolist()):
            out.setdefault(PHASES[int(rng.integers(len(PHASES)))], []).append(cohort[j])
        return out

    def _shuffle(self, models: dict[int, np.ndarray], dropouts: dict[str, list[int]], T: int):
        """(recovered models, client → row, client → cause of loss, seconds per phase, bytes).

        The shuffle runs among the clients in ``models`` (the round's cohort), numbered
        0..m−1 in client order as the protocol's participants.
        """
        cfg = self.cfg
        cohort = sorted(models)
        if cfg.shuffle == "real":
            local = {i: j for j, i in enumerate(cohort)}
            drops = {ph: [local[i] for i in ids] for ph, ids in dropouts.items()}
            # OS randomness: the protocol's secrets are never seeded in a simulation.
            r = shuffle([models[i] for i in cohort], dropouts=drops, T=T, global_model=self.W_g.tobytes(),
                        group=cfg.group, adversaries=self._adversaries(cohort), raise_on_failure=False,
                        group_size=cfg.group_size)
            self._blamed = {cohort[j]: why for j, why in r.blamed.items()}
            self._failure = r.failure
            secs = {ph: s["ps_s"] + s["participant_max_s"] for ph, s in r.stats.items()}
            per_p = sum(s["participant_bytes_sent"] + s["participant_bytes_received"] for s in r.stats.values())
            ps = sum(s["ps_bytes_sent"] + s["ps_bytes_received"] for s in r.stats.values())
            lost = {cohort[j]: why for j, why in loss_causes(r, len(cohort), drops).items()}
            positions = {cohort[j]: row for j, row in r.positions.items()}
            return r.models, positions, lost, secs, {"per_participant": per_p, "ps_total": ps}
        # Before the unmask phase, a dropped participant's model is lost; at unmask it is recovered.
        lost = {i: f"dropout at {ph}" for ph, ids in dropouts.items() if ph != "unmask" for i in ids}
        alive = [i for i in cohort if i not in lost]
        t0 = time.perf_counter()
        per_p = 4.0 * self.W_g.size
        if len(alive) < self.threshold:
            # As in the real round: below its threshold the shuffle delivers nothing.
            self._failure = f"{len(alive)} of {len(cohort)} clients alive, the shuffle needs {self.threshold}"
            return [], {}, lost, {"shuffle": time.perf_counter() - t0}, {"per_participant": per_p, "ps_total": 0.0}
        if cfg.shuffle == "ideal":
            got, pos = ideal_round([models[i] for i in alive], seed=_seed(cfg.seed, T, 6),
                                   b=self.codec.bits, f=self.codec.frac_bits, clip=self.codec.clip)
            positions = {alive[j]: row for j, row in pos.items()}
        else:
            # Plaintext, but through the same fixed-point encoding as the real round.
            got, positions = [self.codec.roundtrip(models[i]) for i in alive], {i: row for row, i in enumerate(alive)}
        secs = {"shuffle": time.perf_counter() - t0}
        return got, positions, lost, secs, {"per_participant": per_p, "ps_total": per_p * len(alive)}

    def _pseudonym(self, client: int, T: int) -> bytes:
        """Client ``client``'s ideal pseudonym in round T: a keyed hash of (epoch, client), one epoch per run."""
        return ideal_pseudonym(run_key(self.cfg.seed), 0, client)

    def _labels(self, positions: dict[int, int], rows: int) -> list[bool | None]:
        """Per delivered row, whether a malicious client sent it (None: no client's row).

        Without an attack every client is honest, so clean runs measure the
        rule's false positives too.
        """
        mal = set(self.malicious) if self.attacked else set()
        labels: list[bool | None] = [None] * rows
        for i, r in positions.items():
            labels[r] = i in mal
        return labels

    def step(self) -> RoundRecord:
        """Run one round and return its record."""
        self._round += 1
        T = self._round
        seconds: dict[str, float] = {}
        self._choices = None
        cohort = self._cohort(T)
        banned = {i: self.banned[i] for i in cohort if i in self.banned}
        models, seconds["training"], seconds["training_total"] = self._train(T, cohort)
        broken = unencodable(models, "local training diverged")
        # Every client that trained diverged: the run has diverged even if W_g itself is finite.
        all_diverged = len(broken) > 0 and len(broken) == len(self._trained(cohort))
        broken.update(self._apply_attack(models, T, broken))
        for i in broken:
            # Never sent (a setup dropout sends nothing); the protocol's participant refuses NaN/Inf models.
            models[i] = self.W_g
        dropouts = self._dropouts(T, cohort)
        if banned or broken:
            # Named with evidence in an earlier round, or holding no encodable model: it takes no part
            # (as a setup dropout would).
            dropouts["setup"] = sorted(set(dropouts.get("setup", [])) | set(banned) | set(broken))
        self._blamed: dict[int, str] = {}
        self._failure: str | None = None
        got, positions, lost, phase_s, nbytes = self._shuffle(models, dropouts, T)
        seconds.update(phase_s)
        lost.update(broken)
        for i in banned:
            lost[i] = f"banned: blamed in round {banned[i]}"
        for i in self._blamed:
            self.banned.setdefault(i, T)
        skipped, accepted, counts = None, [], row_counts(None, ())
        if not got:
            # Nothing delivered (a jammed round that named its jammer, every model diverged, too few
            # alive for the shuffle): W_g stays.
            why = _loss_summary(lost)
            skipped = f"no model delivered: {self._failure} ({why})" if self._failure else f"no model delivered ({why})"
        else:
            t0 = time.perf_counter()
            rows = {r: i for i, r in positions.items()}
            names = [self._pseudonym(rows[r], T) if r in rows else b"row-without-client-%d" % r for r in range(len(got))]
            res = self.fl(self.W_g, got, T, self._labels(positions, len(got)), pseudonyms=names)
            skipped, accepted, counts, self.W_g = res.skipped, list(res.accepted), res.counts, res.W_g
            seconds["detection"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        x, y = self._eval_set(last=T == self.cfg.rounds)
        preds = [self._predict(x, local) for local in self._evaluators()]
        pred = np.concatenate(preds)
        accuracy = float(np.mean([np.mean(p == y) for p in preds]))
        success = self._success(x, y)
        seconds["evaluation"] = time.perf_counter() - t0
        return RoundRecord(
            round=T, accuracy=accuracy, attack_success=success,
            tpr=counts["malicious_flagged"] / counts["malicious_rows"] if counts["malicious_rows"] else None,
            fpr=counts["honest_flagged"] / counts["honest_rows"] if counts["honest_rows"] else None,
            seconds=seconds, bytes=nbytes, models_received=len(got), models_accepted=len(accepted),
            dropped=sorted(i for ids in dropouts.values() for i in ids), lost=lost, blamed=self._blamed,
            diverged=all_diverged or self._diverged(pred), skipped=skipped, eval_samples=len(y),
            sampled=len(cohort), malicious_sampled=len(set(cohort) & set(self.malicious)) if self.attacked else 0,
            attack_choices=self._choices, **counts,
        )

    def _eval_set(self, last: bool) -> tuple[np.ndarray, np.ndarray]:
        """The test subset (``eval_subset``) in every round but the last; the whole test set otherwise."""
        if self.eval_idx is None or last:
            return self.data.x_test, self.data.y_test
        return self.data.x_test[self.eval_idx], self.data.y_test[self.eval_idx]

    def _evaluators(self) -> list[dict | None]:
        """Whose local entries the global model is evaluated with: none (the global model is whole), or under
        local BatchNorm every client's own (FedBN's evaluation: accuracy is the mean over the clients)."""
        if not self.cfg.local_bn or self.local is None:
            return [self.server_local]
        return [self.local[i] for i in range(self.cfg.clients)]

    def _predict(self, x: np.ndarray, local: dict | None = None) -> np.ndarray:
        return predict(self.model, self.W_g, x, layout=self.layout, local=local)

    def _success(self, x: np.ndarray, y: np.ndarray) -> float | None:
        """The attack's success score on the current global model (None without attackers); the mean over the
        clients' own BatchNorm entries under local BatchNorm."""
        if not self.attacked:
            return None
        scores = [self.attack.success(lambda x_, loc=local: self._predict(x_, loc), x, y, self.data.num_classes)
                  for local in self._evaluators()]
        return None if None in scores else float(np.mean(scores))

    def _diverged(self, pred: np.ndarray) -> bool:
        """The global model has NaN/Inf parameters, or outputs that predict no class on the test set."""
        return bool(non_finite(self.W_g) or np.any(pred == NO_LABEL))

    def run(self, on_round: Callable[[RoundRecord], None] | None = None,
            records: list[RoundRecord] | None = None) -> list[RoundRecord]:
        """Run the remaining rounds; ``on_round`` is called after each with its record.

        ``records`` holds the rounds already run (a resumed run) and is extended in
        place before each ``on_round`` call, so a callback that holds the list sees
        every record so far (to write metrics or a checkpoint after each round).
        """
        records = [] if records is None else records
        while self._round < self.cfg.rounds:
            rec = self.step()
            records.append(rec)
            if on_round:
                on_round(rec)
        return records

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """What the next round depends on beyond the configuration: (arrays, JSON data).

        Every other attribute is rebuilt from the configuration, and each round's
        randomness from ``(seed, T, ...)``; :mod:`reshuffle.sim.checkpoint` saves this.
        The server optimiser's arrays are ``opt.<name>``.
        """
        arrays = {"global_model": self.W_g.copy(), **{OPT + k: v for k, v in self.fl.state().items()}}
        for who, local in self._local_states().items():
            arrays.update({f"{LOCAL}{who}.{k}": v.cpu().numpy().copy() for k, v in local.items()})
        return arrays, {"round": self._round, "banned": {str(i): T for i, T in self.banned.items()}}

    def _local_states(self) -> dict[str, dict]:
        """Each client's local entries (``client<i>``) and the PS's (``server``), where the model has any."""
        if self.local is None:
            return {}
        return {"server": self.server_local, **{f"client{i}": loc for i, loc in self.local.items()}}

    def restore(self, arrays: dict[str, np.ndarray], state: dict) -> None:
        """Continue after round ``state["round"]`` (checked by :func:`reshuffle.sim.checkpoint.restore_simulation`)."""
        self.W_g = arrays["global_model"].copy()
        self.fl.restore({k[len(OPT):]: v for k, v in arrays.items() if k.startswith(OPT)})
        for who, local in self._local_states().items():
            for name, t in local.items():
                key = f"{LOCAL}{who}.{name}"
                if key not in arrays:
                    raise ConfigError(f"checkpoint lacks {key}, the local state this model keeps")
                t.copy_(torch.from_numpy(np.asarray(arrays[key])).to(t.device))
        self._round = state["round"]
        self.banned = {int(i): T for i, T in state["banned"].items()}

    def result(self, records: list[RoundRecord]) -> dict:
        """The metrics.json object for ``records``."""
        return metrics(self.cfg.as_dict(), records, {"malicious_clients": self.malicious,
                                                     "model_size": int(self.W_g.size),
                                                     "device": str(self.device),
                                                     "provenance": provenance(self.plugins)})


