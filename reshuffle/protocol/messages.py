"""Typed protocol messages with explicit byte encodings (PROTOCOL.md §4–5).

Every message starts with the header ``version u8 | type u8 | T u64 | m u32 |
sender u32`` (``m`` is the MaskedSum invocation, 0 outside one; the PS sends as
``SERVER_ID``). :func:`decode` parses the header, dispatches on the type, parses
the body with bounds checks and rejects trailing bytes. Group elements are
validated as they are parsed. Nothing here is pickled.

Signed messages sign a canonical byte string that includes the round ``T``, the
hash of the global model ``H(W_g^T)`` and, for PS lists, the invocation ``m``.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from reshuffle.crypto.group import Element, Group
from reshuffle.crypto.shamir import Share
from reshuffle.crypto.signatures import SIG_BYTES, SERVER_ID, Certificate
from reshuffle.errors import DecodeError
from reshuffle.protocol.params import MAX_PARTICIPANTS, RoundParams
from reshuffle.wire import Parser, Writer

VERSION = 1
HASH_BYTES = 32


class MsgType(enum.IntEnum):
    ROUND_START = 1
    ADVERTISE = 2
    ADVERTISE_LIST = 3
    SHARE_BUNDLE = 4
    SHARE_DELIVERY = 5
    OT_REQUEST = 6
    OT_RESPONSE = 7
    MASK_REQUEST = 8
    MASKED_INPUT = 9
    UNMASK_REQUEST = 10
    UNMASK_RESPONSE = 11
    REFUSAL = 12


class ShareKind(enum.IntEnum):
    SELF_SEED = 0  # b_{j,m}: revealed for j in U_m
    DH_SECRET = 1  # x_{j,m}: revealed for j that dropped from U_{m-1} to U_m


@dataclass(frozen=True)
class Context:
    """What a decoder needs to know: the group and, once known, the round parameters."""

    group: Group | None = None
    params: RoundParams | None = None

    def need_group(self) -> Group:
        if self.group is None:
            raise DecodeError("message needs round parameters that are not known yet")
        return self.group

    @property
    def max_n(self) -> int:
        return self.params.N if self.params else MAX_PARTICIPANTS


def _elem(p: Parser, g: Group, field: str) -> Element:
    return g.element_from_bytes(p.fixed(g.element_size, field), field)


def _ids(p: Parser, field: str, ctx: Context) -> tuple[int, ...]:
    ids = p.u32_list(field, ctx.max_n)
    if len(set(ids)) != len(ids):
        raise DecodeError(f"{field}: repeated participant id")
    if ids != sorted(ids):
        raise DecodeError(f"{field}: ids must be sorted")
    return tuple(ids)


@dataclass(frozen=True)
class Message(ABC):
    """Header fields shared by every message."""

    T: int
    m: int
    sender: int

    TYPE: ClassVar[MsgType]

    def encode(self) -> bytes:
        w = Writer().u8(VERSION).u8(self.TYPE).u64(self.T).u32(self.m).u32(self.sender)
        self._body(w)
        return w.bytes()

    @abstractmethod
    def _body(self, w: Writer) -> None:
        """Write the body after the header."""

    @classmethod
    @abstractmethod
    def _parse(cls, p: Parser, hdr: tuple[int, int, int], ctx: Context) -> "Message":
        """Parse the body; ``hdr`` is ``(T, m, sender)``."""


_REGISTRY: dict[int, type[Message]] = {}


def _register(cls: type[Message]) -> type[Message]:
    _REGISTRY[cls.TYPE] = cls
    return cls


def decode(data: bytes, ctx: Context) -> Message:
    """Parse one message; :class:`DecodeError` or a validation error on any defect."""
    p = Parser(data, "message")
    version = p.u8("version")
    if version != VERSION:
        raise DecodeError(f"unsupported protocol version {version}, expected {VERSION}")
    t = p.u8("type")
    cls = _REGISTRY.get(t)
    if cls is None:
        raise DecodeError(f"unknown message type {t}")
    p._what = cls.TYPE.name  # error messages name the message type
    hdr = (p.u64("T"), p.u32("m"), p.u32("sender"))
    msg = cls._parse(p, hdr, ctx)
    p.finish()
    return msg


def peek_type(data: bytes) -> MsgType | None:
    """The type byte of a message, or None if it is not even a header."""
    if len(data) < 2:
        return None
    try:
        return MsgType(data[1])
    except ValueError:
        return None


# --------------------------------------------------------------------------- #
# §5 step 0: broadcast
@_register
@dataclass(frozen=True)
class RoundStart(Message):
    """PS → all: round parameters, H(W_g^T), the PS certificate and the roster."""

    TYPE: ClassVar[MsgType] = MsgType.ROUND_START
    params: RoundParams
    global_hash: bytes
    server_cert: Certificate
    roster: tuple[tuple[int, Certificate], ...]

    def _body(self, w: Writer) -> None:
        w.var(self.params.encode()).fixed(self.global_hash, HASH_BYTES)
        w.var(self.server_cert.encode()).u32(len(self.roster))
        for pid, cert in self.roster:
            w.u32(pid).var(cert.encode())

    @classmethod
    def _parse(cls, p, hdr, ctx):
        params = RoundParams.decode(p.var("params", 4096))
        gh = p.fixed(HASH_BYTES, "global_hash")
        scert = Certificate.decode(p.var("server_cert", 256))
        cnt = p.u32("roster.count")
        if cnt != params.N:
            raise DecodeError(f"roster has {cnt} entries, params say N={params.N}")
        roster = tuple((p.u32("roster.id"), Certificate.decode(p.var("roster.cert", 256))) for _ in range(cnt))
        ids = [pid for pid, _ in roster]
        if len(set(ids)) != len(ids) or SERVER_ID in ids:
            raise DecodeError("roster repeats an id or uses the server id")
        return cls(*hdr, params, gh, scert, roster)


# --------------------------------------------------------------------------- #
# §5 step 1: setup
@_register
@dataclass(frozen=True)
class Advertise(Message):
    """P_i → PS (relayed to all): signed channel key, masking keys X_{i,m} and self-mask commitments."""

    TYPE: ClassVar[MsgType] = MsgType.ADVERTISE
    global_hash: bytes
    enc_key: Element
    mask_keys: tuple[Element, ...]
    seed_commits: tuple[Element, ...]
    signature: bytes

    def signed_bytes(self) -> bytes:
        w = Writer().u64(self.T).u32(self.sender).fixed(self.global_hash, HASH_BYTES)
        w.raw(self.enc_key.to_bytes()).u8(len(self.mask_keys))
        for e in self.mask_keys + self.seed_commits:
            w.raw(e.to_bytes())
        return w.bytes()

    def _body(self, w: Writer) -> None:
        w.fixed(self.global_hash, HASH_BYTES).raw(self.enc_key.to_bytes()).u8(len(self.mask_keys))
        for e in self.mask_keys + self.seed_commits:
            w.raw(e.to_bytes())
        w.fixed(self.signature, SIG_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        g = ctx.need_group()
        gh = p.fixed(HASH_BYTES, "global_hash")
        enc = _elem(p, g, "enc_key")
        M = p.u8("M")
        if ctx.params is not None and M != ctx.params.M:
            raise DecodeError(f"advertisement has {M} masking keys, expected {ctx.params.M}")
        mk = tuple(_elem(p, g, f"mask_key[{i}]") for i in range(M))
        sc = tuple(_elem(p, g, f"seed_commit[{i}]") for i in range(M))
        sig = p.fixed(SIG_BYTES, "signature")
        return cls(*hdr, gh, enc, mk, sc, sig)


@_register
@dataclass(frozen=True)
class AdvertiseList(Message):
    """PS → all: the advertisements it accepted, relayed verbatim."""

    TYPE: ClassVar[MsgType] = MsgType.ADVERTISE_LIST
    adverts: tuple[bytes, ...]

    def _body(self, w: Writer) -> None:
        w.u32(len(self.adverts))
        for a in self.adverts:
            w.var(a)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        cnt = p.u32("count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} advertisements for at most {ctx.max_n} participants")
        return cls(*hdr, tuple(p.var(f"advert[{i}]", 1 << 16) for i in range(cnt)))


@_register
@dataclass(frozen=True)
class ShareBundle(Message):
    """P_i → PS: one AEAD ciphertext of P_i's shares per recipient."""

    TYPE: ClassVar[MsgType] = MsgType.SHARE_BUNDLE
    ciphertexts: tuple[tuple[int, bytes], ...]

    def _body(self, w: Writer) -> None:
        w.u32(len(self.ciphertexts))
        for rcpt, ct in self.ciphertexts:
            w.u32(rcpt).var(ct)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        cnt = p.u32("count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} ciphertexts for at most {ctx.max_n} participants")
        cts = tuple((p.u32("recipient"), p.var("ciphertext", 1 << 16)) for _ in range(cnt))
        if len({r for r, _ in cts}) != cnt:
            raise DecodeError("share bundle addresses a recipient twice")
        return cls(*hdr, cts)


