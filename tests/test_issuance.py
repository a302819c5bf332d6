"""Issuance that cannot silence a group: a pseudonym counts as issued once its holder holds it.

The lockout: one member of a stable group sends no OT request in its group's first round of the
epoch. Its group delivers nothing that round (all or none), and its other members got their
pseudonym evaluations with no certificate after them. Recorded at the OT answer, they would be
refused a second issuance in every later round of the epoch: a group silenced by one silence.
"""

from __future__ import annotations

import numpy as np
import pytest

from reshuffle.harness.api import shuffle
from reshuffle.protocol import pseudonym
from reshuffle.protocol.pseudonym import EpochIssuer
from reshuffle.protocol.server import Server

GROUPS = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
IDS = [200 + i for i in range(10)]


def _models(T):
    return [np.full(4, 10 * T + i, np.float32) for i in range(10)]


class _EarlyRecorder:
    """A PS behaviour that records an issuance when its evaluation leaves (at the OT answer)."""

    role = "ps"
    colluders = ()

    def make(self, *a, **kw):
        s = Server(*a, **kw)
        evaluate = s.nyms.evaluate

        def at_the_answer(identity, blinded, rng=None):
            out = evaluate(identity, blinded, rng)
            s.nyms.confirm([identity])
            return out
        s.nyms.evaluate = at_the_answer
        return s


def _epoch(rounds: int = 6, ps=(), keep=lambda r, i, nym: True):
    """Rounds 1..rounds of one epoch in two stable groups; member 0 sends no OT request in round 1.
    Per round, the members whose model was delivered. ``keep`` says which records the driver keeps."""
    iss = EpochIssuer("ristretto255", 1)
    held: dict = {}
    delivered = []
    for T in range(1, rounds + 1):
        r = shuffle(_models(T), T=T, seed=T, groups=GROUPS, epoch_key=iss, identities=IDS, pseudonyms=held,
                    dropouts={"ot": [0]} if T == 1 else None, raise_on_failure=False, adversaries=list(ps))
        held.update({i: n for i, n in r.held.items() if n is not None and keep(r, i, n)})
        delivered.append(sorted(r.positions))
    return delivered, iss


def test_one_silent_member_in_the_epochs_first_round_silences_nobody_later():
    delivered, iss = _epoch()
    # Round 1: the silent member's group delivers nothing (all or none), the other group everything.
    assert delivered[0] == GROUPS[1]
    # Rounds 2-6: every member of both groups, each with the pseudonym it kept (0 silenced).
    assert all(d == list(range(10)) for d in delivered[1:])
    assert iss.issued == set(IDS) and set(iss.requests) == set(IDS)


def test_a_ps_recording_at_the_answer_silences_nobody_either():
    # Issuance is idempotent: when the PS records makes no difference, a member asks again with its kept B.
    delivered, _ = _epoch(3, ps=[_EarlyRecorder()])
    assert delivered[0] == GROUPS[1]
    assert all(d == list(range(10)) for d in delivered[1:])


def test_the_control_members_that_do_not_keep_their_request_are_silenced_by_the_first_b_the_ps_recorded():
    # Without the write-ahead record (a driver that keeps a pseudonym only once its round delivered), the four
    # honest members of the failed group ask with fresh elements, which the PS refuses: the lockout.
    delivered, _ = _epoch(3, keep=lambda r, i, nym: i in r.positions)
    assert delivered[0] == GROUPS[1]
    assert all(d == GROUPS[1] for d in delivered[1:])  # 4 honest members silenced for the epoch


def test_the_first_blinded_element_is_recorded_at_the_evaluation_and_every_member_keeps_its_record():
    # The Shamir-shared round: the PS records each identity's B when its evaluation leaves (the OT answer), and
    # notes the holders at their certificate. The failed group's members 1-4 got and keep their pseudonym;
    # member 0, silent before its OT request, keeps its pending request and asks with the same B next round.
    iss = EpochIssuer("ristretto255", 1)
    r = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, dropouts={"ot": [0]},
                raise_on_failure=False, dcnet=False)
    assert set(iss.requests) == set(IDS[1:]) and iss.issued == {IDS[i] for i in GROUPS[1]}
    assert r.held[0].pending and not any(r.held[i].pending for i in range(1, 10))


