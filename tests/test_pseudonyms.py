"""Epoch pseudonyms end to end (docs/protocol.md §7.3): issued once per identity per epoch, checked in
every row, kept across the epoch's rounds, unlinkable to the identity beyond the anonymity set."""

import dataclasses
from collections import Counter

import numpy as np
import pytest

from reshuffle.adversaries import make_adversary
from reshuffle.crypto import voprf
from reshuffle.crypto.group import get_group
from reshuffle.errors import ConfigError, DecodeError
from reshuffle.games import credential as crg
from reshuffle.games.toy import ToyGroup
from reshuffle.harness.api import shuffle
from reshuffle.protocol import credential, pseudonym
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.pseudonym import EpochIssuer, EpochKeyMismatch, Pseudonym
from reshuffle.protocol.server import Server

N = 6
IDS = [100 + i for i in range(N)]


def _models(n=N, d=6):
    return [np.full(d, i + 1, np.float32) for i in range(n)]


def _round(T, issuer, held=None, **kw):
    return shuffle(_models(), T=T, epoch_key=issuer, identities=IDS, pseudonyms=held, seed=T,
                   raise_on_failure=False, **kw)


def _refused(r):
    """Why rows were refused, leaving out the empty ones (decoys, dropped owners)."""
    return [why for _, why in sorted(r.output.rejected_rows.items()) if why != "empty"]


class _Participants:
    """A participant behaviour built inline: ``cls`` for the participants ``pids``."""

    role = "participant"

    def __init__(self, pids, cls):
        self.pids, self._cls = tuple(pids), cls

    def make(self, *args, **kwargs):
        return self._cls(*args, **kwargs)


def _forging(rho_z):
    """A participant that skips issuance and writes ``rho_z(epoch, key)`` as its pseudonym."""

    class Forger(Participant):
        def _on_round_start(self, s, m):
            s, out = super()._on_round_start(s, m)
            fake = rho_z(m.epoch, m.nym_key.to_bytes())
            return dataclasses.replace(s, nym=fake, nym_held=True), out

    return Forger


# ------------------------------------------------------------------ the honest path
def test_one_pseudonym_per_participant_kept_across_the_epoch():
    # Prepare: one epoch key for two rounds
    iss = EpochIssuer("ristretto255", 0)
    # Execute
    r1 = _round(1, iss)
    r2 = _round(2, iss, held=r1.held)
    # Assert: every identity issued once; the PS sees the same six pseudonyms in both rounds, each row's
    # pseudonym is its sender's
    assert iss.issued == set(IDS)
    assert len(r1.models) == len(r2.models) == N
    assert sorted(r1.pseudonyms) == sorted(r2.pseudonyms) == sorted(h.name for h in r1.held.values())
    for r in (r1, r2):
        for i, row in r.positions.items():
            assert r.pseudonyms[row] == r1.held[i].name
    assert all(len(name) == 16 for name in r1.pseudonyms)


def test_a_new_epoch_gives_new_unrelated_pseudonyms():
    r1 = _round(1, EpochIssuer("ristretto255", 0))
    r2 = _round(2, EpochIssuer("ristretto255", 1), held=r1.held)
    assert len(r2.models) == N
    assert not set(r1.pseudonyms) & set(r2.pseudonyms)
    assert all(h.epoch == 1 for h in r2.held.values())


def test_grouped_round_delivers_each_rows_pseudonym():
    iss = EpochIssuer("ristretto255", 0)
    r1 = _round(1, iss)
    r = _round(2, iss, held=r1.held, group_size=3)
    assert len(r.models) == len(r.pseudonyms) == N
    assert sorted(r.pseudonyms) == sorted(r1.pseudonyms)


# ------------------------------------------------------------------ attacks on the PS's checks
@pytest.mark.parametrize("name, forge", [
    ("none", lambda e, k: Pseudonym(e, k, bytes(16), bytes(64))),
    ("forged", lambda e, k: Pseudonym(e, k, b"\x07" * 16, voprf.NH * b"\x01")),
])
def test_a_row_without_a_valid_pseudonym_is_refused(name, forge):
    # Prepare: participant 2 writes a zero or made-up pseudonym into an otherwise valid row
    bad = _Participants([2], _forging(forge))
    # Execute
    r = _round(1, EpochIssuer("ristretto255", 0), adversaries=[bad])
    # Assert: only its row is refused, for its pseudonym; the honest rest is delivered
    assert _refused(r) == ["pseudonym"]
    assert sorted(r.positions) == [0, 1, 3, 4, 5] and len(r.models) == N - 1
    assert r.failure is None


