"""Group backends: RFC vectors, validation of every decoded element, algebra."""

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.crypto.group import expand_message_xmd, get_group
from reshuffle.errors import ConfigError, InvalidElement, InvalidScalar

# RFC 9496 Appendix A.1: encodings of 0·B .. 15·B.
MULTIPLES = """
0000000000000000000000000000000000000000000000000000000000000000
e2f2ae0a6abc4e71a884a961c500515f58e30b6aa582dd8db6a65945e08d2d76
6a493210f7499cd17fecb510ae0cea23a110e8d5b901f8acadd3095c73a3b919
94741f5d5d52755ece4f23f044ee27d5d1ea1e2bd196b462166b16152a9d0259
da80862773358b466ffadfe0b3293ab3d9fd53c5ea6c955358f568322daf6a57
e882b131016b52c1d3337080187cf768423efccbb517bb495ab812c4160ff44e
f64746d3c92b13050ed8d80236a7f0007c3b3f962f5ba793d19a601ebb1df403
44f53520926ec81fbd5a387845beb7df85a96a24ece18738bdcfa6a7822a176d
903293d8f2287ebe10e2374dc1a53e0bc887e592699f02d077d5263cdd55601c
02622ace8f7303a31cafc63f8fc48fdc16e1c8c8d234b2f0d6685282a9076031
20706fd788b2720a1ed2a5dad4952b01f413bcf0e7564de8cdc816689e2db95f
bce83f8ba5dd2fa572864c24ba1810f9522bc6004afe95877ac73241cafdab42
e4549ee16b9aa03099ca208c67adafcafa4c3f3e4e5303de6026e3ca8ff84460
aa52e000df2e16f55fb1032fc33bc42742dad6bd5a8fc0be0167436c5948501f
46376b80f409b29dc2b5f6f0c52591990896e5716f41477cd30085ab7f10301e
e0c418f7c8d9c4cdd7395b93ea124f3ad99021bb681dfc3302a9d99a2e53e64e
""".split()

# RFC 9496 Appendix A.2: invalid encodings (non-canonical, negative, non-square, s = -1).
BAD = """
00ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff
ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f
f3ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f
edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f
0100000000000000000000000000000000000000000000000000000000000080
0100000000000000000000000000000000000000000000000000000000000000
01ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f
ed57ffd8c914fb201471d1c3d245ce3c746fcbe63a3679d51b6a516ebebe0e20
c34c4e1826e5d403b78e246e88aa051c36ccf0aafebffe137d148a2bf9104562
c940e5a4404157cfb1628b108db051a8d439e1a421394ec4ebccb9ec92a8ac78
47cfc5497c53dc8e61c91d17fd626ffb1c49e2bca94eed052281b510b1117a24
f1c6165d33367351b0da8f6e4511010c68174a03b6581212c71c0e1d026c3c72
87260f7a2f12495118360f02c26a470f450dadf34a413d21042b43b9d93e1309
26948d35ca62e643e26a83177332e6b6afeb9d08e4268b650f1f5bbd8d81d371
4eac077a713c57b4f4397629a4145982c661f48044dd3f96427d40b147d9742f
de6a7b00deadc788eb6b6c8d20c0ae96c2f2019078fa604fee5b87d6e989ad7b
bcab477be20861e01e4a0e295284146a510150d9817763caf1a6f4b422d67042
2a292df7e32cababbd9de088d1d1abec9fc0440f637ed2fba145094dc14bea08
f4a9e534fc0d216c44b218fa0c42d99635a0127ee2e53c712f70609649fdff22
8268436f8c4126196cf64b3c7ddbda90746a378625f9813dd9b8457077256731
2810e5cbc2cc4d4eece54f61c6f69758e289aa7ab440b3cbeaa21995c2f4232b
3eb858e78f5a7254d8c9731174a94f76755fd3941c0ac93735c07ba14579630e
a45fdc55c76448c049a1ab33f17023edfb2be3581e9c7aade8a6125215e04220
d483fe813c6ba647ebbfd3ec41adca1c6130c2beeee9d9bf065c8d151c5f396e
8a2e1d30050198c65a54483123960ccc38aef6848e1ec8f5f780e8523769ba32
32888462f8b486c68ad7dd9610be5192bbeaf3b443951ac1a8118419d9fa097b
227142501b9d4355ccba290404bde41575b037693cef1f438c47f8fbf35d1165
5c37cc491da847cfeb9281d407efc41e15144c876e0170b499a96a22ed31e01e
445425117cb8c90edcbc7c1cc0e74f747f2c1efa5630a967c64f287792a48a4b
ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f
""".split()

