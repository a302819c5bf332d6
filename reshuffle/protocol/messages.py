"""Typed protocol messages with explicit byte encodings (docs/protocol.md §6–5, §6.2–6.3).

Every message is ``header | body | signature``. The header is ``version u8 |
type u8 | T u64 | m u32 | sender u32`` (``m`` is the MaskedSum invocation, 0
outside one; the PS sends as ``SERVER_ID``). The 64-byte Ed25519 signature of the
sender covers the header and a digest of the body (:meth:`Message.statement`), so
every message anyone may later be blamed for is signed by its sender (§6.2–6.3).
Masked vectors are digested row by row, so one row can later be shown to a third
party with the other rows' hashes only.

:func:`decode` parses the header, dispatches on the type, parses the body with
bounds checks, takes the signature and rejects trailing bytes; the caller checks
the signature with the sender's key (:func:`verify`). Group elements are
validated as they are parsed. Nothing here is pickled.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from reshuffle.crypto.group import Element, Group
from reshuffle.crypto.shamir import Share
from reshuffle.crypto.signatures import SIG_BYTES, SERVER_ID, Certificate, SigningKey, VerifyKey
from reshuffle.errors import DecodeError, ProtocolError
from reshuffle.protocol.params import MAX_PARTICIPANTS, RoundParams
from reshuffle.wire import Parser, Writer

VERSION = 3  # 3: ADVERTISE and DC_KEY carry the signed pseudonym request commitment (§7.3)
HASH_BYTES = 32
HEADER_BYTES = 18


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
    CONSENT = 13
    CERTIFICATE = 14
    BLAME_REQUEST = 15
    OPENING = 16
    DISPUTE = 17
    DISPUTE_ANSWER = 18
    COMPLAINTS = 19
    COMPLAINT_ANSWER = 20
    OPEN_REQUEST = 21
    OPEN_REVEAL = 22
    OBJECTION = 23
    RESTART = 24
    SLOT_REQUEST = 25
    SLOT_RESPONSE = 26
    # Anonymity-group assignment (reshuffle/protocol/groups.py), before any group's ROUND_START.
    GROUP_OPEN = 40
    GROUP_COMMIT = 41
    GROUP_COMMITS = 42
    GROUP_ACK = 43
    GROUP_CERT = 44
    GROUP_REVEAL = 45
    GROUP_REVEALS = 46
    # DC-net round of a stable group (reshuffle/protocol/dcnet.py, docs/protocol.md "The DC-net round").
    DC_START = 60
    DC_KEY = 61
    DC_KEYS = 62
    DC_COUNTS = 63
    DC_UPLOAD_REQUEST = 64
    DC_BLAME = 65
    DC_OPENING = 66


class ShareKind(enum.IntEnum):
    SELF_SEED = 0  # b_{j,m}: revealed for j in U_m
    DH_SECRET = 1  # x_{j,m}: revealed for j that dropped from U_{m-1} to U_m


_SHARE_KINDS = {k.value: k for k in ShareKind}


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


_ROWS: dict[tuple[Group, bytes], tuple[Element, ...]] = {}
ROWS_MAX = 8192  # element rows remembered per process (a Ĉ of t = 31 is about 3 KB of objects)


def _split_elements(g: Group, blob: bytes, field: str) -> tuple[Element, ...]:
    """The validated elements of ``blob``, a concatenation of encodings (``field[k]`` in errors)."""
    size = g.element_size
    return tuple(g.element_from_bytes(blob[k * size : (k + 1) * size], f"{field}[{k}]")
                 for k in range(len(blob) // size))


def _shared_row(p: Parser, g: Group, count: int, field: str) -> tuple[Element, ...]:
    """``count`` validated elements read as one field, reused if this process decoded the same bytes.

    A relayed row (a dealer's Ĉ in every member's SHARE_DELIVERY) reaches all
    members as the same bytes; decoding is a pure function of them and elements
    are immutable, so simulated members in one process hold one copy.
    """
    blob = p.fixed(count * g.element_size, field)
    row = _ROWS.get((g, blob))  # keyed on the group object: two toy groups may share a name
    if row is None:
        row = _split_elements(g, blob, field)
        if len(_ROWS) >= ROWS_MAX:
            _ROWS.clear()
        _ROWS[(g, blob)] = row
    return row


def _write_peers(w: Writer, peers) -> None:
    """The (j, X_j) partner keys a sender used, sorted by j (:func:`_read_peers` reads them back)."""
    w.u32(len(peers))
    for j, X in peers:
        w.u32(j).raw(X.to_bytes())


def _read_peers(p: Parser, ctx: Context, what: str) -> tuple[tuple[int, Element], ...]:
    g = ctx.need_group()
    cnt = p.u32("peers.count")
    if cnt > ctx.max_n:
        raise DecodeError(f"{cnt} partners for at most {ctx.max_n} participants")
    peers = tuple((p.u32("partner"), _elem(p, g, "X_j")) for _ in range(cnt))
    ids = [j for j, _ in peers]
    if ids != sorted(set(ids)):
        raise DecodeError(f"{what} partners must be sorted and distinct")
    return peers


def _write_optional(w: Writer, e: Element | None) -> None:
    """A flag byte, then the element if present."""
    w.u8(0 if e is None else 1)
    if e is not None:
        w.raw(e.to_bytes())


def _read_optional(p: Parser, g: Group, field: str) -> Element | None:
    flag = p.u8(f"{field}.present")
    if flag not in (0, 1):
        raise DecodeError(f"{field}: presence flag {flag}, expected 0 or 1")
    return _elem(p, g, field) if flag else None


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

    def header(self) -> bytes:
        return Writer().u8(VERSION).u8(self.TYPE).u64(self.T).u32(self.m).u32(self.sender).bytes()

    def body(self) -> bytes:
        w = Writer()
        self._body(w)
        return w.bytes()

    def statement(self, body: bytes) -> bytes:
        """What the sender's signature covers: the header and a digest of the body."""
        return self.header() + hashlib.sha256(body).digest()

    def encode(self, sk: "SigningKey | None" = None) -> bytes:
        """Header, body and the sender's signature (64 zero bytes without a key: tests only)."""
        body = self.body()
        sig = sk.sign("msg", self.statement(body)) if sk is not None else bytes(SIG_BYTES)
        return b"".join((self.header(), body, sig))

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
    body_start = len(data) - p.remaining
    msg = cls._parse(p, hdr, ctx)
    body_end = len(data) - p.remaining
    sig = p.fixed(SIG_BYTES, "signature")
    p.finish()
    # Kept beside the message (not a field): what verify() checks.
    object.__setattr__(msg, "_signature", sig)
    object.__setattr__(msg, "_statement", msg.statement(memoryview(data)[body_start:body_end]))
    return msg


