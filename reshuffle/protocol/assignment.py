"""The two sides of the group assignment (docs/protocol.md, "Anonymity groups").

:class:`AssignmentClient` is a participant's side: it checks every PS message,
commits, acknowledges one list per attempt, reveals only under a certificate and
recomputes the partition itself. :class:`AssignmentCollector` is the PS's side.
Both take decoded messages whose sender and round the caller has checked; the
client checks the PS's signatures itself, the collector's caller checks the
participants' signatures. Message flow and hashes: :mod:`reshuffle.protocol.groups`.
"""

from __future__ import annotations

import enum
import hmac

from reshuffle.crypto.rand import RandomSource
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, Certificate, CertificateAuthority, SigningKey
from reshuffle.errors import AlreadyAnswered, BelowThreshold, InvalidSignature, UnexpectedMessage
from reshuffle.protocol import groups as gr
from reshuffle.protocol.groups import (
    Assignment,
    GroupAck,
    GroupCert,
    GroupCommit,
    GroupCommits,
    GroupOpen,
    GroupReveal,
    GroupReveals,
    InvalidReveal,
    CheckCache,
    WrongAssignment,
)
from reshuffle.protocol.messages import Message, MsgType

Outbox = list[tuple[int, bytes]]


class CState(enum.Enum):
    """Participant states of the assignment."""

    AWAIT_OPEN = "await GROUP_OPEN"
    AWAIT_COMMITS = "await GROUP_COMMITS"
    AWAIT_CERT = "await GROUP_CERT"
    AWAIT_REVEALS = "await GROUP_REVEALS (or GROUP_OPEN of the next attempt)"
    ASSIGNED = "assigned: await the group's ROUND_START"


CLIENT_TABLE: dict[CState, tuple[MsgType, ...]] = {
    CState.AWAIT_OPEN: (MsgType.GROUP_OPEN,),
    CState.AWAIT_COMMITS: (MsgType.GROUP_COMMITS,),
    CState.AWAIT_CERT: (MsgType.GROUP_CERT,),
    CState.AWAIT_REVEALS: (MsgType.GROUP_REVEALS, MsgType.GROUP_OPEN),
    CState.ASSIGNED: (),
}