def test_a_dcnet_issuance_is_recorded_at_the_evaluation_and_noted_at_the_first_count_vector():
    # The DC-net round: member 0 sent its DC_KEY (its B is recorded with the evaluation) but never read DC_KEYS;
    # it keeps its pending request. The others hold theirs though their group failed.
    iss = EpochIssuer("ristretto255", 1)
    r = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, dropouts={"ot": [0]},
                raise_on_failure=False, dcnet=True)
    assert sorted(r.positions) == GROUPS[1]
    assert set(iss.requests) == set(IDS) and iss.issued == set(IDS[1:])
    assert r.held[0].pending and not any(r.held[i].pending for i in range(1, 10))


@pytest.mark.parametrize("dcnet", [True, False])
@pytest.mark.parametrize("stage", ["setup", "ot", "reserve", "upload"])
def test_every_recorded_request_is_kept_whichever_stage_a_member_drops_at(stage, dcnet):
    # The lockout's invariant: every B the PS recorded is the one its member keeps (it asks with it again).
    iss = EpochIssuer("ristretto255", 1)
    r = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, dropouts={stage: [0]},
                raise_on_failure=False, dcnet=dcnet)
    kept = {IDS[i]: n.blinded for i, n in r.held.items() if n is not None}
    assert all(kept.get(who) == B for who, B in iss.requests.items())
    assert {IDS[i] for i in GROUPS[1]} <= iss.issued


def test_a_member_that_kept_its_pseudonym_never_asks_again():
    iss = EpochIssuer("ristretto255", 1)
    r1 = shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, raise_on_failure=False)
    r2 = shuffle(_models(2), T=2, seed=2, groups=GROUPS, epoch_key=iss, identities=IDS, pseudonyms=r1.held,
                 raise_on_failure=False)
    assert not any(isinstance(e.error, pseudonym.AlreadyIssued) for e in r2.errors)
    assert sorted(r2.pseudonyms) == sorted(r1.pseudonyms)


