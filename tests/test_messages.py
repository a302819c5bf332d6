"""Every message type: encode/decode round trip, truncation, trailing bytes, fuzzed decoder."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.crypto.group import get_group
from reshuffle.crypto.shamir import Share
from reshuffle.crypto.signatures import CertificateAuthority, SigningKey
from reshuffle.errors import DecodeError, InvalidSignature, ProtocolError
from reshuffle.protocol import messages as msg
from reshuffle.protocol.groups import ASSIGNMENT_TYPES
from reshuffle.protocol.messages import ShareKind
from reshuffle.protocol.params import RoundParams

G = get_group()
P = RoundParams.default(4, 10)
CTX = msg.Context(G, P)
CA = CertificateAuthority.generate()
SK = SigningKey.generate()
CERT = CA.issue(0, SK.verify_key)
E = G.hash_to_group(b"test", b"e")
H = bytes(range(32))


def samples():
    return [
        msg.RoundStart(1, 0, 0xFFFFFFFF, P, H, CERT, tuple((i, CERT) for i in range(4)), E, 7, E),
        msg.Advertise(1, 0, 2, H, P.digest(), E, ((E,) * P.t,) * (2 * P.M), H),
        msg.AdvertiseList(1, 0, 0xFFFFFFFF, (b"a", b"bc")),
        msg.ShareBundle(1, 0, 2, ((0, b"x" * 40), (1, b"y" * 40)), (E,) * P.t),
        msg.ShareDelivery(1, 0, 0xFFFFFFFF, (0, 1, 3), b"table", H, ((0, H, (E,) * P.t), (3, H, (E,) * P.t)),
                          ((0, b"c" * 30),)),
        msg.OTRequestMsg(1, 0, 3, b"req", E, (0, 2)),
        msg.OTRequestMsg(1, 0, 3, b"req", E, (0, 2), E),
        msg.OTResponseMsg(1, 0, 0xFFFFFFFF, b"resp", b"p" * 64, E, b"q" * 64, ((2, b"answer"),)),
        msg.OTResponseMsg(1, 0, 0xFFFFFFFF, b"resp", b"p" * 64, E, b"q" * 64, (), E, b"r" * 64),
        msg.Complaints(1, 0, 0xFFFFFFFF, (0, 3)),
        msg.ComplaintAnswer(1, 0, 2, ((0, tuple(range(2 * P.M))), (3, tuple(range(5, 5 + 2 * P.M))))),
        msg.MaskRequest(1, 2, 0xFFFFFFFF, tuple(range(P.n))),
        msg.MaskRequest(1, 1, 0xFFFFFFFF, (), (1, 3)),
        msg.MaskedInput(1, 2, 1, H, 2, bytes(range(40))),
        msg.UnmaskRequest(1, 2, 0xFFFFFFFF, (0, 2, 3)),
        msg.Consent(1, 2, 3, bytes(range(64))),
        msg.CertificateMsg(1, 2, 0xFFFFFFFF, (0, 2, 3), ((0, bytes(64)), (3, b"s" * 64))),
        msg.UnmaskResponse(1, 2, 1, ((0, ShareKind.SELF_SEED, Share(2, 5)), (3, ShareKind.DH_SECRET, Share(2, 9)))),
        msg.BlameRequest(1, 5, 0xFFFFFFFF, H, (3, 7), ((b"v1",),) * P.R_max, (((0, 5),),) * P.R_max,
                         (((1, 9),),) * P.R_max),
        msg.Opening(1, 5, 2, H, ((0, E), (1, E)), ((3, ((0, H), (1, H))), (7, ((1, H), (0, H))))),
        msg.Dispute(1, 5, 0xFFFFFFFF, 4, b"signed opening"),
        msg.DisputeAnswer(1, 5, 2, 4, E, b"p" * 64),
        msg.Refusal(1, 2, 1, "Refused", "no"),
        msg.OpenRequest(1, 2, 0xFFFFFFFF, "counts of iteration 2 exceed the bound"),
        msg.OpenReveal(1, 2, 1, 12345, ((0, E), (3, E))),
        msg.Objection(1, 3, 2, 7, H),
        msg.Restart(1, 3, 0xFFFFFFFF, 2, b"table", H, (b"evidence-1", b"evidence-2"), (0, 3)),
        msg.SlotRequest(1, 3, 2, b"req"),
        msg.SlotResponse(1, 3, 0xFFFFFFFF, b"resp", b"p" * 64),
        # The DC-net round of a stable group (protocol/dcnet.py).
        msg.DCStart(1, 0, 0xFFFFFFFF, P, H, CERT, tuple((i, CERT) for i in range(4)), E, 7, E, H),
        msg.DCKey(1, 0, 2, H, P.digest(), H, E, H, E),
        msg.DCKey(1, 0, 2, H, P.digest(), H, E, H, E, E),
        msg.DCKeys(1, 1, 0xFFFFFFFF, (b"k1", b"k2"), E, b"q" * 64),
        msg.DCKeys(1, 1, 0xFFFFFFFF, (b"k1",), E, b"q" * 64, E, b"r" * 64),
        msg.DCCounts(1, 2, 0xFFFFFFFF, tuple(range(P.n))),
        msg.DCUploadRequest(1, 5, 0xFFFFFFFF, tuple(range(P.n))),
        msg.DCBlame(1, 5, 0xFFFFFFFF, H, (1, 3), (b"v1", b"v2")),
        msg.DCOpening(1, 5, 2, H, ((1, 0, H), (1, 3, H))),
        msg.DCExclude(1, 0, 0xFFFFFFFF, 2, b"evidence"),
    ]


def test_every_message_type_has_a_sample():
    # The group assignment's messages have theirs in tests/test_groups.py.
    assert {m.TYPE for m in samples()} == set(msg.MsgType) - ASSIGNMENT_TYPES


@pytest.mark.parametrize("m", samples(), ids=lambda m: m.TYPE.name)
def test_peek_header_reads_what_decode_reads(m):
    enc = m.encode(SK)
    got = msg.decode(enc, CTX)
    assert msg.peek_header(enc) == (msg.VERSION, m.TYPE, got.T, got.m, got.sender)
    # Shorter than a header: nothing to read; an unknown type byte reads as None.
    assert msg.peek_header(enc[: msg.HEADER_BYTES - 1]) is None
    assert msg.peek_header(enc[:1] + bytes([250]) + enc[2:]).type is None


@pytest.mark.parametrize("m", samples(), ids=lambda m: m.TYPE.name)
def test_signature_covers_every_byte(m):
    # Prepare: a message signed by its sender.
    enc = m.encode(SK)
    msg.verify(msg.decode(enc, CTX), SK.verify_key)
    # Execute / Assert: any single flipped bit fails to parse, fails the signature, or (a masked
    # vector's words) fails its signed row hash.
    for i in range(0, len(enc), max(1, len(enc) // 40)):
        bad = bytearray(enc)
        bad[i] ^= 0x10
        with pytest.raises(ProtocolError):
            got = msg.decode(bytes(bad), CTX)
            msg.verify(got, SK.verify_key)
            if isinstance(got, msg.MaskedInput):
                msg.check_rows(got)
    with pytest.raises(InvalidSignature):
        msg.verify(msg.decode(enc, CTX), SigningKey.generate().verify_key)


def test_row_hashes_travel_signed_and_rows_are_held_to_them():
    mi = msg.MaskedInput(1, 5, 2, H, 4, bytes(range(64)))
    enc = bytearray(mi.encode(SK))
    d = msg.decode(bytes(enc), CTX)
    msg.verify(d, SK.verify_key)
    msg.check_rows(d)  # every row matches its signed hash
    enc[-64 - 1] ^= 0xFF  # last byte of row 3, signature untouched: still verifies, row 3 does not
    bad = msg.decode(bytes(enc), CTX)
    msg.verify(bad, SK.verify_key)
    msg.check_rows(bad, [0, 1, 2])
    with pytest.raises(DecodeError, match="row 3"):
        msg.check_rows(bad, [3])


def test_masked_input_signature_is_per_row_and_binds_h():
    # A row of a signed masked vector can be shown with the other rows' hashes only.
    mi = msg.MaskedInput(1, 5, 2, H, 4, bytes(range(64)))
    d = msg.decode(mi.encode(SK), CTX)
    stmt, _ = msg.signature_of(d)
    assert stmt.endswith(msg.row_digest(bytes(range(64)), 4))
    other_h = msg.decode(msg.MaskedInput(1, 5, 2, bytes(32), 4, bytes(range(64))).encode(SK), CTX)
    assert msg.signature_of(other_h)[0] != stmt
    with pytest.raises(DecodeError, match="rows"):
        msg.decode(msg.MaskedInput(1, 5, 2, H, 3, bytes(64)).encode(SK), CTX)


@pytest.mark.parametrize("m", samples(), ids=lambda m: m.TYPE.name)
def test_roundtrip_and_every_truncation(m):
    enc = m.encode()
    assert msg.decode(enc, CTX) == m
    for cut in range(len(enc)):
        with pytest.raises(ProtocolError):
            msg.decode(enc[:cut], CTX)
    with pytest.raises(DecodeError, match="trailing"):
        msg.decode(enc + b"\x00", CTX)


def test_bounds_against_params():
    with pytest.raises(DecodeError, match="counts"):
        msg.decode(msg.MaskRequest(1, 2, 0, tuple(range(P.n + 1))).encode(), CTX)
    with pytest.raises(DecodeError, match="commits to"):
        msg.decode(msg.Advertise(1, 0, 2, H, P.digest(), E, ((E,) * P.t,) * 2, H).encode(), CTX)
    with pytest.raises(DecodeError, match="sorted"):
        msg.decode(msg.UnmaskRequest(1, 2, 0, (3, 1)).encode(), CTX)
    with pytest.raises(DecodeError, match="repeated"):
        msg.decode(msg.UnmaskRequest(1, 2, 0, (1, 1)).encode(), CTX)
    with pytest.raises(DecodeError, match="repeats a signer"):
        msg.decode(msg.CertificateMsg(1, 2, 0, (1, 2), ((1, bytes(64)), (1, bytes(64)))).encode(), CTX)
    with pytest.raises(DecodeError, match="roster"):
        rs = msg.RoundStart(1, 0, 0, P, H, CERT, tuple((i, CERT) for i in range(3)), E, 0, E)
        msg.decode(rs.encode(), CTX)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_decoder_raises_only_protocol_errors(data):
    try:
        msg.decode(data, CTX)
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(samples()), st.data())
def test_fuzzed_mutations_raise_only_protocol_errors(m, data):
    enc = bytearray(m.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(enc) - 1))
        enc[i] = data.draw(st.integers(0, 255))
    try:
        msg.decode(bytes(enc), CTX)
    except ProtocolError:
        pass


def test_params_roundtrip_and_rejection():
    assert RoundParams.decode(P.encode()) == P
    bad = RoundParams(4, 10, 16, 8, 1)  # t = 1 <= (N + c)/2: never valid
    with pytest.raises(DecodeError, match="threshold"):
        RoundParams.decode(bad.encode())
