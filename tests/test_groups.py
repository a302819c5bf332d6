"""Anonymity groups: sizes, the commit-reveal assignment, its messages, attacks on it, rounds in groups."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.adversaries.participants import Jam
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, CertificateAuthority, SigningKey
from reshuffle.errors import (
    AlreadyAnswered,
    BelowThreshold,
    ConfigError,
    DecodeError,
    InvalidSignature,
    ProtocolError,
    UnexpectedMessage,
)
from reshuffle.protocol import groups as gr
from reshuffle.protocol import messages as msg
from reshuffle.harness.api import shuffle
from reshuffle.protocol.assignment import AssignmentClient, AssignmentCollector, CState
from reshuffle.protocol.groups import (
    Assignment,
    GroupCert,
    GroupCommits,
    GroupOpen,
    GroupReveal,
    GroupReveals,
    InvalidReveal,
    WrongAssignment,
)
from reshuffle.protocol.messages import Context, MsgType
from reshuffle.protocol.params import RoundParams
from reshuffle.harness.runner import Envelope
from tests.protocol_helpers import make_updates

CA = CertificateAuthority.from_seed(bytes(32))
PS_SK = SigningKey.from_seed(bytes([1]) * 32)
PS_CERT = CA.issue(SERVER_ID, PS_SK.verify_key, ROLE_SERVER)
KEYS = {i: SigningKey.from_seed(bytes([10 + i]) * 32) for i in range(8)}
CERTS = {i: CA.issue(i, k.verify_key) for i, k in KEYS.items()}
H = bytes(range(32))
CTX = Context()


# --------------------------------------------------------------------------- #
# Sizes and the partition
@settings(max_examples=300, deadline=None)
@given(st.integers(gr.MIN_GROUP, 3000), st.integers(gr.MIN_GROUP, 400))
def test_groups_are_nearly_equal_and_never_below_g(N, g):
    # g is the least stable anonymity set: ⌊N/g⌋ groups of g to 2g − 1 (one group of N when N < g).
    sizes = gr.group_sizes(N, g)
    assert sum(sizes) == N
    assert max(sizes) - min(sizes) <= 1
    assert min(sizes) >= gr.MIN_GROUP
    assert len(sizes) == max(1, N // g)
    if N >= g:
        assert g <= min(sizes) and max(sizes) <= 2 * g - 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=gr.MIN_GROUP, max_size=60, unique=True), st.integers(gr.MIN_GROUP, 9),
       st.binary(min_size=32, max_size=32))
def test_partition_is_a_deterministic_split_of_the_ids(ids, g, seed):
    a = Assignment.draw(5, 1, g, ids, seed)
    flat = [i for grp in a.groups for i in grp]
    assert sorted(flat) == sorted(ids)
    assert [len(grp) for grp in a.groups] == gr.group_sizes(len(ids), g)
    assert Assignment.draw(5, 1, g, list(reversed(ids)), seed) == a
    assert all(a.index_of(i) == j for j, grp in enumerate(a.groups) for i in grp)


def test_partition_depends_on_the_seed_and_the_digest_on_everything():
    ids = list(range(40))
    a = Assignment.draw(1, 1, 5, ids, bytes(32))
    b = Assignment.draw(1, 1, 5, ids, bytes([1]) + bytes(31))
    assert a.groups != b.groups and a.digest != b.digest
    assert Assignment.draw(2, 1, 5, ids, bytes(32)).digest != a.digest  # the round is bound
    assert Assignment.draw(1, 2, 5, ids, bytes(32)).digest != a.digest  # the attempt is bound


def test_target_lands_with_each_other_member_about_uniformly():
    # 2,000 seeds: participant 0 shares its group of 4 (of 20) with each other id about 3/19 of the time.
    ids = list(range(20))
    together = np.zeros(20)
    for s in range(2000):
        a = Assignment.draw(1, 1, 4, ids, SeededRandom(s).bytes(32))
        together[list(a.groups[a.index_of(0)])] += 1
    freq = together[1:] / 2000
    assert np.all(np.abs(freq - 3 / 19) < 0.05)


def test_group_size_and_params_validation():
    with pytest.raises(ConfigError, match="group_size"):
        gr.check_group_size(1)
    with pytest.raises(ConfigError, match="group_size"):
        gr.check_group_size(2)  # with c >= 1, a group of 2 leaves one honest member
    with pytest.raises(ConfigError, match="group_size"):
        gr.check_group_size(True)
    with pytest.raises(ConfigError, match="assignment digest"):
        RoundParams.default(4, 8, cohort=0, cohorts=2)
    with pytest.raises(ConfigError, match="cohort"):
        RoundParams.default(4, 8, cohort=2, cohorts=2, assignment=H)
    p = RoundParams.default(4, 8, cohort=1, cohorts=3, assignment=H)
    assert RoundParams.decode(p.encode()) == p
    with pytest.raises(DecodeError, match="rejected"):
        enc = p.encode()  # ends with cohort u32 | cohorts u32 | digest (u32 length, 32 bytes)
        RoundParams.decode(enc[:-44] + (5).to_bytes(4, "big") + enc[-40:])


# --------------------------------------------------------------------------- #
# Messages: samples, round trip, every truncation, signatures, fuzz
def group_samples():
    return [
        GroupOpen(1, 1, SERVER_ID, 3, PS_CERT, tuple(sorted(CERTS.items()))[:4]),
        gr.GroupCommit(1, 1, 2, H),
        GroupCommits(1, 1, SERVER_ID, ((0, H, bytes(64)), (3, H, b"s" * 64))),
        gr.GroupAck(1, 1, 2, b"a" * 64),
        GroupCert(1, 1, SERVER_ID, ((0, b"a" * 64), (2, b"b" * 64))),
        GroupReveal(1, 2, 3, b"n" * 32),
        GroupReveals(1, 2, SERVER_ID, (b"n" * 32, b"m" * 32)),
    ]


def test_every_assignment_type_has_a_sample():
    assert {m.TYPE for m in group_samples()} == gr.ASSIGNMENT_TYPES


@pytest.mark.parametrize("m", group_samples(), ids=lambda m: m.TYPE.name)
def test_group_message_roundtrip_truncation_and_signature(m):
    enc = m.encode(PS_SK)
    got = msg.decode(enc, CTX)
    assert got == m
    msg.verify(got, PS_SK.verify_key)
    for cut in range(len(enc)):
        with pytest.raises(ProtocolError):
            msg.decode(enc[:cut], CTX)
    with pytest.raises(DecodeError, match="trailing"):
        msg.decode(enc + b"\x00", CTX)
    for i in range(0, len(enc), max(1, len(enc) // 30)):
        bad = bytearray(enc)
        bad[i] ^= 0x10
        with pytest.raises(ProtocolError):
            msg.verify(msg.decode(bytes(bad), CTX), PS_SK.verify_key)


def test_unsorted_or_repeated_ids_are_refused():
    with pytest.raises(DecodeError, match="sorted and distinct"):
        msg.decode(GroupCommits(1, 1, SERVER_ID, ((3, H, bytes(64)), (0, H, bytes(64)))).encode(), CTX)
    with pytest.raises(DecodeError, match="sorted and distinct"):
        msg.decode(GroupCert(1, 1, SERVER_ID, ((2, bytes(64)), (2, bytes(64)))).encode(), CTX)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(group_samples()), st.data())
def test_fuzzed_group_messages_raise_only_protocol_errors(m, data):
    enc = bytearray(m.encode(PS_SK))
    for _ in range(data.draw(st.integers(1, 4))):
        enc[data.draw(st.integers(0, len(enc) - 1))] = data.draw(st.integers(0, 255))
    try:
        msg.decode(bytes(enc), CTX)
    except ProtocolError:
        pass


# --------------------------------------------------------------------------- #
# The two state machines, driven by hand
def _clients(n):
    # draw=1: the mechanics of short lists; the candidate floor has tests of its own (test_group_floor.py)
    return {i: AssignmentClient(i, 1, KEYS[i], CERTS[i], CA, SeededRandom(i, b"t"), draw=1) for i in range(n)}


def _deliver(clients, outbox):
    """Each client's replies to the outbox, decoded (the PS side reads them)."""
    replies = {}
    for pid, data in outbox:
        if pid in clients:
            out = clients[pid].handle(msg.decode(data, CTX))
            replies[pid] = [msg.decode(r.encode(KEYS[pid]), CTX) for r in out]
    return replies


