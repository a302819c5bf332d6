"""The reserved record that marks Re-Shuffle's phase messages, and its validated fields.

Flower routes a message to a ClientApp handler by its type before any mod runs,
so the phase messages reuse the strategy's own message type and are marked by a
ConfigRecord under :data:`RECORD` (SecAgg+ does the same with its stage record).

Server to node: ``stage`` (:data:`STAGE_CLAIM`, :data:`STAGE_TRAIN` or
:data:`STAGE_PROTOCOL`), ``T``; with ``claim`` also ``words`` (reply length d),
``keys`` (files or simulation) and ``hash`` (H(W_g^T) of the content the train
stage will carry); with ``train`` also ``words`` and ``data``, beside the
strategy's content; with ``protocol`` also ``data`` (the core's messages for this node).
Node to server: ``pid``, ``cert``, ``claim`` after ``claim``; ``data`` after ``train`` and ``protocol``.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, RecordDict

from reshuffle.errors import DecodeError

RECORD = "reshuffle"  # reserved record key in train messages and their phase replies
STATE = "reshuffle-session"  # ConfigRecord in the node's Context.state
LEDGER = "reshuffle-rounds"  # ConfigRecord in Context.state: the last round this node claimed
GROUP = "reshuffle-group"  # ConfigRecord in Context.state: this node's stable group and the round that formed it
PSEUDONYM = "reshuffle-pseudonym"  # ConfigRecord in Context.state: the node's epoch pseudonym (encoded)
STAGE_CLAIM, STAGE_TRAIN, STAGE_PROTOCOL = "claim", "train", "protocol"
MAX_WORDS = 1 << 28


def is_train(message_type: str) -> bool:
    """``train`` or ``train.<action>``: the messages whose replies are shuffled."""
    return message_type.split(".", 1)[0] == "train"


def record_of(content: RecordDict) -> ConfigRecord:
    """The reserved ConfigRecord of ``content``; :class:`DecodeError` if absent or of another type."""
    if RECORD not in content:
        raise DecodeError(f"no {RECORD!r} record")
    rec = content[RECORD]
    if not isinstance(rec, ConfigRecord):
        raise DecodeError(f"record {RECORD!r} is a {type(rec).__name__}, expected a ConfigRecord")
    return rec


def field(rec: ConfigRecord, key: str, kind: type) -> object:
    """``rec[key]`` checked to be a ``kind`` (bools are not ints)."""
    if key not in rec:
        raise DecodeError(f"{RECORD!r} record lacks {key!r}")
    v = rec[key]
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise DecodeError(f"{RECORD!r} field {key!r} is {type(v).__name__}, expected {kind.__name__}")
    return v


def uint(rec: ConfigRecord, key: str, upper: int = 1 << 64) -> int:
    v = field(rec, key, int)
    if not 0 <= v < upper:  # type: ignore[operator]
        raise DecodeError(f"{RECORD!r} field {key!r} = {v} outside [0, {upper})")
    return v  # type: ignore[return-value]


def data_list(rec: ConfigRecord) -> list[bytes]:
    """The ``data`` field: a list of byte strings (an empty list may arrive as absent)."""
    if "data" not in rec:
        return []
    v = rec["data"]
    if isinstance(v, bytes):
        return [v]
    if not isinstance(v, list) or not all(isinstance(x, bytes) for x in v):
        raise DecodeError(f"{RECORD!r} field 'data' must be a list of bytes")
    return list(v)