def test_a_pseudonym_under_another_key_or_epoch_is_refused():
    # A valid evaluation, but under a key the PS does not hold (or of another epoch): not a pseudonym of this epoch.
    other = EpochIssuer("ristretto255", 0)
    g = get_group()

    def foreign(e, k, epoch_shift=0):
        req = pseudonym.request(g, e + epoch_shift)
        ev, proof = other.issue(len(other.issued), req.blinded)
        nym = pseudonym.finish(g, req, other.key, ev, proof)
        return Pseudonym(e, k, nym.rho, nym.z)

    r = _round(1, EpochIssuer("ristretto255", 0), adversaries=[_Participants([1], _forging(foreign))])
    assert _refused(r) == ["pseudonym"] and 1 not in r.positions
    iss = EpochIssuer("ristretto255", 0)
    r = _round(1, iss, adversaries=[_Participants([4], _forging(
        lambda e, k: dataclasses.replace(_issued(iss, e + 1), epoch=e, key=k)))])
    assert _refused(r) == ["pseudonym"] and 4 not in r.positions


def _issued(iss, epoch):
    """A pseudonym evaluated under ``iss``'s key but for ``epoch`` (a wrong epoch label)."""
    g = iss.group
    req = pseudonym.request(g, epoch)
    (ev,), proof = voprf.blind_evaluate(pseudonym.suite(g), iss._pi, [req.blinded], iss.key)
    return pseudonym.finish(g, req, iss.key, ev, proof.encode(g))


def test_a_second_issuance_in_an_epoch_is_refused():
    # Prepare: a first round issues everyone
    iss = EpochIssuer("ristretto255", 0)
    r1 = _round(1, iss)
    held = dict(r1.held)
    del held[3]  # participant 3 "lost" its pseudonym and asks again
    # Execute
    r2 = _round(2, iss, held=held)
    # Assert: the PS refuses the second issuance and excludes the asker; the others are delivered
    assert any(isinstance(e.error, pseudonym.AlreadyIssued) and e.sender == 3 for e in r2.errors)
    assert 3 not in r2.positions and sorted(r2.positions) == [0, 1, 2, 4, 5]
    assert iss.issued == set(IDS)


def test_a_round_that_ends_before_the_answers_issues_nothing():
    # Prepare: half the members drop before their OT request, so the round ends before any answer leaves
    iss = EpochIssuer("ristretto255", 0)
    # Execute
    r1 = _round(1, iss, dropouts={"ot": [0, 1, 2]})
    # Assert: nothing was issued, so nobody is locked out of the epoch; the next round issues everyone
    assert r1.failure is not None and iss.issued == set()
    r2 = _round(2, iss)
    assert len(r2.models) == N and iss.issued == set(IDS)


def test_issuer_refuses_a_second_evaluation_for_one_identity():
    iss = EpochIssuer("ristretto255", 5)
    req = pseudonym.request(iss.group, 5)
    iss.issue(7, req.blinded)
    with pytest.raises(pseudonym.AlreadyIssued, match="already holds a pseudonym of epoch 5"):
        iss.issue(7, pseudonym.request(iss.group, 5).blinded)


def test_two_rows_with_one_pseudonym_are_both_refused():
    # Prepare: participant 4 holds participant 1's pseudonym (a coalition sharing one)
    iss = EpochIssuer("ristretto255", 0)
    r1 = _round(1, iss)
    held = {**r1.held, 4: r1.held[1]}
    # Execute
    r2 = _round(2, iss, held=held)
    # Assert: both rows carrying it are dropped; the other four are delivered
    assert Counter(_refused(r2)) == {"duplicate pseudonym": 2}
    assert sorted(r2.positions) == [0, 2, 3, 5]
    assert r1.held[1].name not in r2.pseudonyms


# ------------------------------------------------------------------ a PS that tags one member
def test_a_per_member_epoch_key_is_caught_before_issuance():
    # Prepare: the PS gives participant 0 its own P'
    ps = make_adversary("per-participant-epoch-key", target=0)
    # Execute
    r = shuffle(_models(), adversaries=[ps], raise_on_failure=False, seed=3)
    # Assert: the target refuses with the specific error at the advertisements, before it asks for anything
    errs = r.participant_errors[0]
    assert isinstance(errs[0], EpochKeyMismatch)
    assert 0 not in r.positions
    assert not r.views[0].uploaded
    assert ps.holds(r, [1, 2, 3, 4, 5]).holds


def test_a_changed_key_within_an_epoch_is_refused_at_round_start():
    # Prepare: round 1 under P, round 2 of the same epoch under P' (the PS would recognise who asks again)
    r1 = _round(1, EpochIssuer("ristretto255", 0))
    # Execute
    r2 = _round(2, EpochIssuer("ristretto255", 0), held=r1.held)
    # Assert: every member that holds a pseudonym refuses the round with the specific error
    assert r2.failure is not None and not r2.models
    assert all(isinstance(r2.participant_errors[i][0], EpochKeyMismatch) for i in range(N))