def _assign(n=6, g=3, upto=None):
    """Run the assignment among n clients; stop before ``upto`` (a PSState name) if given."""
    clients = _clients(n)
    ps = AssignmentCollector(1, {i: CERTS[i] for i in range(n)}, PS_SK, PS_CERT, g)
    out = ps.start()
    while ps.assignment is None:
        if upto is not None and ps.state.name == upto:
            return clients, ps, out
        for pid, rs in _deliver(clients, out).items():
            for r in rs:
                ps.receive(pid, r)
        out = ps.close()
    _deliver(clients, out)
    return clients, ps, out


def test_every_participant_computes_the_ps_assignment():
    clients, ps, _ = _assign(7, 3)
    assert all(c.phase is CState.ASSIGNED for c in clients.values())
    assert {c.assignment for c in clients.values()} == {ps.assignment}
    assert [len(g) for g in ps.assignment.groups] == [4, 3]  # three groups would leave two of 2


def test_forged_commitment_in_the_list_is_refused():
    # Prepare: the list as the PS would send it, then entry 4's signature replaced by the PS's own.
    clients, ps, out = _assign(upto="ACKS")
    lm = msg.decode(out[0][1], CTX)
    entries = tuple((pid, c, PS_SK.sign("msg", gr.commit_statement(1, 1, pid, c)) if pid == 4 else s)
                    for pid, c, s in lm.entries)
    forged = GroupCommits(1, 1, SERVER_ID, entries).encode(PS_SK)
    # Execute / Assert: nobody acknowledges it.
    with pytest.raises(InvalidSignature, match="commitment of 4"):
        clients[0].handle(msg.decode(forged, CTX))


