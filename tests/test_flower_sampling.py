"""Client sampling on Flower: the project's ServerApp and the drop-in, with a fraction below 1.

A round's roster is the nodes sampled for it: only they get the round's claim and
train messages, and the protocol runs among them. In process, over
:class:`flower_helpers.LoopbackGrid` (real ClientApps, mods and protocol).
"""

from __future__ import annotations

import json

from flwr.app import Context, RecordDict

from flower_helpers import ROOT, LoopbackGrid
from reshuffle.flower.grid import ReshuffleGrid
from reshuffle.flower.reserved import RECORD

RUN_CONFIG = {"dataset": "digits", "model": "logreg", "rounds": 2, "local-epochs": 1, "batch-size": 16, "lr": 0.1,
              "rule": "fedavg", "phase-timeout": 10.0, "stable-sets": False}  # per node


def _stage_nodes(lg: LoopbackGrid, T: int, stage: str) -> set[int]:
    return {m.metadata.dst_node_id for m in lg.sent
            if RECORD in m.content and m.content[RECORD]["stage"] == stage and m.content[RECORD]["T"] == T}


def test_server_app_rounds_run_among_the_sampled_nodes_with_a_server_optimiser(tmp_path):
    from reshuffle.flower.app import client_app, server_app

    nodes = 7
    lg = LoopbackGrid(client_app.app, nodes, ungrouped=True)  # stable-sets false: the nodes opt in
    for c in lg.contexts.values():
        c.run_config = dict(RUN_CONFIG)
    cfg = {**RUN_CONFIG, "fraction": 0.5, "server-opt": "adam", "out-dir": str(tmp_path)}
    # Execute
    server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    # Assert: each round claimed, trained and delivered 4 of the 7 nodes (round(3.5) = 4), the ones
    # the run's sampler draws for it
    m = json.loads((tmp_path / "metrics.json").read_text())
    s = server_app.settings(cfg)
    cohorts = []
    for T in (1, 2):
        want = set(s.sim.sampler().cohort(T, lg.node_ids))
        assert len(want) == 4
        assert _stage_nodes(lg, T, "claim") == _stage_nodes(lg, T, "train") == want
        cohorts.append(want)
    assert cohorts[0] != cohorts[1]
    assert [r["roster"] for r in m["reshuffle"]] == [r["sent"] for r in m["reshuffle"]] == [4, 4]
    assert [r["sampled"] for r in m["rounds"]] == [r["models_received"] for r in m["rounds"]] == [4, 4]
    assert m["config"]["server_opt"] == "adam" and m["final_accuracy"] > m["initial_accuracy"]


def test_dropin_rounds_run_among_the_nodes_flowers_strategy_sampled(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "flower-dropin"))
    from dropin import client_app, server_app

    grids: list[ReshuffleGrid] = []

    def kept(grid):
        grids.append(ReshuffleGrid(grid, group_size=None))
        return grids[-1]
    monkeypatch.setattr(server_app, "ReshuffleGrid", kept)
    monkeypatch.chdir(tmp_path)
    cfg = {"num-server-rounds": 1, "fraction-train": 0.75, "local-epochs": 1, "lr": 0.1, "strategy": "multikrum",
           "num-malicious-nodes": 1}
    lg = LoopbackGrid(client_app.app, 8, ungrouped=True)
    for c in lg.contexts.values():
        c.run_config = cfg
    # Execute: one round of Flower's MultiKrum, sampling 6 of the 8 nodes
    server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    # Assert: the round's roster is the 6 sampled nodes, and all 6 models reached the strategy
    rep = grids[0].rounds[0]
    assert (rep.sent, rep.roster, rep.replies) == (6, 6, 6)
    assert len(_stage_nodes(lg, 1, "claim")) == 6 and _stage_nodes(lg, 1, "claim") == _stage_nodes(lg, 1, "train")
    assert (tmp_path / "results.json").is_file()
