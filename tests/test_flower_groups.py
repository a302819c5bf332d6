"""Anonymity groups on Flower: ReshuffleGrid(group_size=g) with the real ClientApp and mod (in-process Grid)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flower_helpers import LoopbackGrid, forgetful_mod, toy_client_app
from reshuffle.errors import ConfigError
from reshuffle.flower import records
from reshuffle.flower.grid import ReshuffleGrid
from reshuffle.flower.reserved import RECORD
from test_flower_grid import noisy_reply, train_messages


def floor(g, n):
    """Node configs whose own group floor is g (the default floor is 5)."""
    return lambda i: {"partition-id": i, "num-partitions": n, "reshuffle-min-group": g}


def test_six_nodes_in_groups_of_three_deliver_every_reply_bit_exact():
    # Prepare: 6 nodes, each answering fresh noise (recorded as it leaves the node).
    produced: list = []
    lg = LoopbackGrid(toy_client_app(noisy_reply(produced)), 6, node_config=floor(3, 6))
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
    lg = LoopbackGrid(toy_client_app(noisy_reply(produced), mods=[forgetful_mod]), 6, node_config=floor(3, 6))
    grid = ReshuffleGrid(lg, group_size=3)
    replies = list(grid.send_and_receive(train_messages(lg), timeout=60))
    assert sorted(records.encode_content(r.content) for r in replies) == sorted(b for _, b in produced)
    assert grid.rounds[-1].groups["sizes"] == [3, 3] and not lg.errors


def test_a_failing_group_on_flower_loses_only_its_replies():
    # Node 1000 and 1001 stop answering once the groups' rounds start: each group that holds one of
    # them delivers nothing, the other (if any) delivers all its replies.
    seen: dict[int, int] = {}

    def drop(node, m):
        if RECORD in m.content and m.content[RECORD]["stage"] == "protocol":
            seen[node] = seen.get(node, 0) + 1
            return node in (1000, 1001) and seen[node] >= 5  # after the assignment's 4 messages
        return False

    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 8, drop=drop, node_config=floor(4, 8))
    grid = ReshuffleGrid(lg, phase_timeout=0.3, group_size=4)
    replies = list(grid.send_and_receive(train_messages(grid), timeout=60))
    rep = grid.rounds[-1]
    failed = rep.groups["failed"]
    # All or none: a group with a silent member delivers nothing; a group without one delivers all 4.
    assert len(failed) in (1, 2) and len(replies) == 4 * (2 - len(failed))
    assert all("threshold" in why for why in failed.values())


def test_group_size_settings_are_validated():
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 2)
    with pytest.raises(ConfigError, match="group_size"):
        ReshuffleGrid(lg, group_size=1)
    with pytest.raises(ConfigError, match="follow each group's size"):
        ReshuffleGrid(lg, group_size=3, t=2)


def test_the_project_app_reads_group_size_from_the_run_config():
    from reshuffle.flower.app.common import settings

    assert settings({}).sim.stable_sets and settings({}).sim.set_size == 5  # stable groups of 5 by default
    assert settings({"set-size": 20}).sim.set_size == 20
    assert settings({"stable-sets": False, "group-size": 20}).sim.group_size == 20
    assert settings({"stable-sets": False, "group-size": ""}).sim.group_size is None  # one group
    with pytest.raises(ConfigError, match="group_size"):
        settings({"stable-sets": False, "group-size": 1})
    with pytest.raises(ConfigError, match="set-size"):
        settings({"group-size": 20})  # both would size the groups


def test_nodes_with_a_floor_above_g_refuse_and_the_round_fails():
    # Each node's own config: no group below 4. The server asks for groups of 3: nobody commits.
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 6, node_config=lambda i: {
        "partition-id": i, "num-partitions": 6, "reshuffle-min-group": 4})
    grid = ReshuffleGrid(lg, phase_timeout=0.3, group_size=3)
    assert list(grid.send_and_receive(train_messages(grid), timeout=60)) == []
    assert "commitments" in grid.rounds[-1].failed


# --------------------------------------------------------------------------- stable groups across rounds
def same_reply_every_round(msg, ctx):
    """Training as a function of (W_g, the node's data) only: a repeated round gives bit-identical replies."""
    from flwr.app import ArrayRecord, MetricRecord, RecordDict

    k = ctx.node_config["partition-id"]
    arrs = [a + np.float32(k + 1) for a in msg.content["arrays"].to_numpy_ndarrays()]
    return RecordDict({"arrays": ArrayRecord(arrs), "metrics": MetricRecord({"num-examples": 10})})


def _arrays(replies):
    return {b"".join(a.tobytes() for a in r.content["arrays"].to_numpy_ndarrays()) for r in replies}


def _stage_of(m):
    return m.content[RECORD]["stage"] if RECORD in m.content else None


def test_groups_are_kept_across_rounds_and_a_repeated_round_without_one_node_links_nobody():
    # 10 nodes, groups of 5 (the default floor). Round 1 forms the groups; round 2 repeats W_g.
    left_out: list[int] = []

    def drop(node, m):
        # Round 3: the PS lists the node in ROUND_START but never talks to it after its claim.
        return node in left_out and _stage_of(m) != "claim"

    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 10, drop=drop)
    grid = ReshuffleGrid(lg, phase_timeout=0.5, group_size=5)
    r1 = list(grid.send_and_receive(train_messages(grid, 1), timeout=60))
    assert len(r1) == 10 and len(grid.epochs) == 1
    groups = grid.epochs[0].groups
    assert sorted(len(g) for g in groups) == [5, 5]
    sent = len(lg.sent)
    r2 = list(grid.send_and_receive(train_messages(grid, 1), timeout=60))
    assert _arrays(r2) == _arrays(r1)  # the same W_g gives the same replies: content links perfectly
    assert grid.epochs[0].groups == groups and grid.rounds[-1].groups["sampled"] == [[0, 0], [0, 1]]
    # Round 2 ran no new assignment: no GROUP_OPEN went out (each node's first protocol push is DC_START, the
    # DC-net round of its stable group).
    from reshuffle.protocol import messages as msg
    from reshuffle.protocol.messages import MsgType
    firsts = [msg.peek_type(m.content[RECORD]["data"][0]) for m in lg.sent[sent:] if _stage_of(m) == "protocol"]
    assert MsgType.GROUP_OPEN not in firsts and MsgType.DC_START in firsts
    # Round 3: repeat round 2's W_g (and so its training) under the next round number, leave one node out.
    x = grid.group_nodes[groups[0][0]]
    left_out.append(x)
    r3 = list(grid.send_and_receive(train_messages(grid, 1), timeout=60))
    missing = _arrays(r2) - _arrays(r3)
    # Before all-or-none: 9 replies came back and the one missing was node x's: 1 linked (its every round).
    # Now the group of x delivers nothing: 5 replies are missing for 1 absent node, none is named.
    linked = 1 if len(missing) == 1 else 0
    assert linked == 0 and len(r3) == 5 and len(missing) == 5
    assert list(grid.rounds[-1].groups["failed"]) == ["0"]
    assert not lg.errors