def test_a_list_without_or_with_a_changed_own_commitment_is_refused():
    clients, ps, out = _assign(upto="ACKS")
    lm = msg.decode(out[0][1], CTX)
    changed = tuple((pid, bytes(32) if pid == 2 else c, s) for pid, c, s in lm.entries)
    with pytest.raises(WrongAssignment, match="own commitment"):
        clients[2].handle(msg.decode(GroupCommits(1, 1, SERVER_ID, changed).encode(PS_SK), CTX))
    with pytest.raises(WrongAssignment, match="threshold"):
        clients[1].handle(msg.decode(GroupCommits(1, 1, SERVER_ID, lm.entries[:2]).encode(PS_SK), CTX))


def test_equivocated_lists_get_no_certificate_and_no_reveal():
    # Prepare: the PS shows participant 0 a list without participant 5 (a fork) and everyone else the real one.
    clients, ps, out = _assign(upto="ACKS")
    lm = msg.decode(out[0][1], CTX)
    fork = GroupCommits(1, 1, SERVER_ID, tuple(e for e in lm.entries if e[0] != 5)).encode(PS_SK)
    clients[0].handle(msg.decode(fork, CTX))
    acks = {}
    for pid in range(1, 6):
        (ack,) = clients[pid].handle(lm)
        acks[pid] = ack.signature
    # Execute: a certificate of the five honest acks on the real list, shown to participant 0.
    cert = GroupCert(1, 1, SERVER_ID, tuple(sorted(acks.items()))).encode(PS_SK)
    # Assert: its view differs, so the signatures fail and it reveals nothing.
    with pytest.raises(InvalidSignature, match="not on this participant's list"):
        clients[0].handle(msg.decode(cert, CTX))
    assert clients[0].phase is CState.AWAIT_CERT


