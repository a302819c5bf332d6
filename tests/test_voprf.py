"""RFC 9497 OPRF/VOPRF: Appendix A vectors (ristretto255-SHA512), DLEQ attacks, properties."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.crypto import voprf as v
from reshuffle.crypto.group import get_group
from reshuffle.crypto.rand import SeededRandom
from reshuffle.errors import ConfigError, DecodeError, InvalidElement, InvalidProof, InvalidScalar
from reshuffle.games.toy import ToyGroup

# RFC 9497 Appendix A.1 (ristretto255-SHA512); facts copied as published.
SEED = "a3" * 32
KEY_INFO = "74657374206b6579"
BLIND_1 = "64d37aed22a27f5191de1c1d69fadb899d8862b58eb4220029e036ec4c1f6706"
BLIND_2 = "222a5e897cf59db8145db8d16e597e8facb80ae7d4e26d9881aa6f61d645fc0e"
IN_1, IN_2 = "00", "5a" * 17

OPRF_SK = "5ebcea5ee37023ccb9fc2d2019f9d7737be85591ae8652ffa9ef0f4d37063b0e"
OPRF_VECTORS = [  # (input, blind, blinded, evaluated, output)
    (IN_1, BLIND_1,
     "609a0ae68c15a3cf6903766461307e5c8bb2f95e7e6550e1ffa2dc99e412803c",
     "7ec6578ae5120958eb2db1745758ff379e77cb64fe77b0b2d8cc917ea0869c7e",
     "527759c3d9366f277d8c6020418d96bb393ba2afb20ff90df23fb7708264e2f3"
     "ab9135e3bd69955851de4b1f9fe8a0973396719b7912ba9ee8aa7d0b5e24bcf6"),
    (IN_2, BLIND_1,
     "da27ef466870f5f15296299850aa088629945a17d1f5b7f5ff043f76b3c06418",
     "b4cbf5a4f1eeda5a63ce7b77c7d23f461db3fcab0dd28e4e17cecb5c90d02c25",
     "f4a74c9c592497375e796aa837e907b1a045d34306a749db9f34221f7e750cb4"
     "f2a6413a6bf6fa5e19ba6348eb673934a722a7ede2e7621306d18951e7cf2c73"),
]

VOPRF_SK = "e6f73f344b79b379f1a0dd37e07ff62e38d9f71345ce62ae3a9bc60b04ccd909"
VOPRF_PK = "c803e2cc6b05fc15064549b5920659ca4a77b2cca6f04f6b357009335476ad4e"
OUT_1 = ("b58cfbe118e0cb94d79b5fd6a6dafb98764dff49c14e1770b566e42402da1a7d"
         "a4d8527693914139caee5bd03903af43a491351d23b430948dd50cde10d32b3c")
OUT_2 = ("8a9a2f3c7f085b65933594309041fc1898d42d0858e59f90814ae90571a6df60"
         "356f4610bf816f27afdd84f47719e480906d27ecd994985890e5f539e7ea74b6")
EV_1 = "aa8fa048764d5623868679402ff6108d2521884fa138cd7f9c7669a9a014267e"
VOPRF_VECTORS = [  # (inputs, blinds, blinded, evaluated, proof, proof random scalar, outputs)
    ([IN_1], [BLIND_1], ["863f330cc1a1259ed5a5998a23acfd37fb4351a793a5b3c090b642ddc439b945"], [EV_1],
     "ddef93772692e535d1a53903db24367355cc2cc78de93b3be5a8ffcc6985dd06"
     "6d4346421d17bf5117a2a1ff0fcb2a759f58a539dfbe857a40bce4cf49ec600d", BLIND_2, [OUT_1]),
    ([IN_2], [BLIND_1], ["cc0b2a350101881d8a4cba4c80241d74fb7dcbfde4a61fde2f91443c2bf9ef0c"],
     ["60a59a57208d48aca71e9e850d22674b611f752bed48b36f7a91b372bd7ad468"],
     "401a0da6264f8cf45bb2f5264bc31e109155600babb3cd4e5af7d181a2c9dc0a"
     "67154fabf031fd936051dec80b0b6ae29c9503493dde7393b722eafdf5a50b02", BLIND_2, [OUT_2]),
    ([IN_1, IN_2], [BLIND_1, BLIND_2],
     ["863f330cc1a1259ed5a5998a23acfd37fb4351a793a5b3c090b642ddc439b945",
      "90a0145ea9da29254c3a56be4fe185465ebb3bf2a1801f7124bbbadac751e654"],
     [EV_1, "cc5ac221950a49ceaa73c8db41b82c20372a4c8d63e5dded2db920b7eee36a2a"],
     "cc203910175d786927eeb44ea847328047892ddf8590e723c37205cb74600b0a"
     "5ab5337c8eb4ceae0494c2cf89529dcf94572ed267473d567aeed6ab873dee08",
     "419c4f4f5052c53c45f3da494d2b67b220d02118e0857cdbcf037f9ea84bbe0c", [OUT_1, OUT_2]),
]

CTX = b"reshuffle/test/dleq"


@pytest.fixture(scope="module")
def g():
    return get_group("ristretto255")


def _el(g, hx):
    return g.element_from_bytes(bytes.fromhex(hx))


def test_context_strings(g):
    assert v.Suite(g, v.MODE_OPRF).context == b"OPRFV1-\x00-ristretto255-SHA512"
    assert v.Suite(g, v.MODE_VOPRF).context == b"OPRFV1-\x01-ristretto255-SHA512"
    with pytest.raises(ConfigError, match="mode"):
        v.Suite(g, 2)


@pytest.mark.parametrize("mode,sk_hex", [(v.MODE_OPRF, OPRF_SK), (v.MODE_VOPRF, VOPRF_SK)])
def test_rfc_derive_key_pair(g, mode, sk_hex):
    suite = v.Suite(g, mode)
    sk, pk = v.derive_key_pair(suite, bytes.fromhex(SEED), bytes.fromhex(KEY_INFO))
    assert suite.serialize_scalar(sk).hex() == sk_hex
    if mode == v.MODE_VOPRF:
        assert pk.to_bytes().hex() == VOPRF_PK


@pytest.mark.parametrize("vec", OPRF_VECTORS)
def test_rfc_oprf_vectors(g, vec):
    # Prepare
    inp, bl, blinded_hex, ev_hex, out_hex = vec
    suite = v.Suite(g, v.MODE_OPRF)
    sk = suite.deserialize_scalar(bytes.fromhex(OPRF_SK))
    # Execute
    b, blinded = v.blind(suite, bytes.fromhex(inp), blind=suite.deserialize_scalar(bytes.fromhex(bl)))
    evaluated, proof = v.blind_evaluate(suite, sk, [blinded])
    out = v.finalize(suite, [bytes.fromhex(inp)], [b], evaluated)
    # Assert
    assert blinded.to_bytes().hex() == blinded_hex
    assert evaluated[0].to_bytes().hex() == ev_hex and proof is None
    assert out[0].hex() == out_hex == v.evaluate(suite, sk, bytes.fromhex(inp)).hex()


@pytest.mark.parametrize("vec", VOPRF_VECTORS, ids=["batch1-a", "batch1-b", "batch2"])
def test_rfc_voprf_vectors(g, vec):
    # Prepare
    inputs, blinds, blinded_hex, ev_hex, proof_hex, r_hex, outs = vec
    suite = v.Suite(g, v.MODE_VOPRF)
    sk = suite.deserialize_scalar(bytes.fromhex(VOPRF_SK))
    pk = _el(g, VOPRF_PK)
    xs = [bytes.fromhex(x) for x in inputs]
    # Execute
    pairs = [v.blind(suite, x, blind=suite.deserialize_scalar(bytes.fromhex(b))) for x, b in zip(xs, blinds)]
    blinded = [B for _, B in pairs]
    evaluated, proof = v.blind_evaluate(suite, sk, blinded, pk, r=suite.deserialize_scalar(bytes.fromhex(r_hex)))
    # Assert: every intermediate value and the proof bytes
    assert [B.to_bytes().hex() for B in blinded] == blinded_hex
    assert [E.to_bytes().hex() for E in evaluated] == ev_hex
    assert proof.encode(g).hex() == proof_hex
    # the client side, from the wire encodings of the vectors
    received = [_el(g, h) for h in ev_hex]
    decoded = v.Proof.decode(g, bytes.fromhex(proof_hex))
    out = v.finalize(suite, xs, [b for b, _ in pairs], received, blinded, pk, decoded)
    assert [o.hex() for o in out] == outs
    assert [v.evaluate(suite, sk, x).hex() for x in xs] == outs


def _batch(g, k, m, seed=1):
    rng = SeededRandom(seed)
    Cs = [g.hash_to_group(b"test", bytes([i])) ** g.random_scalar(rng) for i in range(m)]
    return Cs, [C**k for C in Cs]


def test_voprf_finalize_rejects_proof_for_another_key(g):
    # Prepare: the server evaluates under sk but shows pk' of another key
    suite = v.Suite(g)
    sk, pk = v.derive_key_pair(suite, bytes(32), b"a")
    _, pk_other = v.derive_key_pair(suite, bytes(32), b"b")
    b, B = v.blind(suite, b"row")
    ev, proof = v.blind_evaluate(suite, sk, [B])
    # Execute / Assert
    with pytest.raises(InvalidProof):
        v.finalize(suite, [b"row"], [b], ev, [B], pk_other, proof)
    # and a proof made with the other key over the right answers fails too
    sk2, pk2 = v.derive_key_pair(suite, bytes(32), b"b")
    _, proof2 = v.blind_evaluate(suite, sk2, [B])
    with pytest.raises(InvalidProof):
        v.finalize(suite, [b"row"], [b], ev, [B], pk, proof2)


def test_dleq_rejects_reordered_and_replaced_outputs(g):
    # Prepare: an honest batch proof over k = 8 OT answers
    k = g.random_scalar(SeededRandom(3))
    A, B = g.generator(), g.base_mul(k)
    Cs, Ds = _batch(g, k, 8)
    proof = v.prove_dleq(k, A, B, Cs, Ds, SeededRandom(4), CTX)
    v.verify_dleq(A, B, Cs, Ds, proof, CTX)
    # Execute / Assert: swapped answers (each still a correct power, wrong order)
    swapped = [Ds[1], Ds[0]] + Ds[2:]
    with pytest.raises(InvalidProof):
        v.verify_dleq(A, B, Cs, swapped, proof, CTX)
    # one answer replaced by another key's power
    replaced = Ds[:5] + [Cs[5] ** (k + 1)] + Ds[6:]
    with pytest.raises(InvalidProof):
        v.verify_dleq(A, B, Cs, replaced, proof, CTX)
    # ... even with a fresh proof made by a prover that knows k: the statement is false
    with pytest.raises(InvalidProof):
        v.verify_dleq(A, B, Cs, replaced, v.prove_dleq(k, A, B, Cs, replaced, None, CTX), CTX)
    # dropping a pair changes the statement
    with pytest.raises(InvalidProof):
        v.verify_dleq(A, B, Cs[:-1], Ds[:-1], proof, CTX)


def test_dleq_bound_to_context_and_base(g):
    k = 12345
    A = g.hash_to_group(b"test", b"X_j")  # §9: K_ij = X_j^{x_i} against X_i = g^{x_i}
    Cs, Ds = [A], [A**k]
    proof = v.prove_dleq(k, g.generator(), g.base_mul(k), Cs, Ds, None, CTX)
    v.verify_dleq(g.generator(), g.base_mul(k), Cs, Ds, proof, CTX)
    with pytest.raises(InvalidProof, match="context"):
        v.verify_dleq(g.generator(), g.base_mul(k), Cs, Ds, proof, CTX + b"/other-round")
    # the same proof claimed for another base (A^k = B for A' = A^2, B' = B^2 is also true)
    with pytest.raises(InvalidProof):
        v.verify_dleq(g.base_mul(2), g.base_mul(2 * k), Cs, Ds, proof, CTX)
    # a VOPRF-suite proof is not a generic one and vice versa
    vp = v.generate_proof(v.Suite(g), k, g.generator(), g.base_mul(k), Cs, Ds)
    with pytest.raises(InvalidProof):
        v.verify_dleq(g.generator(), g.base_mul(k), Cs, Ds, vp, CTX)
    with pytest.raises(ConfigError, match="context"):
        v.prove_dleq(k, g.generator(), g.base_mul(k), Cs, Ds, None, b"")


def test_proof_decoding_rejects_non_canonical_scalars(g):
    q = g.order
    good = v.Proof(5, 7).encode(g)
    assert v.Proof.decode(g, good) == v.Proof(5, 7)
    with pytest.raises(InvalidScalar, match="c"):
        v.Proof.decode(g, q.to_bytes(32, "little") + good[32:])
    with pytest.raises(InvalidScalar, match="s"):
        v.Proof.decode(g, good[:32] + (q + 7).to_bytes(32, "little"))
    with pytest.raises(DecodeError):
        v.Proof.decode(g, good[:-1])
    with pytest.raises(DecodeError, match="trailing"):
        v.Proof.decode(g, good + b"\x00")


def test_non_canonical_proof_scalar_rejected_by_verify(g):
    # s + q is the same exponent; accepting it would make proofs malleable
    k = 99
    A, B = g.generator(), g.base_mul(k)
    Cs, Ds = _batch(g, k, 2)
    p = v.prove_dleq(k, A, B, Cs, Ds, None, CTX)
    with pytest.raises(InvalidProof, match="reduced"):
        v.verify_dleq(A, B, Cs, Ds, v.Proof(p.c, p.s + g.order), CTX)


def test_identity_elements_rejected(g):
    k = 7
    A, B = g.generator(), g.base_mul(k)
    Cs, Ds = _batch(g, k, 2)
    ident = g.base_mul(0)
    assert ident.is_identity
    p = v.prove_dleq(k, A, B, Cs, Ds, None, CTX)
    with pytest.raises(InvalidProof, match=r"D\[1\] is the identity"):
        v.verify_dleq(A, B, Cs, [Ds[0], ident], p, CTX)
    # the zero key: B = 1, D = 1 would "prove" anything about nothing
    with pytest.raises(InvalidProof, match="B is the identity"):
        v.verify_dleq(A, ident, [Cs[0]], [ident], v.Proof(0, 0), CTX)
    with pytest.raises(InvalidElement):
        v.blind_evaluate(v.Suite(g), 5, [ident])
    # an OPRF-mode client (no proof) must not hash the identity as a PRF output
    b, B = v.blind(v.Suite(g, v.MODE_OPRF), b"x")
    with pytest.raises(InvalidElement, match="evaluated element 0"):
        v.finalize(v.Suite(g, v.MODE_OPRF), [b"x"], [b], [ident])
    with pytest.raises(InvalidElement):
        g.element_from_bytes(bytes(32))


def test_length_mismatch_and_foreign_group(g):
    k = 3
    Cs, Ds = _batch(g, k, 3)
    p = v.prove_dleq(k, g.generator(), g.base_mul(k), Cs, Ds, None, CTX)
    with pytest.raises(InvalidProof, match="3 inputs but 2"):
        v.verify_dleq(g.generator(), g.base_mul(k), Cs, Ds[:2], p, CTX)
    toy = ToyGroup.schnorr(41)
    with pytest.raises(InvalidProof, match="not an element"):
        v.verify_dleq(g.generator(), g.base_mul(k), Cs, Ds[:2] + [toy.generator()], p, CTX)


def test_finalize_checks_batch_lengths(g):
    suite = v.Suite(g)
    sk, pk = v.derive_key_pair(suite, bytes(32), b"")
    b1, B1 = v.blind(suite, b"x")
    b2, B2 = v.blind(suite, b"y")
    ev, proof = v.blind_evaluate(suite, sk, [B1, B2])
    with pytest.raises(InvalidProof, match="1 blinded elements for 2"):
        v.finalize(suite, [b"x", b"y"], [b1, b2], ev, [B1], pk, proof)
    with pytest.raises(ConfigError, match="needs the blinded"):
        v.finalize(suite, [b"x", b"y"], [b1, b2], ev)
    # a proof for the batch does not cover its first element alone
    with pytest.raises(InvalidProof):
        v.finalize(suite, [b"x"], [b1], ev[:1], [B1], pk, proof)


def test_blind_hides_input_and_unblinds(g):
    suite = v.Suite(g)
    sk, pk = v.derive_key_pair(suite, bytes(32), b"gamma")
    b1, B1 = v.blind(suite, b"same", rng=SeededRandom(1))
    b2, B2 = v.blind(suite, b"same", rng=SeededRandom(2))
    assert B1 != B2 and B1 != suite.hash_to_group(b"same")
    out = []
    for b, B in ((b1, B1), (b2, B2)):
        ev, proof = v.blind_evaluate(suite, sk, [B])
        out += v.finalize(suite, [b"same"], [b], ev, [B], pk, proof)
    assert out[0] == out[1] == v.evaluate(suite, sk, b"same")
    assert v.evaluate(suite, sk, b"other") != out[0]


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 6), k=st.integers(1, 2**252), seed=st.integers(0, 2**32))
def test_property_honest_batch_proof_verifies(m, k, seed):
    g = get_group("ristretto255")
    k %= g.order
    k = k or 1
    Cs, Ds = _batch(g, k, m, seed)
    rng = SeededRandom(seed + 1)
    A = g.hash_to_group(b"test", seed.to_bytes(8, "big"))
    proof = v.Proof.decode(g, v.prove_dleq(k, A, A**k, Cs, Ds, rng, CTX).encode(g))
    v.verify_dleq(A, A**k, Cs, Ds, proof, CTX)
    with pytest.raises(InvalidProof):
        v.verify_dleq(A, A ** (k + 1), Cs, Ds, proof, CTX)


def test_runs_on_a_toy_group():
    toy = ToyGroup.schnorr(41)
    suite = v.Suite(toy)
    assert suite.identifier == toy.name + "-SHA512"
    sk, pk = v.derive_key_pair(suite, bytes(toy.scalar_size), b"toy")
    b, B = v.blind(suite, b"in")
    ev, proof = v.blind_evaluate(suite, sk, [B])
    assert v.finalize(suite, [b"in"], [b], ev, [B], pk, proof) == [v.evaluate(suite, sk, b"in")]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=80))
def test_fuzz_proof_decoder_raises_only_protocol_errors(data):
    g = get_group("ristretto255")
    try:
        p = v.Proof.decode(g, data)
    except (DecodeError, InvalidScalar):
        return
    assert len(data) == 64 and p.encode(g) == data


def test_voprf_and_dleq_on_every_backend(group):
    # Prepare: the §9 statement K_ij = X_j^{x_i} against X_i, and one VOPRF round
    x_i, x_j = group.random_scalar(), group.random_scalar()
    X_i, X_j = group.base_mul(x_i), group.base_mul(x_j)
    K = X_j**x_i
    suite = v.Suite(group)
    sk, pk = v.derive_key_pair(suite, bytes(group.scalar_size), b"k")
    b, B = v.blind(suite, b"in")
    # Execute
    proof = v.Proof.decode(group, v.prove_dleq(x_i, group.generator(), X_i, [X_j], [K], None, CTX).encode(group))
    ev, vproof = v.blind_evaluate(suite, sk, [B])
    # Assert
    v.verify_dleq(group.generator(), X_i, [X_j], [K], proof, CTX)
    with pytest.raises(InvalidProof):  # a true statement, but the proof was made for another
        v.verify_dleq(group.generator(), X_j, [X_i], [K], proof, CTX)
    assert v.finalize(suite, [b"in"], [b], ev, [B], pk, vproof) == [v.evaluate(suite, sk, b"in")]
