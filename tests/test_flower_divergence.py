"""A round without enough finite models is a recorded round on Flower: W_g stays, the run goes on.

Over the in-process Grid (:class:`flower_helpers.LoopbackGrid`) with the project's
real ClientApp handler, ``reshuffle_mod`` and ServerApp, and with a plain Flower
strategy over ``ReshuffleGrid``.
"""

from __future__ import annotations

import json

import numpy as np
from flwr.app import ArrayRecord, Context, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import FedAvg

from flower_helpers import LoopbackGrid, toy_client_app
from reshuffle.flower.grid import ReshuffleGrid
from reshuffle.flower.mod import reshuffle_mod
from reshuffle.run import checkpoint

RUN_CONFIG = {"dataset": "digits", "model": "logreg", "rounds": 3, "local-epochs": 1, "batch-size": 16,
              "lr": 0.1, "rule": "fedavg", "phase-timeout": 10.0, "stable-sets": False}  # per node
DIVERGING_ROUND = 2


def _round_of(msg) -> int:
    return int(msg.content["config"]["server-round"])


def nan_replies(msg, ctx, call_next):
    """After the node's handler: in the diverging round its model becomes all NaN (it still uploads it)."""
    reply = call_next(msg, ctx)
    if _round_of(msg) == DIVERGING_ROUND and not reply.has_error():
        arrays = [np.full_like(a, np.nan) for a in reply.content["arrays"].to_numpy_ndarrays()]
        reply.content["arrays"] = ArrayRecord(arrays)
    return reply


def huge_lr(msg, ctx, call_next):
    """In the diverging round the node trains with lr = 1e38: its own check finds NaN/Inf and it sends nothing."""
    if _round_of(msg) != DIVERGING_ROUND:
        return call_next(msg, ctx)
    saved = ctx.run_config
    ctx.run_config = dict(saved, lr=1e38)
    try:
        return call_next(msg, ctx)
    finally:
        ctx.run_config = saved


def _run_project_app(tmp_path, mod, nodes: int = 4) -> dict:
    from reshuffle.flower.app import client_app, server_app

    app = ClientApp(mods=[reshuffle_mod, mod])
    app.train()(client_app.train)
    grid = LoopbackGrid(app, nodes, ungrouped=True)  # stable-sets false: the nodes opt in
    for c in grid.contexts.values():
        c.run_config = dict(RUN_CONFIG)
    cfg = dict(RUN_CONFIG, **{"out-dir": str(tmp_path)})
    server_app.main(grid, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    return json.loads((tmp_path / "metrics.json").read_text())


def _assert_round_kept(m: dict, why: str) -> None:
    r1, r2, r3 = m["rounds"]
    rep = m["reshuffle"][DIVERGING_ROUND - 1]
    # The diverged round: no model, W_g kept (same accuracy as after round 1), its reason recorded.
    assert r2["models_received"] == 0 and r2["models_accepted"] == 0
    assert r2["accuracy"] == r1["accuracy"]
    assert rep["outcome"].startswith("W_g kept") and why in rep["outcome"], rep
    assert rep["blamed"] == {}
    # The rounds around it are complete, and the run went on from the kept model.
    assert [x["outcome"] for i, x in enumerate(m["reshuffle"]) if i != DIVERGING_ROUND - 1] == ["completed"] * 2
    assert r1["models_received"] == r3["models_received"] == 4
    assert r3["accuracy"] > m["initial_accuracy"] + 0.2


def test_nodes_uploading_nan_models_leave_the_round_recorded_and_the_run_going(tmp_path):
    m = _run_project_app(tmp_path, nan_replies)
    _assert_round_kept(m, "not a finite model")
    assert m["reshuffle"][DIVERGING_ROUND - 1]["rejected"] == 4  # delivered through the shuffle, then dropped
    assert checkpoint.load(tmp_path, kind="flower").round == 3


def test_nodes_whose_training_diverges_send_nothing_and_say_why(tmp_path):
    m = _run_project_app(tmp_path, huge_lr)
    # The nodes claimed their slots before training (the offline phase); they drop at the upload
    _assert_round_kept(m, "uploads: 0 participants")
    rep = m["reshuffle"][DIVERGING_ROUND - 1]
    assert rep["roster"] == 4 and rep["dropouts"] == {"train": 4}
    assert len(rep["errors"]) == 4 and all("local training diverged" in e for e in rep["errors"])


def test_plain_flower_strategy_keeps_its_model_through_a_round_of_failing_nodes():
    # Prepare: node p answers W + (p + 1); in round 2 every handler fails
    def make(msg, ctx):
        if _round_of(msg) == DIVERGING_ROUND:
            raise FloatingPointError("local training diverged")
        p = int(ctx.node_config["partition-id"])
        arrs = [a + p + 1 for a in msg.content["arrays"].to_numpy_ndarrays()]
        return RecordDict({"arrays": ArrayRecord(arrs), "metrics": MetricRecord({"num-examples": 10})})

    grid = ReshuffleGrid(LoopbackGrid(toy_client_app(make), 4, ungrouped=True), phase_timeout=5, group_size=None)
    # Execute
    result = FedAvg(fraction_evaluate=0.0).start(grid=grid, initial_arrays=ArrayRecord([np.zeros(3, np.float32)]),
                                                 num_rounds=3)
    # Assert: rounds 1 and 3 each add the mean 2.5, round 2 is recorded as failed and adds nothing
    np.testing.assert_allclose(result.arrays.to_numpy_ndarrays()[0], 5.0)
    failed = grid.rounds[DIVERGING_ROUND - 1]
    assert failed.replies == 0 and failed.roster == 4 and "uploads: 0 participants" in failed.failed
    assert sum("local training diverged" in e for e in failed.errors) == 4
    assert [r.failed for r in grid.rounds] == ["", failed.failed, ""]