def test_a_certificate_below_threshold_gets_no_reveal():
    clients, ps, out = _assign(upto="REVEALS")
    cert = msg.decode(out[0][1], CTX)
    short = GroupCert(1, 1, SERVER_ID, cert.signatures[:2]).encode(PS_SK)
    with pytest.raises(WrongAssignment, match="threshold"):
        clients[0].handle(msg.decode(short, CTX))
    (rev,) = clients[1].handle(cert)  # the full certificate: it reveals
    assert isinstance(rev, GroupReveal)


def test_a_nonce_that_does_not_open_its_commitment_is_refused_by_both_sides():
    clients, ps, out = _assign(upto="REVEALS")
    for pid, rs in _deliver(clients, out).items():
        for r in rs:
            ps.receive(pid, r)
    out = ps.close()
    real = msg.decode(out[0][1], CTX)
    wrong = GroupReveals(1, 1, SERVER_ID, (bytes(32),) + real.nonces[1:]).encode(PS_SK)
    with pytest.raises(InvalidReveal, match="does not open"):
        clients[3].handle(msg.decode(wrong, CTX))
    # The PS side: a second collector sees a false reveal from participant 2.
    _, ps2, _ = _assign(upto="REVEALS")
    with pytest.raises(InvalidReveal):
        ps2.receive(2, GroupReveal(1, 1, 2, bytes(32)))


def test_duplicate_reveal_is_ignored_and_late_messages_are_refused():
    clients, ps, out = _assign(upto="REVEALS")
    replies = _deliver(clients, out)
    for pid, rs in replies.items():
        for r in rs:
            ps.receive(pid, r)
    with pytest.raises(AlreadyAnswered):
        ps.receive(1, replies[1][0])
    ps.close()
    with pytest.raises(UnexpectedMessage):
        ps.receive(1, replies[1][0])  # late: the assignment is fixed


def test_a_redraw_must_exclude_someone_and_attempts_are_bounded():
    # Prepare: participant 0 revealed in attempt 1.
    clients, ps, out = _assign(upto="REVEALS")
    _deliver(clients, out)
    roster = tuple(sorted((i, CERTS[i]) for i in range(6)))
    # Execute / Assert: a second attempt with the same candidates (a free redraw) is refused.
    same = GroupOpen(1, 2, SERVER_ID, 3, PS_CERT, roster).encode(PS_SK)
    with pytest.raises(WrongAssignment, match="exclude a member"):
        clients[0].handle(msg.decode(same, CTX))
    # A skipped attempt number is refused; attempt 2 without participant 5 is accepted.
    with pytest.raises(WrongAssignment, match="attempt 3"):
        clients[1].handle(msg.decode(GroupOpen(1, 3, SERVER_ID, 3, PS_CERT, roster[:5]).encode(PS_SK), CTX))
    (commit,) = clients[2].handle(msg.decode(GroupOpen(1, 2, SERVER_ID, 3, PS_CERT, roster[:5]).encode(PS_SK), CTX))
    assert commit.m == 2


def test_the_assignment_starts_at_attempt_one_and_from_the_certified_ps():
    c = _clients(1)[0]
    roster = tuple(sorted((i, CERTS[i]) for i in range(4)))
    with pytest.raises(WrongAssignment, match="attempt 1"):
        c.handle(msg.decode(GroupOpen(1, 2, SERVER_ID, 3, PS_CERT, roster).encode(PS_SK), CTX))
    impostor = SigningKey.from_seed(bytes([99]) * 32)
    c = _clients(1)[0]
    with pytest.raises(InvalidSignature):
        c.handle(msg.decode(GroupOpen(1, 1, SERVER_ID, 3, PS_CERT, roster).encode(impostor), CTX))


