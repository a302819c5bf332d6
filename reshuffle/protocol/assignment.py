"""The two sides of the group assignment (docs/protocol.md, "Anonymity groups").

:class:`AssignmentClient` is a participant's side: it checks every PS message,
commits, acknowledges one list per attempt, reveals only under a certificate and
recomputes the partition itself. Its whole state is one frozen
:class:`ClientState`; :data:`CLIENT_TABLE` names the handler of each message it
accepts in each phase, and every handler validates first and returns the next
state with its replies.

:class:`AssignmentCollector` is the PS's side. What it collects in a step lives in
that step's object (:class:`CommitStep`, :class:`AckStep`, :class:`RevealStep`),
built by the closer of the step before; :data:`COLLECTOR_TABLE` names each step's
message, handler and closer. Both take decoded messages whose sender and round
the caller has checked; the client checks the PS's signatures itself, the
collector's caller checks the participants'. Message flow and hashes:
:mod:`reshuffle.protocol.groups`.
"""

from __future__ import annotations

import enum
import hmac
from dataclasses import dataclass, field, replace
from typing import ClassVar, Mapping

from reshuffle.crypto.rand import RandomSource
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, Certificate, CertificateAuthority, SigningKey
from reshuffle.errors import AlreadyAnswered, BelowThreshold, ConfigError, InvalidSignature, UnexpectedMessage
from reshuffle.protocol import groups as gr
from reshuffle.protocol.groups import (
    Assignment,
    CandidatesBelowFloor,
    CheckCache,
    GroupAck,
    GroupCert,
    GroupCommit,
    GroupCommits,
    GroupOpen,
    GroupReveal,
    GroupReveals,
    InvalidReveal,
    WrongAssignment,
)
from reshuffle.protocol.messages import Message, MsgType

Outbox = list[tuple[int, bytes]]


# --------------------------------------------------------------------------- #
# The participant's side
class CState(enum.Enum):
    """Participant states of the assignment."""

    AWAIT_OPEN = "await GROUP_OPEN"
    AWAIT_COMMITS = "await GROUP_COMMITS"
    AWAIT_CERT = "await GROUP_CERT"
    AWAIT_REVEALS = "await GROUP_REVEALS (or GROUP_OPEN of the next attempt)"
    ASSIGNED = "assigned: await the group's ROUND_START"


#: Which message each participant state accepts, and its handler.
CLIENT_TABLE: dict[CState, dict[MsgType, str]] = {
    CState.AWAIT_OPEN: {MsgType.GROUP_OPEN: "_on_open"},
    CState.AWAIT_COMMITS: {MsgType.GROUP_COMMITS: "_on_commits"},
    CState.AWAIT_CERT: {MsgType.GROUP_CERT: "_on_cert"},
    CState.AWAIT_REVEALS: {MsgType.GROUP_REVEALS: "_on_reveals", MsgType.GROUP_OPEN: "_on_open"},
    CState.ASSIGNED: {},
}


def _names(types) -> str:
    return ", ".join(t.name for t in types) or "the group's ROUND_START"


@dataclass(frozen=True)
class Attempt:
    """One attempt as this participant took part in it: the opening, its nonce and commitment, the list it
    acknowledged and the statement it signed (None until then)."""

    open: GroupOpen
    keys: Mapping[int, Certificate]
    nonce: bytes = field(repr=False)
    commit: bytes
    list: GroupCommits | None = None
    statement: bytes | None = None

    @property
    def m(self) -> int:
        return self.open.m


@dataclass(frozen=True)
class ClientState:
    """Everything P_i holds about the assignment between two messages; each handler returns the next."""

    phase: CState = CState.AWAIT_OPEN
    attempt: Attempt | None = None
    server_cert: Certificate | None = None
    assignment: Assignment | None = None


Replies = tuple[ClientState, list[Message]]