def test_a_strategys_sample_is_widened_or_narrowed_to_whole_groups():
    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 10)
    grid = ReshuffleGrid(lg, phase_timeout=5, group_size=5)
    assert len(list(grid.send_and_receive(train_messages(grid, 1), timeout=60))) == 10
    g0, g1 = ([grid.group_nodes[i] for i in g] for g in grid.epochs[0].groups)
    # 3 of group 0 sampled (widened to its 5), 2 of group 1 (narrowed out): 5 replies from group 0.
    msgs = [m for m in train_messages(grid, 1) if m.metadata.dst_node_id in set(g0[:3] + g1[:2])]
    replies = list(grid.send_and_receive(msgs, timeout=60))
    assert len(replies) == 5 and grid.rounds[-1].groups["sampled"] == [[0, 0]] and grid.rounds[-1].sent == 5
    # No whole group sampled: nothing is sent, and the round says why.
    msgs = [m for m in train_messages(grid, 1) if m.metadata.dst_node_id in {g0[0], g1[0]}]
    assert list(grid.send_and_receive(msgs, timeout=60)) == []
    assert "no whole stable group" in grid.rounds[-1].failed


def test_the_grids_groups_survive_a_restart_of_the_server():
    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 10)
    grid = ReshuffleGrid(lg, phase_timeout=5, group_size=5)
    list(grid.send_and_receive(train_messages(grid, 1), timeout=60))
    state = grid.group_state()
    again = ReshuffleGrid(lg, phase_timeout=5, groups=state)
    again.skip_to(2)
    assert again.epochs == grid.epochs and again.group_size == 5
    assert len(list(again.send_and_receive(train_messages(again, 1), timeout=60))) == 10
    with pytest.raises(ConfigError, match="malformed"):
        ReshuffleGrid(lg, groups={"epochs": ["00"], "nodes": {}})