_SHARED: dict[tuple, Message] = {}
SHARED_MAX = 2048  # decoded relays remembered per process (a g = 50 advertisement is about 30 KB)


def decode_shared(data: bytes, ctx: Context) -> Message:
    """:func:`decode` for a message relayed verbatim to many recipients: parsed once per process.

    Decoding is a pure function of the bytes, the group and the round parameters,
    and messages are immutable, so simulated participants in one process may hold
    the same decoded object (one copy of every peer's Feldman commitments per
    process, not one per participant). Each recipient still checks the signature
    and every condition on the content itself. Only successful decodes are kept.
    """
    key = (bytes(data), ctx.group, ctx.params)
    m = _SHARED.get(key)
    if m is None:
        m = decode(key[0], ctx)
        if len(_SHARED) >= SHARED_MAX:
            _SHARED.clear()
        _SHARED[key] = m
    return m


def verify(m: Message, key: VerifyKey) -> None:
    """Check a decoded message's signature with its sender's key; InvalidSignature if it fails."""
    sig = getattr(m, "_signature", None)
    if sig is None:
        raise DecodeError(f"{m.TYPE.name} was not decoded from bytes: nothing to verify")
    key.verify("msg", m._statement, sig)


def resign(data: bytes, sk: SigningKey, ctx: Context) -> bytes:
    """``data`` with its last 64 bytes replaced by a valid signature of ``sk``.

    For adversaries that craft messages byte by byte and sign them as a real
    sender would; bytes that do not parse are returned unchanged (they fail
    before any signature is checked).
    """
    if len(data) < HEADER_BYTES + SIG_BYTES:
        return data
    try:
        m = decode(bytes(data[:-SIG_BYTES]) + bytes(SIG_BYTES), ctx)
    except ProtocolError:
        return data
    return bytes(data[:-SIG_BYTES]) + sk.sign("msg", m._statement)


def relay_bytes(m: Message) -> bytes:
    """The exact signed bytes of a decoded message, to relay it verbatim (encodings are canonical)."""
    return m.header() + m.body() + m._signature


def signature_of(m: Message) -> tuple[bytes, bytes]:
    """(statement, signature) of a decoded message: evidence a third party can check."""
    return m._statement, m._signature


def peek_type(data: bytes) -> MsgType | None:
    """The type byte of a message, or None if it is not even a header."""
    if len(data) < 2:
        return None
    try:
        return MsgType(data[1])
    except ValueError:
        return None


class Header(NamedTuple):
    """The fixed fields at the start of every message: version, type (None if unknown), T, m, sender."""

    version: int
    type: MsgType | None
    T: int
    m: int
    sender: int


_HEADER = struct.Struct(">BBQII")  # what Message.header() writes: u8 version, u8 type, u64 T, u32 m, u32 sender
if _HEADER.size != HEADER_BYTES:
    raise AssertionError("the header layout and HEADER_BYTES disagree")


def peek_header(data: bytes) -> Header | None:
    """The header of a message without parsing its body or checking anything, or None if ``data`` is
    shorter than a header. For routing and statistics: a driver's view of bytes, never a check."""
    if len(data) < HEADER_BYTES:
        return None
    version, t, T, m, sender = _HEADER.unpack_from(data)
    return Header(version, peek_type(data), T, m, sender)


# --------------------------------------------------------------------------- #
# §5 step 0: broadcast
@_register
@dataclass(frozen=True)
class RoundStart(Message):
    """PS → all: parameters (with c), H(W_g^T), the PS certificate, the roster, the credential key C = g^γ,
    and the epoch with its pseudonym key P = g^π (§7.3)."""

    TYPE: ClassVar[MsgType] = MsgType.ROUND_START
    params: RoundParams
    global_hash: bytes
    server_cert: Certificate
    roster: tuple[tuple[int, Certificate], ...]
    cred_key: Element
    epoch: int
    nym_key: Element

    def _body(self, w: Writer) -> None:
        w.var(self.params.encode()).fixed(self.global_hash, HASH_BYTES)
        w.var(self.server_cert.encode()).u32(len(self.roster))
        for pid, cert in self.roster:
            w.u32(pid).var(cert.encode())
        w.raw(self.cred_key.to_bytes()).u64(self.epoch).raw(self.nym_key.to_bytes())

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
        cred = _elem(p, params.group_obj(), "cred_key")
        epoch = p.u64("epoch")
        nym = _elem(p, params.group_obj(), "nym_key")
        return cls(*hdr, params, gh, scert, roster, cred, epoch, nym)


