"""The project's Flower ServerApp resumes from its checkpoint: the right round, the saved model.

The ServerApp is killed in the middle of a round (its Grid raises while the round's
train messages go out) over the in-process Grid; a new ServerApp with the run-config
key ``resume`` continues on fresh nodes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from flower_helpers import LoopbackGrid
from reshuffle.flower.reserved import RECORD
from reshuffle.run import checkpoint

RUN_CONFIG = {"dataset": "digits", "model": "logreg", "rounds": 4, "local-epochs": 1, "batch-size": 16,
              "lr": 0.1, "rule": "multi-krum", "phase-timeout": 10.0, "stable-sets": False}  # per node
NODES = 5


class Killed(BaseException):
    """The ServerApp's process dies here."""


def _train_models(lg: LoopbackGrid) -> list[tuple[int, np.ndarray]]:
    """(round, W_g) of every train message the nodes received, in order."""
    return [(int(m.content["config"]["server-round"]), m.content["arrays"].to_numpy_ndarrays()[0])
            for m in lg.sent if RECORD in m.content and m.content[RECORD]["stage"] == "train"]


def _server(out, kill_in_round: int | None = None, **run_config) -> LoopbackGrid:
    from reshuffle.flower.app import client_app, server_app

    def drop(node, msg):
        if kill_in_round is not None and "config" in msg.content and \
                msg.content["config"].get("server-round") == kill_in_round:
            raise Killed
        return False
    # stable-sets false: the nodes opt in to ungrouped rounds; they train with the simulation's seeds (their own
    # choice), so that a resumed run can be compared with an uninterrupted one
    seeded = lambda i: {"partition-id": i, "num-partitions": NODES, "reshuffle-seeded-training": True}  # noqa: E731
    lg = LoopbackGrid(client_app.app, NODES, drop=drop, ungrouped=True, node_config=seeded)
    for c in lg.contexts.values():
        c.run_config = dict(RUN_CONFIG)
    cfg = {**RUN_CONFIG, "out-dir": str(out), **run_config}
    server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    return lg


REPORT_KEYS = ("round", "sent", "roster", "replies", "dropouts", "blamed", "failed", "rejected", "outcome")


def _comparable(m: dict) -> dict:
    """metrics.json without times, the output folder and the protocol's cost (its reservation draws OS
    randomness, and with it its length); the reports' outcomes only."""
    m = json.loads(json.dumps(m))
    m["config"].pop("out")
    for r in m["rounds"]:
        r.pop("seconds")
        r.pop("bytes")
    m["reshuffle"] = [{k: r[k] for k in REPORT_KEYS} for r in m["reshuffle"]]
    return m


def test_a_killed_server_app_resumes_with_a_fresh_round_number_and_the_saved_model(tmp_path):
    # Nodes take part in each round number once: a resumed ServerApp never runs again a round it had
    # started. The round the kill interrupted is lost (W_g kept), and the run goes on with the next.
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    _server(whole)
    # Execute: killed while round 3's train messages go out (its claims were sent); then resumed, on fresh nodes
    with pytest.raises(Killed):
        _server(killed, kill_in_round=3)
    saved = checkpoint.load(killed, kind="flower")
    assert saved.round == 2 and saved.state["started"] == 3
    lg = _server(tmp_path / "ignored", resume=str(killed), **{"out-dir": ""})
    # Assert: the resumed app's first round is 4, in its claims as in its train messages, with the model
    # saved after round 2
    sent = _train_models(lg)
    assert [T for T, _ in sent[::NODES]] == [4]
    assert {m.content[RECORD]["T"] for m in lg.sent if RECORD in m.content} == {4}
    assert sent[0][1].tobytes() == saved.arrays["global_model"].tobytes()
    # ... recorded round 3 as lost, wrote into the folder it resumed, and matches the uninterrupted run
    # until round 2
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (killed, whole))
    assert [r["round"] for r in ma["rounds"]] == [r["round"] for r in ma["reshuffle"]] == [1, 2, 3, 4]
    assert ma["rounds"][2]["skipped"].startswith("interrupted") and ma["rounds"][2]["models_received"] == 0
    assert ma["reshuffle"][2]["outcome"].startswith("W_g kept: interrupted")
    assert _comparable(ma)["rounds"][:2] == _comparable(mb)["rounds"][:2]
    assert ma["rounds"][3]["models_received"] == NODES
    assert checkpoint.load(killed).round == 4
    assert not (tmp_path / "ignored").exists()


def test_a_server_app_killed_again_before_the_next_round_loses_no_other_round(tmp_path):
    # Killed in round 2, resumed and killed again in round 3: rounds 2 and 3 are lost, 4 runs.
    with pytest.raises(Killed):
        _server(tmp_path, kill_in_round=2)
    with pytest.raises(Killed):
        _server(tmp_path, kill_in_round=3, resume=str(tmp_path))
    lg = _server(tmp_path, resume=str(tmp_path))
    assert [T for T, _ in _train_models(lg)[::NODES]] == [4]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert [r["skipped"] is not None and r["skipped"].startswith("interrupted") for r in m["rounds"]] == \
        [False, True, True, False]