# --------------------------------------------------------------------------- the simulator's real channel
def _dropout_rounds(seed: int, rounds: int = 5, clients: int = 10):
    """The real channel over ``rounds`` rounds of one epoch in two stable sets of 5, with 10 % of the
    clients dropping out at a random stage each round (as the simulator draws them). Per round: the
    clients whose set had a member drop before unmask, and the clients delivered."""
    from reshuffle.protocol.schedule import STAGES
    from reshuffle.run.delivery import UNMASK, RealShuffle, Uploads
    from reshuffle.run.pseudonyms import EpochBook

    sets = (tuple(range(5)), tuple(range(5, 10)))
    channel = RealShuffle(epochs=EpochBook())
    rng = np.random.default_rng(seed)
    out = []
    for T in range(1, rounds + 1):
        who = rng.choice(clients, size=clients // 10, replace=False)
        drops: dict = {}
        for i in who.tolist():
            drops.setdefault(STAGES[int(rng.integers(len(STAGES)))], []).append(int(i))
        models = {i: np.full(6, T + i / 10, np.float32) for i in range(clients)}
        d = channel.deliver(Uploads(T, np.zeros(6, np.float32), models, drops, {}, frozenset(), (), sets))
        hit = {i for s in sets for i in s
               if any(j in s for ph, ids in drops.items() if ph != UNMASK for j in ids)}
        out.append((hit, set(d.senders)))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_real_channel_at_10_percent_dropouts_loses_a_set_only_in_the_round_its_member_dropped(seed):
    for T, (hit, delivered) in enumerate(_dropout_rounds(seed), start=1):
        assert delivered == set(range(10)) - hit, f"round {T}: delivered {sorted(delivered)}, sets hit {sorted(hit)}"


def test_rule_aware_attackers_replay_the_rule_under_the_pseudonyms_the_deployed_rule_reads():
    # With the real channel, the deployed history rule reads the pseudonyms issued by the protocol; the
    # attackers' replay of it must read the same ones, not the ideal channel's.
    from reshuffle.run.config import SimConfig
    from reshuffle.run.delivery import PSEUDONYM
    from reshuffle.sim import Simulation

    sim = Simulation(SimConfig(dataset="digits", model="logreg", batch_size=16, seed=3, shuffle="real", rounds=2,
                               clients=10, set_size=5, rule="foolsgold"))
    from reshuffle.run.delivery import Uploads

    sets = sim.sets.sets
    models = {i: np.full(sim.W_g.size, i / 10, np.float32) for i in range(10)}
    ideal = {i: sim.attackers.names(i) for i in range(10)}
    delivery = sim.rounds.receive(sim.channel.deliver(Uploads(1, sim.W_g, models, {}, {}, frozenset(), (), sets)))
    deployed = dict(zip((int(i) for i in delivery.senders), delivery.meta[PSEUDONYM]))
    assert sorted(deployed) == list(range(10))
    assert all(sim.attackers.names(i) == name != ideal[i] for i, name in deployed.items())


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_simulator_at_10_percent_dropouts_loses_a_set_only_in_the_round_its_member_dropped(seed):
    # `reshuffle simulate --shuffle real --set-size 5 --dropout 0.1`, 10 clients: each round one client drops at a
    # random stage; before, seed 1 locked a set out for rounds 2-6. Now a set is lost exactly in the rounds one of
    # its members dropped before unmask (the DC-net round delivers a member that drops after its upload).
    from reshuffle.run.config import SimConfig
    from reshuffle.sim import Simulation

    sim = Simulation(SimConfig(dataset="digits", model="logreg", clients=10, rounds=4, shuffle="real", dropout=0.1,
                               set_size=5, seed=seed))
    recs = sim.run()
    sets = [set(s) for s in sim.sets.sets]
    dropped_any = 0
    for r in recs:
        gone = {i for i, why in r.lost.items() if why.startswith("dropout at") and not why.endswith("unmask")}
        dropped_any += len(gone)
        hit = {i for s in sets if s & gone for i in s}
        assert set(r.lost) == hit, f"round {r.round}: lost {sorted(r.lost)}, sets hit {sorted(hit)}"
        assert r.models_received == 10 - len(hit)
    assert dropped_any > 0  # the dropouts happened (a run without any would pass vacuously)


# --------------------------------------------------------------------------- attacks on issuance
# A member that goes silent after its evaluation, and a PS that issues a node a second pseudonym.
import dataclasses  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from reshuffle.crypto.group import get_group  # noqa: E402
from reshuffle.crypto.signatures import CertificateAuthority  # noqa: E402
from reshuffle.errors import InvalidSignature, Refused  # noqa: E402
from reshuffle.harness.api import identities  # noqa: E402
from reshuffle.protocol.participant import Participant  # noqa: E402


class _OldRule(EpochIssuer):
    """The issuer as it was: one evaluation per identity that holds its pseudonym (recorded at the member's
    certificate or first count vector), and no record of the blinded element evaluated."""

    def check(self, identity, blinded):
        if identity in self.issued:
            raise pseudonym.AlreadyIssued(f"participant {identity} already holds a pseudonym")

    def evaluate(self, identity, blinded, rng=None):
        self.check(identity, blinded)
        out = super().evaluate(identity, blinded, rng)
        self.requests.pop(identity)
        return out


class _IssuesAgain(EpochIssuer):
    """A PS that evaluates whatever an identity sends, so as to issue a node a second pseudonym and link the two."""

    def check(self, identity, blinded):
        pass

    def evaluate(self, identity, blinded, rng=None):
        self.requests.pop(identity, None)
        return super().evaluate(identity, blinded, rng)


class _SilentOnceIssued(Participant):
    """A member that goes silent as soon as it holds its pseudonym (before any certificate reaches it)."""

    def handle(self, data):
        if self.state.nym is not None and not self.state.nym.pending and not self.state.nym_held:
            return []
        return super().handle(data)


class _Member0:
    role, pids = "participant", (0,)

    def make(self, *a, **kw):
        return _SilentOnceIssued(*a, **kw)


def _vectors_of_0_lost(env):
    """Member 0 unblinds its pseudonym from DC_KEYS, and sends nothing after (its count vectors never arrive)."""
    from reshuffle.protocol.messages import MsgType, peek_type

    return [] if env.sender == 0 and peek_type(env.data) is MsgType.MASKED_INPUT else [env]


def _round1_silent(iss, dcnet):
    # The DC-net round: silent at its first count vector; the Shamir-shared round: silent after its OT answer.
    how = {"interceptors": [_vectors_of_0_lost]} if dcnet else {"adversaries": [_Member0()]}
    return shuffle(_models(1), T=1, seed=1, groups=GROUPS, epoch_key=iss, identities=IDS, raise_on_failure=False,
                   dcnet=dcnet, **how)


def _silent_after_its_evaluation(iss, dcnet):
    """Round 1: member 0 gets its evaluation, then goes silent (its group delivers nothing, so under the old rule
    nothing is recorded for it). Round 2: it drops its record and asks with a fresh element."""
    r1 = _round1_silent(iss, dcnet)
    assert sorted(r1.positions) == GROUPS[1] and not r1.held[0].pending  # it holds a pseudonym
    held = {i: n for i, n in r1.held.items() if i != 0}
    r2 = shuffle(_models(2), T=2, seed=2, groups=GROUPS, epoch_key=iss, identities=IDS, pseudonyms=held,
                 raise_on_failure=False, dcnet=dcnet)
    return r1, r2


@pytest.mark.parametrize("dcnet", [True, False])
def test_a_member_silent_after_its_evaluation_gets_no_second_pseudonym(dcnet):
    iss = EpochIssuer("ristretto255", 1)
    r1, r2 = _silent_after_its_evaluation(iss, dcnet)
    # The PS refuses the fresh element with the specific error; the member never unblinds a second pseudonym.
    assert any(isinstance(e.error, pseudonym.OtherRequest) and e.sender == 0 for e in r2.errors)
    assert r2.held[0].pending and 0 not in r2.positions
    assert iss.requests[IDS[0]] == r1.held[0].blinded


@pytest.mark.parametrize("dcnet", [True, False])
def test_the_control_under_the_old_rule_the_silent_member_collects_a_second_pseudonym(dcnet):
    iss = _OldRule("ristretto255", 1)
    r1, r2 = _silent_after_its_evaluation(iss, dcnet)
    first, second = r1.held[0], r2.held[0]
    assert not second.pending and second.name != first.name and 0 in r2.positions
    iss.verify(first.rho, first.z)
    iss.verify(second.rho, second.z)  # two valid pseudonyms of one epoch for one client


@pytest.mark.parametrize("dcnet", [True, False])
def test_a_member_asking_again_with_its_kept_element_gets_the_same_pseudonym(dcnet):
    iss = EpochIssuer("ristretto255", 1)
    r1 = _round1_silent(iss, dcnet)
    assert not r1.held[0].pending
    again = dataclasses.replace(r1.held[0], z=b"")  # it sends its kept request again
    r2 = shuffle(_models(2), T=2, seed=2, groups=GROUPS, epoch_key=iss, identities=IDS,
                 pseudonyms={**r1.held, 0: again}, raise_on_failure=False, dcnet=dcnet)
    assert r2.held[0].z == r1.held[0].z and not r2.errors
    assert sorted(r2.positions) == list(range(10)) and r1.held[0].name in r2.pseudonyms


# A node that lost its state draws a fresh request; stable keys across rounds (one seed), so that the group mates
# recognise each other. Member 0 restarts without its record.
SEED = 11


def _restart(iss, dcnet, forget_mates=False):
    r1 = shuffle(_models(1), T=1, seed=SEED, groups=GROUPS, epoch_key=iss, identities=IDS, raise_on_failure=False,
                 dcnet=dcnet)
    assert sorted(r1.positions) == list(range(10))
    g = get_group()
    fresh = pseudonym.pending(g, pseudonym.request(g, iss.epoch), iss.key)  # what the restarted node draws
    held = {i: (dataclasses.replace(n, mates=()) if forget_mates else n) for i, n in r1.held.items()}
    r2 = shuffle(_models(2), T=2, seed=SEED, groups=GROUPS, epoch_key=iss, identities=IDS,
                 pseudonyms={**held, 0: fresh}, raise_on_failure=False, dcnet=dcnet)
    return r1, r2


@pytest.mark.parametrize("dcnet", [True, False])
def test_group_mates_refuse_a_member_issued_twice_and_the_evidence_names_it(dcnet):
    iss = _IssuesAgain("ristretto255", 1)
    r1, r2 = _restart(iss, dcnet)
    # Every honest mate of the restarted member refuses the group with the specific error; it delivers nothing.
    changed = [e for i in GROUPS[0][1:] for e in r2.participant_errors.get(i, [])
               if isinstance(e, pseudonym.IssuanceChanged)]
    assert len(changed) == 4
    assert not set(r2.positions) & set(GROUPS[0]) and sorted(r2.positions) == GROUPS[1]
    assert r1.held[0].name not in r2.pseudonyms
    # The evidence names member 0 from the CA key alone, and does not survive tampering.
    ca = CertificateAuthority.verifier(identities(10, SEED).ca.verify_key)
    ev = pseudonym.NymEvidence.decode(changed[0].evidence.encode())
    assert ev.verify(ca) == 0
    with pytest.raises(InvalidSignature):
        dataclasses.replace(ev, second=(bytes(32), ev.second[1])).verify(ca)
    with pytest.raises(Refused, match="one request only"):
        dataclasses.replace(ev, second=ev.first).verify(ca)
    other = CertificateAuthority.verifier(identities(10, SEED + 1).ca.verify_key)
    with pytest.raises(InvalidSignature):
        ev.verify(other)


@pytest.mark.parametrize("dcnet", [True, False])
def test_the_control_mates_that_remember_nothing_let_the_ps_link_the_restarted_node(dcnet):
    iss = _IssuesAgain("ristretto255", 1)
    r1, r2 = _restart(iss, dcnet, forget_mates=True)
    # The group delivers, member 0's row under a new pseudonym: the one that vanished and the new one are
    # both the node's (the PS saw identity 200 ask in round 2).
    assert sorted(r2.positions) == list(range(10))
    new = r2.held[0].name
    assert new in r2.pseudonyms and r1.held[0].name not in r2.pseudonyms and new not in r1.pseudonyms


@pytest.mark.parametrize("dcnet", [True, False])
def test_an_honest_group_with_stable_keys_continues_across_the_epoch(dcnet):
    # No false refusal: the mates' commitments are compared in every round, a pending member re-sends its B.
    iss = EpochIssuer("ristretto255", 1)
    held: dict = {}
    for T in (1, 2, 3):
        r = shuffle(_models(T), T=T, seed=SEED, groups=GROUPS, epoch_key=iss, identities=IDS, pseudonyms=held,
                    dropouts={"ot": [0]} if T == 1 else None, raise_on_failure=False, dcnet=dcnet)
        held.update({i: n for i, n in r.held.items() if n is not None})
        assert sorted(r.positions) == (GROUPS[1] if T == 1 else list(range(10)))
        assert not any(isinstance(e, pseudonym.IssuanceChanged) for es in r.participant_errors.values() for e in es)
    assert all(len(n.mates) == 4 for n in held.values())


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.booleans()), min_size=1, max_size=8))
def test_any_sequence_of_requests_gives_each_identity_one_pseudonym(steps):
    # Invariant: whatever an identity sends, in any order and across checkpoints, it gets at most one evaluation
    # value (π·B of its first B); another B is refused with OtherRequest and changes nothing.
    g = get_group()
    iss = EpochIssuer("ristretto255", 3, secret=12345)
    reqs = {(who, k): pseudonym.request(g, 3, seed) for who in (0, 1) for k, seed in enumerate((1, 2, 3))}
    firsts: dict = {}
    for who, k, checkpoint in steps:
        if checkpoint:
            iss = EpochIssuer.decode(iss.encode())
        B = reqs[who, k].blinded
        first = firsts.setdefault(who, k)
        if first == k:
            ev, proof = iss.evaluate(who, B)
            assert ev == B ** 12345
            assert pseudonym.finish(g, reqs[who, k], iss.key, ev, proof).z == \
                pseudonym.voprf.evaluate(pseudonym.suite(g), 12345, pseudonym.nym_input(3, reqs[who, k].rho))
        else:
            with pytest.raises(pseudonym.OtherRequest):
                iss.evaluate(who, B)
        assert iss.requests == {w: reqs[w, firsts[w]].blinded.to_bytes() for w in firsts}


