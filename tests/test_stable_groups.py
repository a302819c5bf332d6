"""Stable anonymity groups: formed once, kept across rounds, delivered all or none; their state and floors."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reshuffle.errors import BelowThreshold, ConfigError, DecodeError
from reshuffle.harness.api import build_round, form_groups, identities, prepare, shuffle
from reshuffle.harness.runner import Envelope, InProcessRunner
from reshuffle.protocol import groups as gr
from reshuffle.protocol import messages as msg
from reshuffle.protocol.grouped import GroupedParticipant, GroupedServer
from reshuffle.protocol.groups import Assignment, IncompleteGroup, Membership, WrongAssignment, WrongGroup
from reshuffle.protocol.messages import Context, MsgType
from reshuffle.protocol.params import RoundParams, TrustFloors
from reshuffle.protocol.participant import global_model_hash
from reshuffle.crypto.signatures import CertificateAuthority
from tests.protocol_helpers import make_updates

TWO = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


# --------------------------------------------------------------------------- #
# Attacks: a PS that changes a stable group's roster between rounds
def test_a_member_missing_before_the_upload_delivers_nothing_of_its_group():
    # The PS runs round 2 of the stable groups and withholds participant 3 (it never uploads).
    # Before all-or-none the group delivered 4 of its 5 models and the missing one named 3 to a
    # PS that links models across rounds (4 of 5 linked); now 0 of group 0's models arrive.
    ups = make_updates(10, d=4, seed=1)
    r = shuffle(ups, groups=TWO, seed=2, T=2, dropouts={"upload": [3]}, raise_on_failure=False, dcnet=False)
    assert list(r.failed_groups) == [0]
    assert sorted(r.positions) == TWO[1] and len(r.models) == 5
    for i in (0, 1, 2, 4):
        assert isinstance(r.participant_errors[i][0], IncompleteGroup)
        assert "lacks member(s) [3]" in str(r.participant_errors[i][0])


def test_a_member_not_messaged_at_all_delivers_nothing_of_its_group():
    # The PS lists 7 in ROUND_START but never talks to it (a Flower PS that leaves a node out).
    r = shuffle(make_updates(10, d=4, seed=3), groups=TWO, seed=4, T=5, dropouts={"setup": [7]},
                raise_on_failure=False)
    assert list(r.failed_groups) == [1] and sorted(r.positions) == TWO[0]


def test_a_member_that_drops_after_its_upload_is_recovered():
    r = shuffle(make_updates(10, d=4, seed=5), groups=TWO, seed=6, T=3, dropouts={"unmask": [3, 8]})
    assert not r.failed_groups and sorted(r.positions) == list(range(10))


def _forge_round_start(make_bad):
    """A stable round whose PS replaces participant 0's ROUND_START by ``make_bad(rs, server)``, signed."""
    ups = make_updates(10, d=4, seed=8)
    server, parts = build_round(ups, RoundParams.default(10, 4), seed=9, T=4, groups=TWO, dcnet=False)

    def forge(env: Envelope):
        if env.recipient == 0 and msg.peek_type(env.data) is MsgType.ROUND_START:
            return [env.with_data(make_bad(msg.decode(env.data, Context()), server).encode(server._sk))]
        return [env]

    InProcessRunner(server, parts, None, [forge]).run()
    return server, parts


def _left_out(rs, server):
    ids = [i for i, _ in rs.roster if i != 4]
    p = rs.params.with_(N=4, t=3, c=1)
    return replace(rs, params=p, roster=tuple((i, server._roster[i]) for i in ids))


def _added(rs, server):
    ids = sorted({i for i, _ in rs.roster} | {5})
    p = RoundParams.default(6, rs.params.d, cohort=rs.params.cohort, cohorts=rs.params.cohorts,
                            assignment=rs.params.assignment)
    return replace(rs, params=p, roster=tuple((i, server._roster[i]) for i in ids))


ROSTER_ATTACKS = {
    "left-out": (_left_out, "left out [4], added []"),
    "added": (_added, "left out [], added [5]"),
    "other-digest": (lambda rs, s: replace(rs, params=rs.params.with_(assignment=bytes(32))), "stable group is 0"),
    "other-index": (lambda rs, s: replace(rs, params=rs.params.with_(cohort=1)), "stable group is 0"),
}


@pytest.mark.parametrize("attack", sorted(ROSTER_ATTACKS))
def test_a_later_round_off_the_stable_group_is_refused(attack):
    make_bad, match = ROSTER_ATTACKS[attack]
    server, parts = _forge_round_start(make_bad)
    err = parts[0].view.errors[0]
    assert isinstance(err, WrongGroup) and match in str(err)
    assert not parts[0].view.uploaded
    # Participant 0 is missing from its group's U: the group delivers nothing; group 1 is untouched.
    assert list(server.failed) == [0]
    assert set(server.output.online[server.params.upload_m]) == set(TWO[1])