class AssignmentClient:
    """P_i's side of the assignment of round T.

    Parameters
    ----------
    pid, T : its id and the round.
    signing_key, cert, ca : its key, its certificate and the CA verifier.
    rng : source of its nonces (OS randomness in deployment).
    cache : checks passed and broadcasts parsed (shared by the simulated participants of one process).
    min_group : this participant's own floor: it refuses a group size, or a group of its own,
        smaller than this (default MIN_GROUP, the protocol's minimum).
    draw : the least groups the candidates must be able to form: it refuses an open or a list of fewer
        than ``draw``·g candidates (default 2: with g to 2g − 1 candidates there is one group, the list
        itself, and the PS that chose the list chose the group).
    federation : the federation's size, where this participant knows it: a list of the whole federation
        is taken even below ``draw``·g (the PS then had no list to choose), any shorter one is not.
    """

    TABLE = CLIENT_TABLE

    def __init__(self, pid: int, T: int, signing_key: SigningKey, cert: Certificate, ca: CertificateAuthority,
                 rng: RandomSource, cache: CheckCache | None = None, min_group: int = gr.MIN_GROUP,
                 draw: int = 2, federation: int | None = None) -> None:
        self.min_group = gr.check_group_size(min_group)
        if not isinstance(draw, int) or isinstance(draw, bool) or draw < 1:
            raise ConfigError(f"draw must be an int >= 1, got {draw!r}")
        if federation is not None and (not isinstance(federation, int) or isinstance(federation, bool)
                                       or federation < 2):
            raise ConfigError(f"federation must be None or an int >= 2, got {federation!r}")
        self.draw, self.federation = draw, federation
        self.pid, self.T = pid, T
        self._sk, self._cert, self._ca, self._rng = signing_key, cert, ca, rng
        self._v = cache or CheckCache()
        self.state = ClientState()

    @property
    def phase(self) -> CState:
        return self.state.phase

    @property
    def attempt(self) -> int:
        return self.state.attempt.m if self.state.attempt is not None else 0

    @property
    def assignment(self) -> Assignment | None:
        return self.state.assignment

    @property
    def server_cert(self) -> Certificate | None:
        return self.state.server_cert

    @property
    def server_key(self):
        return self.server_cert.key if self.server_cert is not None else None

    def handle(self, m: Message) -> list[Message]:
        """One PS message of the assignment; the replies. ProtocolError on any defect (the state stays)."""
        s = self.state
        handlers = self.TABLE[s.phase]
        if m.TYPE not in handlers:
            raise UnexpectedMessage(f"participant {self.pid} in assignment state '{s.phase.value}' got "
                                    f"{m.TYPE.name}; expected {_names(handlers)}")
        if m.sender != SERVER_ID or m.T != self.T:
            raise UnexpectedMessage(f"assignment message from {m.sender} for round {m.T}")
        if m.TYPE is not MsgType.GROUP_OPEN:
            self._v.verify(s.server_cert.key, "msg", m._statement, m._signature)
            if m.m != s.attempt.m:
                raise UnexpectedMessage(f"{m.TYPE.name} for attempt {m.m}, current is {s.attempt.m}")
        self.state, replies = getattr(self, handlers[m.TYPE])(s, m)
        return replies

    def _check_candidates(self, what: str, n: int, g: int) -> None:
        """Refuse a candidate list too short for the draw to choose: fewer than ``draw``·g (or than the
        whole federation, where that is known and smaller)."""
        need = self.min_candidates(g)
        if n < need:
            raise CandidatesBelowFloor(
                f"{what} has {n} candidates for groups of {g}: this participant's floor is {need} "
                f"({self.draw} groups' worth, or the whole federation), or the PS's choice of the list would be "
                "the group")

    def min_candidates(self, g: int) -> int:
        """The least candidates this participant accepts for groups of ``g``."""
        need = self.draw * g
        return need if self.federation is None else min(need, self.federation)

    # -- attempt a: open, commit ---------------------------------------------
    def _on_open(self, s: ClientState, m: GroupOpen) -> Replies:
        prev = s.attempt
        if prev is None:
            if m.m != 1:
                raise WrongAssignment(f"the assignment starts at attempt 1, not {m.m}")
            self._v.certificate(self._ca, m.server_cert, SERVER_ID, ROLE_SERVER)
        elif m.server_cert != s.server_cert:
            raise WrongAssignment("the PS certificate changed between attempts")
        self._v.verify(m.server_cert.key, "msg", m._statement, m._signature)
        if m.group_size < self.min_group:
            raise WrongAssignment(f"group size {m.group_size} is below this participant's floor {self.min_group}")
        roster = dict(m.roster)
        if roster.get(self.pid) != self._cert:
            raise WrongAssignment(f"GROUP_OPEN does not list participant {self.pid} with its certificate")
        self._check_candidates("GROUP_OPEN", len(roster), m.group_size)
        if prev is not None:
            # A new attempt only after a missing reveal: its candidates are the last list minus at least one.
            if m.m != prev.m + 1 or m.m > gr.MAX_ATTEMPTS:
                raise WrongAssignment(f"attempt {m.m} after attempt {prev.m} (at most {gr.MAX_ATTEMPTS})")
            if not set(roster) < set(prev.list.ids()):
                raise WrongAssignment("a new attempt must exclude a member of the last list and add nobody")
            if m.group_size != prev.open.group_size:
                raise WrongAssignment("the group size changed between attempts")
            if any(prev.keys[pid] != cert for pid, cert in roster.items()):
                raise WrongAssignment("a certificate changed between attempts")

        def certificates() -> None:
            for pid, cert in m.roster:
                self._v.certificate(self._ca, cert, pid)
        self._v.once(gr.digest("roster", self._ca.verify_key.to_bytes(), gr.signed_statement(m)), certificates)
        nonce = bytes(self._rng.bytes(gr.NONCE_BYTES))
        commit = gr.commitment(self.T, m.m, self.pid, nonce)
        nxt = ClientState(CState.AWAIT_COMMITS, Attempt(m, roster, nonce, commit), m.server_cert)
        return nxt, [GroupCommit(self.T, m.m, self.pid, commit)]

    # -- the list, one ack per attempt ------------------------------------------
    def _on_commits(self, s: ClientState, m: GroupCommits) -> Replies:
        a = s.attempt
        ids, n = m.ids(), len(a.keys)
        if not set(ids) <= set(a.keys):
            raise WrongAssignment("GROUP_COMMITS lists a participant that is not a candidate")
        if len(ids) < gr.assignment_threshold(n):
            raise WrongAssignment(f"GROUP_COMMITS lists {len(ids)} of {n} candidates, "
                                  f"threshold {gr.assignment_threshold(n)}")
        self._check_candidates("GROUP_COMMITS", len(ids), a.open.group_size)
        own = [c for pid, c, _ in m.entries if pid == self.pid]
        if own != [a.commit]:
            raise WrongAssignment(f"GROUP_COMMITS does not carry participant {self.pid}'s own commitment")

        def signatures() -> None:
            for pid, c, sig in m.entries:
                try:
                    self._v.verify(a.keys[pid].key, "msg", gr.commit_statement(self.T, m.m, pid, c), sig)
                except InvalidSignature:
                    raise InvalidSignature(f"GROUP_COMMITS: the commitment of {pid} is not signed by {pid}") from None
        # The same list against the same certified roster passes or fails the same way for everyone.
        self._v.once(gr.digest("list", self._ca.verify_key.to_bytes(), gr.signed_statement(a.open),
                               gr.signed_statement(m)), signatures)
        statement = gr.ack_statement(self.T, m.m, a.open.group_size, gr.open_digest(a.open), gr.list_digest(m))
        nxt = replace(s, phase=CState.AWAIT_CERT, attempt=replace(a, list=m, statement=statement))
        return nxt, [GroupAck(self.T, m.m, self.pid, self._sk.sign(gr.ACK_CONTEXT, statement))]

    # -- certificate, then reveal ------------------------------------------------
    def _on_cert(self, s: ClientState, m: GroupCert) -> Replies:
        a = s.attempt
        need = gr.assignment_threshold(len(a.keys))
        if len(m.signatures) < need:
            raise WrongAssignment(f"GROUP_CERT has {len(m.signatures)} signatures on this list, threshold {need}")
        listed = set(a.list.ids())

        def signatures() -> None:
            for pid, sig in m.signatures:
                if pid not in listed:
                    raise WrongAssignment(f"GROUP_CERT carries a signature of {pid}, who is not listed")
                try:
                    self._v.verify(a.keys[pid].key, gr.ACK_CONTEXT, a.statement, sig)
                except InvalidSignature:
                    raise InvalidSignature(f"GROUP_CERT: {pid}'s signature is not on this participant's list") from None
        # Distinct signers (the decoder checks), every one listed and valid on this participant's statement.
        self._v.once(gr.digest("cert", self._ca.verify_key.to_bytes(), gr.signed_statement(a.open),
                               a.statement, gr.signed_statement(m)), signatures)
        return replace(s, phase=CState.AWAIT_REVEALS), [GroupReveal(self.T, m.m, self.pid, a.nonce)]

    # -- every nonce: the seed and the partition ----------------------------------
    def _on_reveals(self, s: ClientState, m: GroupReveals) -> Replies:
        a = s.attempt
        entries = a.list.entries
        if len(m.nonces) != len(entries):
            raise WrongAssignment(f"GROUP_REVEALS has {len(m.nonces)} nonces for a list of {len(entries)}")

        def openings() -> None:
            for (pid, c, _), nonce in zip(entries, m.nonces):
                if not hmac.compare_digest(gr.commitment(self.T, m.m, pid, nonce), c):
                    raise InvalidReveal(f"the nonce shown for {pid} does not open its commitment")
        self._v.once(gr.digest("reveals", gr.signed_statement(a.list), gr.signed_statement(m)), openings)
        seed = gr.draw_seed(self.T, m.m, a.statement, list(m.nonces))
        drawn = Assignment.draw(self.T, m.m, a.open.group_size, a.list.ids(), seed)
        own = len(drawn.groups[drawn.index_of(self.pid)])
        if own < self.min_group:
            raise WrongAssignment(f"this participant's group has {own} members, below its floor {self.min_group}")
        return replace(s, phase=CState.ASSIGNED, assignment=drawn), []


