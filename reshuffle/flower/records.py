"""Reply content as ring words: a bit-exact, bounds-checked codec for Flower RecordDicts.

A train reply travels through the shuffle as ``d`` uint32 words. ``d`` is fixed
by the PS *before* anyone uploads, from the keys and shapes of the arrays it
sent plus a fixed metrics budget (:func:`reply_words`): a length that each
client chose would itself link replies to senders. The layout, big-endian::

    u32 length ‖ u8 version ‖ u16 records ‖ record* ‖ zero padding to 4·d bytes
    record  = var name ‖ u8 kind ‖ u32 entries ‖ entry*
    array   = var key ‖ var dtype ‖ var stype ‖ u8 ndim ‖ u64 dims ‖ var data
    metric  = var key ‖ u8 type ‖ value        (i64, f64, or u32 count + list)

Only ArrayRecords and MetricRecords are carried. A ConfigRecord in a train reply
is refused with :class:`ConfigError` naming it (so legacy ``FitRes`` replies,
which put their status in a ConfigRecord, cannot be shuffled).
"""

from __future__ import annotations

import struct

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from reshuffle.errors import ConfigError, DecodeError
from reshuffle.wire import Parser, Writer

VERSION = 1
KIND_ARRAYS, KIND_METRICS = 1, 2
M_INT, M_FLOAT, M_INTS, M_FLOATS = 1, 2, 3, 4
MAX_NDIM = 32
MAX_NAME = 1024
DEFAULT_METRICS_BUDGET = 1024  # bytes for MetricRecords and reply record names


def _name(w: Writer, text: str, what: str) -> None:
    raw = text.encode("utf-8")
    if len(raw) > MAX_NAME:
        raise ConfigError(f"{what} {text[:40]!r}... is longer than {MAX_NAME} bytes")
    w.var(raw)


def _array_entry(w: Writer, key: str, a: Array) -> None:
    _name(w, key, "array key")
    _name(w, a.dtype, "dtype")
    _name(w, a.stype, "stype")
    if len(a.shape) > MAX_NDIM:
        raise ConfigError(f"array {key!r} has {len(a.shape)} dimensions, at most {MAX_NDIM}")
    w.u8(len(a.shape))
    for n in a.shape:
        w.u64(int(n))
    w.var(bytes(a.data))


def _metric_entry(w: Writer, key: str, v: object) -> None:
    _name(w, key, "metric key")
    if isinstance(v, bool):
        raise ConfigError(f"metric {key!r} is a bool; MetricRecords hold int or float values")
    if isinstance(v, int):
        w.u8(M_INT).raw(struct.pack(">q", v))
    elif isinstance(v, float):
        w.u8(M_FLOAT).raw(struct.pack(">d", v))
    elif isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        w.u8(M_INTS).u32(len(v)).raw(struct.pack(f">{len(v)}q", *v))
    elif isinstance(v, list) and all(isinstance(x, float) for x in v):
        w.u8(M_FLOATS).u32(len(v)).raw(struct.pack(f">{len(v)}d", *v))
    else:
        raise ConfigError(f"metric {key!r} has unsupported value type {type(v).__name__}")


def encode_content(content: RecordDict) -> bytes:
    """Serialize a train reply's content (without the length word or padding)."""
    w = Writer().u8(VERSION).u16(len(content))
    for name, record in content.items():
        if isinstance(record, ConfigRecord):
            raise ConfigError(
                f"train reply holds ConfigRecord {name!r}: Re-Shuffle carries only ArrayRecords and "
                "MetricRecords (a legacy FitRes reply is refused)"
            )
        _name(w, name, "record name")
        if isinstance(record, ArrayRecord):
            w.u8(KIND_ARRAYS).u32(len(record))
            for key, arr in record.items():
                _array_entry(w, key, arr)
        elif isinstance(record, MetricRecord):
            w.u8(KIND_METRICS).u32(len(record))
            for key, v in record.items():
                _metric_entry(w, key, v)
        else:
            raise ConfigError(f"train reply holds record {name!r} of unsupported type {type(record).__name__}")
    return w.bytes()


def _read_name(p: Parser, what: str) -> str:
    try:
        return p.var(what, MAX_NAME).decode("utf-8")
    except UnicodeDecodeError:
        raise DecodeError(f"{what} is not UTF-8") from None