# RFC 9496 Appendix A.3: element derivation from 64 uniform bytes.
FROM_UNIFORM = [
    ("5d1be09e3d0c82fc538112490e35701979d99e06ca3e2b5b54bffe8b4dc772c14d98b696a1bbfb5ca32c436cc61c16563790306c79eaca7705668b47dffe5bb6",
     "3066f82a1a747d45120d1740f14358531a8f04bbffe6a819f86dfe50f44a0a46"),
    ("f116b34b8f17ceb56e8732a60d913dd10cce47a6d53bee9204be8b44f6678b270102a56902e2488c46120e9276cfe54638286b9e4b3cdb470b542d46c2068d38",
     "f26e5b6f7d362d2d2a94c5d0e7602cb4773c95a2e5c31a64f133189fa76ed61b"),
    ("8422e1bbdaab52938b81fd602effb6f89110e1e57208ad12d9ad767e2e25510c27140775f9337088b982d83d7fcf0b2fa1edffe51952cbe7365e95c86eaf325c",
     "006ccd2a9e6867e6a2c5cea83d3302cc9de128dd2a9a57dd8ee7b9d7ffe02826"),
    ("ac22415129b61427bf464e17baee8db65940c233b98afce8d17c57beeb7876c2150d15af1cb1fb824bbd14955f2b57d08d388aab431a391cfc33d5bafb5dbbaf",
     "f8f0c87cf237953c5890aec3998169005dae3eca1fbb04548c635953c817f92a"),
    ("165d697a1ef3d5cf3c38565beefcf88c0f282b8e7dbd28544c483432f1cec7675debea8ebb4e5fe7d6f6e5db15f15587ac4d4d4a1de7191e0c1ca6664abcc413",
     "ae81e7dedf20a497e10c304a765c1767a42d6e06029758d2d7e8ef7cc4c41179"),
]

# ristretto.group: SHA-512 of these labels, mapped with the one-way map.
LABELLED = [
    ("Ristretto is traditionally a short shot of espresso coffee",
     "3066f82a1a747d45120d1740f14358531a8f04bbffe6a819f86dfe50f44a0a46"),
    ("and is not a Ristretto as some believe.",
     "80bd07262511cdde4863f8a7434cef696750681cb9510eea557088f76d9e5065"),
]


def test_rfc9496_multiples_of_generator(ristretto):
    g = ristretto.generator()
    for i, enc in enumerate(MULTIPLES):
        assert (g**i).to_bytes().hex() == enc
        if i:
            assert ristretto.element_from_bytes(bytes.fromhex(enc)) == g**i


@pytest.mark.parametrize("enc", BAD)
def test_rfc9496_invalid_encodings_rejected(ristretto, enc):
    with pytest.raises(InvalidElement):
        ristretto.element_from_bytes(bytes.fromhex(enc))


@pytest.mark.parametrize("i", range(1, len(MULTIPLES)))
def test_high_bit_set_is_not_a_second_encoding(ristretto, i):
    # libsodium's validity check ignores bit 255; RFC 9496 rejects it (s must be < p), so one
    # element has exactly one accepted encoding and byte equality is element equality.
    enc = bytearray.fromhex(MULTIPLES[i])
    enc[31] |= 0x80
    with pytest.raises(InvalidElement, match="canonical"):
        ristretto.element_from_bytes(bytes(enc))