# --------------------------------------------------------------------------- #
# The harness interface
def test_form_groups_runs_the_assignment_once_and_returns_a_partition_of_the_ids():
    ids = [3, 17, 40, 41, 42, 50, 51, 52, 60, 61, 77]
    groups = form_groups(ids, 5, seed=1)
    assert sorted(i for g in groups for i in g) == ids
    assert [len(g) for g in groups] == [6, 5]  # ⌊11/5⌋ groups, none below 5
    assert all(g == sorted(g) for g in groups)
    assert form_groups(ids, 5, seed=1) == groups
    assert form_groups(ids, 5, seed=2) != groups  # the draw depends on the nonces (chance 1/462 to agree)
    with pytest.raises(ConfigError, match="cannot form a group of 5"):
        form_groups(ids[:4], 5)
    with pytest.raises(ConfigError, match="distinct"):
        form_groups([1, 1, 2, 3, 4], 3)
    with pytest.raises(ConfigError, match="group_size"):
        form_groups(ids, 1)


def test_shuffle_with_stable_groups_delivers_every_model_and_keeps_the_groups():
    ups = make_updates(10, d=8, seed=11)
    groups = [[9, 1, 4, 6, 2], [0, 3, 5, 7, 8]]
    r = shuffle(ups, groups=groups, seed=12, T=9)
    assert r.groups == [tuple(sorted(g)) for g in groups] and not r.failed_groups
    assert r.group_stats["assignment"]["attempts"] == 0  # no new assignment ran
    for i, row in r.positions.items():
        np.testing.assert_allclose(r.models[row], ups[i], atol=2**-20)
    digest = Assignment.given(groups).digest
    assert {p.assignment for p in r.output.group_params.values()} == {digest}
    # prepare() takes the same groups: offline steps first, models later.
    pr = prepare(10, 8, groups=groups, seed=12, T=9)
    assert sorted(pr.upload(ups).positions) == list(range(10))


@pytest.mark.parametrize("groups, match", [
    ([[0, 1, 2, 3, 4]], "cover the cohort"),
    ([[0, 1, 2, 3, 4], [4, 5, 6, 7, 8, 9]], "two groups"),
    ([[0, 1], [2, 3, 4, 5, 6, 7, 8, 9]], "at least 3"),
    ([[0, 1, 2, 3, 4], [5, 6, 7, 8, 10]], "cohort index"),
    ("0123456789", "sequence of sequences"),
])
def test_shuffle_rejects_groups_that_are_not_a_partition_of_the_cohort(groups, match):
    with pytest.raises(ConfigError, match=match):
        shuffle(make_updates(10, d=4), groups=groups)


def test_groups_and_group_size_exclude_each_other():
    with pytest.raises(ConfigError, match="exclude each other"):
        shuffle(make_updates(10, d=4), groups=TWO, group_size=5)


def test_real_shuffle_passes_stable_groups_of_client_ids():
    from reshuffle.run.delivery import RealShuffle, Uploads
    from reshuffle.run.federation import Federation
    from reshuffle.run.sets import StableSets

    ups = make_updates(12, d=4, seed=13)
    clients = {10 + i: u for i, u in enumerate(ups)}
    stable = ((10, 12, 14, 16, 18, 20), (11, 13, 15, 17, 19, 21))
    # As the FL round takes it: the federation's all-or-none rule names why the group's other members lost theirs.
    d = Federation(sets=StableSets(stable)).receive(
        RealShuffle(groups=stable).deliver(Uploads(T=1, W_g=np.zeros(4, np.float32), models=clients,
                                                   dropouts={"upload": [13]})))
    assert sorted(d.senders) == list(stable[0])  # the group of 13 delivers nothing
    assert d.lost[13] == "dropout at upload"  # its own cause; the others lose theirs to it
    assert all(d.lost[i] == "stable set incomplete: client 13 dropout at upload" for i in stable[1] if i != 13)
    assert d.groups == {i: j for j, g in enumerate(stable) for i in g}
    with pytest.raises(ConfigError, match="whole groups"):
        RealShuffle(groups=stable).deliver(Uploads(T=1, W_g=np.zeros(4, np.float32),
                                                   models={i: clients[i] for i in range(10, 21)}))