def test_resume_refuses_other_settings_and_a_damaged_checkpoint(tmp_path):
    from reshuffle.flower.app.server_app import RunRefused

    with pytest.raises(Killed):
        _server(tmp_path, kill_in_round=2)
    # Refused before any message goes out (the checkpoint's own error, as the run's refusal)
    with pytest.raises(RunRefused, match="lr: 0.1 in the checkpoint, 0.5 now"):
        _server(tmp_path, resume=str(tmp_path), lr=0.5)
    raw = checkpoint.path_of(tmp_path).read_bytes()
    checkpoint.path_of(tmp_path).write_bytes(raw[:-10])
    with pytest.raises(RunRefused, match="damaged or truncated"):
        _server(tmp_path, resume=str(tmp_path))


def test_dropin_recipe_saves_with_flowers_evaluate_fn_and_resumes_with_initial_arrays(tmp_path):
    # The recipe of docs/flower.md: a plain Flower strategy over ReshuffleGrid checkpoints its arrays and the
    # grid's reports after every round through Strategy.start's evaluate_fn; a new run starts from them.
    from dataclasses import asdict

    from flwr.app import Array, ArrayRecord, MetricRecord
    from flwr.serverapp.strategy import FedAvg

    from flower_helpers import toy_client_app
    from reshuffle.flower.grid import ReshuffleGrid

    def make(msg, ctx):
        p = int(ctx.node_config["partition-id"])
        arrs = {k: a.numpy() * 0.5 + p for k, a in msg.content["arrays"].items()}
        return RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in arrs.items()}),
                           "metrics": MetricRecord({"num-examples": 10})})

    def run(rounds: int, start: ArrayRecord, done: int = 0, kill_after: int | None = None) -> ArrayRecord:
        grid = ReshuffleGrid(LoopbackGrid(toy_client_app(make), 4, ungrouped=True), phase_timeout=5, group_size=None)

        def save(server_round: int, arrays: ArrayRecord):
            if server_round > 0:
                checkpoint.save(tmp_path, checkpoint.Checkpoint(
                    "dropin", done + server_round, {"strategy": "fedavg"},
                    {k: a.numpy() for k, a in arrays.items()},
                    {"reshuffle": [asdict(r) for r in grid.rounds]}))
            if server_round == kill_after:
                raise Killed
            return None
        return FedAvg(fraction_evaluate=0.0).start(grid=grid, initial_arrays=start, num_rounds=rounds,
                                                   evaluate_fn=save).arrays

    first = ArrayRecord({"w": Array(np.full((2, 3), 8.0, np.float32)), "b": Array(np.zeros(2, np.float32))})
    whole = run(4, first)
    with pytest.raises(Killed):
        run(4, first, kill_after=2)
    ck = checkpoint.load(tmp_path, kind="dropin")
    assert ck.round == 2 and list(ck.arrays) == ["w", "b"] and len(ck.state["reshuffle"]) == 2
    resumed = run(4 - ck.round, ArrayRecord({k: Array(v) for k, v in ck.arrays.items()}), done=ck.round)
    # Each round maps x to x/2 + 1.5 (the mean of p = 0..3): the same four steps either way
    for a, b in zip(whole.to_numpy_ndarrays(), resumed.to_numpy_ndarrays()):
        assert a.tobytes() == b.tobytes()
    np.testing.assert_allclose(resumed["w"].numpy(), 8 / 16 + 1.5 * (1 + 1 / 2 + 1 / 4 + 1 / 8))
    assert checkpoint.load(tmp_path).round == 4


def test_a_new_run_refuses_an_out_dir_holding_a_run_unless_overwrite(tmp_path):
    from reshuffle.errors import ConfigError

    _server(tmp_path, rounds=1)
    first = (tmp_path / "metrics.json").read_bytes()
    with pytest.raises(ConfigError, match="holds a run .*overwrite = true replaces it"):
        _server(tmp_path, rounds=1)
    assert (tmp_path / "metrics.json").read_bytes() == first
    _server(tmp_path, rounds=1, overwrite=True)
    assert json.loads((tmp_path / "metrics.json").read_text())["rounds_run"] == 1


def test_grid_round_numbers_only_go_up():
    from reshuffle.errors import ConfigError
    from reshuffle.flower.grid import ReshuffleGrid

    grid = ReshuffleGrid(LoopbackGrid(lambda m, c: None, 2, ungrouped=True), group_size=None)
    grid.skip_to(5)
    assert grid.next_round == 5
    with pytest.raises(ConfigError, match="round numbers only go up; the next round is 5"):
        grid.skip_to(4)