@_register
@dataclass(frozen=True)
class ShareDelivery(Message):
    """PS → P_j: signed U_0, the ciphertexts addressed to P_j, and the OT table (§5 steps 1–2)."""

    TYPE: ClassVar[MsgType] = MsgType.SHARE_DELIVERY
    online: tuple[int, ...]
    signature: bytes
    ciphertexts: tuple[tuple[int, bytes], ...]
    ot_table: bytes

    def _body(self, w: Writer) -> None:
        w.u32_list(self.online).fixed(self.signature, SIG_BYTES).u32(len(self.ciphertexts))
        for snd, ct in self.ciphertexts:
            w.u32(snd).var(ct)
        w.var(self.ot_table)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        online = _ids(p, "U_0", ctx)
        sig = p.fixed(SIG_BYTES, "signature")
        cnt = p.u32("count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} ciphertexts for at most {ctx.max_n} participants")
        cts = tuple((p.u32("sender"), p.var("ciphertext", 1 << 16)) for _ in range(cnt))
        return cls(*hdr, online, sig, cts, p.var("ot_table", 1 << 26))


# --------------------------------------------------------------------------- #
# §5 step 2: slot tokens
@_register
@dataclass(frozen=True)
class OTRequestMsg(Message):
    TYPE: ClassVar[MsgType] = MsgType.OT_REQUEST
    request: bytes

    def _body(self, w: Writer) -> None:
        w.var(self.request)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.var("request", 1 << 16))


