"""Blame in the DC-net round beyond decoy rows (docs/protocol.md, "Blame and decoys" of the DC-net round).

Attacks first, each with its control (the same attack where the check is taken out):

- a member that jams the reservation (two picks, garbage, no pick) is named by its own signed vector and its
  opening of that iteration alone; without the open step the group fails and nobody is named;
- a member that masks with another key than K_ij for one partner and opens that key (its own plaintext is zero)
  is named by a DLEQ dispute; without it the honest partner is as suspect as the liar;
- a member that signs the h_M every member signed but masks over another transcript is named the same way;
- a PS that forges evidence against an honest member, or asks it for K_ij without a disagreement, is refused.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.adversaries import dcteam
from reshuffle.crypto import voprf
from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.errors import DecodeError, Refused
from reshuffle.protocol import dcnet
from reshuffle.protocol import messages as msg
from reshuffle.protocol.dcnet import (
    KIND_BAD_VECTOR,
    KIND_FALSE_OPENING,
    DCRoundEvidence,
    InvalidEvidence,
    verify_round_evidence,
)
from reshuffle.protocol.messages import MsgType

HONEST = (0, 1, 3, 4)


def _round(cls, seed=3, **attrs):
    cls = type(cls.__name__, (cls,), attrs) if attrs else cls
    ps, parts, out, _ = dcteam._round(seed, {2: cls})
    s = ps.servers[0]
    return ps, parts, out, s, {i: c.key for i, c in s._roster.items()}


def _refuse(self, m):
    raise Refused("this member does not take part in the check")


# --------------------------------------------------------------------------- the reservation jammer
@pytest.mark.parametrize("mode", ["double", "garbage", "none"])
def test_a_reservation_jammer_is_named_by_its_own_vector_and_opening(mode):
    ps, parts, out, s, keys = _round(dcteam.VectorJammer, mode=mode)
    assert set(out.blamed) == {2} and 0 in ps.failed and "named with evidence: [2]" in ps.failed[0]
    ev = out.evidence[2]
    assert ev.kind == KIND_BAD_VECTOR and verify_round_evidence(ev, keys)[1] == s.T
    # The other group delivers all its models; nobody of group 0 uploaded (each opened iteration 1 and ended).
    assert len(out.models) == 5 and not any(parts[i].dc.uploaded for i in HONEST)
    # Only iteration 1's keys were opened, of row 0: no upload key, no real row's key.
    for i in HONEST:
        opens = parts[i].dc._my_opens
        assert sorted(opens) == [1] and all({pos for pos, _ in mine} == {0} for _, mine in opens.values())


def test_a_member_that_picks_again_after_its_pick_settled_is_named_by_its_earlier_vectors():
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner
    from reshuffle.protocol.params import RoundParams

    again = type("Again", (dcteam.VectorJammer,), {"mode": "again"})
    rng = np.random.default_rng(2)  # model values only
    ups = [rng.normal(size=16).astype(np.float32) for _ in range(10)]
    # n = 12 slots: a collision (so a second iteration) in most rounds; member 2 settles in iteration 1.
    ps, parts = build_round(ups, RoundParams.default(10, 16), seed=2, groups=dcteam.TWO, overrides={"n": 12})
    parts[2].dc_class = again
    out = InProcessRunner(ps, parts).run()
    s = ps.servers[0]
    keys = {i: c.key for i, c in s._roster.items()}
    ev = out.evidence[2]
    assert set(out.blamed) == {2} and s.m == 2 and len(ev.earlier) == 1
    verify_round_evidence(DCRoundEvidence.decode(ev.encode()), keys)
    # Its iteration-2 vector alone is one pick at a free slot: without its vector of iteration 1 (where it
    # settled) nothing shows.
    with pytest.raises(InvalidEvidence):
        verify_round_evidence(dataclasses.replace(ev, earlier=()), keys)
    for i in HONEST:
        assert sorted(parts[i].dc._my_opens) == [1, 2] and not parts[i].dc.uploaded


def test_control_without_the_open_step_a_reservation_jammer_is_never_named(monkeypatch):
    monkeypatch.setattr(dcnet.DCParticipant, "_on_open", _refuse)
    ps, parts, out, s, keys = _round(dcteam.VectorJammer)
    assert 0 in ps.failed and not out.blamed


def test_a_jammed_iteration_names_no_honest_member_and_its_evidence_survives_the_wire():
    ps, parts, out, s, keys = _round(dcteam.VectorJammer, seed=5, mode="garbage")
    ev = DCRoundEvidence.decode(out.evidence[2].encode())
    assert ev == out.evidence[2] and verify_round_evidence(ev, keys)
    # The honest members' own vectors and openings name nobody.
    for i in HONEST:
        forged = DCRoundEvidence(KIND_BAD_VECTOR, i, ev.transcript, msg.relay_bytes(s._opened[i][2]),
                                 vector=msg.relay_bytes(s.vectors[1][i]))
        with pytest.raises(InvalidEvidence, match="one pick at a free slot"):
            verify_round_evidence(forged, keys)
    with pytest.raises(DecodeError):
        DCRoundEvidence.decode(ev.encode()[:-1])


# --------------------------------------------------------------------------- a member lying in a decoy opening
def test_a_member_lying_in_a_decoy_opening_is_named_by_a_dleq_dispute():
    ps, parts, out, s, keys = _round(dcteam.PairLiar)
    assert set(out.blamed) == {2} and not set(out.suspects) & set(HONEST)
    ev = out.evidence[2]
    assert ev.kind == KIND_FALSE_OPENING and ev.partner == 0
    verify_round_evidence(ev, keys)
    # Its own plaintext at every decoy row is zero: no nonzero evidence could name it.
    op = s._opened[2][2]
    _, _, _, _, rows = s._kept[2]
    for pos in s.decoy_positions:
        assert not dcnet.plaintext_at(rows[pos], 2, dcnet._opened_row(op, pos), s.params.codec.dtype).any()
    # Only the liar's partner revealed K_ij, and only that pair's: the other honest members revealed nothing.
    assert parts[0].dc._answered == {2} and not any(parts[i].dc._answered for i in (1, 3, 4))


def test_control_without_the_dispute_the_honest_partner_is_as_suspect_as_the_liar(monkeypatch):
    monkeypatch.setattr(dcnet.DCParticipant, "_on_dispute", _refuse)
    ps, parts, out, s, keys = _round(dcteam.PairLiar)
    assert 2 not in out.blamed and {0, 2} <= set(out.suspects)


# --------------------------------------------------------------------------- a wrong-transcript uploader
def test_a_wrong_transcript_uploader_is_named_whichever_keys_it_opens():
    for consistent in (True, False):
        ps, parts, out, s, keys = _round(dcteam.WrongTranscript, seed=4, consistent=consistent)
        assert set(out.blamed) == {2} and not set(out.suspects) & set(HONEST)
        ev = out.evidence[2]
        assert ev.kind == (KIND_FALSE_OPENING if consistent else dcnet.KIND_NONZERO)
        verify_round_evidence(ev, keys)


def test_control_without_the_dispute_a_wrong_transcript_uploader_makes_every_partner_a_suspect(monkeypatch):
    monkeypatch.setattr(dcnet.DCParticipant, "_on_dispute", _refuse)
    ps, parts, out, s, keys = _round(dcteam.WrongTranscript, seed=4)
    assert not out.blamed and set(out.suspects) == {0, 1, 2, 3, 4}


# --------------------------------------------------------------------------- a PS forging blame
def test_a_ps_cannot_forge_a_false_opening_against_an_honest_member(monkeypatch):
    ps, parts, out, s, keys = _round(dcteam.PairLiar)
    ev = out.evidence[2]
    honest = msg.relay_bytes(s._opened[0][2])
    # Member 0's own opening with the proved K_ij: it matches, nothing to name.
    framed = dataclasses.replace(ev, culprit=0, opening=honest, partner=2)
    with pytest.raises(InvalidEvidence, match="matches"):
        verify_round_evidence(framed, keys)
    # Another K_ij than DH(Y_0, Y_2): no DLEQ proof holds for it ...
    fake_K = s.group.base_mul(12345).to_bytes()
    forged = dataclasses.replace(framed, secret=fake_K)
    with pytest.raises(InvalidEvidence, match="proof"):
        verify_round_evidence(forged, keys)
    # ... (control: without the proof check the forgery names the honest member).
    monkeypatch.setattr(dcnet, "check_pair_key", lambda *a: None)
    assert verify_round_evidence(forged, keys)
    monkeypatch.undo()
    # Its opening passed off as the culprit's, another round's counts, or a key no member signed: refused.
    with pytest.raises(InvalidEvidence):
        verify_round_evidence(dataclasses.replace(ev, opening=honest), keys)
    tr = ev.transcript
    counts = list(tr.history[-1])
    counts[0] += 1
    with pytest.raises(InvalidEvidence, match="h_m"):
        verify_round_evidence(dataclasses.replace(ev, transcript=dataclasses.replace(
            tr, history=tr.history[:-1] + (tuple(counts),))), keys)
    with pytest.raises(InvalidEvidence):
        verify_round_evidence(dataclasses.replace(ev, transcript=dataclasses.replace(tr, keys=tr.keys[1:])), keys)


def _dispute(s, to: int, partner_opening: bytes, partner: int) -> bytes:
    return msg.Dispute(s.T, s.params.upload_m, SERVER_ID, partner, partner_opening).encode(s._sk)


def test_a_member_reveals_its_pair_key_only_against_a_signed_disagreeing_opening():
    ps, parts, out, s, keys = _round(dcteam.PairLiar, seed=6)
    m3 = parts[3].dc
    # Fishing: member 1's honest opening agrees with member 3's: member 3 refuses to reveal K_13.
    reply = m3.handle(_dispute(s, 3, msg.relay_bytes(s._opened[1][2]), 1))
    assert msg.peek_type(reply[0]) is MsgType.REFUSAL and "agrees" in str(m3.view.errors[-1])
    # An opening member 1 never signed (member 2's, relabelled): refused as well.
    m4 = parts[4].dc
    op2 = s._opened[2][2]
    relabelled = msg.DCOpening(op2.T, op2.m, 1, op2.h, op2.keys).encode(parts[2]._sk)
    reply = m4.handle(_dispute(s, 4, relabelled, 1))
    assert msg.peek_type(reply[0]) is MsgType.REFUSAL and not m4._answered
    # Control: the liar's own signed, disagreeing opening gets member 0's K_02 (which the liar holds anyway).
    m0 = parts[0].dc
    m0._answered.clear()
    a = msg.decode(m0.handle(_dispute(s, 0, msg.relay_bytes(op2), 2))[0], m0.ctx)
    assert a.TYPE is MsgType.DISPUTE_ANSWER and a.secret.to_bytes() == m0._pairs[2]


# --------------------------------------------------------------------------- the rule an opened vector is held to
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=6, max_size=6), st.sets(st.integers(0, 5), max_size=3), st.booleans())
def test_bad_pick_accepts_exactly_one_pick_at_a_free_slot_before_settling_and_zeros_after(v, taken, settled):
    v = np.array(v, dtype=np.uint32)
    ones = np.flatnonzero(v == 1)
    honest = (v <= 1).all() and ((not settled and ones.size == 1 and int(ones[0]) not in taken)
                                 or (settled and ones.size == 0))
    assert (dcnet.bad_pick(v, taken, settled) is None) == bool(honest)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=4), st.data())
def test_an_honest_members_picks_never_count_as_bad(picks, data):
    # An honest member picks a free slot until its pick shows count 1, then sends zeros.
    n, taken, settled, plains, history = 6, set(), False, [], []
    for pick in picks:
        v = np.zeros(n, dtype=np.uint32)
        if not settled:
            free = [s for s in range(n) if s not in taken]
            if not free:
                break
            v[free[pick % len(free)]] = 1
        plains.append(v)
        counts = [0] * n  # this member's share of the counts (the others' picks play no part in its rule)
        if not settled:
            counts[int(np.flatnonzero(v)[0])] = data.draw(st.integers(1, 3))
            settled = counts[int(np.flatnonzero(v)[0])] == 1
        taken |= {s for s, c in enumerate(counts) if c == 1}
        history.append(tuple(counts))
    assert dcnet.first_bad_pick(plains, history[:-1]) is None


# --------------------------------------------------------------------------- dropping a member named with evidence
G6 = [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]


def _two_rounds(groups, excluded_of=lambda ev: {2: ev}, seed=5):
    """Round 1 with member 2 jamming the reservation; round 2 of the same epoch with it dropped."""
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner
    from reshuffle.protocol.params import RoundParams

    N = sum(len(g) for g in groups)
    rng = np.random.default_rng(seed)  # model values only
    ups = [rng.normal(size=16).astype(np.float32) for _ in range(N)]
    ps, parts = build_round(ups, RoundParams.default(N, 16), seed=seed, groups=groups, T=1)
    parts[2].dc_class = dcteam.VectorJammer
    out = InProcessRunner(ps, parts).run()
    ps2, parts2 = build_round(ups, RoundParams.default(N, 16), seed=seed, groups=groups, T=2,
                              excluded=excluded_of(out.evidence[2]))
    out2 = InProcessRunner(ps2, parts2).run()
    return (ps, parts, out), (ps2, parts2, out2)


def test_a_member_named_with_evidence_is_dropped_and_the_rest_keep_their_pair_keys():
    (ps, parts, out), (ps2, parts2, out2) = _two_rounds(G6)
    assert 0 in ps.failed and set(out.blamed) == {2}
    # Round 2: the five others checked the evidence, run as a group of 5 (at every member's floor of 5) and
    # deliver all their models; the other group too.
    assert not ps2.failed and len(out2.models) == 10
    for i in (0, 1, 3, 4, 5):
        assert parts2[i].membership.members == (0, 1, 3, 4, 5) and parts2[i].dropped == [2]
    assert ps2.servers[0].params.N == 5 and 2 not in ps2.group_of
    # Same epoch keys, so every pair key among the others is the one of round 1: nothing new is derived
    # from, or opened of, round 1's keys.
    for i in (0, 1, 3, 4, 5):
        assert parts2[i].dc._y == parts[i].dc._y
        assert parts2[i].dc._pairs == {j: k for j, k in parts[i].dc._pairs.items() if j != 2}


def test_below_every_members_floor_the_group_dissolves():
    (ps, parts, out), (ps2, parts2, out2) = _two_rounds(dcteam.TWO)
    # A group of 5 at a floor of 5 cannot lose a member: each member refuses, keeps no membership (it joins
    # the next new assignment), and the group delivers nothing; the other group is untouched.
    assert 0 in ps2.failed and len(out2.models) == 5
    for i in (0, 1, 3, 4):
        assert parts2[i].membership is None
        assert isinstance(parts2[i].inner.view.errors[-1], dcnet.GroupDissolved)
    assert all(parts2[i].membership is not None for i in range(5, 10))


def test_a_forged_exclusion_of_an_honest_member_is_refused(monkeypatch):
    def framed(ev):  # member 2's evidence passed off as member 0's
        return {0: dataclasses.replace(ev, culprit=0)}

    (ps, parts, out), (ps2, parts2, out2) = _two_rounds(G6, framed)
    assert 0 in ps2.failed
    for i in (1, 2, 3, 4, 5):
        assert parts2[i].membership.members == tuple(G6[0]) and not parts2[i].dropped
    # Control: members that take the PS's word drop the honest member 0.
    monkeypatch.setattr(dcnet, "verify_round_evidence", lambda ev, keys: None)
    (ps, parts, out), (ps2, parts2, out2) = _two_rounds(G6, framed)
    assert parts2[1].dropped == [0] and parts2[1].membership.members == (1, 2, 3, 4, 5)


def test_evidence_of_another_group_cannot_drop_a_member():
    (ps, parts, out), _ = _two_rounds(G6)
    ev = out.evidence[2]
    gp = parts[6]
    m = msg.decode(msg.DCExclude(2, 0, SERVER_ID, 2, ev.encode()).encode(ps._sk), msg.Context())
    mem = gp.membership
    with pytest.raises(Refused, match="another group"):
        dcnet.check_exclusion(m, mem.members, (mem.index, mem.count, mem.digest), gp._ca, 5)
    # The same announcement to the culprit's own group is taken.
    mem0 = parts[0].membership
    assert dcnet.check_exclusion(m, mem0.members, (mem0.index, mem0.count, mem0.digest), gp._ca, 5) == (0, 1, 3, 4, 5)


# --------------------------------------------------------------------------- the game
def test_the_blame_game_forger_frames_nobody_and_wins_against_a_checker_that_skips_the_transcript():
    from reshuffle.games.dcnet import dc_blame_game, unbound_checker

    assert dc_blame_game(2).wins == 0
    assert dc_blame_game(1, unbound_checker).wins == 1


def test_the_drop_game_reads_nobody_alone_unless_members_drop_on_the_ps_word():
    from reshuffle.adversaries.dclinker import readable_sums
    from reshuffle.games.dcnet import dc_drop_game, drop_round

    # The smaller group: 3 honest members (targets 0, 2 and member 1) against the PS, K_05 and 3 colluders:
    # the coalition reads their sum and nothing finer.
    srv, coalition = drop_round(0)
    assert srv.params.N == 5 and set(readable_sums(srv, coalition)) == {frozenset({0, 1, 2})}
    # Members that drop whomever the PS names leave target 0 alone with the colluders.
    srv, coalition = drop_round(0, weak=True)
    assert srv.params.N == 3 and frozenset({0}) in readable_sums(srv, coalition)
    assert dc_drop_game(2, weak=True).wins == 2


def test_a_liar_that_answers_its_dispute_with_a_made_up_pair_key_is_refused_and_still_named():
    class MadeUp(dcteam.PairLiar):
        def _on_dispute(self, m):
            g = self.params.group_obj()
            K = g.base_mul(777)
            proof = voprf.prove_dleq(
                self._y, g.generator(), self._Y, [self._Y_of[m.partner]], [K], None,
                dcnet.dispute_context(self.T, self.pid, m.partner))
            self._answered.add(m.partner)
            return [msg.DisputeAnswer(self.T, m.m, self.pid, m.partner, K, proof.encode(g))]

    ps, parts, out, s, keys = _round(MadeUp, seed=7)
    assert set(out.blamed) == {2} and out.evidence[2].kind == KIND_FALSE_OPENING
    verify_round_evidence(out.evidence[2], keys)
    assert any(e.sender == 2 and isinstance(e.error, InvalidEvidence) for e in s.errors)


def test_a_member_that_uploaded_never_opens_its_reservation_keys():
    # Its picks fix its slot, hence its row: once it uploaded, an OPEN_REQUEST would link it to its model.
    ps, parts, out, s, keys = _round(dcnet.DCParticipant, seed=8)
    assert len(out.models) == 10
    m0 = parts[0].dc
    assert m0.state is dcnet.DCState.UPLOADED
    reply = m0.handle(msg.OpenRequest(s.T, 1, SERVER_ID, "asked after the upload").encode(s._sk))
    assert msg.peek_type(reply[0]) is MsgType.REFUSAL and not m0._my_opens