# --------------------------------------------------------------------------- #
# Rounds in groups (in process, real protocol)
def test_round_in_groups_delivers_every_model_and_reports_groups():
    ups = make_updates(7, d=8, seed=1)
    r = shuffle(ups, group_size=3, seed=3)
    assert sorted(i for g in r.groups for i in g) == list(range(7))
    assert len(r.models) == 7 and not r.failed_groups
    for i, row in r.positions.items():
        np.testing.assert_allclose(r.models[row], ups[i], atol=2**-20)
    assert r.group_stats["group_size"] == 3
    assert r.group_stats["groups"]["sizes"] == [4, 3]
    assert r.group_stats["assignment"]["attempts"] == 1
    # The assignment is costed like a phase: a few hundred bytes each way per participant at N = 7.
    assert 0 < r.stats["assign"]["participant_bytes_sent"] < 1000 and r.stats["assign"]["ps_s"] > 0
    # Each group ran with its own parameters bound to the one assignment.
    gp = r.output.group_params
    assert {p.assignment for p in gp.values()} == {r.output.assignment.digest}
    assert [(p.N, p.cohort, p.cohorts, p.c) for _, p in sorted(gp.items())] == [(4, 0, 2, 1), (3, 1, 2, 1)]


def test_rows_are_pooled_group_by_group():
    r = shuffle(make_updates(6, d=4, seed=2), group_size=3, seed=5)
    out = r.output
    for i, row in r.positions.items():
        j = r.groups.index(next(g for g in r.groups if i in g))
        lo = out.offsets[j]
        hi = lo + out.group_outputs[j].n_positions
        assert lo <= out.valid_positions[row] < hi


def test_a_failing_group_delivers_nothing_and_the_others_deliver():
    # Prepare: find the seed's groups, then drop two of group 0's three members at setup.
    ups = make_updates(6, d=4, seed=3)
    groups = shuffle(ups, group_size=3, seed=7).groups
    drop = list(groups[0][:2])
    # Execute
    r = shuffle(ups, group_size=3, seed=7, dropouts={"setup": drop})
    # Assert
    assert r.groups == groups
    assert list(r.failed_groups) == [0] and "threshold" in r.failed_groups[0]
    assert sorted(r.positions) == sorted(groups[1]) and len(r.models) == 3
    assert r.group_stats["groups"]["outcome"][0]["failed"] and r.group_stats["groups"]["outcome"][1]["delivered"] == 3


def test_every_group_failing_is_below_threshold():
    ups = make_updates(6, d=4, seed=4)
    with pytest.raises(BelowThreshold, match="every group failed"):
        shuffle(ups, group_size=3, seed=1, dropouts={"setup": list(range(6))})
    r = shuffle(ups, group_size=3, seed=1, dropouts={"setup": list(range(6))}, raise_on_failure=False)
    assert r.failure and not r.models and set(r.failed_groups) == {0, 1}


def test_a_dropout_before_its_upload_fails_its_group_only():
    # Before all-or-none the group delivered its 3 other models, and the missing one named participant 3
    # to a PS that links models across rounds. Now its members refuse U_M without 3: nothing of the group.
    ups = make_updates(8, d=4, seed=5)
    r = shuffle(ups, group_size=4, seed=2, dropouts={"upload": [3]})
    j = next(k for k, g in enumerate(r.groups) if 3 in g)
    assert list(r.failed_groups) == [j]
    assert sorted(r.positions) == sorted(r.groups[1 - j])
    assert all(isinstance(r.participant_errors[i][0], gr.IncompleteGroup) for i in r.groups[j] if i != 3)


def test_a_dropout_after_its_upload_is_recovered_and_its_group_delivers():
    ups = make_updates(8, d=4, seed=5)
    r = shuffle(ups, group_size=4, seed=2, dropouts={"unmask": [3]})
    assert not r.failed_groups and sorted(r.positions) == list(range(8))


