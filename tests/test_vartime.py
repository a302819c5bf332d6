"""Variable-time ristretto255 arithmetic against libsodium, and the Feldman check that uses it."""

import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_group import BAD, MULTIPLES

from reshuffle.crypto import feldman as fv
from reshuffle.crypto import vartime as V
from reshuffle.crypto.domain import label
from reshuffle.crypto.rand import SeededRandom
from reshuffle.errors import InvalidElement, InvalidShare

pytestmark = pytest.mark.skipif(not V.AVAILABLE, reason="gmpy2 is not installed")


def test_rfc9496_multiples_decode_to_repeated_additions():
    base = V.decode(bytes.fromhex(MULTIPLES[1]))
    acc = V.decode(bytes.fromhex(MULTIPLES[0]))  # the identity
    for i, enc in enumerate(MULTIPLES):
        assert V.equal(acc, V.decode(bytes.fromhex(enc))), i
        assert i == 0 or V.equal(V.mul_small(base, i), acc)
        acc = V.add(acc, base)
    assert not V.equal(V.decode(bytes.fromhex(MULTIPLES[2])), V.decode(bytes.fromhex(MULTIPLES[3])))


@pytest.mark.parametrize("enc", BAD)
def test_rfc9496_invalid_encodings_rejected(enc):
    with pytest.raises(InvalidElement):
        V.decode(bytes.fromhex(enc))


@given(st.binary(min_size=32, max_size=32))
def test_decode_accepts_exactly_what_the_group_decoder_accepts(ristretto, data):
    def accepts(decode):
        try:
            decode(data)
            return True
        except InvalidElement:
            return False

    assert accepts(V.decode) == accepts(ristretto._decode)


def test_wrong_length_rejected():
    with pytest.raises(InvalidElement, match="32 bytes"):
        V.decode(bytes(31))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 2**252), st.integers(1, 2**252))
def test_addition_and_doubling_match_the_group(ristretto, a, b):
    A, B = ristretto.base_mul(a), ristretto.base_mul(b)
    pa, pb = V.decode(A.to_bytes()), V.decode(B.to_bytes())
    assert V.equal(V.add(pa, pb), V.decode((A * B).to_bytes()))
    assert V.equal(V.double(pa), V.decode((A * A).to_bytes()))
    assert V.equal(V.add(pa, pb), V.add(pb, pa))
    assert not V.equal(pa, V.add(pa, pb))


def test_equality_is_of_elements_not_of_curve_points(ristretto):
    # (−X, −Y) is P plus the 2-torsion point: another curve point, the same ristretto255 element.
    P = V.decode(ristretto.base_mul(12345).to_bytes())
    X, Y, Z, T = P
    other = ((-X) % V.P, (-Y) % V.P, Z, T)
    assert other != P
    assert V.equal(other, P)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 8), st.integers(1, V.MAX_X - 1), st.integers(0, 2**32))
def test_horner_equals_libsodium_evaluation(ristretto, t, x, seed):
    rng = SeededRandom(seed)
    coms = [ristretto.base_mul(ristretto.random_scalar(rng)) for _ in range(t)]
    want = fv._eval_in_exponent(coms, x)
    assert V.equal(V.horner([c.to_bytes() for c in coms], x), V.decode(want.to_bytes()))
    assert fv.evaluates_to(coms, x, want)
    assert not fv.evaluates_to(coms, x, want * ristretto.generator())


def test_small_multiples_bounds():
    P = V.decode(bytes.fromhex(MULTIPLES[1]))
    for bad in (0, -1, V.MAX_X):
        with pytest.raises(ValueError):
            V.mul_small(P, bad)


@settings(max_examples=20, deadline=None)
@given(t=st.integers(2, 6), S=st.integers(1, 4), delta=st.integers(1, 2**64), seed=st.integers(0, 2**32))
def test_wrong_share_fails_both_evaluations(ristretto, monkeypatch_module, t, S, delta, seed):
    # The attack: a dealer hands one recipient a share off its committed polynomial.
    secrets = [ristretto.random_scalar(SeededRandom(seed + s)) for s in range(S)]
    shares, coms = fv.deal(secrets, t, range(1, t + 3), SeededRandom(seed), ristretto)
    rho = fv.weights(coms, dealer=1, context=label("test/vartime", seed))
    c_hat = fv.combine(coms, rho)
    x = t + 2
    bad = list(shares[x])
    bad[0] = (bad[0] + delta) % ristretto.order
    for fast in (True, False):
        monkeypatch_module.setattr(V, "AVAILABLE", fast)
        fv.verify_batch(x, shares[x], c_hat, rho)
        with pytest.raises(InvalidShare):
            fv.verify_batch(x, bad, c_hat, rho)
        with pytest.raises(InvalidShare):
            fv.verify_share(x, bad[0], coms[0])
    monkeypatch_module.setattr(V, "AVAILABLE", True)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_secret_values_never_reach_the_variable_time_path():
    # Only Feldman's public evaluation computes with it (a DH or mask secret must never be exponentiated
    # here); the benchmarks' helper only switches it off to time the libsodium path beside it.
    package = os.path.dirname(os.path.dirname(fv.__file__))
    users = {}
    for dirpath, _, files in os.walk(package):
        for f in files:
            if f.endswith(".py") and f != "vartime.py":
                text = open(os.path.join(dirpath, f), encoding="utf-8").read()
                uses = set(re.findall(r"vartime\.(\w+)", text))
                if uses:
                    users[os.path.relpath(os.path.join(dirpath, f), package)] = uses
    assert users.pop("crypto/feldman.py") >= {"horner", "decode", "equal"}
    assert users == {"bench/common.py": {"AVAILABLE"}}
