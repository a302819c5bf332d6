"""The simulated clients' side: their data, their local training, what each keeps between rounds.

Every client trains from W_g^T on its own partition (malicious clients on their
poisoned copy of it, made once before round 1). Training is batched (all clients
in one stacked computation) or sequential, as ``training`` chooses; a client's
seed is ``(seed, T, TRAIN, i)``, as on a Flower node.
"""

from __future__ import annotations

import time

import numpy as np

from reshuffle.attacks import Attack
from reshuffle.clients import (
    BatchedTrainer, Dataset, FlatLayout, TrainConfig, build_model, local_train, partition, resolve_device,
)
from reshuffle.errors import ConfigError
from reshuffle.run.config import SimConfig
from reshuffle.run.sampling import POISON, REFERENCE, TRAIN, seed_of


class Training:
    """The federation's clients: partitions, the sample pool, the model they train, their local entries.

    ``local`` holds what each client keeps between rounds (integer buffers; every
    BatchNorm entry under ``local_bn``), ``server_local`` the PS's own copy for the
    model it trains on its root dataset (FLTrust).
    """

    def __init__(self, cfg: SimConfig, data: Dataset, attack: Attack, malicious: list[int], root: np.ndarray) -> None:
        self.cfg, self.data, self.root = cfg, data, root
        self.parts = partition(data.y_train, cfg.clients, cfg.partition, cfg.seed, cfg.alpha,
                               classes_per_client=cfg.classes_per_client, shards_per_client=cfg.shards_per_client,
                               natural_ids=data.natural_ids)
        self.device = resolve_device(cfg.device)
        self.model = build_model(cfg.model, data.input_shape, data.num_classes, seed=cfg.seed,
                                 dataset=cfg.dataset).to(self.device)
        self.layout = FlatLayout.of(self.model, cfg.local_bn)
        start = self.layout.get_local(self.model)
        self.local = {i: {k: v.clone() for k, v in start.items()} for i in range(cfg.clients)} if start else None
        self.server_local = start or None
        self.train_cfg = TrainConfig(cfg.local_epochs, cfg.batch_size, cfg.lr, cfg.optimizer)
        self.pool_x, self.pool_y, self.client_idx = self._pool(attack, malicious)
        self.trainer = self._trainer()

    def _pool(self, attack: Attack, malicious: list[int]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """One sample pool and each client's indices into it.

        The pool is the training set followed by the malicious clients' poisoned
        copies of their own data (poisoned once, before round 1); honest
        clients index the training set itself.
        """
        data = self.data
        xs, ys, idx = [data.x_train], [data.y_train], [p.copy() for p in self.parts]
        if self.cfg.attack == "none" or not attack.uses_own_training:
            return xs[0], ys[0], idx
        at = len(data.y_train)
        for rank, i in enumerate(malicious):
            rng = np.random.default_rng(seed_of(self.cfg.seed, POISON, i))
            x, y = attack.poison_data(data.x_train[idx[i]], data.y_train[idx[i]], rank, len(malicious),
                                      data.num_classes, rng)
            if len(x) != len(y) or x.shape[1:] != data.x_train.shape[1:]:
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

    def train(self, T: int, who: list[int], W_g: np.ndarray) -> tuple[dict[int, np.ndarray], float, float]:
        """Local models of the clients ``who``; (client → model, seconds per client, total seconds).

        Seconds per client is the slowest client's time when training is
        sequential, the batched computation's time divided by the clients in it
        otherwise (an estimate of one client's time in a deployment).
        """
        seeds = [seed_of(self.cfg.seed, T, TRAIN, i) for i in who]
        models: dict[int, np.ndarray] = {}
        t_all = time.perf_counter()
        if self.trainer is not None:
            locals_ = None if self.local is None else [self.local[i] for i in who]
            for i, W in zip(who, self.trainer.train(W_g, [self.client_idx[i] for i in who], seeds, locals_)):
                models[i] = W
            total = time.perf_counter() - t_all
            return models, total / max(len(who), 1), total
        slowest = 0.0
        for i, seed in zip(who, seeds):
            t0 = time.perf_counter()
            idx = self.client_idx[i]
            models[i] = local_train(self.model, W_g, self.pool_x[idx], self.pool_y[idx], self.train_cfg, seed,
                                    layout=self.layout, local=None if self.local is None else self.local[i])
            slowest = max(slowest, time.perf_counter() - t0)
        return models, slowest, time.perf_counter() - t_all

    def reference(self, W_g: np.ndarray, T: int) -> np.ndarray:
        """FLTrust's g₀: the PS trains W_g on its root dataset."""
        x, y = self.data.x_train[self.root], self.data.y_train[self.root]
        return local_train(self.model, W_g, x, y, self.train_cfg, seed_of(self.cfg.seed, T, REFERENCE),
                           layout=self.layout, local=self.server_local) - W_g

    def local_states(self) -> dict[str, dict]:
        """Each client's local entries (``client<i>``) and the PS's (``server``), where the model has any."""
        if self.local is None:
            return {}
        return {"server": self.server_local, **{f"client{i}": loc for i, loc in self.local.items()}}