def test_dropped_reveals_exclude_the_non_revealer_and_redraw():
    # The network (or the PS) loses participant 2's reveal in attempt 1.
    def lose(env: Envelope):
        if env.sender == 2 and msg.peek_type(env.data) is MsgType.GROUP_REVEAL and env.data[10:14] == bytes([0, 0, 0, 1]):
            return []
        return [env]

    r = shuffle(make_updates(7, d=4, seed=6), group_size=3, seed=4, interceptors=[lose])
    assert r.group_stats["assignment"]["attempts"] == 2 and r.group_stats["assignment"]["excluded"] == [2]
    assert all(2 not in g for g in r.groups) and sorted(r.positions) == [0, 1, 3, 4, 5, 6]


def test_reveals_dropped_in_every_attempt_end_the_round():
    def lose_all(env: Envelope):
        return [] if env.sender == 2 and msg.peek_type(env.data) is MsgType.GROUP_REVEAL else [env]

    def lose_next(env: Envelope):  # a different member each attempt: 2, then 3, then 4
        if msg.peek_type(env.data) is MsgType.GROUP_REVEAL:
            a = int.from_bytes(env.data[10:14], "big")
            if env.sender == 1 + a:
                return []
        return [env]

    ok = shuffle(make_updates(7, d=4, seed=6), group_size=3, seed=4, interceptors=[lose_all])
    assert ok.group_stats["assignment"]["attempts"] == 2  # 2 excluded at once; attempt 2 has no 2
    # 9 candidates: the third attempt's 7 still meet every member's candidate floor (2g = 6)
    with pytest.raises(BelowThreshold, match=f"after {gr.MAX_ATTEMPTS} attempts"):
        shuffle(make_updates(9, d=4, seed=6), group_size=3, seed=4, interceptors=[lose_next])


def _run_with_forged_round_start(make_bad):
    """The PS replaces participant 0's group ROUND_START by ``make_bad(rs, server)``, signed with its own key."""
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner

    ups = make_updates(8, d=4, seed=8)
    server, parts = build_round(ups, RoundParams.default(8, 4), seed=9, group_size=4, overrides={})

    def forge(env: Envelope):
        if env.recipient == 0 and msg.peek_type(env.data) is MsgType.ROUND_START:
            return [env.with_data(make_bad(msg.decode(env.data, CTX), server).encode(server._sk))]
        return [env]

    InProcessRunner(server, parts, None, [forge]).run()
    return server, parts


def _other_roster(rs, server):
    # The target with the members of the other group: a partition the target never computed.
    a = server.assignment
    ids = sorted({0} | set(a.groups[1 - a.index_of(0)]))
    p = RoundParams.default(len(ids), rs.params.d, **a.binding(a.index_of(0)))
    return replace(rs, params=p, roster=tuple((i, server._roster[i]) for i in ids))


FORGERIES = {
    "other-roster": (_other_roster, "roster"),
    "other-index": (lambda rs, s: replace(rs, params=rs.params.with_(cohort=1 - rs.params.cohort)), "binds group"),
    "other-digest": (lambda rs, s: replace(rs, params=rs.params.with_(assignment=bytes(32))), "binds group"),
    "other-count": (lambda rs, s: replace(rs, params=rs.params.with_(cohorts=3)), "binds group"),
}


@pytest.mark.parametrize("attack", sorted(FORGERIES))
def test_a_round_start_off_the_computed_partition_is_refused(attack):
    make_bad, match = FORGERIES[attack]
    server, parts = _run_with_forged_round_start(make_bad)
    errs = parts[0].view.errors
    assert errs and isinstance(errs[0], WrongAssignment) and match in str(errs[0])
    assert not parts[0].view.uploaded  # it took part in no group round
    # All or none: its group delivers nothing without it (its other members refuse U_m); the other
    # group is untouched.
    a = server.assignment
    assert 0 not in server.output.online.get(server.params.upload_m, ())
    assert list(server.failed) == [a.index_of(0)]
    assert set(a.groups[1 - a.index_of(0)]) == set(server.output.online[server.params.upload_m])


