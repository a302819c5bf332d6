"""The group floor is the participant's: a PS that never forms groups, or chooses the draw's candidates, gets nothing.

Each test runs the attack as a deviating PS would, against participants with the default floors, and
the same attack against participants that opted out of the floor (the control: the attack works there).
"""

from __future__ import annotations

import numpy as np
import pytest

from flower_helpers import LoopbackGrid, toy_client_app
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, CertificateAuthority, SigningKey
from reshuffle.errors import BelowThreshold, ConfigError, ProtocolError
from reshuffle.flower.grid import ReshuffleGrid
from reshuffle.flower.mod import node_trust
from reshuffle.protocol import messages as msg
from reshuffle.protocol.assignment import AssignmentClient, AssignmentCollector
from reshuffle.protocol.groups import CandidatesBelowFloor
from reshuffle.protocol.params import TrustFloors
from test_flower_grid import noisy_reply, train_messages

CTX = msg.Context()


# --------------------------------------------------------------------------- the PS never forms groups
def _never_grouped(lg: LoopbackGrid, rounds: int = 5) -> list[int]:
    """Ungrouped rounds, each leaving out another subset of nodes (round r leaves out the nodes whose
    index has bit r set): a reply present in exactly the rounds its sender was in names it."""
    # The attacking PS keeps trying after rounds that delivered nothing: it does not end its run
    grid = ReshuffleGrid(lg, phase_timeout=5, group_size=None, max_empty_rounds=None)
    nodes = sorted(lg.get_node_ids())
    got = []
    for r in range(rounds):
        keep = {n for i, n in enumerate(nodes) if not (i >> r) & 1}
        msgs = [m for m in train_messages(grid, r + 1) if m.metadata.dst_node_id in keep]
        got.append(len(list(grid.send_and_receive(msgs, timeout=60))))
    return got


def test_a_ps_that_never_forms_groups_gets_no_model_from_nodes_with_default_settings(tmp_path):
    # Prepare: 10 nodes with the project's mod, each with a group floor of 5 and a state folder of its own
    cfg = lambda i: {"partition-id": i, "num-partitions": 10, "reshuffle-min-group": 5,  # noqa: E731
                     "reshuffle-state-dir": str(tmp_path / f"node{i}")}
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 10, node_config=cfg)
    # Execute: five ungrouped rounds, each without another subset of the nodes
    got = _never_grouped(lg)
    # Assert: no round delivered a model; every node said why
    assert got == [0] * 5
    assert lg.errors == [] or all("bound to no group" in why for _, why in lg.errors)


def test_the_same_attack_links_nodes_that_opted_out_of_the_floor():
    # The control: nodes whose own config takes ungrouped rounds deliver a model in each round they are in.
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 10, ungrouped=True)
    got = _never_grouped(lg)
    nodes = range(10)
    assert got == [sum(1 for i in nodes if not (i >> r) & 1) for r in range(5)] and min(got) >= 3


def test_a_node_reads_its_floors_from_its_own_config():
    _, f = node_trust({"partition-id": 0, "num-partitions": 7})
    assert (f.ungrouped, f.draw, f.federation) == (False, 2, 7) and f.min_candidates(5) == 7
    _, f = node_trust({"reshuffle-ungrouped": True, "reshuffle-min-draw": 3, "reshuffle-federation": 40})
    assert (f.ungrouped, f.min_candidates(5)) == (True, 15)
    for bad in ({"reshuffle-ungrouped": "yes"}, {"reshuffle-min-draw": 0}, {"reshuffle-federation": 1}):
        with pytest.raises(ConfigError, match="node_config reshuffle-"):
            node_trust(bad)


# --------------------------------------------------------------------------- the PS chooses the candidates
CA = CertificateAuthority.from_seed(bytes([7]) * 32)
PS_SK = SigningKey.from_seed(bytes([8]) * 32)
PS_CERT = CA.issue(SERVER_ID, PS_SK.verify_key, ROLE_SERVER)
KEYS = {i: SigningKey.from_seed(bytes([40 + i]) * 32) for i in range(10)}
CERTS = {i: CA.issue(i, k.verify_key) for i, k in KEYS.items()}
TARGET, COLLUDERS, OTHERS = 0, (1, 2), (3, 4)