# --------------------------------------------------------------------------- #
# §5 step 1: setup
@_register
@dataclass(frozen=True)
class Advertise(Message):
    """P_i → PS (relayed to all, signed): channel key and Feldman commitments of its 2M secrets.

    Secrets in order b_{i,1}, x_{i,1}, b_{i,2}, x_{i,2}, ...; row s holds
    ``C_{s,0..t-1}``, so ``C_{s,0}`` is g^{b_{i,m}} or X_{i,m} (§6.4).
    """

    TYPE: ClassVar[MsgType] = MsgType.ADVERTISE
    global_hash: bytes
    params_hash: bytes  # RoundParams.digest() of the parameters it takes part with (evidence binds them)
    enc_key: Element
    commitments: tuple[tuple[Element, ...], ...]
    epoch_key: bytes  # pseudonym.key_digest(epoch, P) of the ROUND_START it received (§7.3)
    # §7.3: c = pseudonym.request_digest(epoch, B) of its pseudonym request, the same in every round of the
    # epoch, and its signature (context "nym") that a group mate keeps as evidence
    nym_commit: bytes = bytes(HASH_BYTES)
    nym_sig: bytes = bytes(SIG_BYTES)

    @property
    def seed_commits(self) -> tuple[Element, ...]:
        return tuple(row[0] for row in self.commitments[0::2])

    @property
    def mask_keys(self) -> tuple[Element, ...]:
        return tuple(row[0] for row in self.commitments[1::2])

    def _body(self, w: Writer) -> None:
        t = len(self.commitments[0])
        w.fixed(self.global_hash, HASH_BYTES).fixed(self.params_hash, HASH_BYTES)
        w.raw(self.enc_key.to_bytes()).fixed(self.epoch_key, HASH_BYTES)
        w.fixed(self.nym_commit, HASH_BYTES).fixed(self.nym_sig, SIG_BYTES).u8(len(self.commitments) // 2).u16(t)
        for row in self.commitments:
            if len(row) != t:
                raise ValueError("every commitment row has t elements")
            for e in row:
                w.raw(e.to_bytes())

    @classmethod
    def _parse(cls, p, hdr, ctx):
        g = ctx.need_group()
        gh = p.fixed(HASH_BYTES, "global_hash")
        ph = p.fixed(HASH_BYTES, "params_hash")
        enc = _elem(p, g, "enc_key")
        ek = p.fixed(HASH_BYTES, "epoch_key")
        nc, ns = p.fixed(HASH_BYTES, "nym_commit"), p.fixed(SIG_BYTES, "nym_sig")
        M, t = p.u8("M"), p.u16("t")
        if ctx.params is not None and (M, t) != (ctx.params.M, ctx.params.t):
            raise DecodeError(f"advertisement commits to {M} invocations at degree {t}, "
                              f"expected {ctx.params.M} and t={ctx.params.t}")
        if M < 1 or t < 1 or t > ctx.max_n:
            raise DecodeError(f"advertisement with M={M}, t={t} out of range")
        size = g.element_size
        blob = p.fixed(2 * M * t * size, "commitments")
        com = tuple(_split_elements(g, blob[s * t * size : (s + 1) * t * size], f"C[{s}]") for s in range(2 * M))
        a = cls(*hdr, gh, ph, enc, com, ek, nc, ns)
        # What encode_commitments() would write, kept for the Feldman weights (they hash it).
        object.__setattr__(a, "_commitments_encoding", Writer().u16(2 * M).u16(t).bytes() + blob)
        return a

    def commitments_encoding(self) -> bytes:
        """``feldman.encode_commitments(self.commitments)``, without re-encoding a decoded advertisement."""
        enc = getattr(self, "_commitments_encoding", None)
        if enc is None:
            from reshuffle.crypto.feldman import encode_commitments

            enc = encode_commitments(self.commitments)
        return enc


@_register
@dataclass(frozen=True)
class AdvertiseList(Message):
    """PS → all: the advertisements it accepted, relayed verbatim (each with its sender's signature)."""

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
    """P_i → PS: one AEAD ciphertext of P_i's shares per recipient, and Ĉ (§6.4).

    Ĉ is taken under weights that hash :meth:`digest` of these very ciphertexts, so
    the dealer fixes its shares before it knows the weights.
    """

    TYPE: ClassVar[MsgType] = MsgType.SHARE_BUNDLE
    ciphertexts: tuple[tuple[int, bytes], ...]
    combined: tuple[Element, ...] = ()

    def digest(self) -> bytes:
        w = Writer().u32(len(self.ciphertexts))
        for rcpt, ct in self.ciphertexts:
            w.u32(rcpt).var(ct)
        return hashlib.sha256(w.bytes()).digest()

    def _body(self, w: Writer) -> None:
        w.u32(len(self.ciphertexts))
        for rcpt, ct in self.ciphertexts:
            w.u32(rcpt).var(ct)
        w.u16(len(self.combined))
        for e in self.combined:
            w.raw(e.to_bytes())

    @classmethod
    def _parse(cls, p, hdr, ctx):
        cnt = p.u32("count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} ciphertexts for at most {ctx.max_n} participants")
        cts = tuple((p.u32("recipient"), p.var("ciphertext", 1 << 16)) for _ in range(cnt))
        if len({r for r, _ in cts}) != cnt:
            raise DecodeError("share bundle addresses a recipient twice")
        t = p.u16("t")
        if ctx.params is not None and t != ctx.params.t:
            raise DecodeError(f"share bundle's Ĉ has {t} elements, expected t={ctx.params.t}")
        return cls(*hdr, cts, tuple(_elem(p, ctx.need_group(), f"combined[{k}]") for k in range(t)))


@_register
@dataclass(frozen=True)
class ShareDelivery(Message):
    """PS → P_j: U_0, the OT table and the decoy commitment (the same for everyone, in h),
    and the ciphertexts addressed to P_j."""

    TYPE: ClassVar[MsgType] = MsgType.SHARE_DELIVERY
    online: tuple[int, ...]
    ot_table: bytes
    decoy_commit: bytes
    dealers: tuple[tuple[int, bytes, tuple[Element, ...]], ...]  # (dealer, bundle digest, Ĉ) for U_0
    ciphertexts: tuple[tuple[int, bytes], ...]

    def common(self) -> bytes:
        """The part every participant must see identically (absorbed into h)."""
        w = Writer().u32_list(self.online).var(self.ot_table).fixed(self.decoy_commit, HASH_BYTES)
        w.u32(len(self.dealers))
        for dealer, digest, combined in self.dealers:
            w.u32(dealer).fixed(digest, HASH_BYTES).u16(len(combined))
            for e in combined:
                w.raw(e.to_bytes())
        return w.bytes()

    def _body(self, w: Writer) -> None:
        w.raw(self.common()).u32(len(self.ciphertexts))
        for snd, ct in self.ciphertexts:
            w.u32(snd).var(ct)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        g = ctx.need_group()
        online = _ids(p, "U_0", ctx)
        table = p.var("ot_table", 1 << 26)
        commit = p.fixed(HASH_BYTES, "decoy_commit")
        nd = p.u32("dealers.count")
        if nd > ctx.max_n:
            raise DecodeError(f"{nd} dealers for at most {ctx.max_n} participants")
        dealers = []
        for _ in range(nd):
            dealer, digest, t = p.u32("dealer"), p.fixed(HASH_BYTES, "digest"), p.u16("t")
            if t > ctx.max_n:
                raise DecodeError(f"Ĉ of {t} elements")
            dealers.append((dealer, digest, _shared_row(p, g, t, "combined")))
        cnt = p.u32("count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} ciphertexts for at most {ctx.max_n} participants")
        cts = tuple((p.u32("sender"), p.var("ciphertext", 1 << 16)) for _ in range(cnt))
        return cls(*hdr, online, table, commit, tuple(dealers), cts)


# --------------------------------------------------------------------------- #
# §5 step 2 and §7.1–7.2: slot tokens and the row credential
@_register
@dataclass(frozen=True)
class OTRequestMsg(Message):
    """P_i → PS: blinded OT choices A_1..A_k, the blinded credential input, the dealers whose
    shares failed its batched Feldman check (complaints, §6.4), and, from a participant whose pseudonym
    request of this epoch is pending, the blinded input B its ADVERTISE committed to (§7.3)."""

    TYPE: ClassVar[MsgType] = MsgType.OT_REQUEST
    request: bytes
    cred_request: Element
    complaints: tuple[int, ...] = ()
    nym_request: Element | None = None

    def _body(self, w: Writer) -> None:
        w.var(self.request).raw(self.cred_request.to_bytes()).u32_list(self.complaints)
        _write_optional(w, self.nym_request)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        req = p.var("request", 1 << 16)
        cred = _elem(p, ctx.need_group(), "cred_request")
        complaints = _ids(p, "complaints", ctx)
        return cls(*hdr, req, cred, complaints, _read_optional(p, ctx.need_group(), "nym_request"))


@_register
@dataclass(frozen=True)
class OTResponseMsg(Message):
    """PS → P_i: D_j = A_j^β with a DLEQ proof against B, the credential evaluation with its proof against C,
    and where P_i asked for one, its pseudonym evaluation with a proof against P (§7.3)."""

    TYPE: ClassVar[MsgType] = MsgType.OT_RESPONSE
    response: bytes
    ot_proof: bytes
    cred_eval: Element
    cred_proof: bytes
    resolved: tuple[tuple[int, bytes], ...] = ()  # (dealer, its signed COMPLAINT_ANSWER) for our complaints
    nym_eval: Element | None = None
    nym_proof: bytes = b""

    def _body(self, w: Writer) -> None:
        w.var(self.response).var(self.ot_proof).raw(self.cred_eval.to_bytes()).var(self.cred_proof)
        w.u32(len(self.resolved))
        for dealer, answer in self.resolved:
            w.u32(dealer).var(answer)
        _write_optional(w, self.nym_eval)
        w.var(self.nym_proof)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        resp, proof = p.var("response", 1 << 16), p.var("ot_proof", 256)
        cred, cproof = _elem(p, ctx.need_group(), "cred_eval"), p.var("cred_proof", 256)
        cnt = p.u32("resolved.count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} resolved complaints for at most {ctx.max_n} participants")
        resolved = tuple((p.u32("dealer"), p.var("answer", 1 << 24)) for _ in range(cnt))
        nym = _read_optional(p, ctx.need_group(), "nym_eval")
        nproof = p.var("nym_proof", 256)
        if (nym is None) != (not nproof):
            raise DecodeError("a pseudonym evaluation comes with its proof, and a proof with an evaluation")
        return cls(*hdr, resp, proof, cred, cproof, resolved, nym, nproof)

    def with_resolved(self, resolved: tuple[tuple[int, bytes], ...]) -> "OTResponseMsg":
        """The same answer with the complaint answers it relays."""
        return dataclasses.replace(self, resolved=resolved)


@_register
@dataclass(frozen=True)
class Complaints(Message):
    """PS → dealer: the participants that complained about its shares (§6.4)."""

    TYPE: ClassVar[MsgType] = MsgType.COMPLAINTS
    complainers: tuple[int, ...]

    def _body(self, w: Writer) -> None:
        w.u32_list(self.complainers)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, _ids(p, "complainers", ctx))


