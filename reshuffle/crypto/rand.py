"""Randomness sources.

Every secret in Re-Shuffle is drawn from a :class:`RandomSource`. The default,
:data:`OS_RANDOM`, reads ``os.urandom``. :class:`SeededRandom` is a
deterministic *cryptographic* generator (AES-256-CTR keyed by HKDF of a seed)
for reproducible tests, games and benchmarks; numpy's generators are never used
for secrets.
"""

from __future__ import annotations

import os
from typing import Protocol

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF


class RandomSource(Protocol):
    def bytes(self, n: int) -> bytes:  # pragma: no cover - protocol
        ...


class _OSRandom:
    __slots__ = ()

    def bytes(self, n: int) -> bytes:
        return os.urandom(n)

    def __repr__(self) -> str:
        return "OS_RANDOM"


OS_RANDOM: RandomSource = _OSRandom()


class SeededRandom:
    """Deterministic AES-CTR stream; for tests and reproducible experiments only."""

    __slots__ = ("_enc",)

    def __init__(self, seed: int | bytes, label: bytes = b"") -> None:
        if isinstance(seed, int):
            if seed < 0:
                raise ValueError("seed must be non-negative")
            seed = seed.to_bytes((seed.bit_length() + 7) // 8 or 1, "big")
        key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=b"reshuffle/v1/seeded-random",
            info=label,
        ).derive(bytes(seed))
        self._enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()

    def bytes(self, n: int) -> bytes:
        return self._enc.update(bytes(n))

    def child(self, label: bytes) -> "SeededRandom":
        """An independent stream derived from this one (e.g. one per participant)."""
        return SeededRandom(self.bytes(32), label)


def as_source(rng: RandomSource | int | None) -> RandomSource:
    """``None`` → OS randomness; an int → :class:`SeededRandom`; a source as is."""
    if rng is None:
        return OS_RANDOM
    if isinstance(rng, bool):
        raise TypeError("rng must be a RandomSource, an int seed or None")
    if isinstance(rng, int):
        return SeededRandom(rng)
    if not hasattr(rng, "bytes"):
        raise TypeError(f"rng must have a .bytes(n) method, got {type(rng).__name__}")
    return rng
