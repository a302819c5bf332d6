"""Anonymity groups: who runs a round with whom (docs/protocol.md, "Anonymity groups").

A round of N participants with group size g is split into G = ⌊N/g⌋ groups (g to 2g − 1 members) that
each run a complete round; the assignment comes from randomness no single party
controls, a signed commit-reveal among the participants:

1. GROUP_OPEN (PS → candidates): g, attempt a, the PS certificate, the candidates' certificates.
2. GROUP_COMMIT (P_i → PS): ``H(label("groups/commit", T, a, i) ‖ nonce_i)``, nonce_i 32 fresh bytes.
3. GROUP_COMMITS (PS → committers): every signed commitment, verbatim.
4. GROUP_ACK (P_i → PS): P_i's signature on ``(T, a, g, H(open), H(list))``, once per (T, a).
5. GROUP_CERT (PS → list): at least t_a signatures of distinct listed members on that statement.
6. GROUP_REVEAL (P_i → PS): nonce_i, only after a valid certificate.
7. GROUP_REVEALS (PS → list): every nonce in list order. ``seed = H(statement, nonces)``;
   the partition is a Fisher–Yates shuffle driven by a PRG keyed with the seed.

A listed member whose reveal is missing is excluded and the assignment runs again
with fresh nonces, at most :data:`MAX_ATTEMPTS` times in all. Each group's
ROUND_START carries (group index, group count, assignment digest) in its
parameters, so they enter h_m, and every member checks them and the roster
against the partition it computed itself.

The groups are stable: formed once and kept across rounds and restarts. The PS
keeps the whole :class:`Assignment`, each participant its :class:`Membership`
(its own group and the digest it verified), both as explicit bytes. A later
round of a group runs without a new assignment: its ROUND_START binds the same
(index, count, digest) and its roster must be exactly the stored group, and the
group's models are recovered only when its upload set holds every member
(:class:`IncompleteGroup`): a group delivers all its members' models or none.

This module holds the primitives and the messages; the two state machines are
in :mod:`reshuffle.protocol.assignment`, their use in a round in
:mod:`reshuffle.protocol.grouped`.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from reshuffle.crypto.domain import label
from reshuffle.crypto.ot import sample_distinct
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.signatures import SIG_BYTES, Certificate, CertificateAuthority, VerifyKey
from reshuffle.errors import ConfigError, DecodeError, ProtocolError, Refused
from reshuffle.protocol import messages as msg
from reshuffle.protocol.messages import HASH_BYTES, MsgType
from reshuffle.protocol.params import GROUP_SIZE, MAX_PARTICIPANTS, colluders, smallest_round, threshold
from reshuffle.wire import Parser, Writer

NONCE_BYTES = 32
MAX_ATTEMPTS = 3  # assignment draws a PS can cause by claiming reveals were lost (the bias bound)
MIN_GROUP = smallest_round()  # the least round the default trust floors take part in (3: N = 2 leaves one honest)
DEFAULT_GROUP_SIZE = GROUP_SIZE  # the default stable anonymity set (TrustFloors.group)
ACK_CONTEXT = "group-ack"
ASSIGNMENT_TYPES = frozenset(
    {MsgType.GROUP_OPEN, MsgType.GROUP_COMMIT, MsgType.GROUP_COMMITS, MsgType.GROUP_ACK,
     MsgType.GROUP_CERT, MsgType.GROUP_REVEAL, MsgType.GROUP_REVEALS}
)


class InvalidReveal(ProtocolError):
    """A revealed nonce does not open the sender's commitment."""


class WrongAssignment(Refused):
    """A PS message disagrees with the assignment this participant computed or was shown."""


class CandidatesBelowFloor(WrongAssignment):
    """An assignment's candidate list is too short for the draw to choose (below the member's draw floor)."""


class UngroupedRound(WrongAssignment):
    """A round bound to no stable group, refused by a participant whose floor asks for one."""


class WrongGroup(WrongAssignment):
    """A later round's ROUND_START is not exactly this participant's stable group (index, digest, roster)."""


class IncompleteGroup(Refused):
    """An online set U_m lacks a member of the stable group: the group's models are delivered all or none."""


