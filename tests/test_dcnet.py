"""The DC-net round of a stable group (docs/protocol.md, "The DC-net round"; docs/security/dcnet.md).

Attacks first: a PS with colluders inside one group of 5. In the Shamir-shared round two colluders
and complaints filed in honest members' names publish t shares of every honest secret (3 of 3
honest members linked); in the DC-net round the coalition unmasks a set of honest members' uploads
only when every member outside it colludes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reshuffle
from reshuffle.adversaries import make_adversary
from reshuffle.adversaries.dclinker import links, read_sets
from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.errors import DecodeError
from reshuffle.harness.api import build_round
from reshuffle.harness.runner import InProcessRunner
from reshuffle.protocol import dcnet
from reshuffle.protocol import messages as msg
from reshuffle.protocol.dcnet import DCEvidence, DCParticipant, DCServer, InvalidEvidence, verify_dc_evidence
from reshuffle.protocol.messages import Context, MsgType
from reshuffle.protocol.params import RoundParams
from tests.protocol_helpers import make_updates

G5 = [[0, 1, 2, 3, 4]]


def _dc_round(N=5, groups=G5, seed=1, d=8, interceptors=(), classes=None, **kw):
    """A stable-group round with the real DC-net round, in process: (grouped PS, participants, output, runner,
    models); ``classes`` maps members to a deviating DCParticipant subclass."""
    ups = make_updates(N, d=d, seed=seed)
    ps, parts = build_round(ups, RoundParams.default(N, d), seed=seed, groups=groups, **kw)
    for pid, cls in (classes or {}).items():
        parts[pid].dc_class = cls
    runner = InProcessRunner(ps, parts, interceptors=interceptors)
    out = runner.run()
    return ps, parts, out, runner, ups


def _coalition(parts, colluders):
    return {c: parts[c].dc._y for c in colluders}


# --------------------------------------------------------------------------- attacks first
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_two_colluders_link_every_honest_member_of_a_group_of_5_in_the_shamir_round(seed):
    # The PS files complaints in honest members' names: each honest dealer publishes t − 1 − c = 2 shares of
    # every secret, the two colluders hold two more: t = 4. The Shamir-shared round in a stable group.
    b = make_adversary("announce-c", c=None, colluders=(3, 4))
    r = reshuffle.shuffle(make_updates(5, d=16, seed=seed), seed=seed, groups=G5, adversaries=[b],
                          raise_on_failure=False)
    assert r.failure is None
    assert b.links(r, [0, 1, 2]) == [0, 1, 2]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_two_colluders_link_nobody_in_the_dcnet_round(seed):
    ps, parts, out, _, _ = _dc_round(seed=seed)
    s = ps.servers[0]
    assert isinstance(s, DCServer) and len(out.models) == 5
    coalition = _coalition(parts, (3, 4))
    assert links(s, coalition) == {}
    sets = read_sets(s, coalition)
    # All the coalition reads: the three honest members' rows together, not whose is whose.
    assert list(sets) == [frozenset({0, 1, 2})]
    assert sets[frozenset({0, 1, 2})] == {parts[i].view.row_tags[0] for i in (0, 1, 2)}


@pytest.mark.parametrize("seed", [1, 2])
def test_three_colluders_learn_only_the_two_honest_members_set(seed):
    ps, parts, out, _, _ = _dc_round(seed=seed)
    s = ps.servers[0]
    coalition = _coalition(parts, (2, 3, 4))
    assert links(s, coalition) == {}
    assert read_sets(s, coalition) == {frozenset({0, 1}): {parts[0].view.row_tags[0], parts[1].view.row_tags[0]}}


def test_four_colluders_read_the_last_member_as_in_any_anonymity_set():
    # The control: the linker works; one honest member is hidden among nobody.
    ps, parts, out, _, _ = _dc_round(seed=4)
    got = links(ps.servers[0], _coalition(parts, (1, 2, 3, 4)))
    assert got == {0: parts[0].view.row_tags[0]}


def test_a_ring_key_graph_is_broken_by_the_two_neighbours():
    # A weak variant: members mask only with their ring neighbours; the target's two neighbours collude.
    ps, parts, out, _, _ = _dc_round(seed=5)

    def ring(i, members):
        return [members[(members.index(i) - 1) % len(members)], members[(members.index(i) + 1) % len(members)]]

    # The real round used the complete graph, so a ring attacker reads nothing from it ...
    assert links(ps.servers[0], _coalition(parts, (1, 4)), ring) == {}
    # ... while a ring round is read (the game's weak instance: reshuffle/games/dcnet.py).
    from reshuffle.games.dcnet import ring_round

    srv, tags = ring_round(seed=5)
    assert links(srv, {c: y for c, y in tags["secrets"].items() if c in (1, 4)}, ring) == {0: tags["tags"][0]}


# --------------------------------------------------------------------------- the round
def test_a_stable_round_delivers_every_model_in_3_round_trips_1_after_training():
    ps, parts, out, runner, ups = _dc_round(N=10, groups=[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], seed=7)
    assert runner.trips.total == 3 and runner.trips.after_training == 1
    assert sorted(map(tuple, np.round(out.models, 4))) == sorted(map(tuple, np.round(ups, 4)))
    assert all(isinstance(s, DCServer) for s in ps.servers.values())
    assert len(out.pseudonyms) == 10 and len(set(out.pseudonyms)) == 10


def test_a_collision_adds_one_offline_iteration_and_groups_wait_for_each_other():
    # n = 8 slots for 6 parties: collisions are the rule; every group's reservation ends before the upload.
    ps, parts, out, runner, ups = _dc_round(N=10, groups=[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], seed=3,
                                            overrides={"n": 8, "R_max": 16})
    steps = runner.trips.steps
    assert steps.count("dc-upload") == 1 and steps[-1] == "dc-upload" and runner.trips.after_training == 1
    assert steps.count("dc-reserve") >= 2
    assert len(out.models) == 10


def test_a_member_silent_at_the_upload_fails_its_group_only():
    ups = make_updates(10, d=8, seed=2)
    r = reshuffle.shuffle(ups, seed=2, groups=[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], dropouts={"upload": [3]},
                          raise_on_failure=False)
    assert list(r.failed_groups) == [0] and sorted(r.positions) == [5, 6, 7, 8, 9]
    assert "[3]" in r.failed_groups[0]


def test_a_forked_view_leaves_noise_and_nothing_is_delivered_of_the_fork():
    # A member masked under another view (h): its keys differ from its partners', the sum is noise.
    ps, parts, out, _, _ = _dc_round(seed=8)
    s = ps.servers[0]
    # Re-sum with member 0's upload masked under another h: nothing decodes.
    p = s.params
    v = np.zeros(dcnet.parties(p) * p.row_words, dtype=p.codec.dtype)
    dcnet.mask_in_place(v, s.T, p.upload_m, 0, parts[0].dc._pairs, bytes(32), dcnet.parties(p))
    total = sum(np.frombuffer(u.words, dtype=p.codec.dtype) for i, u in s.uploads.items() if i != 0) + v
    assert not any(np.array_equal(total.reshape(dcnet.parties(p), -1)[r], s._rows[r]) for r in range(p.N))


# --------------------------------------------------------------------------- keys
def test_epoch_keys_are_the_same_in_every_round_of_an_epoch_and_round_keys_differ():
    _, a, _, _, _ = _dc_round(seed=9, T=1)
    _, b, _, _, _ = _dc_round(seed=9, T=2)
    assert a[0].dc._Y == b[0].dc._Y and a[0].dc._pairs == b[0].dc._pairs
    assert a[0].dc._h != b[0].dc._h
    K = a[0].dc._pairs[1]
    assert dcnet.row_keys(K, 1, 5, 0, 1, a[0].dc._h, 1) != dcnet.row_keys(K, 2, 5, 0, 1, a[0].dc._h, 1)
    assert dcnet.row_keys(K, 1, 5, 0, 1, bytes(32), 1) != dcnet.row_keys(K, 1, 4, 0, 1, bytes(32), 1)
    assert dcnet.row_keys(K, 1, 5, 0, 1, bytes(32), 1) == dcnet.row_keys(K, 1, 5, 1, 0, bytes(32), 1)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 7), st.integers(1, 40), st.integers(1, 3), st.binary(min_size=32, max_size=32))
def test_pairwise_masks_cancel_only_in_the_full_sum(g, L, rows, h):
    secrets = [bytes([i + 1]) * 32 for i in range(g)]
    pairs = {i: {j: bytes(a ^ b for a, b in zip(secrets[min(i, j)], secrets[max(i, j)][::-1]))
                 for j in range(g) if j != i} for i in range(g)}
    vs = [np.zeros(L * rows, dtype=np.uint32) for _ in range(g)]
    for i in range(g):
        dcnet.mask_in_place(vs[i], 3, 1, i, pairs[i], h, rows)
    assert not np.any(sum(vs))
    assert all(np.any(sum(vs[:k])) for k in range(1, g))


# --------------------------------------------------------------------------- encodings
def _decoded_messages():
    ps, parts, out, runner, _ = _dc_round(seed=10)
    return ps.servers[0], parts


def test_dc_messages_round_trip_and_reject_trailing_or_truncated_bytes():
    s, parts = _decoded_messages()
    ctx = Context(s.group, s.params)
    seen = [msg.relay_bytes(k) for k in s.keys.values()] + [msg.relay_bytes(u) for u in s.uploads.values()]
    start = s.start()[0][1]
    seen.append(start)
    for data in seen:
        m = msg.decode(data, ctx)
        assert m.header() + m.body() + m._signature == data
        with pytest.raises(DecodeError):
            msg.decode(data + b"\x00", ctx)
        with pytest.raises(DecodeError):
            msg.decode(data[:-70], ctx)
    op = msg.DCOpening(1, 5, 0, bytes(32), ((0, 1, bytes(32)), (0, 2, bytes(32))))
    assert msg.decode(op.encode(), ctx) == op
    bad = msg.DCOpening(1, 5, 0, bytes(32), ((0, 2, bytes(32)), (0, 1, bytes(32))))
    with pytest.raises(DecodeError, match="sorted"):
        msg.decode(bad.encode(), ctx)
    counts = msg.DCCounts(1, 2, 0, (0,) * (s.params.n - 1))
    with pytest.raises(DecodeError, match="slots"):
        msg.decode(counts.encode(), ctx)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=40), st.binary(min_size=32, max_size=32),
       st.lists(st.integers(0, 64), max_size=5, unique=True))
def test_dc_count_and_blame_messages_round_trip(counts, seed, pos):
    c = msg.DCUploadRequest(3, 5, 0, tuple(counts))
    assert msg.decode(c.encode(), Context()) == c
    b = msg.DCBlame(3, 5, 0, seed, tuple(sorted(pos)), (b"ab", b""))
    assert msg.decode(b.encode(), Context()) == b


# --------------------------------------------------------------------------- blame and decoys
class _Jammer(DCParticipant):
    """Writes garbage into every row of its model list (decoy rows included)."""

    def _deviate(self, lw):
        lw = lw.copy()
        lw[:, :4] += np.uint32(12345)
        return lw


class _Liar(_Jammer):
    """Jams, then opens other keys than it masked with."""

    def _opening(self, op):
        return msg.DCOpening(op.T, op.m, op.sender, op.h, tuple((p, j, bytes(32)) for p, j, _ in op.keys))


def _jammed(cls, seed=11):
    ps, parts, out, runner, _ = _dc_round(seed=seed, classes={2: cls})
    return ps, parts, out, runner


def test_a_jammer_is_named_with_evidence_a_third_party_checks():
    ps, parts, out, runner = _jammed(_Jammer)
    s = ps.servers[0]
    assert list(out.blamed) == [2] and runner.trips.steps[-1] == "dc-blame"
    ev = out.evidence[2]
    keys = {i: c.key for i, c in s._roster.items()}
    verify_dc_evidence(ev, keys, s.params, s.T)
    # Honest members opened the decoy rows only, never their own.
    for i in (0, 1, 3, 4):
        assert parts[i].dc.opened == tuple(s.decoy_positions) and parts[i].view.position not in s.decoy_positions
    # Evidence that names an honest member cannot be built from its messages: its plaintext is zero.
    honest = s.openings[0]
    up = s.uploads[0]
    size = len(up.words) // up.rows
    pos = s.decoy_positions[0]
    fake = DCEvidence(0, pos, up.header(), up.h, tuple(up._hashes()), msg.signature_of(up)[1],
                      bytes(memoryview(up.words)[pos * size:(pos + 1) * size]), msg.relay_bytes(honest))
    with pytest.raises(InvalidEvidence, match="zero"):
        verify_dc_evidence(fake, keys, s.params, s.T)
    # A tampered row or another member's opening is refused.
    z = ev.nonzero
    with pytest.raises(InvalidEvidence):
        verify_dc_evidence(DCEvidence(**{**z.__dict__, "row": bytes(len(z.row))}), keys, s.params, s.T)
    with pytest.raises(InvalidEvidence):
        verify_dc_evidence(DCEvidence(**{**z.__dict__, "opening": msg.relay_bytes(honest)}), keys, s.params, s.T)


def test_a_jammer_that_opens_other_keys_is_a_suspect_never_an_honest_member():
    ps, parts, out, runner = _jammed(_Liar, seed=12)
    assert not set(out.blamed) - {2}
    assert 2 in out.blamed or 2 in out.suspects


def test_a_member_refuses_to_open_a_row_that_is_not_a_decoys():
    # The PS asks to open member 0's own row as if it were a decoy's: the audit refuses.
    ps, parts, out, runner = _jammed(_Jammer, seed=13)
    s = ps.servers[0]
    m = parts[1].dc
    own = m.view.position
    blame = msg.DCBlame(s.T, s.params.upload_m, SERVER_ID, s._seed, (own,),
                        tuple(msg.relay_bytes(v) for r in sorted(s.vectors) for v in s.vectors[r].values()))
    m.state = dcnet.DCState.UPLOADED
    reply = m.handle(blame.encode(s._sk))
    assert msg.peek_type(reply[0]) is MsgType.REFUSAL and "decoys' rows" in str(m.view.errors[-1])


def test_a_replayed_dc_start_gets_fresh_nonces_so_no_round_key_repeats():
    # The PS replays one round's DC_START to a member (same T, same bytes): with OS randomness the member's
    # nonce, hence h and every round key, is new; the epoch key stays.
    ps, parts, out, _, _ = _dc_round(seed=14)
    start = ps.servers[0].start()[0][1]
    gp = parts[0]
    keys = []
    for _ in range(2):
        m = DCParticipant(0, gp.T, gp._sk, gp._cert, gp._ca, gp._gh, None, gp._membership.members, lambda: None)
        keys.append(msg.decode(m.handle(start)[0], m.ctx))
    assert keys[0].dh_key == keys[1].dh_key and keys[0].nonce != keys[1].nonce


def test_a_joint_round_holds_the_dcnet_upload_until_the_newcomers_reserved():
    # Members 0..4: a stable group (DC-net round); 5..9: newcomers forming their group (Shamir-shared round).
    # The stable group's upload request waits for the newcomers' reservation: nothing offline after training.
    from reshuffle.crypto.signatures import CertificateAuthority
    from reshuffle.harness.api import identities
    from reshuffle.protocol import groups as gr
    from reshuffle.protocol.grouped import GroupedParticipant, GroupedServer, JointServer
    from reshuffle.protocol.groups import Assignment, Membership
    from reshuffle.protocol.params import TrustFloors
    from reshuffle.protocol.participant import global_model_hash

    ups = make_updates(10, d=4, seed=61)
    ident = identities(10, 62)
    ca = CertificateAuthority.verifier(ident.ca.verify_key)
    gh = global_model_hash(b"")
    old = Assignment.given([[0, 1, 2, 3, 4]])
    stable = GroupedServer(4, {i: ident.roster[i] for i in range(5)}, ident.ps_key, ident.ps_cert, ca, gh, 4, 5,
                           stable=old, dcnet=True)
    fresh = GroupedServer(4, {i: ident.roster[i] for i in range(5, 10)}, ident.ps_key, ident.ps_cert, ca, gh, 4, 5)
    ps = JointServer([stable, fresh])
    cache = gr.CheckCache()
    # The newcomers accept a list of one group's worth (their own floor, draw=1): the default refuses it.
    parts = {i: GroupedParticipant(i, 4, ups[i], ident.keys[i], ident.roster[i], ca, gh, cache=cache,
                                   membership=Membership.of(old, i) if i < 5 else None,
                                   floors=None if i < 5 else TrustFloors(draw=1)) for i in range(10)}
    runner = InProcessRunner(ps, parts)
    out = runner.run()
    assert len(out.models) == 10
    first_online = runner.trips.model_at
    assert all(not off for off in runner.trips.offline[first_online:])
    assert runner.trips.after_training == 3  # the Shamir-shared round's upload, consent, reveal