def test_a_node_with_a_group_refuses_a_new_assignment():
    # A PS that forgets the groups (or redraws them to intersect) opens a new assignment: every node refuses.
    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 10)
    grid = ReshuffleGrid(lg, phase_timeout=0.5, group_size=5)
    list(grid.send_and_receive(train_messages(grid, 1), timeout=60))
    fresh = ReshuffleGrid(lg, phase_timeout=0.5, group_size=5)
    fresh.skip_to(2)
    assert list(fresh.send_and_receive(train_messages(fresh, 1), timeout=60)) == []
    assert "commitments" in fresh.rounds[-1].failed


class Killed(BaseException):
    """The ServerApp's process dies here."""


def test_the_project_server_app_keeps_its_groups_through_a_kill(tmp_path):
    # Round 1 forms the groups; the ServerApp is killed as round 2 goes out; resumed, round 3 runs the same
    # groups on the same nodes (each kept its group in its Context) with no new assignment.
    from flwr.app import Context, RecordDict

    from reshuffle.flower.app import client_app, server_app
    from reshuffle.protocol import messages as msg
    from reshuffle.protocol.groups import Assignment
    from reshuffle.protocol.messages import MsgType
    from reshuffle.run import checkpoint

    kill = {"round": 2}

    def drop(node, m):
        if "config" in m.content and m.content["config"].get("server-round") == kill["round"]:
            raise Killed
        return False

    cfg = {"dataset": "digits", "model": "logreg", "rounds": 3, "local-epochs": 1, "batch-size": 512, "lr": 0.1,
           "rule": "fedavg", "phase-timeout": 10.0, "set-size": 3, "out-dir": str(tmp_path)}
    lg = LoopbackGrid(client_app.app, 6, drop=drop, node_config=floor(3, 6))
    for c in lg.contexts.values():
        c.run_config = dict(cfg)
    with pytest.raises(Killed):
        server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    fed = checkpoint.load(tmp_path, kind="flower").state["federation"]
    saved = fed["groups"]
    (epoch,) = saved["epochs"]
    groups = Assignment.decode(bytes.fromhex(epoch)).groups
    assert sorted(len(g) for g in groups) == [3, 3]
    kill["round"] = None
    sent = len(lg.sent)
    server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(),
                                run_config={**cfg, "resume": str(tmp_path), "out-dir": ""}))
    after = checkpoint.load(tmp_path, kind="flower").state["federation"]
    # The same groups; a new epoch, numbered above the saved one (nodes that restarted may hold no pseudonym).
    assert after["groups"] == saved
    assert after["pseudonyms"]["base"] + after["pseudonyms"]["first"] > fed["pseudonyms"]["base"] + 2
    firsts = [msg.peek_type(m.content[RECORD]["data"][0]) for m in lg.sent[sent:]
              if RECORD in m.content and m.content[RECORD]["stage"] == "protocol"]
    assert MsgType.GROUP_OPEN not in firsts
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert [r["models_received"] for r in metrics["rounds"]] == [6, 0, 6]