def test_round_start_before_the_assignment_is_refused():
    # A PS that skips the assignment and sends ROUND_START at once gets a refusal from every participant.
    from reshuffle.harness.api import build_round

    ups = make_updates(4, d=4, seed=1)
    server, parts = build_round(ups, RoundParams.default(4, 4), seed=2, group_size=3, overrides={})
    from reshuffle.protocol.server import Server
    plain = Server(RoundParams.default(4, 4), 1, server._roster, server._sk, server._cert, server._ca, server._hash)
    for pid, data in plain.start():
        (refusal,) = parts[pid].handle(data)
        assert msg.peek_type(refusal) is MsgType.REFUSAL
        assert "bound to no group" in str(parts[pid].view.errors[0])


def test_an_adversary_keeps_working_in_its_group():
    # A jammer in one group is named there; the other group delivers all its models.
    ups = make_updates(6, d=4, seed=10)
    r = shuffle(ups, group_size=3, seed=11, adversaries=[Jam((1,))], raise_on_failure=False)
    j = next(k for k, g in enumerate(r.groups) if 1 in g)
    other = r.groups[1 - j]
    assert 1 in r.blamed
    assert set(other) <= set(r.positions)


def test_group_size_rejects_per_group_parameters():
    with pytest.raises(ConfigError, match="follow each group's size"):
        shuffle(make_updates(4, d=4), group_size=3, t=3)
    with pytest.raises(ConfigError, match="group_size"):
        shuffle(make_updates(4, d=4), group_size=1)


def test_group_anonymity_game_broken_participant_is_always_linked_within_its_group():
    from reshuffle.games.anonymity import anonymity_trial_groups

    # The answer-once rule removed: the PS strips every mask of the group's uploads and names the owner.
    correct, h = anonymity_trial_groups(8, 1, 4, 4, broken=True)
    assert correct and h in (3, 4)


def test_simulation_runs_rounds_in_groups_and_names_a_failed_groups_losses():
    from reshuffle.sim import SimConfig, Simulation
    from reshuffle.run.delivery import loss_causes

    with pytest.raises(ConfigError, match="shuffle='real'"):
        SimConfig(clients=6, shuffle="ideal", group_size=3).validated()
    # Execute: a round of 6 clients in groups of 3 (embedded digits, logistic regression), drawn for the round.
    sim = Simulation(SimConfig(rounds=1, clients=6, shuffle="real", model="logreg", seed=1, group_size=3,
                               stable_sets=False))
    recs = list(sim.run())
    # Assert: every model arrives, and the assignment is costed as a phase.
    assert [r.models_received for r in recs] == [6]
    assert all("assign" in r.seconds for r in recs)
    # A failed group's members are lost with that reason.
    ups = make_updates(6, d=4, seed=3)
    groups = shuffle(ups, group_size=3, seed=7).groups
    r = shuffle(ups, group_size=3, seed=7, dropouts={"setup": list(groups[0][:2])})
    lost = loss_causes(r, 6, {"setup": list(groups[0][:2])})
    assert lost[groups[0][2]].startswith("group 0 failed")


def test_upload_per_participant_depends_on_g_not_on_n():
    # Prepare / Execute: rounds of 4 and 12 participants, in groups of 4 and (12) without groups.
    def upload_bytes(N, g):
        r = shuffle(make_updates(N, d=64, seed=N), group_size=g, seed=N)
        assert len(r.models) == N
        return r.stats["upload"]["participant_bytes_sent"]

    small, grouped, single = upload_bytes(4, 4), upload_bytes(12, 4), upload_bytes(12, None)
    # Assert: the masked model list is g rows (plus decoys) long in a group, N rows without groups.
    assert abs(grouped - small) / small < 0.15
    assert single > 2 * grouped


