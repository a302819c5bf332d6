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
    """Deterministic AES-256-CTR stream; for tests and reproducible experiments only.

    The stream owns its position: :meth:`copy` gives an independent generator that
    continues from the same point (the explorer of PS schedules branches participants so).
    Keystream is produced a chunk at a time; the chunk is immutable, so copies share it.
    """

    __slots__ = ("_key", "_pos", "_buf", "_at")
    _CHUNK = 4096

    def __init__(self, seed: int | bytes, label: bytes = b"") -> None:
        if isinstance(seed, int):
            if seed < 0:
                raise ValueError("seed must be non-negative")
            seed = seed.to_bytes((seed.bit_length() + 7) // 8 or 1, "big")
        self._key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=b"reshuffle/v1/seeded-random",
            info=label,
        ).derive(bytes(seed))
        self._pos, self._buf, self._at = 0, b"", 0  # _buf holds the keystream from position _at

    def bytes(self, n: int) -> bytes:
        start = self._pos - self._at
        if start + n > len(self._buf):
            block, skip = divmod(self._pos, 16)
            enc = Cipher(algorithms.AES(self._key), modes.CTR(block.to_bytes(16, "big"))).encryptor()
            self._buf, self._at = enc.update(bytes(skip + max(n, self._CHUNK)))[skip:], self._pos
            start = 0
        self._pos += n
        return self._buf[start: start + n]

    def copy(self) -> "SeededRandom":
        """A generator at the same position that advances on its own."""
        out = SeededRandom.__new__(SeededRandom)
        out._key, out._pos, out._buf, out._at = self._key, self._pos, self._buf, self._at
        return out

    def derive(self, label: bytes) -> "SeededRandom":
        """An independent stream keyed from this one's key and ``label``; this one does not advance."""
        return SeededRandom(self._key, label)

    def child(self, label: bytes) -> "SeededRandom":
        """An independent stream derived from this one (e.g. one per participant)."""
        return SeededRandom(self.bytes(32), label)


def substream(rng: RandomSource, label: bytes) -> RandomSource:
    """A stream for one purpose that leaves ``rng``'s own draws unchanged: derived where ``rng`` is seeded
    (:meth:`SeededRandom.derive`), ``rng`` itself otherwise (OS randomness)."""
    derive = getattr(rng, "derive", None)
    return derive(label) if derive is not None else rng


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
