"""Compact round state and the cheaper public-key paths of a large round, such as N = 1,000 in groups of 50.

Each mechanism must give exactly what the slower path gave, and must not skip a check:
fixed-base g^s, the dealer's Ĉ from its coefficients, Feldman weights from an
advertisement's own bytes, relayed advertisements parsed once per process, and the
participant's dealing state dropped once setup is over.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.crypto import feldman as fv
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import get_group
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.signatures import SigningKey
from reshuffle.errors import ConfigError, DecodeError, InvalidElement, InvalidSignature
from reshuffle.games.toy import ToyGroup
from reshuffle.protocol import messages as msg
from reshuffle.protocol.complaints import Dealer, combined_for, own_combined
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.participant import PPhase

from tests.protocol_helpers import make_updates

G = get_group("ristretto255")
CTX = label("test/scale-state", 3, 1)


# ------------------------------------------------------------- fixed-base g^s
@settings(max_examples=40, deadline=None)
@given(s=st.one_of(st.integers(0, 20), st.integers(0, 2**260), st.just(G.order - 1), st.just(G.order)))
def test_fixed_base_equals_generic_exponentiation(s):
    # Execute
    fast, generic = G.base_mul(s), G.generator() ** s
    # Assert: same element, including s = 0 (the identity) and s reduced mod q
    assert fast.to_bytes() == generic.to_bytes()


def test_fixed_base_zero_is_the_identity():
    assert G.base_mul(0).is_identity and G.base_mul(G.order).is_identity


# ------------------------------------------------------------- dealer's Ĉ from its coefficients
TOY = ToyGroup.schnorr(41)


@settings(max_examples=30, deadline=None)
@given(S=st.integers(1, 5), t=st.integers(1, 6), seed=st.integers(0, 2**32))
def test_combine_from_coefficients_equals_combine(S, t, seed):
    # Prepare: S polynomials of t coefficients and their commitments
    rng = SeededRandom(seed)
    for group in (TOY, G):
        coeffs = [[group.random_scalar(rng) for _ in range(t)] for _ in range(S)]
        coms = [[group.base_mul(a) for a in row] for row in coeffs]
        rho = fv.weights(coms, seed % 97, CTX)
        # Execute / Assert
        assert fv.combine_from_coefficients(group, coeffs, rho) == fv.combine(coms, rho)


def test_combine_from_coefficients_rejects_mismatched_shapes():
    with pytest.raises(ConfigError, match="weights"):
        fv.combine_from_coefficients(G, [[1, 2], [3, 4]], [5])
    with pytest.raises(ConfigError, match="same number"):
        fv.combine_from_coefficients(G, [[1, 2], [3]], [5, 6])


def _advert(M=2, t=4, seed=1):
    """A signed advertisement with real commitments, its coefficients, params and decoding context."""
    p = RoundParams.default(5, 4, t=t, R_max=M - 1)
    rng = SeededRandom(seed)
    coeffs = [[G.random_scalar(rng) for _ in range(t)] for _ in range(2 * M)]
    coms = tuple(tuple(G.base_mul(a) for a in row) for row in coeffs)
    sk = SigningKey.from_seed(bytes([seed]) * 32)
    a = msg.Advertise(1, 0, 2, bytes(32), p.digest(), G.base_mul(7), coms, bytes(32))
    return a, coeffs, a.encode(sk), sk, msg.Context(G, p)


def test_dealer_combined_from_polynomials_matches_the_public_combination():
    # Prepare
    a, coeffs, raw, _, ctx = _advert()
    digest = bytes(range(32))
    # Execute / Assert: the dealer's cheap Ĉ is the one every recipient recomputes from the commitments
    assert own_combined(a, digest, coeffs) == combined_for(msg.decode(raw, ctx), digest)


# ------------------------------------------------------------- weights from the advertisement's bytes
def test_decoded_advert_keeps_exactly_the_commitment_encoding():
    a, _, raw, _, ctx = _advert()
    d = msg.decode(raw, ctx)
    assert d.commitments_encoding() == fv.encode_commitments(a.commitments) == a.commitments_encoding()
    assert Dealer(d, bytes(32), ()).rho() == fv.weights(a.commitments, 2, label("feldman/round", 1) + bytes(32))


def test_weights_refuse_an_encoding_of_another_shape():
    a, _, _, _, _ = _advert()
    enc = fv.encode_commitments(a.commitments)
    assert fv.weights(a.commitments, 2, CTX, enc) == fv.weights(a.commitments, 2, CTX)
    with pytest.raises(ConfigError, match="encoded commitments"):
        fv.weights(a.commitments, 2, CTX, enc[:-1])
    with pytest.raises(ConfigError, match="encoded commitments"):
        fv.weights(a.commitments, 2, CTX, b"\x00\x09" + enc[2:])


# ------------------------------------------------------------- relayed advertisements parsed once per process
def test_decode_shared_returns_one_object_that_still_needs_its_signature_checked():
    # Prepare
    _, _, raw, sk, ctx = _advert(seed=3)
    # Execute
    first, second = msg.decode_shared(raw, ctx), msg.decode_shared(bytes(raw), ctx)
    # Assert: one parse, and each recipient's own signature check still runs and can fail
    assert first is second
    msg.verify(first, sk.verify_key)
    with pytest.raises(InvalidSignature):
        msg.verify(second, SigningKey.from_seed(bytes(32)).verify_key)


def test_decode_shared_validates_every_element_and_remembers_no_failure():
    # Prepare: an advertisement whose last commitment is replaced by the identity encoding
    _, _, raw, _, ctx = _advert(seed=4)
    bad = raw[: -64 - 32] + bytes(32) + raw[-64:]
    # Execute / Assert: refused every time (a failure is never cached)
    for _ in range(2):
        with pytest.raises(InvalidElement):
            msg.decode_shared(bad, ctx)
    with pytest.raises(DecodeError):
        msg.decode_shared(raw[:-1], ctx)


def test_decode_shared_keys_on_the_round_parameters():
    # Prepare: the same bytes under parameters whose t differs from the advertised one
    _, _, raw, _, ctx = _advert(seed=5)
    other = msg.Context(G, ctx.params.with_(t=5))
    msg.decode_shared(raw, ctx)
    # Execute / Assert: not served from the first context's entry
    with pytest.raises(DecodeError, match="degree"):
        msg.decode_shared(raw, other)


# ------------------------------------------------------------- participant state after setup
def test_participants_share_adverts_and_drop_dealing_state_after_setup():
    # Prepare: one real in-process round of 8
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner

    ups = make_updates(8, d=6, seed=1)
    server, parts = build_round(ups, RoundParams.default(8, 6, R_max=2), seed=4)
    # Execute
    InProcessRunner(server, parts).run()
    # Assert: every model delivered, dealing state gone, peers' advertisements shared
    assert len(server.output.models) == 8
    a, b = parts[0], parts[1]
    assert a.phase is PPhase.DONE
    assert a.state.dealers is None and a.state.dealing is None
    assert a.state.peers.adverts[5] is b.state.peers.adverts[5]
    assert all(len(ys) == 2 * server.params.M and all(isinstance(y, int) for y in ys)
               for ys in a.state.held.values())


# ------------------------------------------------------------- the masks' floor in bench round
def test_mask_floor_wall_sums_every_member_of_every_group_over_the_workers(monkeypatch):
    # Prepare: a stand-in timer (words × streams µs) and groups of 3 and 2 members of different lengths
    from reshuffle.bench import round as rb

    monkeypatch.setattr(rb, "_keystream_add_time", lambda L, U, repeat: L * U * 1e-6)
    groups = [(3, 100, None), (2, 80, None), (3, 100, None)]
    # Execute
    one, wall = rb._mask_floor_wall(groups, 2, 1)
    # Assert: one member of the largest group; all 8 members' time over 2 workers
    assert one == pytest.approx(300e-6)
    assert wall == pytest.approx((3 * 300e-6 + 2 * 160e-6 + 3 * 300e-6) / 2)


def test_keystream_add_floor_is_a_part_of_the_real_mask(monkeypatch):
    # Prepare: count the keystream words each expands, and the keys the real mask derives
    # (the benchmark prints the ratio of their times; a test compares the work, not the clock)
    from reshuffle.bench import round as rb
    from reshuffle.crypto import prg
    from reshuffle.protocol import masking

    words, keys = {"n": 0}, {"n": 0}
    real_accumulate, real_derive = prg.accumulate_streams, masking.KeyDeriver.key

    def accumulate(acc, keyed, **kw):
        words["n"] += acc.size * len(keyed)
        return real_accumulate(acc, keyed, **kw)

    def derive(self, domain):
        keys["n"] += 1
        return real_derive(self, domain)

    monkeypatch.setattr(rb, "accumulate_streams", accumulate)
    monkeypatch.setattr(masking, "accumulate_streams", accumulate)
    monkeypatch.setattr(masking.KeyDeriver, "key", derive)
    L, N, rows = 3 * 4096, 4, 3
    # Execute: one expansion each
    rb._keystream_add_time(L, N, 1)
    floor_words, floor_keys = words["n"], keys["n"]
    words["n"] = keys["n"] = 0
    rb._mask_time(N, L, rows, 1)
    # Assert: the same keystream (N streams of L words), and only the real mask derives a key per row and stream
    assert floor_words == words["n"] == N * L
    assert floor_keys == 0 and keys["n"] == rows * N


def test_ps_times_its_sum_and_unmask_in_cpu_seconds_too():
    # Prepare / Execute: one small real round
    import reshuffle

    r = reshuffle.shuffle(make_updates(6, d=2000, seed=2), seed=3, R_max=2)
    t = r.output.timings
    # Assert: both clocks ran, and one thread's CPU time cannot exceed the wall time around it
    for op in ("sum", "unmask"):
        assert 0 < t[f"ps_{op}_cpu_s"] <= t[f"ps_{op}_s"] + 1e-3


# ------------------------------------------------------------- UNMASK_RESPONSE parsed in one read
def test_unmask_response_parse_keeps_every_check():
    # Prepare: a response of two shares, and three defective variants of its bytes
    from reshuffle.crypto.shamir import Share
    from reshuffle.errors import InvalidShare

    _, _, _, _, ctx = _advert()
    shares = ((1, msg.ShareKind.SELF_SEED, Share(3, 5)), (4, msg.ShareKind.DH_SECRET, Share(3, G.order - 1)))
    raw = msg.UnmaskResponse(1, 2, 2, shares).encode()
    body = msg.HEADER_BYTES + 4  # first entry: owner u32 | kind u8 | x u32 | y 32 bytes
    bad_kind = raw[: body + 4] + b"\x07" + raw[body + 5 :]
    unreduced = raw[: body + 41 + 9] + G.order.to_bytes(32, "big") + raw[body + 41 + 41 :]
    # Execute / Assert
    assert msg.decode(raw, ctx).shares == shares
    with pytest.raises(DecodeError, match="share kind 7"):
        msg.decode(bad_kind, ctx)
    with pytest.raises(InvalidShare, match="not reduced"):
        msg.decode(unreduced, ctx)
    with pytest.raises(DecodeError):
        msg.decode(raw[: body + 40], ctx)  # the entries cut short


def test_masked_input_single_copy_encoding_is_the_canonical_signed_message():
    # Prepare: an upload of 3 rows
    sk = SigningKey.from_seed(bytes([9]) * 32)
    mi = msg.MaskedInput(1, 3, 2, bytes(range(32)), 3, bytes(range(240)) * 2)
    # Execute
    raw = mi.encode(sk)
    back = msg.decode(raw, msg.Context(G, RoundParams.default(5, 4)))
    # Assert: header | body | signature, the signature over the row hashes verifies, relaying gives the same bytes
    assert raw[:-64] == mi.header() + mi.body()
    msg.verify(back, sk.verify_key)
    assert msg.relay_bytes(back) == raw and bytes(back.words) == mi.words


def test_relayed_combined_rows_are_validated_and_shared_between_recipients():
    # Prepare: two members' deliveries carrying the same dealer's Ĉ, and one whose Ĉ holds the identity
    _, _, _, _, ctx = _advert()
    c_hat = tuple(G.base_mul(k + 2) for k in range(ctx.params.t))

    def delivery(to, row):
        return msg.ShareDelivery(1, 0, 0xFFFFFFFF, (0, 1, 2), b"table", bytes(32), ((2, bytes(32), row),),
                                 ((to, b"c" * 30),)).encode()

    bad = delivery(0, c_hat).replace(c_hat[1].to_bytes(), bytes(32))
    # Execute
    a, b = msg.decode(delivery(0, c_hat), ctx), msg.decode(delivery(1, c_hat), ctx)
    # Assert: one decoded row for both, equal to what was sent; a bad element is refused every time
    assert a.dealers[0][2] is b.dealers[0][2] and a.dealers[0][2] == c_hat
    for _ in range(2):
        with pytest.raises(InvalidElement, match=r"combined\[1\]"):
            msg.decode(bad, ctx)