def test_an_epoch_gone_back_is_refused():
    g = get_group()
    held = Pseudonym(4, g.base_mul(3).to_bytes(), bytes(16), bytes(64))
    with pytest.raises(EpochKeyMismatch, match="epoch 4"):
        pseudonym.held_for(held, 3, g.base_mul(3))
    assert pseudonym.held_for(held, 5, g.base_mul(3)) is None
    assert pseudonym.held_for(held, 4, g.base_mul(3)) is held


def test_an_evaluation_under_another_key_fails_the_participants_proof_check():
    # Prepare: a PS that announces P but evaluates the pseudonym under another key
    class WrongKey(Server):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.nyms = _Swapped(self.nyms)

    class _Swapped:
        def __init__(self, real):
            self.real, self.other = real, EpochIssuer(real.group_name, real.epoch)
            self.epoch, self.key, self.group_name, self.issued = real.epoch, real.key, real.group_name, real.issued

        def check(self, who, blinded):
            self.real.check(who, blinded)

        def evaluate(self, who, blinded, rng=None):
            return self.other.evaluate(who, blinded, rng)

        def confirm(self, who):
            self.real.confirm(who)

        def verify(self, rho, z):
            self.real.verify(rho, z)

    class Behaviour:
        role = "ps"
        colluders = ()

        def make(self, *a, **kw):
            return WrongKey(*a, **kw)

    # Execute
    r = shuffle(_models(), adversaries=[Behaviour()], raise_on_failure=False, seed=5)
    # Assert: every participant stops at the proof, before it consents to anything
    assert all(type(r.participant_errors[i][0]).__name__ == "InvalidProof" for i in range(N))
    assert not r.models


# ------------------------------------------------------------------ unlinkability
def test_issuance_view_is_independent_of_the_pseudonym():
    # Exact on a 17-bit group: over every blind, the blinded element the PS sees is uniform over the
    # group's non-identity elements, whatever ρ is; so it says nothing of ρ (perfect hiding).
    g = ToyGroup.schnorr(17)
    a = crg.blinded_distribution(g, pseudonym.nym_input(0, b"\x01" * 16))
    b = crg.blinded_distribution(g, pseudonym.nym_input(0, b"\x02" * 16))
    assert a == b
    assert set(a.values()) == {1} and len(a) == g.order - 1


def test_issuance_requests_of_one_rho_look_alike_at_the_ps():
    # The real suite: two requests for the same ρ share no element (fresh blinds), so the PS cannot tell a
    # repeated request from two members' requests.
    g = get_group()
    req = pseudonym.request(g, 0)
    again = pseudonym.Blinded(0, req.rho, *voprf.blind(pseudonym.suite(g), pseudonym.nym_input(0, req.rho)))
    assert req.blinded != again.blinded


def test_pseudonym_and_credential_inputs_are_domain_separated():
    r = b"\x05" * 16
    assert pseudonym.nym_input(1, r) != credential.cred_input(1, r)
    assert pseudonym.nym_input(1, r)[: -16] != credential.cred_input(1, r)[: -16]


# ------------------------------------------------------------------ storage
def test_pseudonym_and_issuer_encodings_round_trip_and_hide_secrets():
    iss = EpochIssuer("ristretto255", 9)
    req = pseudonym.request(iss.group, 9)
    ev, proof = iss.issue(42, req.blinded)
    nym = pseudonym.finish(iss.group, req, iss.key, ev, proof)
    assert Pseudonym.decode(nym.encode()) == nym
    back = EpochIssuer.decode(iss.encode())
    assert back.key == iss.key and back.issued == {42}
    back.verify(nym.rho, nym.z)
    with pytest.raises(pseudonym.InvalidPseudonym):
        back.verify(nym.rho, bytes(64))
    assert nym.rho.hex() not in repr(nym) and nym.z.hex() not in repr(nym)
    assert str(iss._pi) not in repr(iss)
    assert req.rho.hex() not in repr(req) and str(req.blind) not in repr(req)
    with pytest.raises(DecodeError):
        Pseudonym.decode(nym.encode() + b"\x00")
    with pytest.raises(DecodeError):
        Pseudonym.decode(nym.encode()[:-1])
    with pytest.raises(ConfigError):
        Pseudonym(0, b"k", b"short", bytes(64))


def test_pseudonym_decode_rejects_an_invalid_key():
    g = get_group()
    raw = Pseudonym(1, bytes(32), bytes(16), bytes(64)).encode()  # the identity's encoding
    with pytest.raises(Exception) as exc:
        Pseudonym.decode(raw)
    assert type(exc.value).__name__ in ("InvalidElement", "DecodeError")
    assert g.element_size == 32


