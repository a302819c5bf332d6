"""Shared helpers for protocol tests."""

import numpy as np

from reshuffle.crypto.encoding import FixedPoint
from reshuffle.crypto.rand import SeededRandom


def make_updates(N, d=16, seed=0, scale=1.0):
    # Test data only: crypto never sees this generator.
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=d) * scale).astype(np.float32) for _ in range(N)]


def multiset(arrays):
    return sorted(a.tobytes() for a in arrays)


def expected_models(updates, idx, codec=FixedPoint()):
    return multiset(codec.roundtrip(updates[i]) for i in idx)


def rewrite_header(data: bytes, *, T=None, m=None, sender=None) -> bytes:
    b = bytearray(data)
    if T is not None:
        b[2:10] = T.to_bytes(8, "big")
    if m is not None:
        b[10:14] = m.to_bytes(4, "big")
    if sender is not None:
        b[14:18] = sender.to_bytes(4, "big")
    return bytes(b)


def seeded(seed):
    return SeededRandom(seed)