@_register
@dataclass(frozen=True)
class ComplaintAnswer(Message):
    """Dealer → PS (signed, public): the disputed shares in the clear, per complainer."""

    TYPE: ClassVar[MsgType] = MsgType.COMPLAINT_ANSWER
    shares: tuple[tuple[int, tuple[int, ...]], ...]  # (complainer j, its S share values)

    def _body(self, w: Writer) -> None:
        w.u32(len(self.shares))
        for j, ys in self.shares:
            w.u32(j).u16(len(ys))
            for y in ys:
                w.fixed(y.to_bytes(32, "big"), 32)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        g = ctx.need_group()
        cnt = p.u32("count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} answers for at most {ctx.max_n} participants")
        out = []
        for _ in range(cnt):
            j, S = p.u32("complainer"), p.u16("S")
            if ctx.params is not None and S != 2 * ctx.params.M:
                raise DecodeError(f"answer holds {S} shares, expected {2 * ctx.params.M}")
            out.append((j, tuple(g.scalar_from_bytes(p.fixed(g.scalar_size, "share"), "share") for _ in range(S))))
        if len({j for j, _ in out}) != cnt:
            raise DecodeError("answer repeats a complainer")
        return cls(*hdr, tuple(out))


# --------------------------------------------------------------------------- #
# §6 MaskedSum, used by §5 steps 3–4, with the consistency step of §6.2–6.3
@_register
@dataclass(frozen=True)
class MaskRequest(Message):
    """PS → U_{m-1}: upload for invocation m; carries the counts of invocation m-1 and, for m = 1,
    the dealers excluded from U_0 by the complaint step (§6.4)."""

    TYPE: ClassVar[MsgType] = MsgType.MASK_REQUEST
    counts: tuple[int, ...]
    excluded: tuple[int, ...] = ()

    def _body(self, w: Writer) -> None:
        w.u32_list(self.counts).u32_list(self.excluded)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        limit = ctx.params.n if ctx.params else 1 << 20
        return cls(*hdr, tuple(p.u32_list("counts", limit)), _ids(p, "excluded", ctx))


def row_hashes(words: bytes | memoryview, rows: int) -> list[bytes]:
    """SHA-256 of each row of a masked vector."""
    mv = memoryview(words).cast("B")
    if rows < 1 or len(mv) % rows:
        raise DecodeError(f"masked vector of {len(mv)} bytes does not split into {rows} rows")
    size = len(mv) // rows
    return [hashlib.sha256(mv[r * size : (r + 1) * size]).digest() for r in range(rows)]


def digest_of_row_hashes(hashes) -> bytes:
    return hashlib.sha256(b"".join(hashes)).digest()


def row_digest(words: bytes | memoryview, rows: int) -> bytes:
    """H(y) over per-row hashes: SHA-256 of the rows' SHA-256 digests (one pass over y)."""
    return digest_of_row_hashes(row_hashes(words, rows))