# --------------------------------------------------------------------------- #
# What each side keeps, as bytes
@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=3, max_size=40, unique=True), st.integers(3, 8), st.data())
def test_assignment_and_membership_round_trip_through_their_bytes(ids, g, data):
    a = Assignment.draw(7, 1, g, ids, data.draw(st.binary(min_size=32, max_size=32)))
    assert Assignment.decode(a.encode()) == a and Assignment.decode(a.encode()).digest == a.digest
    pid = data.draw(st.sampled_from(ids))
    m = Membership.of(a, pid)
    assert Membership.decode(m.encode()) == m
    assert pid in m.members and m.digest == a.digest
    with pytest.raises(DecodeError):
        Membership.decode(m.encode() + b"\0")
    with pytest.raises(DecodeError):
        Assignment.decode(a.encode()[:-1])


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_the_state_decoders_raise_only_decode_errors(data):
    for decode in (Assignment.decode, Membership.decode):
        try:
            decode(data)
        except DecodeError:
            pass


def test_a_membership_that_does_not_name_its_holder_is_rejected():
    m = Membership.of(Assignment.given(TWO), 0)
    bad = replace(m, pid=7).encode()
    with pytest.raises(DecodeError, match="membership"):
        Membership.decode(bad)


def test_a_stable_round_survives_a_restart_of_both_sides():
    # Round 1 forms the groups; each side persists its bytes; round 2 runs from the decoded state only.
    ups = make_updates(10, d=4, seed=21)
    server, parts = build_round(ups, RoundParams.default(10, 4), seed=22, group_size=5, overrides={})
    InProcessRunner(server, parts, None, []).run()
    ps_state = server.assignment.encode()
    node_state = {i: p.membership.encode() for i, p in parts.items()}
    stable = Assignment.decode(ps_state)
    ident = identities(10, 22)
    ca = CertificateAuthority.verifier(ident.ca.verify_key)
    gh = global_model_hash(b"round 2")
    ps2 = GroupedServer(2, ident.roster, ident.ps_key, ident.ps_cert, ca, gh, 4, 5, stable=stable)
    parts2 = {i: GroupedParticipant(i, 2, ups[i], ident.keys[i], ident.roster[i], ca, gh,
                                    membership=Membership.decode(node_state[i])) for i in range(10)}
    InProcessRunner(ps2, parts2, None, []).run()
    assert len(ps2.output.models) == 10 and not ps2.failed
    assert ps2.assignment_log == []  # no assignment message went out


def test_a_sampled_subset_of_the_stable_groups_runs_alone():
    ups = make_updates(10, d=4, seed=31)
    stable = Assignment.given(TWO)
    ident = identities(10, 32)
    ca = CertificateAuthority.verifier(ident.ca.verify_key)
    gh = global_model_hash(b"")
    members = TWO[1]
    roster = {i: ident.roster[i] for i in members}
    ps = GroupedServer(3, roster, ident.ps_key, ident.ps_cert, ca, gh, 4, 5, stable=stable, sample=[1])
    parts = {i: GroupedParticipant(i, 3, ups[i], ident.keys[i], ident.roster[i], ca, gh,
                                   membership=Membership.of(stable, i)) for i in members}
    InProcessRunner(ps, parts, None, []).run()
    assert len(ps.output.models) == 5 and list(ps.servers) == [1]
    # A sampled group with a member absent from the roster is not started: it delivers nothing.
    ps = GroupedServer(3, {i: ident.roster[i] for i in members[1:]}, ident.ps_key, ident.ps_cert, ca, gh, 4, 5,
                       stable=stable, sample=[1])
    assert ps.start() == []
    with pytest.raises(BelowThreshold, match="not in the roster"):
        ps.close_phase()
    with pytest.raises(ConfigError, match="sample"):
        GroupedServer(3, roster, ident.ps_key, ident.ps_cert, ca, gh, 4, 5, stable=stable, sample=[2])


# --------------------------------------------------------------------------- #
# Floors
def test_the_default_group_floor_is_five_and_follows_the_anonymity_floor():
    f = TrustFloors()
    assert f.min_group == 5 and f.group_honest(5) == 4 and f.group_honest(10) == 8
    # A round floor above the group floor raises it: 6 honest need N − max(1, ⌊N/5⌋) >= 6, so N = 7.
    assert TrustFloors(anonymity=6).min_group == 7
    assert TrustFloors(group=3).min_group == 3
    with pytest.raises(ConfigError, match="group floor"):
        TrustFloors(group=1)