def _read_array(p: Parser) -> tuple[str, Array]:
    key = _read_name(p, "array key")
    dtype, stype = _read_name(p, "dtype"), _read_name(p, "stype")
    ndim = p.u8("ndim")
    if ndim > MAX_NDIM:
        raise DecodeError(f"array {key!r} has {ndim} dimensions, at most {MAX_NDIM}")
    shape = tuple(p.u64("dimension") for _ in range(ndim))
    return key, Array(dtype=dtype, shape=shape, stype=stype, data=p.var("array data"))


def _read_metric(p: Parser) -> tuple[str, object]:
    key = _read_name(p, "metric key")
    t = p.u8("metric type")
    if t == M_INT:
        return key, struct.unpack(">q", p.fixed(8, "int metric"))[0]
    if t == M_FLOAT:
        return key, struct.unpack(">d", p.fixed(8, "float metric"))[0]
    if t in (M_INTS, M_FLOATS):
        n = p.u32("metric list length")
        if n * 8 > p.remaining:
            raise DecodeError(f"metric {key!r} announces {n} values, {p.remaining} bytes remain")
        return key, list(struct.unpack(f">{n}{'q' if t == M_INTS else 'd'}", p.fixed(8 * n, "metric list")))
    raise DecodeError(f"metric {key!r} has unknown type tag {t}")


def decode_content(data: bytes) -> RecordDict:
    """Exact inverse of :func:`encode_content`; malformed bytes raise :class:`DecodeError`."""
    p = Parser(data, "train reply content")
    if (v := p.u8("version")) != VERSION:
        raise DecodeError(f"train reply content version {v}, expected {VERSION}")
    out = RecordDict()
    for _ in range(p.u16("record count")):
        name = _read_name(p, "record name")
        if name in out:
            raise DecodeError(f"record {name!r} appears twice")
        kind, n = p.u8("record kind"), p.u32("entry count")
        if kind == KIND_ARRAYS:
            items = [_read_array(p) for _ in range(n)]
            rec: ArrayRecord | MetricRecord = ArrayRecord()
        elif kind == KIND_METRICS:
            items = [_read_metric(p) for _ in range(n)]
            rec = MetricRecord()
        else:
            raise DecodeError(f"record {name!r} has unknown kind {kind}")
        for k, val in items:
            if k in rec:
                raise DecodeError(f"record {name!r} repeats key {k!r}")
            rec[k] = val
        out[name] = rec
    p.finish()
    return out


def reply_words(sent: RecordDict, metrics_budget: int = DEFAULT_METRICS_BUDGET) -> int:
    """``d``: ring words that hold a reply with the sent arrays' keys and shapes plus ``metrics_budget`` bytes."""
    if not isinstance(metrics_budget, int) or isinstance(metrics_budget, bool) or metrics_budget < 64:
        raise ConfigError(f"metrics_budget must be an int of at least 64 bytes, got {metrics_budget!r}")
    w = Writer()
    for name, record in sent.items():
        if isinstance(record, ArrayRecord):
            _name(w, name, "record name")
            w.u8(KIND_ARRAYS).u32(len(record))
            for key, arr in record.items():
                _array_entry(w, key, arr)
    total = 4 + 3 + len(w.bytes()) + metrics_budget
    return -(-total // 4)


def to_words(content: RecordDict, d: int) -> np.ndarray:
    """``content`` as exactly ``d`` little-endian uint32 words (length word, content, zero padding)."""
    body = encode_content(content)
    if 4 + len(body) > 4 * d:
        raise ConfigError(
            f"train reply needs {4 + len(body)} bytes, the round allows {4 * d}: reply with the arrays' "
            "keys, shapes and dtypes as sent and keep MetricRecords within the metrics budget"
        )
    buf = bytearray(4 * d)
    buf[:4] = struct.pack(">I", len(body))
    buf[4 : 4 + len(body)] = body
    return np.frombuffer(bytes(buf), dtype="<u4").copy()


def from_words(words: np.ndarray) -> RecordDict:
    """Inverse of :func:`to_words`; a bad length or non-zero padding raises :class:`DecodeError`."""
    raw = np.ascontiguousarray(words, dtype="<u4").tobytes()
    if len(raw) < 4:
        raise DecodeError("train reply words are shorter than the length word")
    n = struct.unpack(">I", raw[:4])[0]
    if n > len(raw) - 4:
        raise DecodeError(f"train reply announces {n} bytes, {len(raw) - 4} available")
    if any(raw[4 + n :]):
        raise DecodeError("train reply padding is not zero")
    return decode_content(raw[4 : 4 + n])