@_register
@dataclass(frozen=True)
class MaskedInput(Message):
    """P_i → PS: ``v_i + r_{i,m}`` as little-endian ring words, with the transcript hash h_m it used.

    The signature covers ``(header, h_m, H(row hashes))`` (§6.2); ``rows`` is how many
    rows y has (1 for a count vector). The sender's row hashes travel in the body, so a
    receiver checks the signature without hashing y and hashes only the rows it may
    ever have to show a third party (:func:`check_rows`).
    """

    TYPE: ClassVar[MsgType] = MsgType.MASKED_INPUT
    h: bytes
    rows: int
    words: bytes | memoryview  # decoded as a zero-copy view

    @classmethod
    def hashed(cls, T: int, m: int, sender: int, h: bytes, rows: int, words, hashes: list[bytes]) -> "MaskedInput":
        """The message with its row hashes as the sender computed them while writing the words (one pass)."""
        if len(hashes) != rows:
            raise ValueError(f"{len(hashes)} row hashes for {rows} rows")
        out = cls(T, m, sender, h, rows, words)
        object.__setattr__(out, "_row_hashes", list(hashes))
        return out

    def _hashes(self) -> list[bytes]:
        if getattr(self, "_row_hashes", None) is None:
            object.__setattr__(self, "_row_hashes", row_hashes(self.words, self.rows))
        return self._row_hashes

    def _prefix(self) -> bytes:
        """The body up to the words: h_m, rows, row hashes, padding and the words' length."""
        w = Writer().fixed(self.h, HASH_BYTES).u32(self.rows)
        for rh in self._hashes():
            w.fixed(rh, HASH_BYTES)
        # Two zero bytes put the words on a 4-byte boundary of the message (18-byte header), so a
        # receiver sums them in place at numpy's aligned speed (1.7x the unaligned one).
        return w.u16(0).u32(len(self.words)).bytes()

    def _body(self, w: Writer) -> None:
        w.raw(self._prefix()).raw(self.words)

    def statement(self, body: bytes) -> bytes:
        return self.header() + self.h + digest_of_row_hashes(self._hashes())

    def encode(self, sk: "SigningKey | None" = None) -> bytes:
        # The signature covers the row hashes, not the body bytes: the words are copied once, into the message.
        sig = sk.sign("msg", self.statement(b"")) if sk is not None else bytes(SIG_BYTES)
        return b"".join((self.header(), self._prefix(), self.words, sig))

    @classmethod
    def _parse(cls, p, hdr, ctx):
        h = p.fixed(HASH_BYTES, "h")
        rows = p.u32("rows")
        limit = (ctx.params.n + 64) if ctx.params else 1 << 20
        if not 1 <= rows <= limit:
            raise DecodeError(f"masked vector with {rows} rows, expected 1..{limit}")
        hashes = p.fixed_list(HASH_BYTES, rows, "row_hash")
        if p.u16("pad") != 0:
            raise DecodeError("masked vector padding is not zero")
        words = p.var_view("words", 1 << 31)
        if len(words) % rows:
            raise DecodeError(f"masked vector of {len(words)} bytes does not split into {rows} rows")
        m = cls(*hdr, h, rows, words)
        object.__setattr__(m, "_row_hashes", hashes)  # as claimed: check_rows() holds rows to them
        return m


def check_rows(m: MaskedInput, which=None) -> None:
    """Hash the rows ``which`` (default all) and compare with the signed row hashes; DecodeError if one differs."""
    mv = memoryview(m.words).cast("B")
    size = len(mv) // m.rows
    for r in range(m.rows) if which is None else which:
        if not 0 <= r < m.rows or hashlib.sha256(mv[r * size : (r + 1) * size]).digest() != m._row_hashes[r]:
            raise DecodeError(f"row {r} of the masked vector of {m.sender} does not match its signed hash")


@_register
@dataclass(frozen=True)
class UnmaskRequest(Message):
    """PS → U_m: the online list U_m of invocation m, to be signed by its members (§6.2–6.3)."""

    TYPE: ClassVar[MsgType] = MsgType.UNMASK_REQUEST
    online: tuple[int, ...]

    def _body(self, w: Writer) -> None:
        w.u32_list(self.online)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, _ids(p, "U_m", ctx))


@_register
@dataclass(frozen=True)
class Consent(Message):
    """P_i → PS: its signature on the statement ``(T, m, U_m, h_m)`` (at most one per (T, m))."""

    TYPE: ClassVar[MsgType] = MsgType.CONSENT
    consent: bytes

    def _body(self, w: Writer) -> None:
        w.fixed(self.consent, SIG_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.fixed(SIG_BYTES, "consent"))


