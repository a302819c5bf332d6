"""Anonymity groups on Flower: ReshuffleGrid(group_size=g) with the real ClientApp and mod (in-process Grid)."""

from __future__ import annotations

import pytest

from flower_helpers import LoopbackGrid, forgetful_mod, toy_client_app
from reshuffle.errors import ConfigError
from reshuffle.flower import records
from reshuffle.flower.grid import ReshuffleGrid
from reshuffle.flower.reserved import RECORD
from test_flower_grid import noisy_reply, train_messages


def test_six_nodes_in_groups_of_three_deliver_every_reply_bit_exact():
    # Prepare: 6 nodes, each answering fresh noise (recorded as it leaves the node).
    produced: list = []
    lg = LoopbackGrid(toy_client_app(noisy_reply(produced)), 6)
    grid = ReshuffleGrid(lg, phase_timeout=10, group_size=3)
    # Execute
    replies = list(grid.send_and_receive(train_messages(grid), timeout=60))
    # Assert: all six, bit-exact, on six distinct train messages; two groups of three
    assert sorted(records.encode_content(r.content) for r in replies) == sorted(b for _, b in produced)
    assert len({r.metadata.reply_to_message_id for r in replies}) == 6
    rep = grid.rounds[-1]
    assert (rep.roster, rep.replies, rep.failed) == (6, 6, "")
    assert rep.groups == {"group_size": 3, "sizes": [3, 3], "failed": {}}
    assert not lg.errors
    # The assignment ran over the Grid before any group's round: its messages went to every node.
    protocol = [m for m in lg.sent if RECORD in m.content and m.content[RECORD]["stage"] == "protocol"]
    assert len({m.metadata.dst_node_id for m in protocol}) == 6


def test_groups_survive_a_fresh_process_per_message():
    # A SuperNode may start a new ClientApp process per message: the grouped session is replayed.
    produced: list = []
    lg = LoopbackGrid(toy_client_app(noisy_reply(produced), mods=[forgetful_mod]), 6)
    grid = ReshuffleGrid(lg, group_size=3)
    replies = list(grid.send_and_receive(train_messages(lg), timeout=60))
    assert sorted(records.encode_content(r.content) for r in replies) == sorted(b for _, b in produced)
    assert grid.rounds[-1].groups["sizes"] == [3, 3] and not lg.errors


def test_a_failing_group_on_flower_loses_only_its_replies():
    # Node 1000 and 1001 stop answering once the groups' rounds start; the group they are in fails
    # if both are in it (2 of 4 left, t = 3), else each group loses at most one member and delivers.
    seen: dict[int, int] = {}

    def drop(node, m):
        if RECORD in m.content and m.content[RECORD]["stage"] == "protocol":
            seen[node] = seen.get(node, 0) + 1
            return node in (1000, 1001) and seen[node] >= 5  # after the assignment's 4 messages
        return False

    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 8, drop=drop)
    grid = ReshuffleGrid(lg, phase_timeout=0.3, group_size=4)
    replies = list(grid.send_and_receive(train_messages(grid), timeout=60))
    rep = grid.rounds[-1]
    failed = rep.groups["failed"]
    assert len(replies) == 8 - 2 - (2 if failed else 0)
    assert all("threshold" in why for why in failed.values())


def test_group_size_settings_are_validated():
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 2)
    with pytest.raises(ConfigError, match="group_size"):
        ReshuffleGrid(lg, group_size=1)
    with pytest.raises(ConfigError, match="follow each group's size"):
        ReshuffleGrid(lg, group_size=3, t=2)


def test_the_project_app_reads_group_size_from_the_run_config():
    from reshuffle.flower.common import settings

    assert settings({"group-size": 20}).sim.group_size == 20
    assert settings({"group-size": ""}).sim.group_size is None  # the pyproject default: one group
    with pytest.raises(ConfigError, match="group_size"):
        settings({"group-size": 1})


def test_nodes_with_a_floor_above_g_refuse_and_the_round_fails():
    # Each node's own config: no group below 4. The server asks for groups of 3: nobody commits.
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 6, node_config=lambda i: {
        "partition-id": i, "num-partitions": 6, "reshuffle-min-group": 4})
    grid = ReshuffleGrid(lg, phase_timeout=0.3, group_size=3)
    assert list(grid.send_and_receive(train_messages(grid), timeout=60)) == []
    assert "commitments" in grid.rounds[-1].failed