@pytest.mark.parametrize("uniform,expected", FROM_UNIFORM)
def test_rfc9496_from_uniform_bytes(ristretto, uniform, expected):
    assert ristretto.from_uniform_bytes(bytes.fromhex(uniform)).hex() == expected


@pytest.mark.parametrize("text,expected", LABELLED)
def test_one_way_map_of_labels(ristretto, text, expected):
    assert ristretto.from_uniform_bytes(hashlib.sha512(text.encode()).digest()).hex() == expected


def test_rfc9380_expand_message_xmd_sha512():
    dst = b"QUUX-V01-CS02-with-expander-SHA512-256"
    assert expand_message_xmd(b"", dst, 32).hex() == (
        "6b9a7312411d92f921c6f68ca0b6380730a1a4d982c507211a90964c394179ba"
    )
    assert expand_message_xmd(b"abc", dst, 32).hex() == (
        "0da749f12fbe5483eb066a5f595055679b976e93abe9be6f0f6318bce7aca8dc"
    )


def test_identity_rejected(group):
    ident = group.generator() ** 0
    assert ident.is_identity
    with pytest.raises(InvalidElement, match="identity"):
        group.element_from_bytes(ident.to_bytes())


def test_truncated_and_extended_rejected(group):
    enc = group.hash_to_group(b"t", b"x").to_bytes()
    for bad in (enc[:-1], enc + b"\x00", b"", enc[:1]):
        with pytest.raises(InvalidElement, match="bytes"):
            group.element_from_bytes(bad)


def test_non_bytes_rejected(group):
    with pytest.raises(InvalidElement):
        group.element_from_bytes("00" * group.element_size)


def test_secp256k1_specific_encodings():
    g = get_group("secp256k1")
    good = g.generator().to_bytes()
    with pytest.raises(InvalidElement, match="SEC1"):
        g.element_from_bytes(b"\x04" + good[1:])
    with pytest.raises(InvalidElement, match="reduced"):
        g.element_from_bytes(b"\x02" + b"\xff" * 32)
    # x = 5: 5^3 + 7 = 132 is not a square mod p, so no point has this x.
    with pytest.raises(InvalidElement, match="not a point"):
        g.element_from_bytes(b"\x02" + (5).to_bytes(32, "big"))


def test_generator_known_answer_secp256k1():
    g = get_group("secp256k1")
    assert g.generator().to_bytes().hex() == (
        "0279be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798"
    )


@settings(max_examples=25, deadline=None)
@given(a=st.integers(min_value=1), b=st.integers(min_value=1))
def test_exponent_laws(group, a, b):
    g = group.generator()
    q = group.order
    a, b = a % q or 1, b % q or 1
    assert (g**a) ** b == (g**b) ** a == g ** (a * b)
    assert (g**a) * (g**b) == g ** (a + b)
    assert ((g**a) / (g**a)).is_identity
    assert (g**a) ** (q - 1) == (g**a).inverse()
    assert group.element_from_bytes((g**a).to_bytes()) == g**a


def test_hash_to_group_domain_separated(group):
    a = group.hash_to_group(b"dom-A", b"m")
    assert a == group.hash_to_group(b"dom-A", b"m")
    assert a != group.hash_to_group(b"dom-B", b"m")
    assert a != group.hash_to_group(b"dom-A", b"n")
    assert not a.is_identity
    with pytest.raises(ConfigError):
        group.hash_to_group(b"", b"m")


def test_scalar_codec(group):
    s = group.random_scalar()
    assert group.scalar_from_bytes(group.scalar_to_bytes(s)) == s
    with pytest.raises(InvalidScalar, match="reduced"):
        group.scalar_from_bytes(group.order.to_bytes(group.scalar_size, "big"))
    with pytest.raises(InvalidScalar, match="bytes"):
        group.scalar_from_bytes(b"\x01")


def test_unknown_group():
    with pytest.raises(ConfigError, match="unknown group"):
        get_group("p256")


def test_mixed_groups_rejected():
    a = get_group("ristretto255").generator()
    b = get_group("secp256k1").generator()
    with pytest.raises(TypeError):
        a * b