@_register
@dataclass(frozen=True)
class CertificateMsg(Message):
    """PS → U_m: at least t members' signatures on the identical statement ``(T, m, U_m, h_m)``."""

    TYPE: ClassVar[MsgType] = MsgType.CERTIFICATE
    online: tuple[int, ...]
    signatures: tuple[tuple[int, bytes], ...]

    def _body(self, w: Writer) -> None:
        w.u32_list(self.online).u32(len(self.signatures))
        for pid, sig in self.signatures:
            w.u32(pid).fixed(sig, SIG_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        online = _ids(p, "U_m", ctx)
        cnt = p.u32("count")
        if cnt > len(online):
            raise DecodeError(f"{cnt} signatures for a list of {len(online)} members")
        sigs = tuple((p.u32("signer"), p.fixed(SIG_BYTES, "signature")) for _ in range(cnt))
        if len({s for s, _ in sigs}) != cnt:
            raise DecodeError("certificate repeats a signer")
        return cls(*hdr, online, sigs)


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
        # Fixed-size entries (owner u32 | kind u8 | x u32 | y): one bounds-checked read, then unpacked.
        entry = struct.Struct(f">IBI{g.scalar_size}s")
        raw = p.fixed(cnt * entry.size, "shares")
        out = []
        for owner, kind_raw, x, y in entry.iter_unpack(raw):
            kind = _SHARE_KINDS.get(kind_raw)
            if kind is None:
                raise DecodeError(f"unknown share kind {kind_raw}")
            out.append((owner, kind, Share.checked(x, int.from_bytes(y, "big"), g.order)))
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
# §9: blame for rows
def _scalar_map(p: Parser, g: Group, field: str, ctx: Context) -> tuple[tuple[int, int], ...]:
    cnt = p.u32(field + ".count")
    if cnt > ctx.max_n:
        raise DecodeError(f"{field}: {cnt} entries for at most {ctx.max_n} participants")
    out = tuple((p.u32(field + ".id"), g.scalar_from_bytes(p.fixed(g.scalar_size, field), field)) for _ in range(cnt))
    if len({i for i, _ in out}) != cnt:
        raise DecodeError(f"{field}: repeated participant id")
    return out


def _write_scalar_map(w: Writer, items, size: int = 32) -> None:
    w.u32(len(items))
    for i, s in items:
        w.u32(i).fixed(s.to_bytes(size, "big"), size)


@_register
@dataclass(frozen=True)
class BlameRequest(Message):
    """PS → U_m: the opened decoy seed, what each participant needs to audit every reservation
    iteration (members' signed masked count vectors, their self seeds, the dropped members' x),
    and the decoy positions whose per-row keys it asks for."""

    TYPE: ClassVar[MsgType] = MsgType.BLAME_REQUEST
    decoy_seed: bytes
    positions: tuple[int, ...]
    vectors: tuple[tuple[bytes, ...], ...]  # per iteration r = 1..R_max: relayed signed MASKED_INPUTs
    seeds: tuple[tuple[tuple[int, int], ...], ...]  # per iteration: (i, b_{i,r}) for i in U_r
    dropped: tuple[tuple[tuple[int, int], ...], ...]  # per iteration: (j, x_{j,r}) for the dropped

    def _body(self, w: Writer) -> None:
        w.fixed(self.decoy_seed, 32).u32_list(self.positions).u32(len(self.vectors))
        for vecs, seeds, dropped in zip(self.vectors, self.seeds, self.dropped):
            w.u32(len(vecs))
            for v in vecs:
                w.var(v)
            _write_scalar_map(w, seeds)
            _write_scalar_map(w, dropped)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        g = ctx.need_group()
        seed = p.fixed(32, "decoy_seed")
        positions = tuple(p.u32_list("positions", 1 << 16))
        R = p.u32("iterations")
        # The slot phase that produced the upload: all R_max iterations, fewer after a restart (§8.2).
        if ctx.params is not None and not 1 <= R <= ctx.params.R_max:
            raise DecodeError(f"blame request audits {R} iterations, the round has {ctx.params.R_max}")
        vectors, seeds, dropped = [], [], []
        for _ in range(min(R, 64)):
            cnt = p.u32("vectors.count")
            if cnt > ctx.max_n:
                raise DecodeError(f"{cnt} vectors for at most {ctx.max_n} participants")
            vectors.append(tuple(p.var("vector", 1 << 24) for _ in range(cnt)))
            seeds.append(_scalar_map(p, g, "self seed", ctx))
            dropped.append(_scalar_map(p, g, "dropped secret", ctx))
        return cls(*hdr, seed, positions, tuple(vectors), tuple(seeds), tuple(dropped))


KEY_BYTES = 32


@_register
@dataclass(frozen=True)
class Opening(Message):
    """P_i → PS (signed): its per-row pairwise keys ``k_{ij,ρ}`` at each decoy row ρ (§9 step 2), with what
    they were derived from: h_M of its upload and the partner keys X_j it used. A checker then reads nothing
    about the keys that the opener did not sign; every row gives one key per partner of ``peers``."""

    TYPE: ClassVar[MsgType] = MsgType.OPENING
    h: bytes
    peers: tuple[tuple[int, Element], ...]
    rows: tuple[tuple[int, tuple[tuple[int, bytes], ...]], ...]

    def _body(self, w: Writer) -> None:
        _write_peers(w.fixed(self.h, HASH_BYTES), self.peers)
        w.u32(len(self.rows))
        for pos, keys in self.rows:
            w.u32(pos).u32(len(keys))
            for j, k in keys:
                w.u32(j).fixed(k, KEY_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        h = p.fixed(HASH_BYTES, "h")
        peers = _read_peers(p, ctx, "opening")
        ids = [j for j, _ in peers]
        cnt = p.u32("rows.count")
        if cnt > 64:
            raise DecodeError(f"opening of {cnt} rows; at most 64 decoys")
        rows = []
        for _ in range(cnt):
            pos, nk = p.u32("position"), p.u32("keys.count")
            if nk > ctx.max_n:
                raise DecodeError(f"{nk} keys for at most {ctx.max_n} participants")
            keys = tuple((p.u32("partner"), p.fixed(KEY_BYTES, "key")) for _ in range(nk))
            if sorted(j for j, _ in keys) != ids:
                raise DecodeError(f"opening row {pos} gives keys for other partners than it names")
            rows.append((pos, keys))
        return cls(*hdr, h, peers, tuple(rows))


@_register
@dataclass(frozen=True)
class Dispute(Message):
    """PS → P_i: its partner's signed opening that conflicts with P_i's own for one pair (§9 step 3)."""

    TYPE: ClassVar[MsgType] = MsgType.DISPUTE
    partner: int
    partner_opening: bytes

    def _body(self, w: Writer) -> None:
        w.u32(self.partner).var(self.partner_opening)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.u32("partner"), p.var("partner_opening", 1 << 20))


@_register
@dataclass(frozen=True)
class DisputeAnswer(Message):
    """P_i → PS: ``K_ij`` of the disputed pair with a DLEQ proof against X_i and X_j."""

    TYPE: ClassVar[MsgType] = MsgType.DISPUTE_ANSWER
    partner: int
    secret: Element
    proof: bytes

    def _body(self, w: Writer) -> None:
        w.u32(self.partner).raw(self.secret.to_bytes()).var(self.proof)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        partner = p.u32("partner")
        return cls(*hdr, partner, _elem(p, ctx.need_group(), "K_ij"), p.var("proof", 256))


# --------------------------------------------------------------------------- #
# §8.2: opening a failed reservation iteration and restarting the slot phase
@_register
@dataclass(frozen=True)
class OpenRequest(Message):
    """PS → U_r: iteration r (``m``) failed a count check; reveal x_{i,r} of that invocation only."""

    TYPE: ClassVar[MsgType] = MsgType.OPEN_REQUEST
    reason: str

    def _body(self, w: Writer) -> None:
        w.var(self.reason.encode())

    @classmethod
    def _parse(cls, p, hdr, ctx):
        raw = p.var("reason", 1024)
        try:
            return cls(*hdr, raw.decode())
        except UnicodeDecodeError:
            raise DecodeError("open request reason is not UTF-8") from None


@_register
@dataclass(frozen=True)
class OpenReveal(Message):
    """P_i → PS (signed): x_{i,r} of the opened iteration r and the (j, X_{j,r}) it masked against.

    The partner keys are the sender's own claim: if they are false, its count vector
    decodes to garbage and names it, so a third party needs no other party's message."""

    TYPE: ClassVar[MsgType] = MsgType.OPEN_REVEAL
    x: int
    peers: tuple[tuple[int, Element], ...]

    def _body(self, w: Writer) -> None:
        _write_peers(w.fixed(self.x.to_bytes(32, "big"), 32), self.peers)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        g = ctx.need_group()
        x = g.scalar_from_bytes(p.fixed(g.scalar_size, "x"), "x")
        return cls(*hdr, x, _read_peers(p, ctx, "open reveal"))


@_register
@dataclass(frozen=True)
class Objection(Message):
    """P_i → PS (signed), instead of the vector of invocation m: its pick ``slot`` of iteration m-1
    shows count 0 in the counts it was shown under ``h`` (= h_m)."""

    TYPE: ClassVar[MsgType] = MsgType.OBJECTION
    slot: int
    h: bytes

    def _body(self, w: Writer) -> None:
        w.u32(self.slot).fixed(self.h, HASH_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        slot = p.u32("slot")
        if ctx.params is not None and slot >= ctx.params.n:
            raise DecodeError(f"objection names slot {slot}, the round has n={ctx.params.n}")
        return cls(*hdr, slot, p.fixed(HASH_BYTES, "h"))


@_register
@dataclass(frozen=True)
class Restart(Message):
    """PS → the remaining members: the slot phase restarts at invocation ``m`` with a new OT table
    and decoy commitment, without the named culprits (with their evidence) and the silent."""

    TYPE: ClassVar[MsgType] = MsgType.RESTART
    opened: int  # the iteration that was opened
    ot_table: bytes
    decoy_commit: bytes
    evidence: tuple[bytes, ...]  # encoded CountEvidence, one per culprit
    silent: tuple[int, ...]  # members that did not reveal: dropped, never named

    def _body(self, w: Writer) -> None:
        w.u32(self.opened).var(self.ot_table).fixed(self.decoy_commit, HASH_BYTES).u32(len(self.evidence))
        for e in self.evidence:
            w.var(e)
        w.u32_list(self.silent)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        opened = p.u32("opened")
        table, commit = p.var("ot_table", 1 << 24), p.fixed(HASH_BYTES, "decoy_commit")
        cnt = p.u32("evidence.count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} culprits for at most {ctx.max_n} participants")
        ev = tuple(p.var("evidence", 1 << 20) for _ in range(cnt))
        return cls(*hdr, opened, table, commit, ev, _ids(p, "silent", ctx))


@_register
@dataclass(frozen=True)
class SlotRequest(Message):
    """P_i → PS: blinded OT choices for the restarted slot phase (the credential stays)."""

    TYPE: ClassVar[MsgType] = MsgType.SLOT_REQUEST
    request: bytes

    def _body(self, w: Writer) -> None:
        w.var(self.request)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.var("request", 1 << 16))


@_register
@dataclass(frozen=True)
class SlotResponse(Message):
    """PS → P_i: the OT answers of the restarted slot phase with their DLEQ proof against the new B."""

    TYPE: ClassVar[MsgType] = MsgType.SLOT_RESPONSE
    response: bytes
    ot_proof: bytes

    def _body(self, w: Writer) -> None:
        w.var(self.response).var(self.ot_proof)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.var("response", 1 << 16), p.var("ot_proof", 256))


