"""One simulated federation: local training, attacks, the Re-Shuffle round, detection, evaluation.

Per round T (PROTOCOL.md §5):

0. every client trains from W_g^T and forms its local model W_i^T; malicious
   clients replace their update U_i = W_i − W_g with the attack's output;
1–5. the models go through the shuffle (``real``: the protocol, in process;
   ``ideal``: its ideal functionality; ``none``: plaintext, in client order);
6. the PS sorts the recovered models into a canonical order (by hash, so the
   result cannot depend on the shuffle's permutation), forms U = W − W_g, runs the
   rule and sets W_g^{T+1} = W_g^T + rule(U).

Only the evaluator (``_detection``) uses the ground-truth positions, to score the
rule's choice; the rule itself sees the anonymous rows alone.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from reshuffle.attacks import Attack, make_attack
from reshuffle.clients import Dataset, TrainConfig, build_model, get_flat, load_dataset, local_train, partition, predict
from reshuffle.errors import ConfigError
from reshuffle.protocol.api import ideal_round, shuffle
from reshuffle.protocol.phases import PHASES
from reshuffle.server import Rule, make_rule
from reshuffle.sim.config import SimConfig
from reshuffle.sim.report import metrics


@dataclass
class RoundRecord:
    round: int
    accuracy: float
    attack_success: float | None
    tpr: float | None
    fpr: float | None
    seconds: dict[str, float]
    bytes: dict[str, float]
    models_received: int
    models_accepted: int
    dropped: list[int] = field(default_factory=list)


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def observed_updates(attack: Attack, own: np.ndarray, honest: np.ndarray) -> np.ndarray:
    """The simulation hook through which attacks see updates.

    Omniscient attacks get the honest clients' updates of this round (what
    colluders who know the honest distribution would have); all others get only
    the attackers' own updates.
    """
    return honest if attack.omniscient else own


def canonical_order(models: list[np.ndarray]) -> list[int]:
    """Row order by SHA-256 of each model's bytes: independent of who sent what."""
    return sorted(range(len(models)), key=lambda i: hashlib.sha256(models[i].tobytes()).digest())