def test_group_collusion_sets_each_groups_c_and_t():
    r = shuffle(make_updates(8, d=4, seed=12), group_size=4, seed=12, group_collusion=0.5)
    # c_j = ⌊0.5·4⌋ = 2, t_j = ⌊(4 + 2)/2⌋ + 1 = 4 (the default would be c = 1, t = 3)
    assert {(p.c, p.t) for p in r.output.group_params.values()} == {(2, 4)}
    assert all(o["c"] == 2 and o["t"] == 4 for o in r.group_stats["groups"]["outcome"].values())
    with pytest.raises(ConfigError, match="fraction"):
        shuffle(make_updates(4, d=4), group_size=3, group_collusion=1.0)
    with pytest.raises(ConfigError, match="needs group_size"):
        shuffle(make_updates(4, d=4), group_collusion=0.3)


@pytest.mark.parametrize("name", ["equivocate-u", "tagged-ot", "per-participant-key"])
def test_a_deviating_ps_is_stopped_in_every_group(name):
    from reshuffle.adversaries import make_adversary

    # Every group's PS runs the deviation against participant 0 (in whichever group it lands).
    b = make_adversary(name)
    r = shuffle(make_updates(8, d=8, seed=13), group_size=4, seed=13, adversaries=[b], raise_on_failure=False)
    v = b.holds(r, list(range(8)))
    assert v.holds, v.detail
    assert r.groups and not r.blamed


def test_a_participant_refuses_groups_below_its_own_floor():
    roster = tuple(sorted((i, CERTS[i]) for i in range(7)))
    c = AssignmentClient(0, 1, KEYS[0], CERTS[0], CA, SeededRandom(0), min_group=4)
    with pytest.raises(WrongAssignment, match="below this participant's floor 4"):
        c.handle(msg.decode(GroupOpen(1, 1, SERVER_ID, 3, PS_CERT, roster).encode(PS_SK), CTX))
    # g = 5 passes the first check, but 4 candidates make one group of 4: every member refuses the open
    # (below one group's worth), and would refuse the group of 4 it computed.
    clients = {i: AssignmentClient(i, 1, KEYS[i], CERTS[i], CA, SeededRandom(i), min_group=5, draw=1)
               for i in range(4)}
    ps = AssignmentCollector(1, {i: CERTS[i] for i in range(4)}, PS_SK, PS_CERT, 5)
    (_, data), *_ = ps.start()
    for i in range(4):
        with pytest.raises(WrongAssignment, match="4 candidates for groups of 5"):
            clients[i].handle(msg.decode(data, CTX))


def test_a_failed_assignment_is_reported_without_raising_on_request():
    def lose_all(env: Envelope):
        return [] if msg.peek_type(env.data) is MsgType.GROUP_REVEAL else [env]

    r = shuffle(make_updates(5, d=4, seed=1), group_size=3, seed=1, interceptors=[lose_all], raise_on_failure=False)
    assert "0 participants left" in r.failure  # every reveal lost: nobody is left to redraw among
    assert not r.models and not r.positions and r.groups == []
    assert r.group_stats["assignment"]["attempts"] == 1 and r.group_stats["groups"]["count"] == 0


def test_a_refused_assignment_message_leaves_the_client_state_unchanged():
    # The client's state is a frozen value: a handler validates first and returns the next state.
    clients, ps, out = _assign(upto="ACKS")
    lm = msg.decode(out[0][1], CTX)
    before = clients[0].state
    stripped = GroupCommits(1, 1, SERVER_ID, tuple(e for e in lm.entries if e[0] != 0))
    with pytest.raises(WrongAssignment, match="own commitment"):
        clients[0].handle(msg.decode(stripped.encode(PS_SK), CTX))
    assert clients[0].state is before and clients[0].phase is CState.AWAIT_COMMITS
    (ack,) = clients[0].handle(lm)  # the genuine list still goes through
    assert ack.TYPE is MsgType.GROUP_ACK and clients[0].phase is CState.AWAIT_CERT
    with pytest.raises(UnexpectedMessage, match="expected nothing"):
        AssignmentCollector(1, {i: CERTS[i] for i in range(6)}, PS_SK, PS_CERT, 3).receive(0, ack)