# --------------------------------------------------------------------------- #
def consent_statement(T: int, m: int, online, h: bytes) -> bytes:
    """The statement ``(T, m, U_m, h_m)`` members sign before anything of invocation m is revealed."""
    return Writer().u64(T).u32(m).u32_list(online).fixed(h, HASH_BYTES).bytes()


# --------------------------------------------------------------------------- #
# The DC-net round of a stable group (protocol/dcnet.py). Count vectors and the upload travel as
# MASKED_INPUT (invocation m = iteration, or R_max + 1 for the upload).
DC_NONCE_BYTES = 32


def _roster(p: Parser, params: RoundParams) -> tuple[tuple[int, Certificate], ...]:
    cnt = p.u32("roster.count")
    if cnt != params.N:
        raise DecodeError(f"roster has {cnt} entries, params say N={params.N}")
    roster = tuple((p.u32("roster.id"), Certificate.decode(p.var("roster.cert", 256))) for _ in range(cnt))
    ids = [pid for pid, _ in roster]
    if ids != sorted(set(ids)) or SERVER_ID in ids:
        raise DecodeError("roster ids must be sorted, distinct and not the server id")
    return roster


@_register
@dataclass(frozen=True)
class DCStart(Message):
    """PS → group: parameters, H(W_g^T), PS certificate, roster, credential key C, epoch with its key P, and the
    commitment to the decoy seed."""

    TYPE: ClassVar[MsgType] = MsgType.DC_START
    params: RoundParams
    global_hash: bytes
    server_cert: Certificate
    roster: tuple[tuple[int, Certificate], ...]
    cred_key: Element
    epoch: int
    nym_key: Element
    decoy_commit: bytes

    def _body(self, w: Writer) -> None:
        w.var(self.params.encode()).fixed(self.global_hash, HASH_BYTES)
        w.var(self.server_cert.encode()).u32(len(self.roster))
        for pid, cert in self.roster:
            w.u32(pid).var(cert.encode())
        w.raw(self.cred_key.to_bytes()).u64(self.epoch).raw(self.nym_key.to_bytes())
        w.fixed(self.decoy_commit, HASH_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        params = RoundParams.decode(p.var("params", 4096))
        gh = p.fixed(HASH_BYTES, "global_hash")
        scert = Certificate.decode(p.var("server_cert", 256))
        roster = _roster(p, params)
        g = params.group_obj()
        cred = _elem(p, g, "cred_key")
        epoch = p.u64("epoch")
        nym = _elem(p, g, "nym_key")
        return cls(*hdr, params, gh, scert, roster, cred, epoch, nym, p.fixed(HASH_BYTES, "decoy_commit"))


@_register
@dataclass(frozen=True)
class DCKey(Message):
    """Member → PS (relayed to the group, signed): its epoch key Y_i, a fresh nonce for this round's keys, the
    blinded credential input, its signed pseudonym request commitment of the epoch (§7.3) and, while its
    request is pending, the blinded pseudonym input B it commits to."""

    TYPE: ClassVar[MsgType] = MsgType.DC_KEY
    global_hash: bytes
    params_hash: bytes
    epoch_key: bytes  # pseudonym.key_digest(epoch, P) of the DC_START it received
    dh_key: Element
    nonce: bytes
    cred_request: Element
    nym_request: Element | None = None
    nym_commit: bytes = bytes(HASH_BYTES)  # pseudonym.request_digest(epoch, B), as in ADVERTISE
    nym_sig: bytes = bytes(SIG_BYTES)

    def _body(self, w: Writer) -> None:
        w.fixed(self.global_hash, HASH_BYTES).fixed(self.params_hash, HASH_BYTES).fixed(self.epoch_key, HASH_BYTES)
        w.raw(self.dh_key.to_bytes()).fixed(self.nonce, DC_NONCE_BYTES).raw(self.cred_request.to_bytes())
        _write_optional(w, self.nym_request)
        w.fixed(self.nym_commit, HASH_BYTES).fixed(self.nym_sig, SIG_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        g = ctx.need_group()
        gh, ph, ek = (p.fixed(HASH_BYTES, f) for f in ("global_hash", "params_hash", "epoch_key"))
        Y = _elem(p, g, "dh_key")
        nonce = p.fixed(DC_NONCE_BYTES, "nonce")
        cred, nym = _elem(p, g, "cred_request"), _read_optional(p, g, "nym_request")
        return cls(*hdr, gh, ph, ek, Y, nonce, cred, nym, p.fixed(HASH_BYTES, "nym_commit"),
                   p.fixed(SIG_BYTES, "nym_sig"))


@_register
@dataclass(frozen=True)
class DCKeys(Message):
    """PS → member: every member's DC_KEY relayed verbatim (the common part, absorbed into h), and this member's
    credential evaluation with its proof (and pseudonym evaluation with its proof, if it asked)."""

    TYPE: ClassVar[MsgType] = MsgType.DC_KEYS
    keys: tuple[bytes, ...]
    cred_eval: Element
    cred_proof: bytes
    nym_eval: Element | None = None
    nym_proof: bytes = b""

    def common(self) -> bytes:
        """What every member absorbs: the relayed keys."""
        w = Writer().u32(len(self.keys))
        for k in self.keys:
            w.var(k)
        return w.bytes()

    def _body(self, w: Writer) -> None:
        w.raw(self.common()).raw(self.cred_eval.to_bytes()).var(self.cred_proof)
        _write_optional(w, self.nym_eval)
        w.var(self.nym_proof)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        g = ctx.need_group()
        cnt = p.u32("keys.count")
        if cnt > ctx.max_n:
            raise DecodeError(f"{cnt} keys for at most {ctx.max_n} members")
        keys = tuple(p.var(f"key[{i}]", 4096) for i in range(cnt))
        cred, cproof = _elem(p, g, "cred_eval"), p.var("cred_proof", 256)
        nym = _read_optional(p, g, "nym_eval")
        nproof = p.var("nym_proof", 256)
        if (nym is None) != (not nproof):
            raise DecodeError("a pseudonym evaluation comes with its proof, and a proof with an evaluation")
        return cls(*hdr, keys, cred, cproof, nym, nproof)


def _counts(p: Parser, ctx: Context) -> tuple[int, ...]:
    limit = ctx.params.n if ctx.params else MAX_PARTICIPANTS * 64
    counts = tuple(p.u32_list("counts", limit))
    if ctx.params is not None and len(counts) != ctx.params.n:
        raise DecodeError(f"{len(counts)} counts, the round has n={ctx.params.n} slots")
    return counts


@_register
@dataclass(frozen=True)
class DCCounts(Message):
    """PS → group: the published counts of iteration m − 1 (real sum plus decoy picks); asks for iteration m."""

    TYPE: ClassVar[MsgType] = MsgType.DC_COUNTS
    counts: tuple[int, ...]

    def _body(self, w: Writer) -> None:
        w.u32_list(self.counts)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, _counts(p, ctx))


@_register
@dataclass(frozen=True)
class DCUploadRequest(Message):
    """PS → group: the counts of the last iteration (every party settled); asks for the upload (m = R_max + 1)."""

    TYPE: ClassVar[MsgType] = MsgType.DC_UPLOAD_REQUEST
    counts: tuple[int, ...]

    def _body(self, w: Writer) -> None:
        w.u32_list(self.counts)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, _counts(p, ctx))


