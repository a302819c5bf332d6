"""Flower's local simulation (`flwr run`, Ray backend): the drop-in example and the project's own app.

Both runs share one local SuperLink and run in the background
(:class:`flower_helpers.LocalSimulationRuns`), started by conftest with the session.
``flwr run`` exits 0 even when the ServerApp raised, so every test reads the
results, not only the exit code. Nothing here depends on the machine's speed: a node
that misses a phase timeout on a loaded machine leaves the round, as the protocol
says, and the tests assert what the protocol guarantees for whoever stayed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flower_helpers import LocalSimulationRuns, LoopbackGrid
from reshuffle.protocol.params import RoundParams

EXAMPLE = LocalSimulationRuns.EXAMPLE
NODES, ROUNDS = LocalSimulationRuns.NODES, LocalSimulationRuns.ROUNDS


@pytest.fixture(scope="module")
def local_runs(request) -> Path:
    """The runs' folder: conftest starts them with the session (in whichever xdist worker claims them)."""
    return request.config.reshuffle_background / "LocalSimulationRuns"


def _finished(runs: Path, name: str):
    r, out = LocalSimulationRuns.load(runs, name)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r, out


def _plain_accuracy(monkeypatch, tmp_path) -> dict:
    """The example without its two Re-Shuffle lines, in process: the baseline."""
    from flwr.app import Context, RecordDict
    from flwr.clientapp import ClientApp

    monkeypatch.syspath_prepend(str(EXAMPLE))
    from dropin import client_app, server_app

    plain = ClientApp()
    plain.train()(client_app.train)
    plain.evaluate()(client_app.evaluate)
    monkeypatch.setattr(server_app, "ReshuffleGrid", lambda grid: grid)
    monkeypatch.chdir(tmp_path)
    cfg = {"num-server-rounds": ROUNDS, "fraction-train": 1.0, "local-epochs": 1, "lr": 0.1,
           "strategy": "multikrum", "num-malicious-nodes": 1}
    grid = LoopbackGrid(plain, NODES)
    for c in grid.contexts.values():
        c.run_config = cfg
    server_app.main(grid, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    return json.loads((tmp_path / "results.json").read_text())["accuracy"]


def _assert_roster_and_delivery(sent: int, roster: int, dropouts: dict, failed: str, delivered: int) -> None:
    """The roster is whoever answered the claim within the phase timeout (every claim here is valid);
    a completed round delivers the models of the nodes still online at its end, at least t of them."""
    assert sent == NODES and roster + dropouts.get("claim", 0) == sent
    assert not failed and RoundParams.default(roster, 1).t <= delivered <= roster, (roster, dropouts, delivered)


def test_dropin_example_in_local_simulation(local_runs, tmp_path, monkeypatch):
    # Execute: the example (with probes) in Flower's local simulation
    r, probe = _finished(local_runs, "probe")
    assert (probe / "results.json").is_file(), r.stdout[-3000:]
    # Assert: every reply that reached MultiKrum is one a node's handler produced, bit-exact, each
    # once, from a random node
    identity_rounds = 0
    for rnd in range(1, ROUNDS + 1):
        server = json.loads((probe / f"server-{rnd}.json").read_text())
        produced = {(c := json.loads(p.read_text()))["digest"]: c["node"] for p in probe.glob(f"client-{rnd}-*.json")}
        delivered = [x["digest"] for x in server["replies"]]
        _assert_roster_and_delivery(server["sent"], server["roster"], server["dropouts"], server["failed"],
                                    len(delivered))
        assert len(set(delivered)) == len(delivered) and set(delivered) <= set(produced)
        identity_rounds += all(produced[x["digest"]] == x["node"] for x in server["replies"])
    # A uniformly random bijection is the identity with chance (1/k!)^3 over k delivered per round
    # (1/120)^3 with every node; a round delivers at least t = 4 of 5 (1/24 per round).
    assert identity_rounds < ROUNDS
    # Assert: the same learning as the plain app
    ours = json.loads((probe / "results.json").read_text())["accuracy"]
    plain = _plain_accuracy(monkeypatch, tmp_path)
    assert ours[str(ROUNDS)]["accuracy"] > 0.7
    assert abs(ours[str(ROUNDS)]["accuracy"] - plain[str(ROUNDS)]["accuracy"]) < 0.05


def test_project_app_in_local_simulation(local_runs):
    # `make flower`, on a smaller federation (rounds=2).
    _, out = _finished(local_runs, "project")
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["driver"] == "flower" and m["config"]["clients"] == NODES
    assert [x["round"] for x in m["rounds"]] == [1, 2]
    for rec, rep in zip(m["rounds"], m["reshuffle"], strict=True):
        _assert_roster_and_delivery(rep["sent"], rep["roster"], rep["dropouts"], rep["failed"], rec["models_received"])
        assert rep["blamed"] == {}  # nobody deviates: nobody is named
    assert m["final_accuracy"] > m["initial_accuracy"] + 0.3
    assert {"train", "setup"} <= set(m["rounds"][0]["seconds"])