def test_row_grows_by_the_pseudonym():
    assert credential.NYM_BYTES == pseudonym.ROW_BYTES == 80
    assert credential.row_bytes(40) % credential.ROW_ALIGN == 0


# ------------------------------------------------------------------ the simulator's real channel
def _uploads(T, cohort, d=6):
    from reshuffle.run.delivery import Uploads

    return Uploads(T, np.zeros(d, np.float32), {i: np.full(d, i + 1, np.float32) for i in cohort})


def test_real_channel_delivers_each_rows_pseudonym_like_the_ideal_column():
    from reshuffle.run.delivery import PSEUDONYM, RealShuffle
    from reshuffle.run.pseudonyms import SIZE, run_pseudonym

    # Prepare: a real channel; rounds of two overlapping cohorts
    ch = RealShuffle()
    # Execute
    d1 = ch.deliver(_uploads(1, [0, 1, 2, 3, 4, 5]))
    d2 = ch.deliver(_uploads(2, [2, 3, 4, 5, 6, 7]))
    # Assert: one pseudonym per row, of the ideal pseudonyms' type and size; a client keeps its pseudonym
    names1 = dict(zip(d1.senders, d1.meta[PSEUDONYM]))
    names2 = dict(zip(d2.senders, d2.meta[PSEUDONYM]))
    assert len(names1) == len(names2) == 6
    ideal = run_pseudonym(1, 0)
    assert all(type(n) is type(ideal) and len(n) == SIZE for n in names1.values())
    assert all(names1[i] == names2[i] for i in (2, 3, 4, 5))
    assert len(set(names1.values()) | set(names2.values())) == 8
    assert ch.epochs.issuer(3).issued == set(range(8))


def test_epoch_book_checkpoint_resumes_the_same_pseudonyms():
    from reshuffle.run.delivery import PSEUDONYM, RealShuffle
    from reshuffle.run.pseudonyms import EpochBook

    ch = RealShuffle()
    d1 = ch.deliver(_uploads(1, range(6)))
    saved = ch.epochs.state()
    assert all(isinstance(v, str) for v in saved["held"].values())
    # Resume in a fresh channel from the checkpoint's data
    book = EpochBook()
    book.restore(saved)
    again = RealShuffle(epochs=book).deliver(_uploads(2, range(6)))
    assert dict(zip(again.senders, again.meta[PSEUDONYM])) == dict(zip(d1.senders, d1.meta[PSEUDONYM]))
    assert book.issuer(2).issued == set(range(6))
    with pytest.raises(ConfigError, match="epochs of"):
        EpochBook(rounds=5).restore(saved)


def test_epoch_book_rotates_the_key_with_the_epoch():
    from reshuffle.run.pseudonyms import EpochBook

    book = EpochBook(rounds=2)
    k1, k2, k3 = book.issuer(1), book.issuer(2), book.issuer(3)
    assert k1 is k2 and k3 is not k2 and (k1.epoch, k3.epoch) == (1, 3) and k3.key != k1.key
    # A book started afresh at a later round opens a later epoch than any before
    assert EpochBook().issuer(7).epoch == 7 and EpochBook().issuer(7).key != k3.key


def test_a_resumed_real_simulation_keeps_every_clients_pseudonym(tmp_path):
    from reshuffle.run import checkpoint
    from reshuffle.run.config import SimConfig
    from reshuffle.run.delivery import PSEUDONYM
    from reshuffle.sim.simulator import Simulation

    # Prepare: a real-shuffle run stopped after round 1 and resumed in a fresh Simulation
    cfg = SimConfig(dataset="digits", model="logreg", clients=6, rounds=3, local_epochs=1, lr=0.1, seed=2,
                    shuffle="real", rule="fedavg")
    first = Simulation(cfg)
    recs = [first.step()]
    names1 = sorted(first.channel.epochs.held[i].name for i in range(6))
    checkpoint.save(tmp_path, checkpoint.simulation_checkpoint(first, recs))
    cfg2, ck = checkpoint.load_simulation(tmp_path)
    second = Simulation(cfg2)
    checkpoint.restore_simulation(second, ck)
    # Execute: the resumed run's next round, its delivery as the PS's rule would read it
    got = {}
    orig = second.rounds.receive
    second.rounds.receive = lambda d, cohort=None: got.setdefault("d", orig(d, cohort))
    second.step()
    # Assert: the same epoch key (no client asks again) and the same six pseudonyms on the rows
    assert second.channel.epochs.issuer(2).key == first.channel.epochs.issuer(2).key
    assert sorted(got["d"].meta[PSEUDONYM]) == names1
