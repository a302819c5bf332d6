"""Epoch pseudonyms on Flower: a node keeps its pseudonym in its Context across rounds, with or without a
live participant between messages (docs/protocol.md §7.3, §14)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from flower_helpers import forgetful_mod, toy_client_app
from reshuffle.flower.grid import ReshuffleGrid
from reshuffle.flower.app.loopback import LoopbackGrid
from reshuffle.flower.reserved import PSEUDONYM
from reshuffle.protocol.pseudonym import Pseudonym


def _reply(msg, ctx):
    arrs = [a + 1 for a in msg.content["arrays"].to_numpy_ndarrays()]
    return RecordDict({"arrays": ArrayRecord(arrs), "metrics": MetricRecord({"num-examples": 10})})


def _train(grid, T):
    content = RecordDict({"arrays": ArrayRecord([np.zeros(3, np.float32)]),
                          "config": ConfigRecord({"server-round": T})})
    return [Message(content, dst_node_id=n, message_type="train", group_id=str(T)) for n in grid.get_node_ids()]


@pytest.mark.parametrize("mods", [None, [forgetful_mod]], ids=["live", "fresh-process"])
def test_a_node_keeps_its_pseudonym_across_rounds(mods):
    # Prepare: 5 nodes, one stable group (the default), one grid (one epoch for its life)
    lg = LoopbackGrid(toy_client_app(_reply, mods=mods), 5)
    grid = ReshuffleGrid(lg, phase_timeout=10)
    kept = []
    for T in (1, 2):
        # Execute
        replies = list(grid.send_and_receive(_train(grid, T), timeout=60))
        # Assert: every reply arrives, and each node holds one pseudonym of the grid's epoch
        assert len(replies) == 5 and not lg.errors
        kept.append({n: lg.contexts[n].state[PSEUDONYM]["pseudonym"] for n in lg.node_ids})
        # Each reply carries its row's pseudonym: the nodes' own, as a set (the reply names no node).
        held = {Pseudonym.decode(b).name for b in kept[-1].values()}
        assert {grid.pseudonym_of(r) for r in replies} == held and None not in held
    assert kept[0] == kept[1]
    nyms = [Pseudonym.decode(b) for b in kept[0].values()]
    # one epoch, numbered above every earlier run's (the grid's base, then its first round)
    assert len({n.name for n in nyms}) == 5 and {n.epoch for n in nyms} == {grid.pseudonym_keys.base + 1}
    issuer = grid.pseudonym_keys.issuer(2)
    assert len(issuer.issued) == 5 and all(n.key == issuer.key.to_bytes() for n in nyms)


def test_a_resumed_grid_opens_a_new_epoch_and_nodes_take_new_pseudonyms():
    # One group per round: a fresh grid without the kept stable groups is refused by every member of one.
    lg = LoopbackGrid(toy_client_app(_reply), 4, ungrouped=True)
    list(ReshuffleGrid(lg, phase_timeout=10, group_size=None).send_and_receive(_train(lg, 1), timeout=60))
    before = {n: lg.contexts[n].state[PSEUDONYM]["pseudonym"] for n in lg.node_ids}
    # A ServerApp restarted later: a fresh grid whose rounds continue above the last one
    grid = ReshuffleGrid(lg, phase_timeout=10, group_size=None)
    grid.skip_to(2)
    replies = list(grid.send_and_receive(_train(lg, 2), timeout=60))
    after = {n: lg.contexts[n].state[PSEUDONYM]["pseudonym"] for n in lg.node_ids}
    assert len(replies) == 4
    assert all(Pseudonym.decode(after[n]).epoch == grid.pseudonym_keys.base + 2 and after[n] != before[n]
               for n in lg.node_ids)


def test_the_server_app_hands_a_history_rule_each_row_s_pseudonym(tmp_path):
    # FoolsGold keeps a history per pseudonym and refuses rows without one: the run completes only if the
    # grid's recovered pseudonyms reach the rule, round after round, in one stable group of 5.
    import json

    from flwr.app import Context

    from reshuffle.flower.app import client_app, server_app

    cfg = {"dataset": "digits", "model": "logreg", "rounds": 2, "local-epochs": 1, "batch-size": 64, "lr": 0.1,
           "rule": "foolsgold", "phase-timeout": 10.0, "out-dir": str(tmp_path)}
    lg = LoopbackGrid(client_app.app, 5)
    for c in lg.contexts.values():
        c.run_config = dict(cfg)
    server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    rounds = json.loads((tmp_path / "metrics.json").read_text())["rounds"]
    assert [r["models_received"] for r in rounds] == [5, 5]
    assert all(r["models_accepted"] > 0 for r in rounds)