def test_a_participant_refuses_a_stable_group_below_its_floor():
    # Groups of 4 were formed under a floor of 4; a member whose floor is now the default 5 refuses.
    ups = make_updates(8, d=4, seed=41)
    stable = Assignment.given([[0, 1, 2, 3], [4, 5, 6, 7]])
    ident = identities(8, 42)
    ca = CertificateAuthority.verifier(ident.ca.verify_key)
    gh = global_model_hash(b"")
    ps = GroupedServer(2, ident.roster, ident.ps_key, ident.ps_cert, ca, gh, 4, 4, stable=stable)
    parts = {i: GroupedParticipant(i, 2, ups[i], ident.keys[i], ident.roster[i], ca, gh,
                                   membership=Membership.of(stable, i)) for i in range(8)}
    with pytest.raises(BelowThreshold):
        InProcessRunner(ps, parts, None, []).run()
    err = parts[0].view.errors[0]
    assert isinstance(err, WrongAssignment) and "4 members, below this participant's floor 5" in str(err)


# --------------------------------------------------------------------------- #
# The anonymity game over many rounds
def test_the_many_round_adversary_is_held_to_the_group_and_wins_against_partial_groups():
    from reshuffle.games.rounds import rounds_trial

    # All or none: every round that left a member out delivered nothing of the group; 4 candidates remain.
    correct, h, candidates = rounds_trial(5, 5, 1)
    assert (h, candidates) == (4, 4)
    # A group that delivers without a member isolates every chain in the round its owner was left out.
    correct, h, candidates = rounds_trial(5, 5, 1, weak=True)
    assert correct and (h, candidates) == (4, 1)


PHASES = ("setup", "ot", "reserve", "upload", "unmask")


@pytest.mark.parametrize("dcnet", [True, False])
@settings(max_examples=10, deadline=None)
@given(st.dictionaries(st.integers(0, 9), st.sampled_from(PHASES), max_size=3))
@example(drops={0: "unmask", 1: "unmask"})  # two unmask-time losses in one group: the rounds differ
def test_every_group_delivers_all_its_models_or_none(dcnet, drops):
    # Any members, dropped at any phase: a group's models arrive all together or not at all, and a group
    # none of whose members dropped before its upload delivers. The Shamir-shared round then survives one
    # unmask-time loss at most (t = 4 of 5); the DC-net round ends at the upload (its sum needs no unmasking).
    by_phase: dict = {}
    for i, ph in drops.items():
        by_phase.setdefault(ph, []).append(i)
    r = shuffle(make_updates(10, d=4, seed=51), groups=TWO, seed=52, T=6, dropouts=by_phase, raise_on_failure=False,
                dcnet=dcnet)
    for j, g in enumerate(TWO):
        got = [i for i in g if i in r.positions]
        assert got in ([], g)
        early = [i for i in g if i in drops and drops[i] != "unmask"]
        late = [i for i in g if drops.get(i) == "unmask"]
        assert (got == g) == (not early and (dcnet or len(late) <= 1))


def test_a_joint_round_runs_an_old_epoch_and_newcomers_and_one_failing_part_spares_the_other():
    # Participants 0..4: a stable group of an earlier epoch; 5..9: newcomers forming their own group now.
    from reshuffle.protocol.grouped import JointServer

    ups = make_updates(10, d=4, seed=61)
    ident = identities(10, 62)
    ca = CertificateAuthority.verifier(ident.ca.verify_key)
    gh = global_model_hash(b"")
    old = Assignment.given([TWO[0]])
    cache = gr.CheckCache()

    def run(drops):
        stable = GroupedServer(4, {i: ident.roster[i] for i in TWO[0]}, ident.ps_key, ident.ps_cert, ca, gh, 4, 5,
                               stable=old)
        fresh = GroupedServer(4, {i: ident.roster[i] for i in TWO[1]}, ident.ps_key, ident.ps_cert, ca, gh, 4, 5)
        ps = JointServer([stable, fresh])
        # The newcomers accept a list of one group's worth (their own floor, draw=1): the default refuses it.
        parts = {i: GroupedParticipant(i, 4, ups[i], ident.keys[i], ident.roster[i], ca, gh, cache=cache,
                                       membership=Membership.of(old, i) if i in TWO[0] else None,
                                       floors=None if i in TWO[0] else TrustFloors(draw=1)) for i in range(10)}
        InProcessRunner(ps, parts, drops, []).run()
        return ps, parts

    ps, parts = run(None)
    assert len(ps.output.models) == 10 and ps.output.groups[0] == tuple(TWO[0]) and not ps.failed_parts
    assert all(parts[i].membership.members == tuple(TWO[1]) for i in TWO[1])  # the newcomers' new epoch
    ps, _ = run({"upload": [2]})
    assert list(ps.failed_parts) == [0] and len(ps.output.models) == 5
    with pytest.raises(ConfigError, match="disjoint"):
        JointServer([ps.parts[0], ps.parts[0]])
