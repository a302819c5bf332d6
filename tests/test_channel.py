"""Channels: confidentiality plumbing, binding of (T, sender, receiver, phase)."""

import pytest

from reshuffle.crypto.channel import Channel, DHKeyPair
from reshuffle.errors import DecodeError, DecryptionError


def pair(group, T=1):
    a, b = DHKeyPair.generate(group), DHKeyPair.generate(group)
    return Channel(a, b.public, 1, 2, T), Channel(b, a.public, 2, 1, T)


def test_roundtrip_both_directions(group):
    ab, ba = pair(group)
    assert ba.open(3, ab.seal(3, b"share")) == b"share"
    assert ab.open(4, ba.seal(4, b"reply")) == b"reply"


def test_fresh_nonce_each_time(group):
    ab, _ = pair(group)
    assert ab.seal(1, b"x") != ab.seal(1, b"x")


def test_wrong_phase_round_or_direction_fails(group):
    a, b = DHKeyPair.generate(group), DHKeyPair.generate(group)
    ab = Channel(a, b.public, 1, 2, T=5)
    ct = ab.seal(1, b"m")
    with pytest.raises(DecryptionError):
        Channel(b, a.public, 2, 1, T=5).open(2, ct)  # wrong phase
    with pytest.raises(DecryptionError):
        Channel(b, a.public, 2, 1, T=6).open(1, ct)  # wrong round
    with pytest.raises(DecryptionError):
        ab.open(1, ct)  # reflected back to its sender


def test_tampering_and_truncation(group):
    ab, ba = pair(group)
    ct = bytearray(ab.seal(1, b"secret"))
    ct[-1] ^= 1
    with pytest.raises(DecryptionError):
        ba.open(1, bytes(ct))
    with pytest.raises(DecodeError):
        ba.open(1, b"\x00" * 20)


def test_third_party_cannot_open(group):
    a, b, c = (DHKeyPair.generate(group) for _ in range(3))
    ct = Channel(a, b.public, 1, 2, 1).seal(1, b"m")
    with pytest.raises(DecryptionError):
        Channel(c, a.public, 3, 1, 1).open(1, ct)
