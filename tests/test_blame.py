"""Blame for rows (docs/protocol.md §9): culprits named with checkable evidence, honest parties never."""

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reshuffle
from reshuffle.adversaries import make_adversary
from reshuffle.adversaries.participants import TamperOneRow
from reshuffle.errors import InvalidSignature, ProtocolError, Refused
from reshuffle.harness.api import build_round
from reshuffle.protocol.blame import KIND_FALSE_OPENING, KIND_NONZERO, verify_evidence
from reshuffle.protocol.schedule import STAGES
from tests.protocol_helpers import expected_models, make_updates, multiset

N = 8


def keys_of(ups, params, seed):
    """The roster's verification keys: all a third party needs (rebuilt from the same seed)."""
    server, _ = build_round(ups, params, seed=seed)
    return {i: c.key for i, c in server._roster.items()}


@pytest.mark.parametrize("seed", [1, 2])
def test_jammer_is_named_and_a_third_party_checks_the_evidence(seed):
    # Prepare: P1 uploads a correctly masked list of random words (v1: 0 of 7 delivered, nobody named).
    ups = make_updates(N, d=12, seed=seed)
    r = reshuffle.shuffle(ups, seed=seed, adversaries=[make_adversary("jam")])
    # Assert: only the jammer is named, with evidence that verifies from the roster keys alone.
    assert set(r.blamed) == {1}
    ev = r.output.evidence[1]
    assert ev.kind == KIND_NONZERO and ev.position in r.output.decoy_positions
    keys = keys_of(ups, r.params, seed)
    assert verify_evidence(ev, keys, r.params).any()
    # Any altered piece of evidence fails: another seed, another row, another signer, a forged signature.
    for bad in (dataclasses.replace(ev, self_seed=ev.self_seed + 1),
                dataclasses.replace(ev, row=bytes(len(ev.row))),
                dataclasses.replace(ev, pid=2),
                dataclasses.replace(ev, upload_signature=bytes(64))):
        with pytest.raises(ProtocolError):
            verify_evidence(bad, keys, r.params)
    # Nothing tampered was delivered.
    assert r.models == []


def test_evidence_against_an_honest_participant_cannot_be_made():
    # The jammer's evidence re-labelled as P2's (whose upload and opening are honest) fails.
    ups = make_updates(N, d=12, seed=3)
    r = reshuffle.shuffle(ups, seed=3, adversaries=[make_adversary("jam")])
    ev = r.output.evidence[1]
    with pytest.raises((InvalidSignature, Refused)):
        verify_evidence(dataclasses.replace(ev, pid=2, upload_header=ev.upload_header[:14] + (2).to_bytes(4, "big")),
                        keys_of(ups, r.params, 3), r.params)


def test_tamper_hitting_a_decoy_row_is_named_and_a_participant_row_is_only_dropped():
    outcomes = {}
    for seed in range(1, 40):
        ups = make_updates(N, d=12, seed=seed)
        b = TamperOneRow()
        r = reshuffle.shuffle(ups, seed=seed, adversaries=[b])
        kind = "decoy" if b.hit in r.output.decoy_positions else "participant"
        assert b.hit not in r.output.valid_positions  # the tampered row is never delivered
        assert set(r.blamed) <= {1}
        if kind == "decoy":
            assert set(r.blamed) == {1} and r.output.evidence[1].position == b.hit
        else:
            # The victim's row fails its tag; every other model (the tamperer's own too) is delivered.
            assert r.output.rejected_rows[b.hit] == "tag"
            victim = next(i for i, v in r.views.items() if v.position == b.hit)
            assert r.online == [i for i in range(N) if i != victim]
            assert multiset(r.models) == expected_models(ups, r.online)
        outcomes.setdefault(kind, seed)
        if len(outcomes) == 2:
            break
    assert set(outcomes) == {"decoy", "participant"}


def test_false_opening_starts_a_dispute_that_names_the_liar():
    # A jammer that also lies about one pairwise key: its partner, shown the signed conflicting
    # opening, reveals K_ij with a DLEQ proof, which names the liar; the partner is never named.
    ups = make_updates(N, d=12, seed=4)
    r = reshuffle.shuffle(ups, seed=4, adversaries=[make_adversary("false-opening")])
    assert set(r.blamed) == {1}
    ev = r.output.evidence[1]
    assert ev.kind == KIND_FALSE_OPENING and ev.partner != 1
    keys = keys_of(ups, r.params, 4)
    assert verify_evidence(ev, keys, r.params) is None  # raises if it does not hold
    with pytest.raises(ProtocolError):
        verify_evidence(dataclasses.replace(ev, proof=bytes(64)), keys, r.params)


@pytest.mark.parametrize("name", ["false-decoy-claim", "forged-dispute"])
def test_deviating_ps_in_the_blame_step_gets_nothing(name):
    ups = make_updates(N, d=12, seed=5)
    b = make_adversary(name)
    r = reshuffle.shuffle(ups, seed=5, adversaries=[b], raise_on_failure=False)
    v = b.holds(r, list(range(N)))
    assert v.holds, v
    assert r.blamed == {}


def test_honest_round_with_dropouts_starts_no_blame():
    ups = make_updates(N, d=12, seed=6)
    r = reshuffle.shuffle(ups, seed=6, dropouts={"upload": [2], "unmask": [3]})
    assert r.blamed == {} and r.output.suspects == []
    assert set(r.output.rejected_rows.values()) <= {"empty"}
    assert multiset(r.models) == expected_models(ups, r.online)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(1, 10_000),
    drops=st.lists(st.tuples(st.integers(0, N - 1), st.sampled_from(STAGES)), max_size=2),
    jammer=st.booleans(),
)
def test_blame_never_names_an_honest_participant(seed, drops, jammer):
    # Random dropouts (an honest participant may vanish in any phase, also mid-blame) and random
    # honest picks (some collide with decoys); with or without a jammer at P7.
    dropouts: dict[str, list[int]] = {}
    for pid, phase in drops:
        if pid != 7:
            dropouts.setdefault(phase, []).append(pid)
    ups = make_updates(N, d=6, seed=seed)
    adv = [make_adversary("jam", pids=(7,))] if jammer else []
    r = reshuffle.shuffle(ups, seed=seed, dropouts=dropouts, adversaries=adv, raise_on_failure=False)
    assert set(r.blamed) <= ({7} if jammer else set())
    if not jammer:
        assert r.output.suspects == []
