"""Domain separation labels.

Every hash, KDF and PRG call in Re-Shuffle takes a label built here, so that two
uses can never produce the same input. The encoding is injective: a
length-prefixed ASCII label followed by fixed-width unsigned integers.
"""

from __future__ import annotations

import struct

PREFIX = b"reshuffle/v1/"


def label(name: str, *fields: int) -> bytes:
    """``PREFIX || len(name) || name || count || u64 fields``."""
    raw = name.encode("ascii")
    if len(raw) > 255:
        raise ValueError("domain label too long")
    for f in fields:
        if not isinstance(f, int) or isinstance(f, bool) or not 0 <= f < 2**64:
            raise ValueError(f"domain field must be an int in [0, 2^64), got {f!r}")
    return (
        PREFIX
        + bytes([len(raw)])
        + raw
        + bytes([len(fields)])
        + struct.pack(f">{len(fields)}Q", *fields)
    )
