"""``reshuffle bench simulate``: one round of local training, batched against sequential.

The same clients (same initial model, data, batch order and seeds) train once
one after another with :func:`local_train` and once as one stacked computation
with :class:`BatchedTrainer`; the speed-up is measured in the same run, and the
largest coordinate difference between the two results is reported with it.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from reshuffle.errors import ConfigError


def run(
    dataset: str = "mnist",
    model: str = "lenet5",
    clients: int = 20,
    data_dir: str | None = None,
    samples: int | None = None,
    batch_size: int = 64,
    lr: float = 0.1,
    seed: int = 0,
    threads: int = 1,
    on_step: Callable[[str], None] | None = None,
) -> dict:
    """Time one local epoch of ``clients`` IID clients both ways; ``samples`` caps each client's data.

    Both run on ``threads`` torch threads (1 by default: on a shared machine,
    more threads than free cores make small operations wait on each other).
    """
    import torch

    from reshuffle.clients import BatchedTrainer, TrainConfig, build_model, get_flat, load_dataset, local_train, partition

    if not isinstance(clients, int) or clients < 1:
        raise ConfigError(f"clients must be a positive int, got {clients!r}")
    torch.set_num_threads(threads)
    data = load_dataset(dataset, data_dir)
    parts = partition(data.y_train, clients, "iid", seed)
    if samples is not None:
        parts = [p[:samples] for p in parts]
    net = build_model(model, data.input_shape, data.num_classes, seed=seed)
    W_g = get_flat(net)
    cfg = TrainConfig(batch_size=batch_size, lr=lr)
    seeds = [seed * 1000 + i for i in range(clients)]

    if on_step is not None:
        on_step("sequential")
    t0 = time.perf_counter()
    seq = [local_train(net, W_g, data.x_train[p], data.y_train[p], cfg, s) for p, s in zip(parts, seeds)]
    sequential = time.perf_counter() - t0

    if on_step is not None:
        on_step("batched")
    trainer = BatchedTrainer(net, data.x_train, data.y_train, cfg)
    t0 = time.perf_counter()
    bat = trainer.train(W_g, parts, seeds)
    batched = time.perf_counter() - t0

    diff = max(float(np.abs(a - b).max()) for a, b in zip(seq, bat))
    return {
        "dataset": dataset, "model": model, "clients": clients, "threads": threads,
        "samples_per_client": int(np.mean([len(p) for p in parts])),
        "sequential_s": sequential, "batched_s": batched, "speedup": sequential / batched,
        "max_abs_diff": diff, "auto_picks": "batched" if BatchedTrainer.pays_off(net) else "sequential",
    }