def test_newcomers_wait_until_they_form_a_whole_group_of_their_own():
    # 10 nodes form two groups in round 1; 10 more connect later, and are sampled 6, then 10.
    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 20)
    grid = ReshuffleGrid(lg, phase_timeout=5, group_size=5)
    first = set(sorted(lg.get_node_ids())[:10])
    late = sorted(lg.get_node_ids())[10:]
    lg.node_ids = sorted(first)  # not connected yet
    sent = lambda nodes: [m for m in train_messages(grid, 1) if m.metadata.dst_node_id in nodes]  # noqa: E731
    assert len(list(grid.send_and_receive(sent(first), timeout=60))) == 10
    lg.node_ids = sorted(first) + late
    # 6 newcomers are too few for a draw (a node refuses fewer than 2g candidates): they are not sent
    # the round; the two groups deliver.
    assert len(list(grid.send_and_receive(sent(first | set(late[:6])), timeout=60))) == 10
    assert grid.rounds[-1].sent == 10 and len(grid.epochs) == 1
    # 10 newcomers form two groups of their own by a new assignment among them, in the same round.
    before = len(lg.sent)
    assert len(list(grid.send_and_receive(sent(first | set(late)), timeout=60))) == 20
    assert len(grid.epochs) == 2 and sorted(pid for grp in grid.epochs[1].groups for pid in grp) == sorted(
        pid for pid, node in grid.group_nodes.items() if node in late)
    from reshuffle.protocol import messages as msg
    from reshuffle.protocol.messages import MsgType
    opened = {m.metadata.dst_node_id for m in lg.sent[before:] if _stage_of(m) == "protocol"
              and msg.peek_type(m.content[RECORD]["data"][0]) is MsgType.GROUP_OPEN}
    assert opened == set(late)  # the old groups took part in no new draw
    # Every group, old and new, runs again with no assignment; the state carries both epochs.
    assert len(list(grid.send_and_receive(sent(first | set(late)), timeout=60))) == 20
    assert grid.rounds[-1].groups["sampled"] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert len(ReshuffleGrid(lg, groups=grid.group_state()).epochs) == 2


def test_a_flower_strategys_fraction_is_widened_or_narrowed_to_whole_groups():
    # FedAvg samples 6 of 10 nodes each round: the first round goes to all 10 (it forms two groups of 5);
    # later ones run every group of which at least 3 members were sampled (one at least), widened to 5.
    from flwr.app import ArrayRecord
    from flwr.serverapp.strategy import FedAvg

    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 10)
    grid = ReshuffleGrid(lg, phase_timeout=5, group_size=5)
    FedAvg(fraction_train=0.6, fraction_evaluate=0.0, min_available_nodes=10).start(
        grid=grid, initial_arrays=ArrayRecord([np.zeros(3, np.float32)]), num_rounds=3)
    first, *later = grid.rounds
    assert (first.sent, first.replies) == (10, 10) and [len(g) for g in grid.epochs[0].groups] == [5, 5]
    for rep in later:
        assert rep.sent == rep.replies == 5 * len(rep.groups["sampled"]) and rep.groups["sampled"]


@pytest.mark.parametrize("state_dir, mods", [(False, None), (True, None), (True, [forgetful_mod])],
                         ids=["no-state-dir", "state-dir", "state-dir-fresh-process"])
def test_a_node_with_a_state_dir_keeps_its_group_across_runs(tmp_path, state_dir, mods):
    # Run 1 forms groups of 5 among 10 nodes. Run 2 is a new run (fresh Contexts) whose PS opens a new draw:
    # intersecting two runs' groups would narrow each sender. With reshuffle-state-dir every node refuses
    # the new draw and answers only its kept group; without it, the nodes join the new draw.
    def cfg(i):
        return {"partition-id": i, "num-partitions": 10,
                **({"reshuffle-state-dir": str(tmp_path / f"node{i}")} if state_dir else {})}

    lg = LoopbackGrid(toy_client_app(same_reply_every_round, mods=mods), 10, node_config=cfg)
    first = ReshuffleGrid(lg, phase_timeout=5, group_size=5)
    assert len(list(first.send_and_receive(train_messages(first, 1), timeout=60))) == 10
    if state_dir:
        assert all(len(list((tmp_path / f"node{i}").glob("state-*.bin"))) == 1 for i in range(10))
    # Run 2: fresh Contexts, a PS without the old groups
    lg2 = LoopbackGrid(toy_client_app(same_reply_every_round, mods=mods), 10, node_config=cfg)
    fresh = ReshuffleGrid(lg2, phase_timeout=0.5, group_size=5)
    got = list(fresh.send_and_receive(train_messages(fresh, 1), timeout=60))
    assert len(got) == (0 if state_dir else 10)
    if state_dir:
        rep = fresh.rounds[-1]
        assert "0 commitments" in rep.failed, rep.failed  # nobody joined the new draw
        # A PS that keeps the groups (a resumed run) gets every group back, whole.
        lg3 = LoopbackGrid(toy_client_app(same_reply_every_round, mods=mods), 10, node_config=cfg)
        kept = ReshuffleGrid(lg3, phase_timeout=5, groups=first.group_state())
        kept.skip_to(1)
        assert len(list(kept.send_and_receive(train_messages(kept, 2), timeout=60))) == 10