@_register
@dataclass(frozen=True)
class DCBlame(Message):
    """PS → group: the opened decoy seed, the decoy rows to open, and every member's signed count vector of
    every iteration (relayed verbatim) for the audit."""

    TYPE: ClassVar[MsgType] = MsgType.DC_BLAME
    decoy_seed: bytes
    positions: tuple[int, ...]
    vectors: tuple[bytes, ...]

    def _body(self, w: Writer) -> None:
        w.fixed(self.decoy_seed, HASH_BYTES).u32_list(self.positions).u32(len(self.vectors))
        for v in self.vectors:
            w.var(v)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        seed = p.fixed(HASH_BYTES, "decoy_seed")
        pos = tuple(p.u32_list("positions", ctx.max_n + 64))
        if list(pos) != sorted(set(pos)):
            raise DecodeError("positions must be sorted and distinct")
        cnt = p.u32("vectors.count")
        limit = ctx.max_n * (ctx.params.R_max if ctx.params else MAX_R_MAX_WIRE)
        if cnt > limit:
            raise DecodeError(f"{cnt} vectors, at most {limit}")
        return cls(*hdr, seed, pos, tuple(p.var(f"vector[{i}]", 1 << 26) for i in range(cnt)))


MAX_R_MAX_WIRE = 255


@_register
@dataclass(frozen=True)
class DCOpening(Message):
    """Member → PS: its per-row pairwise keys of the decoy rows, (position, partner, key), under the h_M of its
    upload."""

    TYPE: ClassVar[MsgType] = MsgType.DC_OPENING
    h: bytes
    keys: tuple[tuple[int, int, bytes], ...]

    def _body(self, w: Writer) -> None:
        w.fixed(self.h, HASH_BYTES).u32(len(self.keys))
        for pos, j, k in self.keys:
            w.u32(pos).u32(j).fixed(k, HASH_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        h = p.fixed(HASH_BYTES, "h")
        cnt = p.u32("keys.count")
        if cnt > ctx.max_n * (ctx.max_n + 64):
            raise DecodeError(f"{cnt} opened keys, too many")
        keys = tuple((p.u32("position"), p.u32("partner"), p.fixed(HASH_BYTES, "key")) for _ in range(cnt))
        if [k[:2] for k in keys] != sorted(set(k[:2] for k in keys)):
            raise DecodeError("opened keys must be sorted by (position, partner) and distinct")
        return cls(*hdr, h, keys)
