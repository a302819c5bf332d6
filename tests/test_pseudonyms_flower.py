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
    assert kept[0] == kept[1]
    nyms = [Pseudonym.decode(b) for b in kept[0].values()]
    assert len({n.name for n in nyms}) == 5 and {n.epoch for n in nyms} == {1}
    issuer = grid.pseudonym_keys.issuer(2)
    assert len(issuer.issued) == 5 and all(n.key == issuer.key.to_bytes() for n in nyms)


def test_a_resumed_grid_opens_a_new_epoch_and_nodes_take_new_pseudonyms():
    # One group per round: a fresh grid without the kept stable groups is refused by every member of one.
    lg = LoopbackGrid(toy_client_app(_reply), 4)
    list(ReshuffleGrid(lg, phase_timeout=10, group_size=None).send_and_receive(_train(lg, 1), timeout=60))
    before = {n: lg.contexts[n].state[PSEUDONYM]["pseudonym"] for n in lg.node_ids}
    # A ServerApp restarted later: a fresh grid whose rounds continue above the last one
    grid = ReshuffleGrid(lg, phase_timeout=10, group_size=None)
    grid.skip_to(2)
    replies = list(grid.send_and_receive(_train(lg, 2), timeout=60))
    after = {n: lg.contexts[n].state[PSEUDONYM]["pseudonym"] for n in lg.node_ids}
    assert len(replies) == 4
    assert all(Pseudonym.decode(after[n]).epoch == 2 and after[n] != before[n] for n in lg.node_ids)
