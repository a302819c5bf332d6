"""``reshuffle bench flower``: one training round of the same Flower app, three ways, in one run.

- **plain**: Flower's Message-API ``FedAvg``; the strategy gets N linked models.
- **reshuffle**: the same strategy through :class:`~reshuffle.flower.grid.ReshuffleGrid`
  and ``reshuffle_mod``; the strategy gets N raw models, unlinked from their senders.
- **secagg+**: Flower's legacy ``SecAggPlusWorkflow`` with ``secaggplus_mod``; the
  strategy gets only the sum. ``num_shares = N`` and ``reconstruction_threshold =
  ⌊N/2⌋ + 1``, the trust assumption of Re-Shuffle's t.

Every node's train step is the same: the global model plus fresh noise (no
training, so that the ratios compare only what the three ways add). All three run
over :class:`~reshuffle.flower.app.loopback.LoopbackGrid`, which calls each node's
ClientApp in this process: the times are the whole round's CPU work (server and
all N clients), without network or process start-up. Ratios come from one run.
``pushes`` counts, per way, the grid pushes of one training round (each a round
trip through the SuperLink in a deployment, where it costs seconds), counted at
the grid; ``pushes_after_training`` those from the push in which the nodes' train
handlers ran (inclusive: the nodes answer it once trained), also counted at the grid.

Without ``--quick`` it also runs the project's app in Flower's local simulation
(``flwr run``, Ray, 5 SuperNodes, 2 rounds) and prints the wall time of a protocol
phase as the grid measured it (``local_simulation``), beside the 3 s that Flower's
own ``send_and_receive`` sleeps between pulls: the cost per phase that adaptive
polling avoids. The train push (local training) and round 1's claim push (the
nodes' start-up) are left out.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from logging import WARNING
from pathlib import Path
from typing import Callable

import numpy as np

DEFAULT_NS = (10, 20)
DEFAULT_D = 61_706  # LeNet-5 on 28x28 inputs, as in ``reshuffle bench round``
FLOWER_PULL_INTERVAL = 3.0  # seconds between pulls in Flower's Grid.send_and_receive (flwr 1.x)


_TRAIN_CALLS = [0]  # train handlers run so far, in this process


def _noise(d: int) -> np.ndarray:
    _TRAIN_CALLS[0] += 1
    return np.random.default_rng().normal(scale=0.01, size=d).astype(np.float32)


def _message_app(with_mod: bool):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    from reshuffle.flower.mod import reshuffle_mod

    app = ClientApp(mods=[reshuffle_mod] if with_mod else [])

    @app.train()
    def train(msg, ctx):
        w = msg.content["arrays"].to_numpy_ndarrays()[0]
        content = RecordDict({"arrays": ArrayRecord([w + _noise(w.size)]), "metrics": MetricRecord({"num-examples": 1})})
        return Message(content, reply_to=msg)

    return app


def _legacy_app():
    from flwr.client import ClientApp as LegacyClientApp
    from flwr.client import NumPyClient
    from flwr.client.mod import secaggplus_mod

    class Client(NumPyClient):
        def fit(self, parameters, config):
            return [parameters[0] + _noise(parameters[0].size)], 1, {}

    return LegacyClientApp(client_fn=lambda context: Client().to_client(), mods=[secaggplus_mod])


def _counting_grid(app, N: int):
    """A LoopbackGrid that counts its pushes (each one a round trip through the SuperLink in a deployment)."""
    from reshuffle.flower.app.loopback import LoopbackGrid

    class CountingGrid(LoopbackGrid):
        pushes = 0
        trained_at: int | None = None  # the push (1-based) in which a train handler first ran

        def push_messages(self, messages):
            msgs = list(messages)
            self.pushes += bool(msgs)
            before = _TRAIN_CALLS[0]
            ids = super().push_messages(msgs)
            if self.trained_at is None and _TRAIN_CALLS[0] > before:
                self.trained_at = self.pushes
            return ids

        def after_training(self, first: int = 1) -> int:
            """Pushes from the one that ran the train handlers on, of those from push ``first`` on."""
            if self.trained_at is None or self.trained_at < first:
                raise RuntimeError("no train handler ran in the counted pushes")
            return self.pushes - self.trained_at + 1

    return CountingGrid(app, N, ungrouped=True)  # one round of all N: the nodes opt in to ungrouped rounds


def _message_round(N: int, d: int, reshuffle: bool) -> tuple[float, tuple[int, int], object]:
    from flwr.app import ArrayRecord
    from flwr.serverapp.strategy import FedAvg

    from reshuffle.flower.grid import ReshuffleGrid

    grid = _counting_grid(_message_app(reshuffle), N)
    g = ReshuffleGrid(grid, group_size=None) if reshuffle else grid
    t0 = time.perf_counter()
    res = FedAvg(fraction_evaluate=0.0, min_available_nodes=N).start(
        grid=g, initial_arrays=ArrayRecord([np.zeros(d, np.float32)]), num_rounds=1)
    dt = time.perf_counter() - t0
    if res.arrays is None or (reshuffle and g.rounds[-1].replies != N):
        raise RuntimeError("the round did not deliver every model")
    return dt, (grid.pushes, grid.after_training()), (g.rounds[-1] if reshuffle else None)


def _secagg_round(N: int, d: int) -> tuple[float, tuple[int, int]]:
    from flwr.common import Context, RecordDict, ndarrays_to_parameters
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    grid = _counting_grid(_legacy_app(), N)
    strategy = LegacyFedAvg(fraction_evaluate=0.0, min_available_clients=N, min_fit_clients=N,
                            initial_parameters=ndarrays_to_parameters([np.zeros(d, np.float32)]))
    ctx = LegacyContext(context=Context(run_id=grid.run.run_id, node_id=1, node_config={}, state=RecordDict(),
                                        run_config={}), config=ServerConfig(num_rounds=1), strategy=strategy)
    timed: dict[str, float] = {}
    secagg = SecAggPlusWorkflow(num_shares=N, reconstruction_threshold=N // 2 + 1)

    def fit(grid_, context_) -> None:  # only the training round is timed and counted
        p0 = grid.pushes
        t0 = time.perf_counter()
        secagg(grid_, context_)
        timed["fit"] = time.perf_counter() - t0
        timed["pushes"] = grid.pushes - p0
        timed["after"] = grid.after_training(p0 + 1)

    DefaultWorkflow(fit_workflow=fit)(grid, ctx)
    if "fit" not in timed:
        raise RuntimeError("the SecAgg+ round did not run")
    return timed["fit"], (int(timed["pushes"]), int(timed["after"]))


def local_simulation(nodes: int = 5, rounds: int = 2, timeout: float = 1800.0) -> dict:
    """Seconds per protocol phase of the project's app in Flower's local simulation, beside Flower's pull interval."""
    from reshuffle.errors import ConfigError
    from reshuffle.flower.app.local import BIN, flwr_env, stop_processes_of, write_simulation_home

    root = Path(__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if not project.is_file() or "[tool.flwr.app]" not in project.read_text():
        raise ConfigError(f"the local simulation runs the Flower app of a checkout; {root} has no pyproject.toml "
                          "declaring one (run with --quick to leave it out)")
    with tempfile.TemporaryDirectory(prefix="reshuffle-bench-flower-") as d:
        home, out = Path(d) / "flwr-home", Path(d) / "out"
        write_simulation_home(home, nodes)
        # Nobody drops: the phase timeout only bounds a slow phase on a loaded machine.
        cmd = [str(BIN / "flwr"), "run", str(root), "--stream", "--run-config",
               f'out-dir="{out}" rounds={rounds} phase-timeout=300.0']
        try:
            r = subprocess.run(cmd, cwd=root, env=flwr_env(home, root), capture_output=True, text=True, timeout=timeout)
        finally:
            stop_processes_of(home)  # the local SuperLink that `flwr run` started
        metrics = out / "metrics.json"
        if r.returncode or not metrics.is_file():
            raise RuntimeError(f"the local simulation failed (exit {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        reports = json.loads(metrics.read_text())["reshuffle"]
    phases = [s for rep in reports for k, s in rep["phase_seconds"].items()
              if k != "train" and (rep["round"], k) != (1, "claim")]
    if not phases:
        raise RuntimeError("the local simulation recorded no protocol phase")
    mean = sum(phases) / len(phases)
    return {"nodes": nodes, "rounds": rounds, "protocol_phases": len(phases), "protocol_phase_s_mean": mean,
            "protocol_phase_s_max": max(phases), "flower_pull_interval_s": FLOWER_PULL_INTERVAL,
            "mean/pull_interval": mean / FLOWER_PULL_INTERVAL}


def run(Ns=DEFAULT_NS, d: int = DEFAULT_D, quick: bool = False, on_step: Callable[[str], None] | None = None) -> dict:
    """Seconds per round and ratios, per N; without ``quick``, the local simulation's seconds per phase."""
    from reshuffle.flower.flwr_private import FLOWER_LOGGER

    FLOWER_LOGGER.setLevel(WARNING)  # Flower logs every message at INFO
    if quick:
        Ns, d = tuple(n for n in Ns if n <= 10) or (min(Ns),), min(d, 5_000)
    out: dict = {"d": d}
    for N in Ns:
        if on_step is not None:
            on_step(f"N={N}")
        plain, plain_pushes, _ = _message_round(N, d, reshuffle=False)
        ours, ours_pushes, report = _message_round(N, d, reshuffle=True)
        secagg, secagg_pushes = _secagg_round(N, d)
        out[f"N={N}"] = {
            "plain_s": plain, "reshuffle_s": ours, "secaggplus_s": secagg,
            # Pushes per training round, counted at the grid: each is a round trip through the SuperLink.
            "pushes": {"plain": plain_pushes[0], "reshuffle": ours_pushes[0], "secaggplus": secagg_pushes[0]},
            "pushes_after_training": {"plain": plain_pushes[1], "reshuffle": ours_pushes[1],
                                      "secaggplus": secagg_pushes[1]},
            "reshuffle_steps": report.steps,
            "reshuffle/secaggplus": ours / secagg, "reshuffle/plain": ours / plain,
            "secaggplus/plain": secagg / plain,
            "models_to_strategy": {"plain": N, "reshuffle": N, "secaggplus": "1 sum"},
        }
    if not quick:
        if on_step is not None:
            on_step("local simulation")
        out["local_simulation"] = local_simulation()
    return out