# --------------------------------------------------------------------------- #
# Sizes and thresholds
def check_group_size(g: object) -> int:
    """``g`` as an int ≥ MIN_GROUP; ConfigError otherwise."""
    if not isinstance(g, int) or isinstance(g, bool) or not MIN_GROUP <= g <= MAX_PARTICIPANTS:
        raise ConfigError(f"group_size must be an int in [{MIN_GROUP}, {MAX_PARTICIPANTS}], got {g!r}")
    return g


def check_collusion(f: object) -> float | None:
    """``None`` or a fraction in [0, 1): the share of each group assumed to collude with the PS."""
    if f is None:
        return None
    if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 <= f < 1:
        raise ConfigError(f"group collusion must be a fraction in [0, 1), got {f!r}")
    return float(f)


def group_count(N: int, g: int) -> int:
    """⌊N/g⌋: g is the least group size, so every group has g to 2g − 1 members (one group of N if N < g,
    which a participant whose floor is g refuses)."""
    check_group_size(g)
    if N < MIN_GROUP:
        raise ConfigError(f"{N} participants cannot form a group of at least {MIN_GROUP}")
    return max(1, N // g)


def group_sizes(N: int, g: int) -> list[int]:
    """Sizes of the G = ⌊N/g⌋ groups, nearly equal (they differ by at most one), largest first."""
    G = group_count(N, g)
    q, r = divmod(N, G)
    return [q + 1] * r + [q] * (G - r)


def assignment_threshold(n: int) -> int:
    """t_a for n candidates: ⌊(n + c)/2⌋ + 1 with c = max(1, ⌊n/5⌋), as a round's t (docs/protocol.md §11)."""
    return threshold(n, colluders(n))


# --------------------------------------------------------------------------- #
# Hashes (each under its own label)
def commitment(T: int, attempt: int, pid: int, nonce: bytes) -> bytes:
    """``H(label("groups/commit", T, a, pid) ‖ nonce)``."""
    if len(nonce) != NONCE_BYTES:
        raise ConfigError(f"nonce must be {NONCE_BYTES} bytes, got {len(nonce)}")
    return hashlib.sha256(label("groups/commit", T, attempt, pid) + bytes(nonce)).digest()


def signed_statement(m: msg.Message) -> bytes:
    """What the sender's signature covers (header ‖ SHA-256(body)): binds the whole message."""
    st = getattr(m, "_statement", None)
    return bytes(st) if st is not None else m.statement(m.body())


def open_digest(m: "GroupOpen") -> bytes:
    return hashlib.sha256(label("groups/open", m.T, m.m) + signed_statement(m)).digest()


def list_digest(m: "GroupCommits") -> bytes:
    return hashlib.sha256(label("groups/list", m.T, m.m) + signed_statement(m)).digest()


def ack_statement(T: int, attempt: int, g: int, open_h: bytes, list_h: bytes) -> bytes:
    """What every listed member signs before anyone reveals: ``(T, a, g, H(open), H(list))``."""
    return Writer().u64(T).u32(attempt).u32(g).fixed(open_h, HASH_BYTES).fixed(list_h, HASH_BYTES).bytes()


def draw_seed(T: int, attempt: int, statement: bytes, nonces: list[bytes]) -> bytes:
    """``H(label("groups/seed", T, a) ‖ H(statement) ‖ nonce_1 ‖ … ‖ nonce_n)`` in list order."""
    h = hashlib.sha256(label("groups/seed", T, attempt, len(nonces)))
    h.update(hashlib.sha256(statement).digest())
    for n in nonces:
        h.update(n)
    return h.digest()


# --------------------------------------------------------------------------- #
@dataclass(frozen=True)
class Assignment:
    """The partition of one round's participants into groups, and what binds it."""

    T: int
    attempt: int
    group_size: int
    seed: bytes
    groups: tuple[tuple[int, ...], ...]

    @classmethod
    def draw(cls, T: int, attempt: int, g: int, ids: list[int], seed: bytes) -> "Assignment":
        """Shuffle ``ids`` (sorted) with a PRG keyed by ``seed``, then cut into nearly equal groups."""
        return _draw(T, attempt, g, tuple(sorted(ids)), bytes(seed))

    @property
    def digest(self) -> bytes:
        """32 bytes bound into every group's parameters (``RoundParams.assignment``)."""
        w = Writer().fixed(self.seed, HASH_BYTES)
        for grp in self.groups:
            w.u32_list(grp)
        tag = label("groups/assignment", self.T, self.attempt, self.group_size, len(self.groups))
        return hashlib.sha256(tag + w.bytes()).digest()

    def index_of(self, pid: int) -> int:
        for j, grp in enumerate(self.groups):
            if pid in grp:
                return j
        raise KeyError(pid)

    def binding(self, j: int) -> dict:
        """RoundParams overrides of group j: ``cohort``, ``cohorts``, ``assignment``."""
        return {"cohort": j, "cohorts": len(self.groups), "assignment": self.digest}

    @classmethod
    def given(cls, groups, group_size: int | None = None) -> "Assignment":
        """A partition fixed by its holder (a persisted one, or a simulation's), not drawn here.

        Its seed is a hash of the partition itself, so the digest, and every group's
        binding, is a function of the groups alone. ConfigError if ``groups`` are not
        disjoint groups of at least MIN_GROUP distinct ids.
        """
        gs = tuple(tuple(sorted(int(i) for i in g)) for g in groups)
        _check_partition(gs)
        g = min(len(x) for x in gs) if group_size is None else check_group_size(group_size)
        w = Writer()
        for grp in gs:
            w.u32_list(grp)
        seed = hashlib.sha256(label("groups/given", len(gs)) + w.bytes()).digest()
        return cls(0, 0, g, seed, gs)

    def encode(self) -> bytes:
        """Explicit bytes for the PS's run state (``decode`` is the exact inverse)."""
        w = Writer().u8(_STATE_VERSION).u64(self.T).u32(self.attempt).u32(self.group_size)
        w.fixed(self.seed, HASH_BYTES).u32(len(self.groups))
        for grp in self.groups:
            w.u32_list(grp)
        return w.bytes()

    @classmethod
    def decode(cls, data: bytes) -> "Assignment":
        p = Parser(bytes(data), "stable groups")
        if (v := p.u8("version")) != _STATE_VERSION:
            raise DecodeError(f"stable groups version {v}, expected {_STATE_VERSION}")
        T, attempt, g, seed = p.u64("T"), p.u32("attempt"), p.u32("group_size"), p.fixed(HASH_BYTES, "seed")
        cnt = p.u32("groups.count")
        if not 1 <= cnt <= MAX_PARTICIPANTS // MIN_GROUP:
            raise DecodeError(f"stable groups: {cnt} groups")
        groups = tuple(tuple(p.u32_list("group", MAX_PARTICIPANTS)) for _ in range(cnt))
        p.finish()
        try:
            _check_partition(groups, sort=True)
            check_group_size(g)
        except ConfigError as exc:
            raise DecodeError(f"stable groups: {exc}") from None
        return cls(T, attempt, g, seed, groups)


_STATE_VERSION = 1


def _check_partition(groups: tuple[tuple[int, ...], ...], sort: bool = False) -> None:
    """ConfigError unless ``groups`` are disjoint, each of at least MIN_GROUP distinct ids (sorted if ``sort``)."""
    if not groups:
        raise ConfigError("a partition needs at least one group")
    seen: set[int] = set()
    for j, grp in enumerate(groups):
        if len(grp) < MIN_GROUP:
            raise ConfigError(f"group {j} has {len(grp)} members; a group has at least {MIN_GROUP}")
        if len(set(grp)) != len(grp) or (sort and list(grp) != sorted(grp)):
            raise ConfigError(f"group {j} repeats a member or is not sorted: {list(grp)}")
        if any(not 0 <= i < MAX_PARTICIPANTS for i in grp):
            raise ConfigError(f"group {j} has an id outside [0, {MAX_PARTICIPANTS})")
        if seen & set(grp):
            raise ConfigError(f"participant(s) {sorted(seen & set(grp))} are in two groups")
        seen |= set(grp)


@dataclass(frozen=True)
class Membership:
    """What a participant keeps of the assignment across rounds: its stable group and what it verified.

    ``index`` and ``count`` are its group's index and the number of groups,
    ``digest`` the assignment digest it recomputed, ``members`` its group's ids
    (sorted, itself among them). A later round's ROUND_START must bind exactly
    these (:meth:`check_round_start`).
    """

    pid: int
    index: int
    count: int
    digest: bytes
    members: tuple[int, ...]

    @classmethod
    def of(cls, a: Assignment, pid: int) -> "Membership":
        j = a.index_of(pid)
        return cls(pid, j, len(a.groups), a.digest, a.groups[j])

    def encode(self) -> bytes:
        """Explicit bytes for the participant's own state (``decode`` is the exact inverse)."""
        w = Writer().u8(_STATE_VERSION).u32(self.pid).u32(self.index).u32(self.count)
        return w.fixed(self.digest, HASH_BYTES).u32_list(self.members).bytes()

    @classmethod
    def decode(cls, data: bytes) -> "Membership":
        p = Parser(bytes(data), "stable group membership")
        if (v := p.u8("version")) != _STATE_VERSION:
            raise DecodeError(f"stable group membership version {v}, expected {_STATE_VERSION}")
        pid, j, cnt = p.u32("pid"), p.u32("index"), p.u32("count")
        digest = p.fixed(HASH_BYTES, "digest")
        members = tuple(p.u32_list("members", MAX_PARTICIPANTS))
        p.finish()
        if not 0 <= j < cnt or pid not in members or list(members) != sorted(set(members)) \
                or len(members) < MIN_GROUP:
            raise DecodeError(f"stable group membership: group {j} of {cnt}, members {list(members)}, pid {pid}")
        return cls(pid, j, cnt, digest, members)

    def check_round_start(self, p, roster: tuple[int, ...]) -> None:
        """WrongGroup unless round parameters ``p`` bind this group (index, count, digest) and ``roster`` is
        exactly its members: the PS can neither leave a member out nor add one."""
        if (p.cohort, p.cohorts, p.assignment) != (self.index, self.count, self.digest):
            raise WrongGroup(
                f"ROUND_START binds group {p.cohort} of {p.cohorts} (assignment {p.assignment.hex()[:16]}); "
                f"participant {self.pid}'s stable group is {self.index} of {self.count} ({self.digest.hex()[:16]})")
        if tuple(roster) != self.members:
            left, added = sorted(set(self.members) - set(roster)), sorted(set(roster) - set(self.members))
            raise WrongGroup(f"ROUND_START roster {list(roster)} is not stable group {self.index} = "
                             f"{list(self.members)} (left out {left}, added {added})")

    def check_online(self, m: int, online) -> None:
        """IncompleteGroup unless U_m (``online``) is the whole group: a missing member's absence would
        name it, so the group's models are recovered all together or not at all."""
        missing = sorted(set(self.members) - set(online))
        if missing:
            raise IncompleteGroup(f"U_{m} lacks member(s) {missing} of stable group {self.index}: "
                                  "a group delivers all its members' models or none")


class CheckCache:
    """Checks already passed, and broadcasts already parsed, in this process.

    Every check the assignment makes is a pure function of bytes (a signature of a
    key on a statement; a relayed list against the roster that came with it), and
    so is parsing. In a real deployment each participant holds its own cache and
    does every check once. Simulated participants in one process may share one
    (the in-process driver does): a PS broadcast then costs one parse and one check
    in all, not one per participant. Only successes are remembered.
    """

    _DECODED_MAX = 64

    def __init__(self) -> None:
        self._ok: set = set()
        self._decoded: dict[bytes, msg.Message] = {}

    def verify(self, key: VerifyKey, context: str, statement: bytes, sig: bytes) -> None:
        k = (key.to_bytes(), context, bytes(statement), bytes(sig))
        if k not in self._ok:
            key.verify(context, statement, sig)
            self._ok.add(k)

    def certificate(self, ca: CertificateAuthority, cert: Certificate, subject: int, role: int | None = None) -> None:
        if cert.subject != subject or (role is not None and cert.role != role):
            ca.verify(cert, subject, role)  # raises with the precise reason
        self.verify(ca.verify_key, "cert", cert.body(), cert.signature)

    def once(self, tag: bytes, check) -> None:
        """Run ``check()`` unless a check with this exact ``tag`` (a digest of all its inputs) passed before."""
        if tag not in self._ok:
            check()
            self._ok.add(tag)

    def decode(self, data: bytes) -> msg.Message:
        """``messages.decode(data, Context())``, parsed once per distinct bytes."""
        data = bytes(data)
        got = self._decoded.get(data)
        if got is None:
            got = msg.decode(data, msg.Context())
            if len(self._decoded) >= self._DECODED_MAX:
                self._decoded.pop(next(iter(self._decoded)))
            self._decoded[data] = got
        return got


def digest(name: str, *parts: bytes) -> bytes:
    """A tag for :meth:`CheckCache.once`: SHA-256 over a label and length-prefixed parts."""
    h = hashlib.sha256(label("groups/check/" + name, len(parts)))
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.digest()


# --------------------------------------------------------------------------- #
# Messages (header m = attempt)
def _sorted_ids(ids: list[int], field: str) -> None:
    if ids != sorted(set(ids)):
        raise DecodeError(f"{field}: ids must be sorted and distinct")


@msg._register
@dataclass(frozen=True)
class GroupOpen(msg.Message):
    """PS → candidates: group size g, the PS certificate and the candidates' certificates (attempt = m)."""

    TYPE: ClassVar[MsgType] = MsgType.GROUP_OPEN
    group_size: int
    server_cert: Certificate
    roster: tuple[tuple[int, Certificate], ...]

    def _body(self, w: Writer) -> None:
        w.u32(self.group_size).var(self.server_cert.encode()).u32(len(self.roster))
        for pid, cert in self.roster:
            w.u32(pid).var(cert.encode())

    @classmethod
    def _parse(cls, p: Parser, hdr, ctx):
        g = p.u32("group_size")
        scert = Certificate.decode(p.var("server_cert", 256))
        cnt = p.u32("roster.count")
        if not MIN_GROUP <= cnt <= MAX_PARTICIPANTS or cnt * 4 > p.remaining:
            raise DecodeError(f"GROUP_OPEN roster of {cnt} entries")
        roster = tuple((p.u32("roster.id"), Certificate.decode(p.var("roster.cert", 256))) for _ in range(cnt))
        _sorted_ids([pid for pid, _ in roster], "GROUP_OPEN roster")
        if g < MIN_GROUP:
            raise DecodeError(f"group size {g} below {MIN_GROUP}")
        return cls(*hdr, g, scert, roster)


@msg._register
@dataclass(frozen=True)
class GroupCommit(msg.Message):
    """P_i → PS: its commitment to a fresh nonce."""

    TYPE: ClassVar[MsgType] = MsgType.GROUP_COMMIT
    commitment: bytes

    def _body(self, w: Writer) -> None:
        w.fixed(self.commitment, HASH_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.fixed(HASH_BYTES, "commitment"))


@msg._register
@dataclass(frozen=True)
class GroupCommits(msg.Message):
    """PS → committers: (pid, commitment, P_pid's signature on its GROUP_COMMIT), sorted by pid."""

    TYPE: ClassVar[MsgType] = MsgType.GROUP_COMMITS
    entries: tuple[tuple[int, bytes, bytes], ...]

    def _body(self, w: Writer) -> None:
        w.u32(len(self.entries))
        for pid, c, sig in self.entries:
            w.u32(pid).fixed(c, HASH_BYTES).fixed(sig, SIG_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        cnt = p.u32("entries.count")
        if cnt > MAX_PARTICIPANTS or cnt * (4 + HASH_BYTES + SIG_BYTES) > p.remaining:
            raise DecodeError(f"GROUP_COMMITS with {cnt} entries, {p.remaining} bytes left")
        entries = tuple((p.u32("pid"), p.fixed(HASH_BYTES, "commitment"), p.fixed(SIG_BYTES, "signature"))
                        for _ in range(cnt))
        _sorted_ids([e[0] for e in entries], "GROUP_COMMITS")
        return cls(*hdr, entries)

    def ids(self) -> list[int]:
        return [e[0] for e in self.entries]


@msg._register
@dataclass(frozen=True)
class GroupAck(msg.Message):
    """P_i → PS: its signature on the ack statement of this attempt."""

    TYPE: ClassVar[MsgType] = MsgType.GROUP_ACK
    signature: bytes

    def _body(self, w: Writer) -> None:
        w.fixed(self.signature, SIG_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.fixed(SIG_BYTES, "ack"))


@msg._register
@dataclass(frozen=True)
class GroupCert(msg.Message):
    """PS → listed members: the acks of distinct listed members (at least t_a)."""

    TYPE: ClassVar[MsgType] = MsgType.GROUP_CERT
    signatures: tuple[tuple[int, bytes], ...]

    def _body(self, w: Writer) -> None:
        w.u32(len(self.signatures))
        for pid, sig in self.signatures:
            w.u32(pid).fixed(sig, SIG_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        cnt = p.u32("signatures.count")
        if cnt > MAX_PARTICIPANTS or cnt * (4 + SIG_BYTES) > p.remaining:
            raise DecodeError(f"GROUP_CERT with {cnt} signatures, {p.remaining} bytes left")
        sigs = tuple((p.u32("pid"), p.fixed(SIG_BYTES, "signature")) for _ in range(cnt))
        _sorted_ids([pid for pid, _ in sigs], "GROUP_CERT")
        return cls(*hdr, sigs)


@msg._register
@dataclass(frozen=True)
class GroupReveal(msg.Message):
    """P_i → PS: its nonce."""

    TYPE: ClassVar[MsgType] = MsgType.GROUP_REVEAL
    nonce: bytes

    def _body(self, w: Writer) -> None:
        w.fixed(self.nonce, NONCE_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        return cls(*hdr, p.fixed(NONCE_BYTES, "nonce"))


@msg._register
@dataclass(frozen=True)
class GroupReveals(msg.Message):
    """PS → listed members: every listed member's nonce, in list order."""

    TYPE: ClassVar[MsgType] = MsgType.GROUP_REVEALS
    nonces: tuple[bytes, ...]

    def _body(self, w: Writer) -> None:
        w.u32(len(self.nonces))
        for n in self.nonces:
            w.fixed(n, NONCE_BYTES)

    @classmethod
    def _parse(cls, p, hdr, ctx):
        cnt = p.u32("nonces.count")
        if cnt > MAX_PARTICIPANTS or cnt * NONCE_BYTES > p.remaining:
            raise DecodeError(f"GROUP_REVEALS with {cnt} nonces, {p.remaining} bytes left")
        return cls(*hdr, tuple(p.fixed(NONCE_BYTES, "nonce") for _ in range(cnt)))


def commit_statement(T: int, attempt: int, pid: int, c: bytes) -> bytes:
    """What P_pid's GROUP_COMMIT signature covers (to check a relayed entry): header ‖ SHA-256(c)."""
    header = struct.pack(">BBQII", msg.VERSION, MsgType.GROUP_COMMIT, T, attempt, pid)
    return header + hashlib.sha256(bytes(c)).digest()


@lru_cache(maxsize=8)
def _draw(T: int, attempt: int, g: int, ids: tuple[int, ...], seed: bytes) -> Assignment:
    # Pure: simulated participants of one process that share a view share the result.
    order = sample_distinct(len(ids), len(ids), SeededRandom(seed, label("groups/partition", T, attempt)))
    groups, start = [], 0
    for size in group_sizes(len(ids), g):
        groups.append(tuple(sorted(ids[k] for k in order[start:start + size])))
        start += size
    return Assignment(T, attempt, g, seed, tuple(groups))


__all__ = [
    "ACK_CONTEXT", "ASSIGNMENT_TYPES", "Assignment", "CandidatesBelowFloor", "UngroupedRound", "DEFAULT_GROUP_SIZE", "IncompleteGroup", "Membership",
    "WrongGroup", "GroupAck", "GroupCert", "GroupCommit", "GroupCommits",
    "GroupOpen", "GroupReveal", "GroupReveals", "InvalidReveal", "MAX_ATTEMPTS", "MIN_GROUP", "NONCE_BYTES",
    "CheckCache", "WrongAssignment", "ack_statement", "assignment_threshold", "check_collusion", "check_group_size",
    "commit_statement", "commitment", "digest", "draw_seed", "group_count", "group_sizes", "list_digest", "open_digest", "signed_statement",
]