@_register
@dataclass(frozen=True)
class OTResponseMsg(Message):
    TYPE: ClassVar[MsgType] = MsgType.OT_RESPONSE
    response: bytes

    def _body(self, w: Writer) -> None:
        w.var(self.response)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.var("response", 1 << 16))


# --------------------------------------------------------------------------- #
# §4 MaskedSum, used by §5 steps 3–4
@_register
@dataclass(frozen=True)
class MaskRequest(Message):
    """PS → U_{m-1}: upload for invocation m; carries the signed counts of invocation m-1."""

    TYPE: ClassVar[MsgType] = MsgType.MASK_REQUEST
    counts: tuple[int, ...]
    signature: bytes

    def _body(self, w: Writer) -> None:
        w.u32_list(self.counts).fixed(self.signature, SIG_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        limit = ctx.params.n if ctx.params else 1 << 20
        return cls(*hdr, tuple(p.u32_list("counts", limit)), p.fixed(SIG_BYTES, "signature"))


@_register
@dataclass(frozen=True)
class MaskedInput(Message):
    """P_i → PS: ``v_i + r_{i,m}`` as little-endian ring words."""

    TYPE: ClassVar[MsgType] = MsgType.MASKED_INPUT
    words: bytes | memoryview  # decoded as a zero-copy view

    def _body(self, w: Writer) -> None:
        w.var(self.words)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.var_view("words", 1 << 31))


@_register
@dataclass(frozen=True)
class UnmaskRequest(Message):
    """PS → U_m: the signed online list U_m of invocation m."""

    TYPE: ClassVar[MsgType] = MsgType.UNMASK_REQUEST
    online: tuple[int, ...]
    signature: bytes

    def _body(self, w: Writer) -> None:
        w.u32_list(self.online).fixed(self.signature, SIG_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, _ids(p, "U_m", ctx), p.fixed(SIG_BYTES, "signature"))


@_register
@dataclass(frozen=True)
class UnmaskResponse(Message):
    """P_i → PS: its shares ``(owner j, kind, share)`` for invocation m."""

    TYPE: ClassVar[MsgType] = MsgType.UNMASK_RESPONSE
    shares: tuple[tuple[int, ShareKind, Share], ...]

    def _body(self, w: Writer) -> None:
        size = 32
        w.u32(len(self.shares))
        for owner, kind, sh in self.shares:
            w.u32(owner).u8(kind).raw(sh.encode(size))

    @classmethod
    def _parse(cls, p, hdr, ctx):
        g = ctx.need_group()
        cnt = p.u32("count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} shares for at most {ctx.max_n} participants")
        out = []
        for _ in range(cnt):
            owner = p.u32("owner")
            kind_raw = p.u8("kind")
            try:
                kind = ShareKind(kind_raw)
            except ValueError:
                raise DecodeError(f"unknown share kind {kind_raw}") from None
            raw = p.fixed(4 + g.scalar_size, "share")
            out.append((owner, kind, Share.decode(raw, g.order, g.scalar_size)))
        return cls(*hdr, tuple(out))


@_register
@dataclass(frozen=True)
class Refusal(Message):
    """A typed refusal in place of a reply: the error class name and a reason."""

    TYPE: ClassVar[MsgType] = MsgType.REFUSAL
    error: str
    reason: str

    def _body(self, w: Writer) -> None:
        w.var(self.error.encode()).var(self.reason.encode())

    @classmethod
    def _parse(cls, p, hdr, ctx):
        try:
            return cls(*hdr, p.var("error", 64).decode(), p.var("reason", 4096).decode())
        except UnicodeDecodeError:
            raise DecodeError("refusal text is not UTF-8") from None


# --------------------------------------------------------------------------- #
# Canonical signed statements of the PS.
def signed_list(T: int, m: int, global_hash: bytes, ids) -> bytes:
    return Writer().u64(T).u32(m).fixed(global_hash, HASH_BYTES).u32_list(ids).bytes()


def signed_counts(T: int, m: int, global_hash: bytes, counts) -> bytes:
    return Writer().u64(T).u32(m).fixed(global_hash, HASH_BYTES).u32_list(counts).bytes()
