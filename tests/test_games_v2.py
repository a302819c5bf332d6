"""v2 games: channel IND-CPA, row-credential unforgeability, DLEQ soundness.

Honest instances show no advantage beyond the Hoeffding bound; the weak ones are
broken; each reduction's simulation is checked against the real code.
"""

import pytest

from reshuffle.crypto import voprf
from reshuffle.crypto.channel import Channel, DHKeyPair
from reshuffle.crypto.rand import SeededRandom
from reshuffle.errors import ConfigError, DecryptionError, InvalidProof
from reshuffle.games import channel as chg
from reshuffle.games import credential as crg
from reshuffle.games import dleq as dg
from reshuffle.games.framework import estimate
from reshuffle.games.ot_sender import CTCDH
from reshuffle.games.toy import ToyGroup

TOY, TINY = ToyGroup.schnorr(41), ToyGroup.schnorr(17)
N = 300


# ------------------------------------------------------------------ channel
def test_channel_secure_instance_shows_no_advantage():
    a, b_ddh, b_aead = chg.channel_games(TOY, chg.sanity_adversary, N)
    for e in (a, b_ddh, b_aead):
        assert abs(e.advantage) <= e.bound


def test_channel_weak_group_is_broken_and_b_ddh_carries_it():
    a, b_ddh, b_aead = chg.channel_games(TINY, chg.sanity_adversary, N)
    assert a.above(0.3)
    assert b_ddh.above(0) and abs(b_ddh.advantage - a.advantage / 2) <= b_ddh.bound + a.bound / 2
    assert abs(b_aead.advantage) <= b_aead.bound


def test_channel_fixed_nonce_is_broken_and_b_aead_carries_it():
    a, b_ddh, b_aead = chg.channel_games(TOY, chg.sanity_adversary, N, chg.FixedNonces)
    assert a.advantage == 0.5 and b_aead.advantage == 0.5
    assert abs(b_ddh.advantage) <= b_ddh.bound


def test_b_ddh_simulation_is_the_real_channel_when_z_is_real():
    # Prepare: U = g^a, V = g^c, Z = g^{ac}; the same nonce stream for both channels
    a, c = TOY.random_scalar(), TOY.random_scalar()
    U, V = TOY.base_mul(a), TOY.base_mul(c)
    real = Channel(DHKeyPair(a, U), V, chg.I, chg.J, chg.T, rng=SeededRandom(1))
    sim = chg.programmed_channel(U, V, U**c, SeededRandom(1))
    # Execute / Assert: identical ciphertexts, which j opens
    ct = sim.seal(chg.PHASE, b"share")
    assert ct == real.seal(chg.PHASE, b"share")
    assert Channel(DHKeyPair(c, V), U, chg.J, chg.I, chg.T).open(chg.PHASE, ct) == b"share"
    # with a random Z the ciphertext does not open for j
    bad = chg.programmed_channel(U, V, TOY.base_mul(TOY.random_scalar()), None).seal(chg.PHASE, b"s")
    with pytest.raises(DecryptionError):
        Channel(DHKeyPair(c, V), U, chg.J, chg.I, chg.T).open(chg.PHASE, bad)


def test_b_aead_simulation_uses_the_real_seal():
    ki, kj = DHKeyPair.generate(TOY), DHKeyPair.generate(TOY)
    real = Channel(ki, kj.public, chg.I, chg.J, chg.T, rng=SeededRandom(2))
    sim = chg.OracleChannel(real._send, chg.I, chg.J, chg.T, rng=SeededRandom(2))
    assert sim.seal(chg.PHASE, b"m") == real.seal(chg.PHASE, b"m")
    ch = chg.AEADChallenger()
    ch.encrypt(bytes(12), b"a", b"")
    assert ch.nonce_respecting
    ch.encrypt(bytes(12), b"b", b"")
    assert not ch.nonce_respecting


def test_bounded_dlog():
    assert chg.bounded_dlog(TOY, TOY.base_mul(123_456)) == 123_456
    assert chg.bounded_dlog(TOY, TOY.base_mul(2**40 + 5)) is None
    x = TINY.random_scalar()
    assert chg.bounded_dlog(TINY, TINY.base_mul(x)) == x


# --------------------------------------------------------------- credential
def test_credential_secure_instance_shows_no_advantage():
    a, b = crg.credential_games(TOY, crg.sanity_forger, 150)
    assert a.wins == 0 and b.wins == 0  # the guessed (q+1)-th output is 512 random bits


def test_credential_weak_instances_are_broken_and_reduction_transfers():
    a, b = crg.credential_games(TINY, crg.sanity_forger, 100)
    assert a.above(0.5) and b.above(0.5)
    assert abs(b.advantage - a.advantage) <= a.bound + b.bound
    keyless = estimate(lambda: crg.credential_trial(TOY, crg.sanity_forger, keyless=True), 100, 0.0)
    assert keyless.above(0.5)


def test_reduction_simulates_proofs_and_extracts_q_pairs():
    # Prepare: the honest-then-guess path verifies every simulated proof
    ch = CTCDH(TOY, crg.Q)
    # Execute
    pairs = crg.Reduction(crg.sanity_forger, crg.Q)(ch)
    # Assert: q honest credentials give q correct one-more-DH pairs, not q + 1
    assert len(pairs) == crg.Q and ch.helped == crg.Q
    assert all(V == W**ch._beta for W, V in pairs)
    assert not ch.wins(pairs)


def test_issuer_answers_at_most_q_elements():
    suite = voprf.Suite(TOY)
    iss = crg.Issuer(suite, 2)
    Bs = [voprf.blind(suite, bytes([i]))[1] for i in range(3)]
    iss.issue(Bs[:2])
    with pytest.raises(ConfigError, match="at most q=2"):
        iss.issue(Bs[2:])


def test_issuer_rejects_duplicates_and_invalid_outputs():
    suite = voprf.Suite(TOY)
    iss = crg.Issuer(suite, 1)
    good = voprf.evaluate(suite, iss.gamma, b"a")
    assert not iss.wins([(b"a", good), (b"a", good)])  # not distinct
    assert not iss.wins([(b"a", good), (b"b", good)])  # second output wrong
    assert iss.wins([(b"a", good), (b"b", voprf.evaluate(suite, iss.gamma, b"b"))])


# --------------------------------------------------------------------- dleq
def test_dleq_forger_fails_against_the_real_verifier_and_wins_against_the_weak():
    real, ext = dg.dleq_games(TOY, N)
    assert real.wins == 0
    assert ext.wins == ext.trials
    weak, _ = dg.dleq_games(TOY, 100, weak=True)
    assert weak.wins == weak.trials


def test_weak_forgery_is_for_a_false_statement():
    gamma = TOY.random_scalar()
    A, C = TOY.generator(), TOY.base_mul(gamma)
    B, D, proof = dg.weak_fs_forger(TOY, A, C)
    assert D != B**gamma
    dg.weak_verify(A, B, C, D, proof)
    with pytest.raises(InvalidProof):
        dg.real_verify(A, B, C, D, proof)


def test_extract_needs_two_challenges():
    with pytest.raises(ValueError):
        dg.extract(voprf.Proof(3, 4), voprf.Proof(3, 5), TOY.order)
    k, r, c1, c2 = 11, 17, 5, 9
    q = TOY.order
    assert dg.extract(voprf.Proof(c1, (r - c1 * k) % q), voprf.Proof(c2, (r - c2 * k) % q), q) == k