class Simulation:
    """A federation built from a :class:`SimConfig`; ``run()`` yields one RoundRecord per round."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg.validated()
        self.data: Dataset = load_dataset(cfg.dataset, cfg.data_dir)
        self.parts = partition(self.data.y_train, cfg.clients, cfg.partition, cfg.seed, cfg.alpha)
        self.model = build_model(cfg.model, self.data.input_shape, self.data.num_classes, seed=cfg.seed)
        self.W_g = get_flat(self.model)
        self.train_cfg = TrainConfig(cfg.local_epochs, cfg.batch_size, cfg.lr, cfg.optimizer)
        self.attack = make_attack(cfg.attack, **cfg.attack_options)
        rng = np.random.default_rng(_seed(cfg.seed, 1))
        self.malicious = sorted(rng.choice(cfg.clients, size=cfg.n_malicious, replace=False).tolist())
        self.root = rng.choice(len(self.data.y_train), size=min(cfg.root_samples, len(self.data.y_train)), replace=False)
        self.rule: Rule = make_rule(cfg.rule, cfg.rule_f, reference=self._fltrust_reference, seed=cfg.seed,
                                    pre=cfg.pre, pre_options=cfg.pre_options, **cfg.rule_options)
        self._round = 0

    @property
    def attacked(self) -> bool:
        return bool(self.malicious) and self.cfg.attack != "none"

    def _fltrust_reference(self) -> np.ndarray:
        """g₀: the PS trains the current global model on its root dataset."""
        x, y = self.data.x_train[self.root], self.data.y_train[self.root]
        return local_train(self.model, self.W_g, x, y, self.train_cfg, _seed(self.cfg.seed, self._round, 2)) - self.W_g

    def _train(self, T: int) -> tuple[list[np.ndarray], float, float]:
        """Local models of all clients; (models, slowest client seconds, total seconds)."""
        cfg, data = self.cfg, self.data
        mal = set(self.malicious)
        models, times = [], []
        for i, idx in enumerate(self.parts):
            t0 = time.perf_counter()
            if i in mal and not self.attack.uses_own_training:
                models.append(self.W_g.copy())
            else:
                y = data.y_train[idx]
                if i in mal:
                    y = self.attack.poison_labels(y, data.num_classes)
                models.append(local_train(self.model, self.W_g, data.x_train[idx], y, self.train_cfg, _seed(cfg.seed, T, 3, i)))
            times.append(time.perf_counter() - t0)
        return models, max(times), sum(times)

    def _apply_attack(self, models: list[np.ndarray], T: int) -> None:
        if not self.attacked:
            return
        mal = self.malicious
        honest = [i for i in range(self.cfg.clients) if i not in set(mal)]
        U_own = np.stack([models[i] - self.W_g for i in mal])
        U_honest = np.stack([models[i] - self.W_g for i in honest])
        rng = np.random.default_rng(_seed(self.cfg.seed, T, 4))
        bad = self.attack(observed_updates(self.attack, U_own, U_honest), len(mal), rng)
        if bad.shape != (len(mal), self.W_g.size) or not np.isfinite(bad).all():
            raise ConfigError(f"attack {self.cfg.attack!r} returned {bad.shape} (need finite {(len(mal), self.W_g.size)})")
        for row, i in enumerate(mal):
            models[i] = (self.W_g + bad[row]).astype(np.float32)

    def _dropouts(self, T: int) -> dict[str, list[int]]:
        rng = np.random.default_rng(_seed(self.cfg.seed, T, 5))
        who = rng.choice(self.cfg.clients, size=self.cfg.n_dropout, replace=False)
        out: dict[str, list[int]] = {}
        for i in sorted(who.tolist()):
            out.setdefault(PHASES[int(rng.integers(len(PHASES)))], []).append(i)
        return out

    def _shuffle(self, models: list[np.ndarray], dropouts: dict[str, list[int]], T: int):
        """(recovered models, client → row, seconds per phase, bytes)."""
        cfg = self.cfg
        if cfg.shuffle == "real":
            # OS randomness: the protocol's secrets are never seeded in a simulation.
            r = shuffle(models, dropouts=dropouts, T=T, global_model=self.W_g.tobytes(), group=cfg.group)
            secs = {ph: s["ps_s"] + s["participant_max_s"] for ph, s in r.stats.items()}
            per_p = sum(s["participant_bytes_sent"] + s["participant_bytes_received"] for s in r.stats.values())
            ps = sum(s["ps_bytes_sent"] + s["ps_bytes_received"] for s in r.stats.values())
            return r.models, r.positions, secs, {"per_participant": per_p, "ps_total": ps}
        # Before the unmask phase, a dropped participant's model is lost; at unmask it is recovered.
        lost = {i for ph, ids in dropouts.items() if ph != "unmask" for i in ids}
        alive = [i for i in range(cfg.clients) if i not in lost]
        t0 = time.perf_counter()
        if cfg.shuffle == "ideal":
            got, pos = ideal_round([models[i] for i in alive], seed=_seed(cfg.seed, T, 6))
            positions = {alive[j]: row for j, row in pos.items()}
            per_p = 4.0 * self.W_g.size
        else:
            got, positions = [models[i] for i in alive], {i: row for row, i in enumerate(alive)}
            per_p = 4.0 * self.W_g.size
        return got, positions, {"shuffle": time.perf_counter() - t0}, {"per_participant": per_p, "ps_total": per_p * len(alive)}

    def _detection(self, positions: dict[int, int], accepted: set[int]) -> tuple[float | None, float | None]:
        """TPR = rejected malicious / malicious received; FPR = rejected honest / honest received."""
        if not self.attacked:
            return None, None
        mal = set(self.malicious)
        m_rows = [r for i, r in positions.items() if i in mal]
        h_rows = [r for i, r in positions.items() if i not in mal]
        tpr = sum(r not in accepted for r in m_rows) / len(m_rows) if m_rows else None
        fpr = sum(r not in accepted for r in h_rows) / len(h_rows) if h_rows else None
        return tpr, fpr

    def step(self) -> RoundRecord:
        """Run one round and return its record."""
        self._round += 1
        T = self._round
        seconds: dict[str, float] = {}
        models, seconds["training"], _ = self._train(T)
        self._apply_attack(models, T)
        dropouts = self._dropouts(T)
        got, positions, phase_s, nbytes = self._shuffle(models, dropouts, T)
        seconds.update(phase_s)

        t0 = time.perf_counter()
        order = canonical_order(got)
        row_of = {old: new for new, old in enumerate(order)}
        positions = {i: row_of[r] for i, r in positions.items()}
        U = np.stack([got[j] for j in order]).astype(np.float64) - self.W_g
        decision = self.rule.decide(U, round=T)  # one call: randomized rules draw from (seed, T)
        accepted, agg = list(decision.accepted), decision.aggregate
        self.W_g = (self.W_g + agg).astype(np.float32)
        seconds["detection"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        pred = predict(self.model, self.W_g, self.data.x_test)
        accuracy = float(np.mean(pred == self.data.y_test))
        success = self.attack.success(pred, self.data.y_test, self.data.num_classes) if self.attacked else None
        seconds["evaluation"] = time.perf_counter() - t0
        tpr, fpr = self._detection(positions, set(accepted))
        return RoundRecord(
            round=T, accuracy=accuracy, attack_success=success, tpr=tpr, fpr=fpr, seconds=seconds, bytes=nbytes,
            models_received=len(got), models_accepted=len(accepted),
            dropped=sorted(i for ids in dropouts.values() for i in ids),
        )

    def run(self, on_round: Callable[[RoundRecord], None] | None = None) -> list[RoundRecord]:
        records = []
        for _ in range(self.cfg.rounds):
            rec = self.step()
            records.append(rec)
            if on_round:
                on_round(rec)
        return records

    def result(self, records: list[RoundRecord]) -> dict:
        """The metrics.json object for ``records``."""
        return metrics(self.cfg.as_dict(), records, {"malicious_clients": self.malicious, "model_size": int(self.W_g.size)})


