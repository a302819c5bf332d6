"""Bounds-checked binary codec shared by every message type.

:class:`Writer` builds big-endian byte strings; :class:`Parser` is its exact
inverse. Every read checks the remaining length and raises :class:`DecodeError`
naming the field; :meth:`Parser.finish` rejects trailing bytes, so a structure
consumes exactly its declared length.
"""

from __future__ import annotations

import struct

from reshuffle.errors import DecodeError

MAX_VAR_BYTES = 1 << 31  # hard ceiling on one length-prefixed field


class Writer:
    """Append-only encoder. ``Parser`` reads back what ``Writer`` wrote, in order."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def u8(self, v: int) -> "Writer":
        self._parts.append(struct.pack(">B", v))
        return self

    def u16(self, v: int) -> "Writer":
        self._parts.append(struct.pack(">H", v))
        return self

    def u32(self, v: int) -> "Writer":
        self._parts.append(struct.pack(">I", v))
        return self

    def u64(self, v: int) -> "Writer":
        self._parts.append(struct.pack(">Q", v))
        return self

    def fixed(self, data: bytes, size: int) -> "Writer":
        """Write exactly ``size`` bytes; the length is not encoded."""
        if len(data) != size:
            raise ValueError(f"fixed field must be {size} bytes, got {len(data)}")
        self._parts.append(bytes(data))
        return self

    def var(self, data: bytes) -> "Writer":
        """Write a u32 length prefix, then ``data``."""
        self.u32(len(data))
        self._parts.append(bytes(data))
        return self

    def u32_list(self, values) -> "Writer":
        values = list(values)
        self.u32(len(values))
        self._parts.append(struct.pack(f">{len(values)}I", *values))
        return self

    def raw(self, data: bytes) -> "Writer":
        self._parts.append(bytes(data))
        return self

    def bytes(self) -> bytes:
        return b"".join(self._parts)


class Parser:
    """Bounds-checked reader over an immutable byte string."""

    __slots__ = ("_buf", "_pos", "_what")

    def __init__(self, data: bytes, what: str = "message") -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise DecodeError(f"{what}: expected bytes, got {type(data).__name__}")
        # A read-only view: large fields can be handed out without a copy.
        self._buf = memoryview(data).toreadonly().cast("B")
        self._pos = 0
        self._what = what

    @property
    def remaining(self) -> int:
        return len(self._buf) - self._pos

    def _take(self, n: int, field: str) -> bytes:
        if n < 0 or n > self.remaining:
            raise DecodeError(
                f"{self._what}: field '{field}' needs {n} bytes, {self.remaining} left"
            )
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out.tobytes()

    def var_view(self, field: str, max_len: int = MAX_VAR_BYTES) -> memoryview:
        """Like :meth:`var`, but a zero-copy view into the message (for bulk vectors)."""
        n = self.u32(field + ".length")
        if n > max_len or n > self.remaining:
            raise DecodeError(f"{self._what}: field '{field}' needs {n} bytes, {self.remaining} left")
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out

    def u8(self, field: str) -> int:
        return self._take(1, field)[0]

    def u16(self, field: str) -> int:
        return struct.unpack(">H", self._take(2, field))[0]

    def u32(self, field: str) -> int:
        return struct.unpack(">I", self._take(4, field))[0]

    def u64(self, field: str) -> int:
        return struct.unpack(">Q", self._take(8, field))[0]

    def fixed(self, size: int, field: str) -> bytes:
        return self._take(size, field)

    def fixed_list(self, size: int, count: int, field: str) -> list[bytes]:
        """``count`` consecutive fields of ``size`` bytes, read in one bounds check."""
        if size < 1 or count < 0:
            raise DecodeError(f"{self._what}: field '{field}' with {count} items of {size} bytes")
        raw = self._take(size * count, f"{field}[0..{count})")
        return [raw[i : i + size] for i in range(0, len(raw), size)]

    def var(self, field: str, max_len: int = MAX_VAR_BYTES) -> bytes:
        n = self.u32(field + ".length")
        if n > max_len:
            raise DecodeError(f"{self._what}: field '{field}' length {n} exceeds {max_len}")
        return self._take(n, field)

    def u32_list(self, field: str, max_items: int) -> list[int]:
        n = self.u32(field + ".count")
        if n > max_items:
            raise DecodeError(f"{self._what}: field '{field}' has {n} items, at most {max_items}")
        raw = self._take(4 * n, field)
        return list(struct.unpack(f">{n}I", raw))

    def rest(self) -> bytes:
        return self._take(self.remaining, "rest")

    def finish(self) -> None:
        """Reject trailing bytes."""
        if self.remaining:
            raise DecodeError(f"{self._what}: {self.remaining} trailing bytes")