# --------------------------------------------------------------------------- #
# The PS's side
class PSState(enum.Enum):
    COMMITS = "collect GROUP_COMMIT"
    ACKS = "collect GROUP_ACK"
    REVEALS = "collect GROUP_REVEAL"
    DONE = "assigned"


@dataclass
class AttemptStep:
    """What the PS collects in one step of attempt ``a`` among ``candidates``; each closer builds the next."""

    STATE: ClassVar[PSState]
    a: int
    candidates: list[int]
    open: GroupOpen


@dataclass
class CommitStep(AttemptStep):
    STATE: ClassVar[PSState] = PSState.COMMITS
    commits: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)  # pid -> (commitment, signature)


@dataclass
class AckStep(AttemptStep):
    STATE: ClassVar[PSState] = PSState.ACKS
    list: GroupCommits | None = None
    statement: bytes = b""
    acks: dict[int, bytes] = field(default_factory=dict)


@dataclass
class RevealStep(AckStep):
    STATE: ClassVar[PSState] = PSState.REVEALS
    reveals: dict[int, bytes] = field(default_factory=dict)


@dataclass
class Assigned:
    STATE: ClassVar[PSState] = PSState.DONE
    assignment: Assignment


#: Per PS state: the message it collects, its handler, and the closer that builds the next step.
COLLECTOR_TABLE: dict[PSState, tuple[MsgType | None, str | None, str | None]] = {
    PSState.COMMITS: (MsgType.GROUP_COMMIT, "_on_commit", "_close_commits"),
    PSState.ACKS: (MsgType.GROUP_ACK, "_on_ack", "_close_acks"),
    PSState.REVEALS: (MsgType.GROUP_REVEAL, "_on_reveal", "_close_reveals"),
    PSState.DONE: (None, None, None),
}