def _names(types) -> str:
    return ", ".join(t.name for t in types) or "the group's ROUND_START"


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
    """

    def __init__(self, pid: int, T: int, signing_key: SigningKey, cert: Certificate, ca: CertificateAuthority,
                 rng: RandomSource, cache: CheckCache | None = None, min_group: int = gr.MIN_GROUP) -> None:
        self.min_group = gr.check_group_size(min_group)
        self.pid, self.T = pid, T
        self._sk, self._cert, self._ca, self._rng = signing_key, cert, ca, rng
        self._v = cache or CheckCache()
        self.state = CState.AWAIT_OPEN
        self.attempt = 0
        self.assignment: Assignment | None = None
        self.server_cert: Certificate | None = None
        self._open: GroupOpen | None = None
        self._list: GroupCommits | None = None
        self._keys: dict = {}

    @property
    def server_key(self):
        return self.server_cert.key if self.server_cert is not None else None

    def handle(self, m: Message) -> list[Message]:
        """One PS message of the assignment; the replies. ProtocolError on any defect."""
        if m.TYPE not in CLIENT_TABLE[self.state]:
            raise UnexpectedMessage(f"participant {self.pid} in assignment state '{self.state.value}' got "
                                    f"{m.TYPE.name}; expected {_names(CLIENT_TABLE[self.state])}")
        if m.sender != SERVER_ID or m.T != self.T:
            raise UnexpectedMessage(f"assignment message from {m.sender} for round {m.T}")
        if isinstance(m, GroupOpen):
            return self._on_open(m)
        self._check_ps(m)
        if m.m != self.attempt:
            raise UnexpectedMessage(f"{m.TYPE.name} for attempt {m.m}, current is {self.attempt}")
        return {GroupCommits: self._on_commits, GroupCert: self._on_cert, GroupReveals: self._on_reveals}[type(m)](m)

    def _check_ps(self, m: Message) -> None:
        st, sig = m._statement, m._signature
        self._v.verify(self.server_key, "msg", st, sig)

    # -- attempt a: open, commit ---------------------------------------------
    def _on_open(self, m: GroupOpen) -> list[Message]:
        first = self._open is None
        if first:
            if m.m != 1:
                raise WrongAssignment(f"the assignment starts at attempt 1, not {m.m}")
            self._v.certificate(self._ca, m.server_cert, SERVER_ID, ROLE_SERVER)
        elif m.server_cert != self.server_cert:
            raise WrongAssignment("the PS certificate changed between attempts")
        self._v.verify(m.server_cert.key, "msg", m._statement, m._signature)
        if m.group_size < self.min_group:
            raise WrongAssignment(f"group size {m.group_size} is below this participant's floor {self.min_group}")
        roster = dict(m.roster)
        if roster.get(self.pid) != self._cert:
            raise WrongAssignment(f"GROUP_OPEN does not list participant {self.pid} with its certificate")
        if not first:
            # A new attempt only after a missing reveal: its candidates are the last list minus at least one.
            prev = set(self._list.ids())
            if m.m != self.attempt + 1 or m.m > gr.MAX_ATTEMPTS:
                raise WrongAssignment(f"attempt {m.m} after attempt {self.attempt} (at most {gr.MAX_ATTEMPTS})")
            if not set(roster) < prev:
                raise WrongAssignment("a new attempt must exclude a member of the last list and add nobody")
            if m.group_size != self._open.group_size:
                raise WrongAssignment("the group size changed between attempts")
            if any(self._keys[pid] != cert for pid, cert in roster.items()):
                raise WrongAssignment("a certificate changed between attempts")
        def certificates() -> None:
            for pid, cert in m.roster:
                self._v.certificate(self._ca, cert, pid)
        self._v.once(gr.digest("roster", self._ca.verify_key.to_bytes(), gr.signed_statement(m)), certificates)
        self.server_cert, self._open, self.attempt = m.server_cert, m, m.m
        self._keys = roster
        self._nonce = bytes(self._rng.bytes(gr.NONCE_BYTES))
        self._commit = gr.commitment(self.T, m.m, self.pid, self._nonce)
        self.state = CState.AWAIT_COMMITS
        return [GroupCommit(self.T, m.m, self.pid, self._commit)]

    # -- the list, one ack per attempt ------------------------------------------
    def _on_commits(self, m: GroupCommits) -> list[Message]:
        ids = m.ids()
        n = len(self._keys)
        if not set(ids) <= set(self._keys):
            raise WrongAssignment("GROUP_COMMITS lists a participant that is not a candidate")
        if len(ids) < gr.assignment_threshold(n):
            raise WrongAssignment(f"GROUP_COMMITS lists {len(ids)} of {n} candidates, "
                                  f"threshold {gr.assignment_threshold(n)}")
        own = [c for pid, c, _ in m.entries if pid == self.pid]
        if own != [self._commit]:
            raise WrongAssignment(f"GROUP_COMMITS does not carry participant {self.pid}'s own commitment")
        def signatures() -> None:
            for pid, c, sig in m.entries:
                try:
                    self._v.verify(self._keys[pid].key, "msg", gr.commit_statement(self.T, m.m, pid, c), sig)
                except InvalidSignature:
                    raise InvalidSignature(f"GROUP_COMMITS: the commitment of {pid} is not signed by {pid}") from None
        # The same list against the same certified roster passes or fails the same way for everyone.
        self._v.once(gr.digest("list", self._ca.verify_key.to_bytes(), gr.signed_statement(self._open),
                               gr.signed_statement(m)), signatures)
        self._list = m
        self._statement = gr.ack_statement(self.T, m.m, self._open.group_size, gr.open_digest(self._open),
                                           gr.list_digest(m))
        self.state = CState.AWAIT_CERT
        return [GroupAck(self.T, m.m, self.pid, self._sk.sign(gr.ACK_CONTEXT, self._statement))]

    # -- certificate, then reveal ------------------------------------------------
    def _on_cert(self, m: GroupCert) -> list[Message]:
        need = gr.assignment_threshold(len(self._keys))
        if len(m.signatures) < need:
            raise WrongAssignment(f"GROUP_CERT has {len(m.signatures)} signatures on this list, threshold {need}")
        listed = set(self._list.ids())

        def signatures() -> None:
            for pid, sig in m.signatures:
                if pid not in listed:
                    raise WrongAssignment(f"GROUP_CERT carries a signature of {pid}, who is not listed")
                try:
                    self._v.verify(self._keys[pid].key, gr.ACK_CONTEXT, self._statement, sig)
                except InvalidSignature:
                    raise InvalidSignature(f"GROUP_CERT: {pid}'s signature is not on this participant's list") from None
        # Distinct signers (the decoder checks), every one listed and valid on this participant's statement.
        self._v.once(gr.digest("cert", self._ca.verify_key.to_bytes(), gr.signed_statement(self._open),
                               self._statement, gr.signed_statement(m)), signatures)
        self.state = CState.AWAIT_REVEALS
        return [GroupReveal(self.T, m.m, self.pid, self._nonce)]

    # -- every nonce: the seed and the partition ----------------------------------
    def _on_reveals(self, m: GroupReveals) -> list[Message]:
        entries = self._list.entries
        if len(m.nonces) != len(entries):
            raise WrongAssignment(f"GROUP_REVEALS has {len(m.nonces)} nonces for a list of {len(entries)}")
        def openings() -> None:
            for (pid, c, _), nonce in zip(entries, m.nonces):
                if not hmac.compare_digest(gr.commitment(self.T, m.m, pid, nonce), c):
                    raise InvalidReveal(f"the nonce shown for {pid} does not open its commitment")
        self._v.once(gr.digest("reveals", gr.signed_statement(self._list), gr.signed_statement(m)), openings)
        seed = gr.draw_seed(self.T, m.m, self._statement, list(m.nonces))
        a = Assignment.draw(self.T, m.m, self._open.group_size, self._list.ids(), seed)
        own = len(a.groups[a.index_of(self.pid)])
        if own < self.min_group:
            raise WrongAssignment(f"this participant's group has {own} members, below its floor {self.min_group}")
        self.assignment = a
        self.state = CState.ASSIGNED
        return []


class PSState(enum.Enum):
    COMMITS = "collect GROUP_COMMIT"
    ACKS = "collect GROUP_ACK"
    REVEALS = "collect GROUP_REVEAL"
    DONE = "assigned"


COLLECTOR_TABLE: dict[PSState, MsgType | None] = {
    PSState.COMMITS: MsgType.GROUP_COMMIT,
    PSState.ACKS: MsgType.GROUP_ACK,
    PSState.REVEALS: MsgType.GROUP_REVEAL,
    PSState.DONE: None,
}


class AssignmentCollector:
    """The PS's side: runs attempts until every listed member revealed (at most MAX_ATTEMPTS).

    ``receive`` takes a decoded, signature-checked message of a roster member and
    raises ProtocolError on a defect; ``close`` ends the current step and returns
    the next messages. ``assignment`` is set when done; BelowThreshold ends it.
    """

    def __init__(self, T: int, roster: dict[int, Certificate], signing_key: SigningKey, cert: Certificate,
                 group_size: int) -> None:
        self.T, self._roster, self._sk, self._cert = T, dict(roster), signing_key, cert
        self.g = gr.check_group_size(group_size)
        self.state = PSState.COMMITS
        self.attempt = 0
        self.assignment: Assignment | None = None
        self.excluded: list[int] = []  # listed members whose reveal was missing, per attempt
        self.attempts_log: list[dict] = []

    def start(self) -> Outbox:
        return self._open(sorted(self._roster))

    def _open(self, candidates: list[int]) -> Outbox:
        self.attempt += 1
        self.candidates = candidates
        self._commits: dict[int, tuple[bytes, bytes]] = {}
        self._acks: dict[int, bytes] = {}
        self._reveals: dict[int, bytes] = {}
        om = GroupOpen(self.T, self.attempt, SERVER_ID, self.g, self._cert,
                       tuple((pid, self._roster[pid]) for pid in candidates))
        self._open_msg = om
        self.state = PSState.COMMITS
        data = om.encode(self._sk)
        return [(pid, data) for pid in candidates]

    def receive(self, sender: int, m: Message) -> None:
        want = COLLECTOR_TABLE[self.state]
        if m.TYPE is not want:
            raise UnexpectedMessage(f"PS in assignment state '{self.state.value}' got {m.TYPE.name}; "
                                    f"expected {want.name if want else 'nothing'}")
        if m.m != self.attempt:
            raise UnexpectedMessage(f"{m.TYPE.name} for attempt {m.m}, current is {self.attempt}")
        if isinstance(m, GroupCommit):
            if sender not in self.candidates:
                raise UnexpectedMessage(f"participant {sender} is not a candidate of attempt {self.attempt}")
            if sender in self._commits:
                raise AlreadyAnswered(f"second commitment from {sender}")
            self._commits[sender] = (m.commitment, m._signature)
        elif isinstance(m, GroupAck):
            if sender not in self._commits:
                raise UnexpectedMessage(f"participant {sender} is not on the list")
            if sender in self._acks:
                raise AlreadyAnswered(f"second ack from {sender}")
            self._v_ack(sender, m.signature)
            self._acks[sender] = m.signature
        else:
            if sender not in self._commits:
                raise UnexpectedMessage(f"participant {sender} is not on the list")
            if sender in self._reveals:
                raise AlreadyAnswered(f"second reveal from {sender}")
            if not hmac.compare_digest(gr.commitment(self.T, self.attempt, sender, m.nonce), self._commits[sender][0]):
                raise InvalidReveal(f"participant {sender}'s nonce does not open its commitment")
            self._reveals[sender] = m.nonce

    def _v_ack(self, sender: int, sig: bytes) -> None:
        try:
            self._roster[sender].key.verify(gr.ACK_CONTEXT, self._statement, sig)
        except InvalidSignature:
            raise InvalidSignature(f"participant {sender}'s ack is not on the PS's list") from None

    def close(self) -> Outbox:
        need = gr.assignment_threshold(len(self.candidates))
        if self.state is PSState.COMMITS:
            if len(self._commits) < need:
                raise BelowThreshold(f"assignment attempt {self.attempt}: {len(self._commits)} commitments, "
                                     f"threshold {need}")
            lm = GroupCommits(self.T, self.attempt, SERVER_ID,
                              tuple((pid, c, s) for pid, (c, s) in sorted(self._commits.items())))
            self._list = lm
            self._statement = gr.ack_statement(self.T, self.attempt, self.g, gr.open_digest(self._open_msg),
                                               gr.list_digest(lm))
            self.state = PSState.ACKS
            return self._to_list(lm)
        if self.state is PSState.ACKS:
            if len(self._acks) < need:
                raise BelowThreshold(f"assignment attempt {self.attempt}: {len(self._acks)} acks, threshold {need}")
            self.state = PSState.REVEALS
            return self._to_list(GroupCert(self.T, self.attempt, SERVER_ID, tuple(sorted(self._acks.items()))))
        if self.state is PSState.REVEALS:
            listed = self._list.ids()
            missing = [pid for pid in listed if pid not in self._reveals]
            self.attempts_log.append({"attempt": self.attempt, "candidates": len(self.candidates),
                                      "listed": len(listed), "missing_reveals": missing})
            if missing:
                self.excluded += missing
                if self.attempt >= gr.MAX_ATTEMPTS:
                    raise BelowThreshold(f"assignment: reveals missing after {self.attempt} attempts ({missing})")
                rest = [pid for pid in listed if pid in self._reveals]
                if len(rest) < gr.MIN_GROUP:
                    raise BelowThreshold(f"assignment: {len(rest)} participants left")
                return self._open(rest)
            nonces = [self._reveals[pid] for pid in listed]
            seed = gr.draw_seed(self.T, self.attempt, self._statement, nonces)
            self.assignment = Assignment.draw(self.T, self.attempt, self.g, listed, seed)
            self.state = PSState.DONE
            return self._to_list(GroupReveals(self.T, self.attempt, SERVER_ID, tuple(nonces)))
        raise UnexpectedMessage("the assignment is over")

    def _to_list(self, m: Message) -> Outbox:
        data = m.encode(self._sk)
        return [(pid, data) for pid in self._list.ids()]


__all__ = ["AssignmentClient", "AssignmentCollector", "CState", "PSState"]
