"""PRG: AES-256-CTR keyed by HKDF-SHA256(seed, domain), read as ring words.

Every stream has its own domain (see :mod:`reshuffle.crypto.domain`), so one
seed never keys two streams. Output is little-endian unsigned words of ``bits``
(8, 16, 32 or 64) bits, i.e. elements of ``Z_{2^bits}``; uniform because AES-CTR
output bytes are. :meth:`PRG.add_into` accumulates ``±stream`` into a caller's
array through one reusable scratch buffer, which is the masking hot path.
"""

from __future__ import annotations

import hashlib
import hmac
import os

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from reshuffle.errors import ConfigError

RING_DTYPES = {8: np.dtype("<u1"), 16: np.dtype("<u2"), 32: np.dtype("<u4"), 64: np.dtype("<u8")}
_HKDF_SALT = b"reshuffle/v1/prg-key"
_CTR_ZERO = modes.CTR(bytes(16))  # every stream has its own key, so each starts at counter 0


def ring_dtype(bits: int) -> np.dtype:
    try:
        return RING_DTYPES[bits]
    except KeyError:
        raise ConfigError(f"ring width b must be one of {sorted(RING_DTYPES)}, got {bits!r}") from None


class _Zeros:
    """A growing read-only zero buffer: CTR encrypts zeros to get the keystream."""

    def __init__(self) -> None:
        self._buf = memoryview(bytes(1 << 16))

    def view(self, n: int) -> memoryview:
        if len(self._buf) < n:
            self._buf = memoryview(bytes(max(n, 2 * len(self._buf))))
        return self._buf[:n]


_ZEROS = _Zeros()


def _check_seed(seed: bytes) -> None:
    if not isinstance(seed, (bytes, bytearray)) or len(seed) < 16:
        raise ConfigError("PRG seed must be at least 16 bytes")


def _expand(prk: bytes, domain: bytes) -> bytes:
    """HKDF-Expand (RFC 5869) to one SHA-256 block: ``HMAC(PRK, info || 0x01)``."""
    if not domain:
        raise ConfigError("PRG domain must be non-empty")
    return hmac.digest(prk, domain + b"\x01", "sha256")


def derive_key(seed: bytes, domain: bytes) -> bytes:
    """HKDF-SHA256(seed, salt, info=domain) to 32 bytes: one stream's AES key."""
    _check_seed(seed)
    return _expand(hmac.digest(_HKDF_SALT, bytes(seed), "sha256"), domain)


class KeyDeriver:
    """:func:`derive_key` for one seed under many domains: HKDF-Extract is done once.

    The masks key one stream per row from the same seed, so extracting once
    saves a hash per row; the keys equal :func:`derive_key`'s.
    """

    __slots__ = ("_prk",)

    def __init__(self, seed: bytes) -> None:
        _check_seed(seed)
        self._prk = hmac.digest(_HKDF_SALT, bytes(seed), "sha256")

    def key(self, domain: bytes) -> bytes:
        return _expand(self._prk, domain)


def keystream_into(key: bytes, buf: bytearray, nbytes: int) -> None:
    """Raw AES-256-CTR keystream of ``nbytes`` into ``buf`` (len >= nbytes + 15)."""
    enc = Cipher(algorithms.AES(key), _CTR_ZERO).encryptor()
    enc.update_into(_ZEROS.view(nbytes), buf)


