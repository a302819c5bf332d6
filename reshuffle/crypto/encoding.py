"""Fixed-point encoding of float32 vectors into the ring ``Z_{2^b}``.

``Enc(w) = round(w * 2^f) mod 2^b`` for ``|w| <= clip``; values outside the
declared range are clipped to it and *counted* (never silently wrapped).
Decoding reads the words as two's-complement signed integers and divides by
``2^f``. ``clip * 2^f`` must stay below ``2^(b-1)`` so that no encoded value
wraps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reshuffle.crypto.prg import ring_dtype
from reshuffle.errors import ConfigError, EncodingError

_SIGNED = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}
DECODE_CHUNK = 1 << 15  # words: the float64 scratch of decode stays in L2
ENCODE_CHUNK = 1 << 14  # words: encode_into's float64 slices (measured fastest of 2^12, 2^14, 2^16)


@dataclass(frozen=True)
class Encoded:
    """Ring words plus the number of coordinates that were clipped."""

    words: np.ndarray
    clipped: int


@dataclass(frozen=True)
class FixedPoint:
    """Fixed-point codec with ``bits`` ring width, ``frac_bits`` fractional bits, range ``±clip``."""

    bits: int = 32
    frac_bits: int = 24
    clip: float = 64.0

    def __post_init__(self) -> None:
        ring_dtype(self.bits)
        if not isinstance(self.frac_bits, int) or not 0 <= self.frac_bits < self.bits:
            raise ConfigError(f"frac_bits must be an int in [0, {self.bits}), got {self.frac_bits!r}")
        if not (isinstance(self.clip, (int, float)) and self.clip > 0 and np.isfinite(self.clip)):
            raise ConfigError(f"clip must be a positive finite number, got {self.clip!r}")
        if self.clip * 2.0**self.frac_bits >= 2.0 ** (self.bits - 1):
            raise ConfigError(
                f"range ±{self.clip} with f={self.frac_bits} does not fit in b={self.bits} bits: "
                f"need clip·2^f < 2^{self.bits - 1}"
            )

    @property
    def dtype(self) -> np.dtype:
        return ring_dtype(self.bits)

    @property
    def resolution(self) -> float:
        return 2.0**-self.frac_bits

    def encode(self, w: np.ndarray) -> Encoded:
        w = np.asarray(w)
        if w.ndim != 1:
            raise EncodingError(f"expected a 1-D vector, got shape {w.shape}")
        if not np.issubdtype(w.dtype, np.floating):
            raise EncodingError(f"expected a float vector, got dtype {w.dtype}")
        finite = np.isfinite(w)
        if not finite.all():
            raise EncodingError(f"{int((~finite).sum())} non-finite values cannot be encoded")
        w64 = w.astype(np.float64, copy=False)
        clipped = int(np.count_nonzero(np.abs(w64) > self.clip))
        scaled = np.rint(np.clip(w64, -self.clip, self.clip) * 2.0**self.frac_bits)
        # int64 -> unsigned cast wraps negatives modulo 2^b (two's complement).
        words = scaled.astype(np.int64).astype(self.dtype)
        return Encoded(words, clipped)

    def encode_into(self, w: np.ndarray, out: np.ndarray) -> int:
        """``out[:] = encode(w).words`` without a full-size temporary; returns the clipped count.

        The arithmetic is :meth:`encode`'s (float64, clip, scale, round half to even, int64, wrap to the
        ring), so the words are the same bits; a caller hands slices of a long vector one cache-sized
        chunk at a time.
        """
        w = np.asarray(w)
        if w.ndim != 1:
            raise EncodingError(f"expected a 1-D vector, got shape {w.shape}")
        if not np.issubdtype(w.dtype, np.floating):
            raise EncodingError(f"expected a float vector, got dtype {w.dtype}")
        if out.shape != w.shape or out.dtype != self.dtype:
            raise EncodingError(f"output must be {w.size} words of dtype {self.dtype}")
        signed = out.view(_SIGNED[self.bits])
        clipped = 0
        for a in range(0, w.size, ENCODE_CHUNK):  # float64 scratch of one slice stays in L1/L2
            w64 = w[a : a + ENCODE_CHUNK].astype(np.float64)
            tmp = np.abs(w64)
            # One reduction checks the slice: a sum of finite |w| is finite unless it overflows (then count).
            with np.errstate(over="ignore"):
                total = tmp.sum()
            if not np.isfinite(total):
                bad = int(np.count_nonzero(~np.isfinite(w)))
                if bad:
                    raise EncodingError(f"{bad} non-finite values cannot be encoded")
            clipped += int(np.count_nonzero(tmp > self.clip))
            np.clip(w64, -self.clip, self.clip, out=tmp)
            np.multiply(tmp, 2.0**self.frac_bits, out=tmp)
            np.rint(tmp, out=tmp)
            # |tmp| <= clip·2^f < 2^(b−1): exact in the signed b-bit type, whose bits are the ring word that
            # encode()'s int64 -> unsigned wrap gives.
            np.copyto(signed[a : a + ENCODE_CHUNK], tmp, casting="unsafe")
        return clipped

    def decode(self, words: np.ndarray) -> np.ndarray:
        words = np.asarray(words)
        if words.dtype != self.dtype:
            raise EncodingError(f"expected ring words of dtype {self.dtype}, got {words.dtype}")
        out = np.empty(words.shape, dtype=np.float32)
        signed = words.view(_SIGNED[self.bits])
        if signed.ndim != 1:
            return (signed.astype(np.float64) * self.resolution).astype(np.float32)
        # Chunk by chunk (the same float64 product, rounded once to float32): no full-size float64 temporary.
        tmp = np.empty(min(DECODE_CHUNK, signed.size), dtype=np.float64)
        for a in range(0, signed.size, DECODE_CHUNK):
            part = signed[a : a + DECODE_CHUNK]
            t = tmp[: part.size]
            np.multiply(part, self.resolution, out=t)
            out[a : a + part.size] = t
        return out

    def roundtrip(self, w: np.ndarray) -> np.ndarray:
        """``Dec(Enc(w))``: what the PS recovers for ``w``."""
        return self.decode(self.encode(w).words)


@dataclass(frozen=True)
class RawWords:
    """Identity codec: the payload already is ring words (bit-exact transport of bytes).

    Used when a driver ships serialized content (e.g. a Flower RecordDict) rather
    than a float model; nothing is clipped, rounded or reinterpreted.
    """

    bits: int = 32

    def __post_init__(self) -> None:
        ring_dtype(self.bits)

    @property
    def dtype(self) -> np.dtype:
        return ring_dtype(self.bits)

    def encode(self, w: np.ndarray) -> Encoded:
        w = np.asarray(w)
        if w.ndim != 1 or w.dtype != self.dtype:
            raise EncodingError(f"raw payload must be a 1-D {self.dtype} vector, got {w.dtype} {w.shape}")
        return Encoded(w, 0)

    def encode_into(self, w: np.ndarray, out: np.ndarray) -> int:
        """``out[:] = w`` (checked as :meth:`encode` checks it); nothing is clipped."""
        w = np.asarray(w)
        if w.ndim != 1 or w.dtype != self.dtype:
            raise EncodingError(f"raw payload must be a 1-D {self.dtype} vector, got {w.dtype} {w.shape}")
        if out.shape != w.shape or out.dtype != self.dtype:
            raise EncodingError(f"output must be {w.size} words of dtype {self.dtype}")
        out[:] = w
        return 0

    def decode(self, words: np.ndarray) -> np.ndarray:
        words = np.asarray(words)
        if words.dtype != self.dtype:
            raise EncodingError(f"expected ring words of dtype {self.dtype}, got {words.dtype}")
        return words.copy()
