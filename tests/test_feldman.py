"""Feldman VSS: batched per-dealer check, single-share check, commitment codec."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.crypto import feldman as fv
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import get_group
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.shamir import Shamir, Share
from reshuffle.errors import ConfigError, DecodeError, InvalidElement, InvalidShare
from reshuffle.games.toy import ToyGroup

CTX = label("test/feldman", 7, 1)  # round 7, invocation 1


@pytest.fixture(scope="module")
def g():
    return get_group("ristretto255")


def _secrets(group, S, seed=0):
    rng = SeededRandom(seed)
    return [group.random_scalar(rng) for _ in range(S)]


def test_honest_dealer_passes_batch_and_single_checks(g):
    # Prepare: S = 4 secrets, t = 3, participants 0..4 hold x = 1..5
    secrets = _secrets(g, 4)
    shares, coms = fv.deal(secrets, 3, range(1, 6), SeededRandom(1), g)
    rho = fv.weights(coms, dealer=2, context=CTX)
    c_hat = fv.combine(coms, rho)
    # Execute / Assert
    for x, ys in shares.items():
        fv.verify_batch(x, ys, coms, rho)
        fv.verify_batch(x, ys, c_hat, rho)
        fv.verify_batch(x, ys, rho=rho, combined=c_hat)
        for y, row in zip(ys, coms):
            fv.verify_share(x, y, row)
    assert all(coms[s][0] == g.base_mul(secrets[s]) for s in range(4))


def test_reconstructed_secret_matches_c0(g):
    secrets = _secrets(g, 2, 5)
    shares, coms = fv.deal(secrets, 3, [1, 2, 3, 4], None, g)
    sh = Shamir(g.order, 3)
    for s in range(2):
        rec = sh.reconstruct([Share(x, shares[x][s]) for x in (4, 1, 3)])
        assert rec == secrets[s]
        fv.check_secret(rec, coms[s])
    with pytest.raises(InvalidShare, match="C_0"):
        fv.check_secret((secrets[0] + 1) % g.order, coms[0])


def test_one_wrong_share_is_caught_and_pinpointed(g):
    # Prepare: the dealer sends participant x = 2 a share of secret 3 off by one
    shares, coms = fv.deal(_secrets(g, 5), 4, range(1, 7), SeededRandom(2), g)
    rho = fv.weights(coms, 0, CTX)
    ys = list(shares[2])
    ys[3] = (ys[3] + 1) % g.order
    # Execute / Assert
    with pytest.raises(InvalidShare, match="x=2 fail the batched Feldman check"):
        fv.verify_batch(2, ys, fv.combine(coms, rho), rho)
    assert fv.find_bad_shares(2, ys, coms) == [3]
    with pytest.raises(InvalidShare, match="x=2"):
        fv.verify_share(2, ys[3], coms[3])


def test_shares_swapped_between_secrets_or_participants_fail(g):
    shares, coms = fv.deal(_secrets(g, 3), 2, [1, 2, 3], SeededRandom(3), g)
    rho = fv.weights(coms, 0, CTX)
    with pytest.raises(InvalidShare):
        fv.verify_batch(1, [shares[1][1], shares[1][0], shares[1][2]], coms, rho)
    with pytest.raises(InvalidShare):
        fv.verify_batch(1, shares[2], coms, rho)


def test_wrong_commitment_caught(g):
    # Prepare: a dealer whose published commitment for secret 1 is not g^{a_{1,1}}
    shares, coms = fv.deal(_secrets(g, 2), 3, [1, 2, 3, 4], SeededRandom(4), g)
    bad = [list(r) for r in coms]
    bad[1][1] = bad[1][1] * g.generator()
    rho = fv.weights(bad, 1, CTX)
    # Execute / Assert: every recipient's batch check fails
    for x, ys in shares.items():
        with pytest.raises(InvalidShare):
            fv.verify_batch(x, ys, bad, rho)
    # a commitment to another secret (C_0 swapped) is caught at reveal time too
    with pytest.raises(InvalidShare):
        fv.check_secret(Shamir(g.order, 3).reconstruct([Share(x, shares[x][0]) for x in (1, 2, 3)]), coms[1])


def test_weights_bound_to_dealer_context_and_commitments(g):
    _, coms = fv.deal(_secrets(g, 3), 2, [1, 2], SeededRandom(6), g)
    rho = fv.weights(coms, 4, CTX)
    assert len(set(rho)) == 3
    assert fv.weights(coms, 5, CTX) != rho
    assert fv.weights(coms, 4, label("test/feldman", 7, 2)) != rho
    other = [list(r) for r in coms]
    other[2][1] = other[2][1] * g.generator()
    assert fv.weights(other, 4, CTX)[:2] != rho[:2]
    with pytest.raises(ConfigError, match="context"):
        fv.weights(coms, 4, b"")


def test_bad_inputs_rejected(g):
    shares, coms = fv.deal(_secrets(g, 2), 2, [1, 2, 3], SeededRandom(7), g)
    rho = fv.weights(coms, 0, CTX)
    with pytest.raises(InvalidShare, match="2 committed secrets"):
        fv.verify_batch(1, shares[1][:1], coms, rho)
    with pytest.raises(InvalidShare, match="not a scalar"):
        fv.verify_batch(1, [shares[1][0], g.order], coms, rho)
    with pytest.raises(InvalidShare, match="index"):
        fv.verify_batch(0, shares[1], coms, rho)
    with pytest.raises(ConfigError, match="secret 0"):
        fv.deal([0], 2, [1, 2], None, g)
    with pytest.raises(ConfigError, match="share points"):
        fv.deal([5], 3, [1, 2], None, g)
    with pytest.raises(ConfigError, match="either"):
        fv.verify_batch(1, shares[1], fv.combine(coms, rho), rho, combined=fv.combine(coms, rho))


def test_commitment_codec_round_trip_and_validation(g):
    _, coms = fv.deal(_secrets(g, 3), 4, [1, 2, 3, 4], SeededRandom(8), g)
    data = fv.encode_commitments(coms)
    assert len(data) == 4 + 3 * 4 * 32
    assert fv.decode_commitments(g, data, 3, 4) == coms
    # wrong counts
    with pytest.raises(DecodeError, match="expected 2×4"):
        fv.decode_commitments(g, data, 2, 4)
    with pytest.raises(DecodeError, match="expected 3×5"):
        fv.decode_commitments(g, data, 3, 5)
    # truncated / extended
    with pytest.raises(DecodeError):
        fv.decode_commitments(g, data[:-1], 3, 4)
    with pytest.raises(DecodeError, match="trailing"):
        fv.decode_commitments(g, data + b"\x00", 3, 4)
    # the identity and a non-canonical encoding in the middle
    off = 4 + 5 * 32
    with pytest.raises(InvalidElement, match=r"C\[1\]\[1\].*identity"):
        fv.decode_commitments(g, data[:off] + bytes(32) + data[off + 32:], 3, 4)
    with pytest.raises(InvalidElement, match=r"C\[1\]\[1\]"):
        fv.decode_commitments(g, data[:off] + b"\xff" * 32 + data[off + 32:], 3, 4)
    c_hat = fv.combine(coms, fv.weights(coms, 1, CTX))
    assert fv.decode_combined(g, fv.encode_combined(c_hat), 4) == c_hat
    with pytest.raises(DecodeError, match="expected t=3"):
        fv.decode_combined(g, fv.encode_combined(c_hat), 3)


TOY = ToyGroup.schnorr(41)


@settings(max_examples=25, deadline=None)
@given(t=st.integers(1, 6), S=st.integers(1, 4), extra=st.integers(0, 3), seed=st.integers(0, 2**32))
def test_property_honest_shares_pass(t, S, extra, seed):
    rng = SeededRandom(seed)
    xs = sorted({1 + int.from_bytes(rng.bytes(2), "big") for _ in range(t + extra + 4)})[: t + extra]
    if len(xs) < t:
        return
    secrets = [TOY.random_scalar(rng) for _ in range(S)]
    shares, coms = fv.deal(secrets, t, xs, rng, TOY)
    rho = fv.weights(coms, seed % 50, CTX)
    c_hat = fv.combine(coms, rho)
    for x in xs:
        fv.verify_batch(x, shares[x], c_hat, rho)


@settings(max_examples=25, deadline=None)
@given(t=st.integers(1, 5), S=st.integers(1, 5), bad=st.integers(0, 4), delta=st.integers(1, 2**40),
       seed=st.integers(0, 2**32))
def test_property_one_wrong_share_among_S_caught(t, S, bad, delta, seed):
    bad %= S
    shares, coms = fv.deal([TOY.random_scalar(SeededRandom(seed + s)) for s in range(S)], t,
                           range(1, t + 2), SeededRandom(seed), TOY)
    rho = fv.weights(coms, 3, CTX)
    ys = list(shares[1])
    ys[bad] = (ys[bad] + delta) % TOY.order
    if ys[bad] == shares[1][bad]:
        return  # delta ≡ 0 mod q: not an error
    with pytest.raises(InvalidShare):
        fv.verify_batch(1, ys, coms, rho)
    assert fv.find_bad_shares(1, ys, coms) == [bad]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=4 + 2 * 2 * 32))
def test_fuzz_commitment_decoder_raises_only_protocol_errors(data):
    g = get_group("ristretto255")
    try:
        coms = fv.decode_commitments(g, data, 2, 2)
    except (DecodeError, InvalidElement):
        return
    assert fv.encode_commitments(coms) == data


@settings(max_examples=10, deadline=None)
@given(S=st.integers(1, 4), t=st.integers(1, 4), seed=st.integers(0, 2**32))
def test_property_commitment_codec_round_trip(S, t, seed):
    _, coms = fv.deal([TOY.random_scalar(SeededRandom(seed + s)) for s in range(S)], t,
                      range(1, t + 1), SeededRandom(seed), TOY)
    assert fv.decode_commitments(TOY, fv.encode_commitments(coms), S, t) == coms