class AssignmentCollector:
    """The PS's side: runs attempts until every listed member revealed (at most MAX_ATTEMPTS).

    ``receive`` takes a decoded, signature-checked message of a roster member and
    raises ProtocolError on a defect; ``close`` ends the current step and returns
    the next messages. ``assignment`` is set when done; BelowThreshold ends it.
    """

    TABLE = COLLECTOR_TABLE

    def __init__(self, T: int, roster: dict[int, Certificate], signing_key: SigningKey, cert: Certificate,
                 group_size: int) -> None:
        self.T, self._roster, self._sk, self._cert = T, dict(roster), signing_key, cert
        self.g = gr.check_group_size(group_size)
        self.step: AttemptStep | Assigned | None = None
        self.excluded: list[int] = []  # listed members whose reveal was missing, per attempt
        self.attempts_log: list[dict] = []

    @property
    def state(self) -> PSState:
        return PSState.COMMITS if self.step is None else self.step.STATE

    @property
    def attempt(self) -> int:
        return 0 if self.step is None or isinstance(self.step, Assigned) else self.step.a

    @property
    def assignment(self) -> Assignment | None:
        return self.step.assignment if isinstance(self.step, Assigned) else None

    def start(self) -> Outbox:
        if self.step is not None:
            raise UnexpectedMessage("the assignment has started already")
        self.step, out = self._open(1, sorted(self._roster))
        return out

    def _open(self, a: int, candidates: list[int]) -> tuple[CommitStep, Outbox]:
        om = GroupOpen(self.T, a, SERVER_ID, self.g, self._cert, tuple((pid, self._roster[pid]) for pid in candidates))
        data = om.encode(self._sk)
        return CommitStep(a, candidates, om), [(pid, data) for pid in candidates]

    def receive(self, sender: int, m: Message) -> None:
        st = self.step
        want, handler, _ = self.TABLE[self.state]
        if st is None or m.TYPE is not want:
            raise UnexpectedMessage(f"PS in assignment state '{self.state.value}' got {m.TYPE.name}; "
                                    f"expected {want.name if want and st is not None else 'nothing'}")
        if m.m != st.a:
            raise UnexpectedMessage(f"{m.TYPE.name} for attempt {m.m}, current is {st.a}")
        getattr(self, handler)(st, sender, m)

    def _on_commit(self, st: CommitStep, sender: int, m: GroupCommit) -> None:
        if sender not in st.candidates:
            raise UnexpectedMessage(f"participant {sender} is not a candidate of attempt {st.a}")
        if sender in st.commits:
            raise AlreadyAnswered(f"second commitment from {sender}")
        st.commits[sender] = (m.commitment, m._signature)

    def _listed(self, st: AckStep, sender: int, seen: dict, what: str) -> None:
        if sender not in st.list.ids():
            raise UnexpectedMessage(f"participant {sender} is not on the list")
        if sender in seen:
            raise AlreadyAnswered(f"second {what} from {sender}")

    def _on_ack(self, st: AckStep, sender: int, m: GroupAck) -> None:
        self._listed(st, sender, st.acks, "ack")
        try:
            self._roster[sender].key.verify(gr.ACK_CONTEXT, st.statement, m.signature)
        except InvalidSignature:
            raise InvalidSignature(f"participant {sender}'s ack is not on the PS's list") from None
        st.acks[sender] = m.signature

    def _on_reveal(self, st: RevealStep, sender: int, m: GroupReveal) -> None:
        self._listed(st, sender, st.reveals, "reveal")
        c = dict((pid, c) for pid, c, _ in st.list.entries)[sender]
        if not hmac.compare_digest(gr.commitment(self.T, st.a, sender, m.nonce), c):
            raise InvalidReveal(f"participant {sender}'s nonce does not open its commitment")
        st.reveals[sender] = m.nonce

    def close(self) -> Outbox:
        _, _, closer = self.TABLE[self.state]
        if closer is None or self.step is None:
            raise UnexpectedMessage("the assignment is over" if closer is None else "the assignment has not started")
        self.step, out = getattr(self, closer)(self.step)
        return out

    def _close_commits(self, st: CommitStep) -> tuple[AckStep, Outbox]:
        need = gr.assignment_threshold(len(st.candidates))
        if len(st.commits) < need:
            raise BelowThreshold(f"assignment attempt {st.a}: {len(st.commits)} commitments, threshold {need}")
        lm = GroupCommits(self.T, st.a, SERVER_ID, tuple((pid, c, s) for pid, (c, s) in sorted(st.commits.items())))
        statement = gr.ack_statement(self.T, st.a, self.g, gr.open_digest(st.open), gr.list_digest(lm))
        nxt = AckStep(st.a, st.candidates, st.open, lm, statement)
        return nxt, self._to_list(nxt, lm)

    def _close_acks(self, st: AckStep) -> tuple[RevealStep, Outbox]:
        need = gr.assignment_threshold(len(st.candidates))
        if len(st.acks) < need:
            raise BelowThreshold(f"assignment attempt {st.a}: {len(st.acks)} acks, threshold {need}")
        nxt = RevealStep(st.a, st.candidates, st.open, st.list, st.statement, dict(st.acks))
        return nxt, self._to_list(nxt, GroupCert(self.T, st.a, SERVER_ID, tuple(sorted(st.acks.items()))))

    def _close_reveals(self, st: RevealStep) -> tuple[CommitStep | Assigned, Outbox]:
        listed = st.list.ids()
        missing = [pid for pid in listed if pid not in st.reveals]
        self.attempts_log.append({"attempt": st.a, "candidates": len(st.candidates), "listed": len(listed),
                                  "missing_reveals": missing})
        if missing:
            self.excluded += missing
            if st.a >= gr.MAX_ATTEMPTS:
                raise BelowThreshold(f"assignment: reveals missing after {st.a} attempts ({missing})")
            rest = [pid for pid in listed if pid in st.reveals]
            if len(rest) < gr.MIN_GROUP:
                raise BelowThreshold(f"assignment: {len(rest)} participants left")
            return self._open(st.a + 1, rest)
        nonces = [st.reveals[pid] for pid in listed]
        seed = gr.draw_seed(self.T, st.a, st.statement, nonces)
        done = Assigned(Assignment.draw(self.T, st.a, self.g, listed, seed))
        return done, self._to_list(st, GroupReveals(self.T, st.a, SERVER_ID, tuple(nonces)))

    def _to_list(self, st: AckStep, m: Message) -> Outbox:
        data = m.encode(self._sk)
        return [(pid, data) for pid in st.list.ids()]


__all__ = ["AssignmentClient", "AssignmentCollector", "CState", "ClientState", "PSState"]