def _listed_draw(run: int, floors: TrustFloors) -> tuple[int, ...] | None:
    """A PS of a 10-member federation lists only the target, two colluders and two others (g = 5); the
    colluders follow the protocol. The target's group, or None if no assignment was fixed."""
    listed = (TARGET, *COLLUDERS, *OTHERS)
    verifier = CertificateAuthority.verifier(CA.verify_key)
    clients = {i: AssignmentClient(i, run, KEYS[i], CERTS[i], verifier, SeededRandom(run * 100 + i, b"t"),
                                   min_group=floors.min_group, draw=floors.draw, federation=floors.federation)
               for i in listed}
    ps = AssignmentCollector(run, {i: CERTS[i] for i in listed}, PS_SK, PS_CERT, 5)
    out = ps.start()
    try:
        while ps.assignment is None:
            for pid, data in out:
                try:
                    replies = clients[pid].handle(msg.decode(data, CTX))
                except CandidatesBelowFloor:
                    continue
                for r in replies:
                    ps.receive(pid, msg.decode(r.encode(KEYS[pid]), CTX))
            out = ps.close()
    except BelowThreshold:
        return None
    a = ps.assignment
    return a.groups[a.index_of(TARGET)]


def test_a_candidate_list_of_one_group_is_refused_and_the_colluders_never_join_the_target():
    # Default floors: a list below 2g (10) is refused by every honest member; no group forms.
    assert [_listed_draw(run, TrustFloors()) for run in range(1, 6)] == [None] * 5
    # A member that knows its federation has 10 members refuses it too; one whose federation is those 5
    # takes it (the PS had no other list to choose).
    assert _listed_draw(1, TrustFloors(federation=10)) is None
    assert _listed_draw(1, TrustFloors(federation=5)) == (0, 1, 2, 3, 4)


def test_the_control_a_member_without_the_candidate_floor_lands_with_both_colluders_every_time():
    groups = [_listed_draw(run, TrustFloors(draw=1)) for run in range(1, 6)]
    assert all(g is not None and set(COLLUDERS) <= set(g) for g in groups)


def test_the_refusal_names_the_list_and_the_floor():
    c = AssignmentClient(0, 1, KEYS[0], CERTS[0], CertificateAuthority.verifier(CA.verify_key), SeededRandom(0))
    ps = AssignmentCollector(1, {i: CERTS[i] for i in range(5)}, PS_SK, PS_CERT, 5)
    (_, data), *_ = ps.start()
    with pytest.raises(CandidatesBelowFloor, match="5 candidates for groups of 5: .* floor is 10"):
        c.handle(msg.decode(data, CTX))
    with pytest.raises(ProtocolError):
        c.handle(msg.decode(data, CTX))  # and the state is unchanged: it refuses again


def test_the_floor_settings_are_validated():
    for bad in ({"draw": 0}, {"draw": True}, {"ungrouped": 1}, {"federation": 1}):
        with pytest.raises(ConfigError):
            TrustFloors(**bad)
    with pytest.raises(ConfigError, match="draw"):
        AssignmentClient(0, 1, KEYS[0], CERTS[0], CA, SeededRandom(0), draw=0)
    assert TrustFloors().min_candidates(5) == 10 and TrustFloors(federation=7).min_candidates(5) == 7


# --------------------------------------------------------------------------- the node's own training randomness
def test_a_node_draws_its_own_training_randomness():
    from reshuffle.flower.app.client_app import NODE_SEEDED, _train_seed

    fresh = {_train_seed({}, 1, 3, 0) for _ in range(8)}
    assert len(fresh) == 8  # the server's round number and run seed decide nothing
    assert _train_seed({NODE_SEEDED: True}, 1, 3, 0) == _train_seed({NODE_SEEDED: True}, 1, 3, 0)
    with pytest.raises(ConfigError, match=NODE_SEEDED):
        _train_seed({NODE_SEEDED: "yes"}, 1, 3, 0)


def test_replayed_content_gives_a_node_two_different_models():
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

    from reshuffle.clients import build_model, get_flat, load_dataset
    from reshuffle.flower.app import client_app

    ds = load_dataset("digits")
    w = get_flat(build_model("logreg", ds.input_shape, ds.num_classes, seed=0))
    run = {"dataset": "digits", "model": "logreg", "local-epochs": 1, "batch-size": 16, "lr": 0.1}
    content = RecordDict({"arrays": ArrayRecord([w]), "config": ConfigRecord({"server-round": 2})})

    def train_once(node_config):
        ctx = Context(run_id=7, node_id=1000, node_config=node_config, state=RecordDict(), run_config=run)
        reply = client_app.train(Message(content, dst_node_id=1000, message_type="train", group_id="2"), ctx)
        return reply.content["arrays"].to_numpy_ndarrays()[0]

    own = {"partition-id": 0, "num-partitions": 4}
    a, b = train_once(own), train_once(own)
    assert not np.array_equal(a, b)
    seeded = {**own, "reshuffle-seeded-training": True}
    assert np.array_equal(train_once(seeded), train_once(seeded))
