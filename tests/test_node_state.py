"""A Flower node's own state: its group and its pseudonym, kept on disk per federation and participant."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from flwr.app import RecordDict

from flower_helpers import LoopbackGrid, toy_client_app
from reshuffle.flower.grid import ReshuffleGrid
from reshuffle.flower.reserved import GROUP, PSEUDONYM
from reshuffle.protocol.pseudonym import Pseudonym
from test_flower_grid import train_messages
from test_flower_groups import same_reply_every_round


def _round(grid, T):
    return list(grid.send_and_receive(train_messages(grid, T), timeout=60))


def _nyms(lg):
    return {n: Pseudonym.decode(lg.contexts[n].state[PSEUDONYM]["pseudonym"]) for n in lg.node_ids}


def test_a_restarted_node_continues_in_its_group_with_its_pseudonym(tmp_path):
    # Prepare: 5 nodes, each with a state folder of its own; two rounds of one epoch
    cfg = lambda i: {"partition-id": i, "num-partitions": 5, "reshuffle-state-dir": str(tmp_path / f"n{i}")}  # noqa
    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 5, node_config=cfg)
    grid = ReshuffleGrid(lg, phase_timeout=5, group_size=5)
    assert len(_round(grid, 1)) == 5
    before = _nyms(lg)
    # Execute: node 1002's process restarts: its Context is wiped, its folder kept
    lg.contexts[1002].state = RecordDict()
    replies = _round(grid, 2)
    # Assert: every node delivered, the restarted one with the same pseudonym, and it asked for none
    # (the PS's record has each of the 5 once, and no second request was refused)
    assert len(replies) == 5 and not lg.errors and not grid.rounds[-1].errors
    assert _nyms(lg) == before
    assert {grid.pseudonym_of(r) for r in replies} == {n.name for n in before.values()}
    assert len(grid.pseudonym_keys.issuer(2).issued) == 5


def test_the_control_without_a_state_folder_the_restarted_node_silences_its_group():
    # Without its folder the restarted node holds no group and no pseudonym: it refuses the group's
    # round (it cannot check the roster against a group it lost), and the group delivers nothing.
    cfg = lambda i: {"partition-id": i, "num-partitions": 5, "reshuffle-state-dir": ""}  # noqa: E731
    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 5, node_config=cfg)
    grid = ReshuffleGrid(lg, phase_timeout=2, group_size=5)
    assert len(_round(grid, 1)) == 5
    lg.contexts[1002].state = RecordDict()
    assert _round(grid, 2) == []


def test_nodes_sharing_one_folder_keep_each_its_own_group(tmp_path):
    # Flower's simulation engine hands every node the same folder: one file per participant.
    cfg = lambda i: {"partition-id": i, "num-partitions": 10, "reshuffle-state-dir": str(tmp_path)}  # noqa: E731
    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 10, node_config=cfg)
    grid = ReshuffleGrid(lg, phase_timeout=5, group_size=5)
    assert len(_round(grid, 1)) == 10
    assert len(list(tmp_path.glob("state-*.bin"))) == 10
    for c in lg.contexts.values():  # every node restarts
        c.state = RecordDict()
    assert len(_round(grid, 2)) == 10 and not lg.errors


def test_a_membership_that_is_not_the_nodes_own_is_refused_in_one_line(tmp_path):
    cfg = lambda i: {"partition-id": i, "num-partitions": 5, "reshuffle-state-dir": str(tmp_path / f"n{i}")}  # noqa
    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 5, node_config=cfg)
    grid = ReshuffleGrid(lg, phase_timeout=2, group_size=5)
    assert len(_round(grid, 1)) == 5
    # Node 0's file is replaced by node 1's (copied across), and node 0 restarts
    (mine,) = (tmp_path / "n0").glob("state-*.bin")
    (theirs,) = (tmp_path / "n1").glob("state-*.bin")
    shutil.copyfile(theirs, mine)
    lg.contexts[1000].state = RecordDict()
    assert _round(grid, 2) == []
    why = [e for e in grid.rounds[-1].errors if "node 1000" in e]
    assert len(why) == 1 and "holds participant 1's group; this node is participant 0" in why[0]
    assert "\n" not in why[0].strip()


def test_a_fresh_federation_under_the_same_ca_starts_afresh_and_a_new_run_keeps_the_groups(tmp_path):
    from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, CertificateAuthority

    ca = CertificateAuthority.generate()
    keys = {name: tmp_path / name for name in ("old", "new")}
    for d in keys.values():  # one CA; each federation's PS its own key
        ca.save(d)
        ca.issue_files(d, SERVER_ID, ROLE_SERVER)
    for i in range(10):  # a participant's key is its own: the same in both federations
        ca.issue_files(keys["old"], i)
        for f in keys["old"].glob(f"participant-{i}.*"):
            shutil.copyfile(f, keys["new"] / f.name)
    state = tmp_path / "state"

    def nodes(fed):
        cfg = lambda i: {"reshuffle-key-dir": str(keys[fed]), "reshuffle-participant-id": i, "partition-id": i,  # noqa
                         "num-partitions": 10, "reshuffle-state-dir": str(state / str(i))}
        return LoopbackGrid(toy_client_app(same_reply_every_round), 10, node_config=cfg)

    first = ReshuffleGrid(lg := nodes("old"), key_dir=str(keys["old"]), phase_timeout=5, group_size=5)
    assert len(_round(first, 1)) == 10
    # A new run of the same federation (fresh Contexts, a PS that lost the groups): the nodes keep theirs
    again = ReshuffleGrid(nodes("old"), key_dir=str(keys["old"]), phase_timeout=1, group_size=5)
    assert _round(again, 1) == [] and "0 commitments" in again.rounds[-1].failed
    kept = ReshuffleGrid(nodes("old"), key_dir=str(keys["old"]), phase_timeout=5, groups=first.group_state())
    assert len(_round(kept, 1)) == 10
    # A fresh federation under the same CA (another PS key): the same nodes form new groups there
    fresh = ReshuffleGrid(nodes("new"), key_dir=str(keys["new"]), phase_timeout=5, group_size=5)
    assert len(_round(fresh, 1)) == 10
    assert GROUP in next(iter(lg.contexts.values())).state


def test_a_pseudonym_issued_in_a_dcnet_round_is_kept_in_the_folder_across_a_restart(tmp_path):
    # Prepare: the groups formed in one run; a new run of the federation keeps them, so its first round is
    # the stable groups' DC-net round, and it opens a new epoch: each node's pseudonym is issued there.
    cfg = lambda i: {"partition-id": i, "num-partitions": 10, "reshuffle-state-dir": str(tmp_path / f"n{i}")}  # noqa
    first = ReshuffleGrid(LoopbackGrid(toy_client_app(same_reply_every_round), 10, node_config=cfg),
                          phase_timeout=5, group_size=5)
    assert len(_round(first, 1)) == 10
    lg = LoopbackGrid(toy_client_app(same_reply_every_round), 10, node_config=cfg)
    grid = ReshuffleGrid(lg, phase_timeout=5, groups=first.group_state())
    assert len(_round(grid, 1)) == 10 and not grid.rounds[-1].errors
    issued = _nyms(lg)
    assert all(n.epoch == grid.pseudonym_keys.issuer(1).epoch for n in issued.values())
    # Execute: every node's process restarts (Contexts wiped, folders kept)
    for c in lg.contexts.values():
        c.state = RecordDict()
    replies = _round(grid, 2)
    # Assert: all delivered with the pseudonyms issued in the DC-net round, none asked twice
    assert len(replies) == 10 and not lg.errors and not grid.rounds[-1].errors
    assert {grid.pseudonym_of(r) for r in replies} == {n.name for n in issued.values()}
    assert _nyms(lg) == issued and len(grid.pseudonym_keys.issuer(2).issued) == 10


def test_the_state_folder_setting_is_checked():
    from reshuffle.errors import ConfigError
    from reshuffle.flower.mod import _state_dir

    class Ctx:
        node_config = {"reshuffle-state-dir": 3}
    with pytest.raises(ConfigError, match="reshuffle-state-dir"):
        _state_dir(Ctx())
    Ctx.node_config = {"reshuffle-state-dir": ""}
    assert _state_dir(Ctx()) is None
    Ctx.node_config = {}
    assert _state_dir(Ctx()).name == "reshuffle-state"


def _dies_once(lg, node, kind, forget_request=False):
    """A mod: node ``node``'s process dies on the first protocol message holding a ``kind`` message, before it
    handles it (no reply; its Context is wiped, its folder kept). With ``forget_request`` its folder keeps its
    group but not its pseudonym record, as before the record was written ahead of the request."""
    from reshuffle.flower import mod, reserved
    from reshuffle.protocol.messages import peek_type

    fired = []

    def dies(msg, ctx, call_next):
        if not fired and ctx.node_id == node and reserved.is_train(msg.metadata.message_type):
            rec = reserved.record_of(msg.content)
            if reserved.field(rec, "stage", str) == reserved.STAGE_PROTOCOL and any(
                    peek_type(d) is kind for d in reserved.data_list(rec)):
                fired.append(node)
                ctx.state = lg.contexts[node].state = RecordDict()
                mod._LIVE.clear()
                if forget_request:
                    (path,) = Path(ctx.node_config["reshuffle-state-dir"]).glob("state-*.bin")
                    group, _ = mod._read_state(path, node - 1000)
                    mod._write_state(path, group, b"")
                raise RuntimeError("the node's process died")
        return mod.reshuffle_mod(msg, ctx, call_next)
    return dies, fired


def _restart_after_the_request(tmp_path, forget_request):
    """A new epoch's first round is the stable groups' DC-net round; node 1002 dies after its DC_KEY left (it never
    reads its evaluation), then takes part in the next round. The replies of both rounds and the grid."""
    from reshuffle.protocol.messages import MsgType

    cfg = lambda i: {"partition-id": i, "num-partitions": 10, "reshuffle-state-dir": str(tmp_path / f"n{i}")}  # noqa
    first = ReshuffleGrid(LoopbackGrid(toy_client_app(same_reply_every_round), 10, node_config=cfg),
                          phase_timeout=5, group_size=5)
    assert len(_round(first, 1)) == 10
    box = {}
    lg = LoopbackGrid(toy_client_app(same_reply_every_round, mods=[lambda m, c, n: box["mod"](m, c, n)]), 10,
                      node_config=cfg)
    box["mod"], fired = _dies_once(lg, 1002, MsgType.DC_KEYS, forget_request)
    grid = ReshuffleGrid(lg, phase_timeout=5, groups=first.group_state())
    one = _round(grid, 1)
    assert fired == [1002] and len(one) == 5  # its group delivers nothing in that round
    return one, _round(grid, 2), grid


def test_a_node_that_dies_after_its_request_asks_again_with_it_and_gets_the_same_pseudonym(tmp_path):
    # The record is written to the folder before the DC_KEY that carries B leaves: the restarted node sends the
    # same B, the PS answers with the same evaluation, and its group mates see the commitment they kept.
    _, two, grid = _restart_after_the_request(tmp_path, forget_request=False)
    assert len(two) == 10 and not grid.rounds[-1].errors
    iss = grid.pseudonym_keys.issuer(2)
    assert len(iss.requests) == 10 and len(iss.issued) == 10


def test_the_control_a_node_that_kept_no_request_silences_its_group_for_the_epoch(tmp_path):
    # Without the written-ahead record the node draws a fresh request: the PS refuses it (it recorded the first
    # B) and its group mates refuse a changed commitment, so the group is silenced for the epoch.
    _, two, grid = _restart_after_the_request(tmp_path, forget_request=True)
    assert len(two) == 5
    errs = " ".join(str(e) for e in grid.rounds[-1].errors)
    assert "OtherRequest" in errs and errs.count("IssuanceChanged: group mate 2 signed another pseudonym") == 4