class PRG:
    """One domain-separated stream. ``PRG(seed, domain).words(n)`` → n ring words."""

    __slots__ = ("_key", "dtype")

    def __init__(self, seed: bytes, domain: bytes, bits: int = 32) -> None:
        self.dtype = ring_dtype(bits)
        self._key = derive_key(seed, domain)

    def words(self, n: int) -> np.ndarray:
        """A fresh array of ``n`` uniform ring words."""
        out = np.empty(n, dtype=self.dtype)
        self.words_into(out)
        return out

    def words_into(self, out: np.ndarray) -> None:
        """Fill a caller's contiguous array with the stream, without any copy."""
        if out.dtype != self.dtype or not out.flags.c_contiguous or not out.flags.writeable:
            raise ConfigError(f"output must be a writeable contiguous {self.dtype} array")
        view = memoryview(out.reshape(-1).view(np.uint8))
        nbytes = len(view)
        enc = Cipher(algorithms.AES(self._key), _CTR_ZERO).encryptor()
        # update_into needs len(buf) >= len(data) + 15: write all but the last
        # 16 bytes in place, then the tail through a small copy.
        head = max(nbytes - 16, 0)
        if head:
            enc.update_into(_ZEROS.view(head), view)
        view[head:] = enc.update(_ZEROS.view(nbytes - head))

    def add_into(self, acc: np.ndarray, sign: int = 1, scratch: bytearray | None = None) -> None:
        """``acc += sign * stream`` in ``Z_{2^b}`` without allocating (given ``scratch``)."""
        if acc.dtype != self.dtype or not acc.flags.c_contiguous:
            raise ConfigError(f"accumulator must be a contiguous {self.dtype} array")
        nbytes = acc.nbytes
        if scratch is None or len(scratch) < nbytes + 15:
            scratch = bytearray(nbytes + 15)
        keystream_into(self._key, scratch, nbytes)
        stream = np.frombuffer(scratch, dtype=self.dtype, count=acc.size)
        if sign >= 0:
            np.add(acc, stream, out=acc)
        else:
            np.subtract(acc, stream, out=acc)


def scratch_for(n: int, bits: int = 32) -> bytearray:
    """A scratch buffer suitable for :meth:`PRG.add_into` on ``n`` words."""
    return bytearray(n * ring_dtype(bits).itemsize + 15)


CHUNK_BYTES = 1 << 18  # 256 KiB: accumulator chunk and keystream stay in L2


