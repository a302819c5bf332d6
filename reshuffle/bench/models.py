"""``reshuffle bench models``: local-training throughput of every built-in model, per engine and device.

For each built-in model, C clients train one local epoch of n samples each
from the same global model, three ways, timed in the same run:

- ``loop``: one client after another (:func:`~reshuffle.clients.train.local_train`);
- ``func``: all clients in one ``torch.func`` computation (:class:`~reshuffle.clients.batched.BatchedTrainer`);
- ``stacked``: the hand-written stacked forward and backward (logreg, mlp and lenet5 only).

Each figure is samples per second per client: the samples a client trains on
divided by its share of the time (a client's own samples/s when clients train
one after another; the batch's total divided by C when they train together).
Ratios (func/loop, stacked/func) come from the same run. Inputs are random
tensors of the model's usual shape: throughput does not depend on pixel values.
The CPU is always measured; a CUDA device only where torch sees one, and its
columns are None otherwise (never estimated).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from reshuffle.errors import ConfigError

#: (model, input shape, classes, samples per client, batch size): MNIST-shaped input for the three small
#: models, CIFAR-10-shaped for the CNN and ResNet-18; fewer samples for ResNet-18 (slow on a CPU).
CASES = (
    ("logreg", (1, 28, 28), 10, 256, 32),
    ("mlp", (1, 28, 28), 10, 256, 32),
    ("lenet5", (1, 28, 28), 10, 256, 32),
    ("cnn", (3, 32, 32), 10, 128, 32),
    ("resnet18", (3, 32, 32), 10, 32, 16),
)


def _time(fn, repeat: int) -> tuple[float, object]:
    """(best wall time of ``repeat`` calls after one untimed warm-up call, the last result)."""
    out = fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _measure(name, shape, classes, n, batch, clients, device, repeat) -> dict:
    import torch

    from reshuffle.clients import BatchedTrainer, TrainConfig, build_model, get_flat, local_train
    from reshuffle.clients.stacked import StackedNet

    rng = np.random.default_rng(0)
    x = rng.normal(size=(clients * n, *shape)).astype(np.float32)
    y = rng.integers(0, classes, size=clients * n).astype(np.int64)
    parts = [np.arange(c * n, (c + 1) * n) for c in range(clients)]
    seeds = list(range(clients))
    model = build_model(name, shape, classes, seed=0).to(device)
    W_g = get_flat(model)
    cfg = TrainConfig(batch_size=batch, lr=0.05)
    total = clients * n

    def loop():
        return [local_train(model, W_g, x[p], y[p], cfg, s) for p, s in zip(parts, seeds)]

    if device.type == "cuda":
        def sync(fn):
            def run():
                out = fn()
                torch.cuda.synchronize(device)
                return out
            return run
    else:
        def sync(fn):
            return fn

    t_loop, seq = _time(sync(loop), repeat)
    func = BatchedTrainer(model, x, y, cfg, engine="func")
    t_func, bat = _time(sync(lambda: func.train(W_g, parts, seeds)), repeat)
    # Per client: the n samples a client trains on over its share, 1/C, of the time: total / t.
    row = {"loop": total / t_loop, "func": total / t_func, "func_over_loop": t_loop / t_func,
           "max_abs_diff": max(float(np.abs(a - b).max()) for a, b in zip(seq, bat))}
    if StackedNet.supports(model):
        stacked = BatchedTrainer(model, x, y, cfg, engine="stacked")
        t_st, _ = _time(sync(lambda: stacked.train(W_g, parts, seeds)), repeat)
        row |= {"stacked": total / t_st, "stacked_over_func": t_func / t_st}
    return row


def run(clients: int = 8, threads: int = 1, quick: bool = False, repeat: int = 2,
        models: tuple[str, ...] | None = None, on_step: Callable[[str], None] | None = None) -> dict:
    """Throughput of each built-in model (or ``models``) on the CPU, and on CUDA where available.

    ``quick`` quarters the samples per client and times one repetition.
    """
    import torch

    if not isinstance(clients, int) or clients < 2:
        raise ConfigError(f"clients must be an int >= 2, got {clients!r}")
    known = [c[0] for c in CASES]
    chosen = tuple(models or known)
    bad = [m for m in chosen if m not in known]
    if bad:
        raise ConfigError(f"unknown model(s) {', '.join(bad)} for the benchmark; choose among {', '.join(known)}")
    torch.set_num_threads(threads)
    gpu = torch.device("cuda") if torch.cuda.is_available() else None
    out: dict = {"clients": clients, "threads": threads, "cpu": {}, "gpu": {},
                 "gpu_name": torch.cuda.get_device_name(0) if gpu is not None else None}
    for name, shape, classes, n, batch in CASES:
        if name not in chosen:
            continue
        n = max(batch, n // 4) if quick else n
        reps = 1 if quick else repeat
        if on_step is not None:
            on_step(name)
        out["cpu"][name] = {"samples_per_client": n, "batch_size": batch,
                            **_measure(name, shape, classes, n, batch, clients, torch.device("cpu"), reps)}
        out["gpu"][name] = (_measure(name, shape, classes, n, batch, clients, gpu, reps) if gpu is not None
                            else {"loop": None, "func": None, "func_over_loop": None})
    return out


def print_models_table(results: dict) -> None:
    """One row per model: CPU columns, then GPU columns (empty where no GPU was measured)."""
    from rich.console import Console
    from rich.table import Table

    def fmt(v, ratio=False):
        return "" if v is None else (f"{v:.2f}x" if ratio else f"{v:,.0f}")

    gpu = results["gpu_name"] or "no GPU"
    t = Table(title=f"reshuffle bench models: samples/s per client, {results['clients']} clients, "
                    f"{results['threads']} CPU thread(s); GPU: {gpu}")
    for col in ("model", "n/client", "CPU loop", "CPU func", "CPU stacked", "func/loop", "stacked/func",
                "GPU loop", "GPU func", "GPU func/loop"):
        t.add_column(col, justify="left" if col == "model" else "right")
    for name, c in results["cpu"].items():
        g = results["gpu"][name]
        t.add_row(name, str(c["samples_per_client"]), fmt(c["loop"]), fmt(c["func"]), fmt(c.get("stacked")),
                  fmt(c["func_over_loop"], True), fmt(c.get("stacked_over_func"), True),
                  fmt(g["loop"]), fmt(g["func"]), fmt(g["func_over_loop"], True))
    Console(width=200).print(t)