def test_a_pseudonym_record_round_trips_pending_finished_and_with_mates():
    g = get_group()
    iss = EpochIssuer("ristretto255", 9)
    req = pseudonym.request(g, 9)
    rec = pseudonym.pending(g, req, iss.key)
    assert rec.pending and pseudonym.Pseudonym.decode(rec.encode()) == rec
    ev, proof = iss.evaluate(5, req.blinded)
    done = pseudonym.finish(g, rec, iss.key, ev, proof)
    mate = pseudonym.Commitment(3, bytes(32), bytes(32), bytes(64))
    done = done.with_mates({3: mate})
    assert pseudonym.Pseudonym.decode(done.encode()) == done and done.mate(3) == mate
    assert done.commitment() == rec.commitment() == pseudonym.request_digest(9, req.blinded.to_bytes())
    # A record whose B is not its blind applied to ρ's input is refused (it would re-send another request).
    bad = dataclasses.replace(done, blinded=pseudonym.request(g, 9).blinded.to_bytes())
    with pytest.raises(pseudonym.DecodeError, match="not the blind applied"):
        pseudonym.Pseudonym.decode(bad.encode())
    with pytest.raises(pseudonym.DecodeError, match="version 1"):
        pseudonym.Pseudonym.decode(b"\x01" + done.encode()[1:])


class _SwapsItsRequest(Participant):
    """Commits to one request in its advertisement and sends another B in its OT request."""

    def _on_advertise_list(self, s, m):
        s, out = super()._on_advertise_list(s, m)
        g = get_group()
        other = pseudonym.pending(g, pseudonym.request(g, s.nym.epoch), g.element_from_bytes(s.nym.key))
        return dataclasses.replace(s, nym=other), out


def test_the_ps_evaluates_only_the_request_the_advertisement_committed_to():
    class Swapper:
        role, pids = "participant", (3,)

        def make(self, *a, **kw):
            return _SwapsItsRequest(*a, **kw)

    iss = EpochIssuer("ristretto255", 1)
    r = shuffle(_models(1), T=1, seed=1, epoch_key=iss, identities=IDS, adversaries=[Swapper()],
                raise_on_failure=False)
    assert any(e.sender == 3 and "did not commit to" in str(e.error) for e in r.errors)
    assert IDS[3] not in iss.requests and 3 not in r.positions and len(r.positions) == 9