def accumulate_streams(
    acc: np.ndarray, streams: list[tuple[bytes, int]], chunk_bytes: int = CHUNK_BYTES,
    scratch: bytearray | None = None,
) -> None:
    """``acc += sum(sign * AES-CTR(key))`` over all ``(key, sign)``, chunk by chunk.

    Each stream's encryptor stays open across chunks (CTR state carries on), so
    one chunk of the accumulator is updated by every stream while it is in cache.
    Keys come from :func:`derive_key`; the result equals adding each
    ``PRG(seed, domain).words(n)`` in turn. ``scratch`` (>= chunk + 15 bytes) may be
    reused across calls.
    """
    if not acc.flags.c_contiguous or acc.dtype.kind != "u":
        raise ConfigError("accumulator must be a contiguous unsigned array")
    if not streams:
        return
    encs = [
        (Cipher(algorithms.AES(k), _CTR_ZERO).encryptor(), s >= 0) for k, s in streams
    ]
    flat = acc.reshape(-1).view(np.uint8)
    item = acc.dtype.itemsize
    chunk = max(16, chunk_bytes - chunk_bytes % 16)
    if scratch is None or len(scratch) < chunk + 15:
        scratch = bytearray(chunk + 15)
    for start in range(0, flat.size, chunk):
        nb = min(chunk, flat.size - start)
        part = flat[start : start + nb].view(acc.dtype)
        ks = np.frombuffer(scratch, dtype=acc.dtype, count=nb // item)
        zeros = _ZEROS.view(nb)
        for enc, positive in encs:
            enc.update_into(zeros, scratch)
            if positive:
                np.add(part, ks, out=part)
            else:
                np.subtract(part, ks, out=part)


def cores_available() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


OVERLAP_MIN_BYTES = 1 << 24  # 64 chunks: below this a thread hand-off per chunk is not worth it
_HASHER: list = []  # one lazily started thread that runs SHA-256 updates in submission order


def _hasher():
    if not _HASHER:
        from concurrent.futures import ThreadPoolExecutor

        _HASHER.append(ThreadPoolExecutor(1, thread_name_prefix="reshuffle-sha256"))
    return _HASHER[0]


def mask_rows(
    out: np.ndarray, streams, fill=None, chunk_bytes: int = CHUNK_BYTES, scratch: bytearray | None = None,
    overlap: bool | None = None,
) -> list[bytes]:
    """The fused per-byte pass: every row of ``out`` written, masked and hashed one chunk at a time.

    ``out`` is a contiguous (rows, words) unsigned array of zeros, ``streams[ρ]`` row ρ's ``(key, sign)`` list.
    For each chunk of row ρ, ``fill(ρ, first_word, part)`` writes the row's plaintext words into ``part`` (a
    view of ``out``) and returns True, or returns False for a row left zero; each stream is added with its sign,
    and the masked chunk is fed to the row's SHA-256 while it is still in cache. Returns the rows' SHA-256
    digests. The words equal filling each row, then :func:`accumulate_streams` on it (each row's streams start
    at counter 0; addition in the ring commutes, so a zero chunk takes its first stream's keystream straight
    from AES); no temporary beyond one chunk of keystream. ``overlap`` runs the hashes on a helper thread
    (default: for lists of at least :data:`OVERLAP_MIN_BYTES` where a second core exists); the digests are
    the same.
    """
    if out.ndim != 2 or not out.flags.c_contiguous or out.dtype.kind != "u":
        raise ConfigError("output must be a contiguous 2-D unsigned array")
    if len(streams) != out.shape[0]:
        raise ConfigError(f"{len(streams)} stream lists for {out.shape[0]} rows")
    item = out.dtype.itemsize
    chunk = max(16, chunk_bytes - chunk_bytes % 16)
    if scratch is None or len(scratch) < chunk + 15:
        scratch = bytearray(chunk + 15)
    whole = memoryview(out.reshape(-1).view(np.uint8))
    row_bytes = out.shape[1] * item
    # overlap: SHA-256 (it releases the GIL) of each finished chunk on one helper thread, in order, while the
    # next chunk is masked. Default: on for a large list where there is a second core. The process's CPU
    # seconds stay the same (measured at ResNet-18 size), the masking thread's drop by the hashes' share.
    if overlap is None:
        overlap = out.nbytes >= OVERLAP_MIN_BYTES and cores_available() > 1
    pending = []
    hashes = []
    for row, keyed in enumerate(streams):
        base = row * row_bytes
        flat = out[row].view(np.uint8)
        # A positive stream first: a zero chunk is then written by AES itself. If every sign is negative, a
        # zero chunk takes the sum of the streams, negated once.
        keyed = sorted(keyed, key=lambda ks: ks[1] < 0)
        all_neg = bool(keyed) and keyed[0][1] < 0
        encs = [(Cipher(algorithms.AES(k), _CTR_ZERO).encryptor(), s >= 0) for k, s in keyed]
        h = hashlib.sha256()
        for start in range(0, row_bytes, chunk):
            nb = min(chunk, row_bytes - start)
            part = flat[start : start + nb].view(out.dtype)
            written = fill is not None and fill(row, start // item, part)
            zeros = _ZEROS.view(nb)
            at = base + start
            rest, negate = encs, False
            # update_into needs 15 bytes of room past the chunk; CTR writes exactly nb bytes.
            if encs and not written and at + nb + 15 <= len(whole):
                encs[0][0].update_into(zeros, whole[at : at + nb + 15])
                rest = [(e, True) for e, _ in encs[1:]] if all_neg else encs[1:]
                negate = all_neg
            ks = np.frombuffer(scratch, dtype=out.dtype, count=nb // item)
            for enc, positive in rest:
                enc.update_into(zeros, scratch)
                if positive:
                    np.add(part, ks, out=part)
                else:
                    np.subtract(part, ks, out=part)
            if negate:
                np.negative(part, out=part)
            if overlap:
                pending.append(_hasher().submit(h.update, flat[start : start + nb]))
            else:
                h.update(flat[start : start + nb])
        hashes.append(h)
    for f in pending:
        f.result()
    return [h.digest() for h in hashes]
