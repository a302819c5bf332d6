"""A round in anonymity groups: the assignment, then one complete round per group (docs/protocol.md, "Anonymity groups").

:class:`GroupedServer` meets the driver contract of :class:`~reshuffle.protocol.server.Server`
(:class:`reshuffle.protocol.driver.PS`), so the in-process runner and the Flower grid drive it unchanged. It
runs the assignment (:class:`~reshuffle.protocol.assignment.AssignmentCollector`),
then one ``Server`` per group with the same PS identity and that group's own
parameters, in lockstep: closing a phase closes it in every group still running.
A group that falls below its threshold delivers nothing; the others go on.
Its output pools the delivered rows (group by group) in a :class:`GroupedOutput`.

:class:`GroupedParticipant` runs a participant's side of the assignment, then
checks the group's ROUND_START (PS, roster, group index, group count and
assignment digest against the partition it computed) before handing it, and
everything after it, to an ordinary participant.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from reshuffle.crypto.rand import OS_RANDOM, RandomSource, SeededRandom, as_source
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, Certificate, CertificateAuthority, SigningKey
from reshuffle.errors import AlreadyAnswered, BelowThreshold, ConfigError, ProtocolError, UnexpectedMessage
from reshuffle.protocol import messages as msg
from reshuffle.protocol.assignment import AssignmentClient, AssignmentCollector, CState, PSState
from reshuffle.protocol.groups import (
    ASSIGNMENT_TYPES,
    MIN_GROUP,
    Assignment,
    CheckCache,
    WrongAssignment,
    check_collusion,
)
from reshuffle.protocol.messages import Context, MsgType
from reshuffle.protocol.params import RoundParams, TrustFloors, colluders, smallest_round
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.schedule import ASSIGN_STEP, Step
from reshuffle.protocol.server import ErrorRecord, RoundOutput, Server, admit

Outbox = list[tuple[int, bytes]]
ASSIGN_PHASE = "setup"  # the assignment is part of the setup for stats and errors


@dataclass
class GroupedOutput(RoundOutput):
    """The pooled output: every delivering group's rows, group after group.

    Positions (valid, rejected, decoy) are global: group j's row ρ is at
    ``offsets[j] + ρ``. ``online`` holds, per invocation, the union over the
    delivering groups. ``groups``, ``offsets``, ``group_params`` and ``failed``
    (why a group delivered nothing) are :class:`RoundOutput`'s, so a driver reads
    either output alike; ``group_outputs`` keeps each group's own output (also of a
    failed group, when it got that far).
    """

    group_outputs: dict[int, RoundOutput] = field(default_factory=dict)
    assignment: Assignment | None = None
    assignment_log: list[dict] = field(default_factory=list)


def _pool(groups, servers: dict[int, Server], failed: dict[int, str], errors, assignment, log) -> GroupedOutput:
    models, valid, rejected, decoys, suspects, names = [], [], {}, [], [], []
    online: dict[int, set[int]] = {}
    blamed, evidence, offsets, outs = {}, {}, {}, {}
    offset = 0
    all_errors = list(errors)
    for j, s in sorted(servers.items()):
        all_errors += s.errors
        named = s.output.evidence if s.output is not None else s.culprits
        evidence.update(named)
        blamed.update({i: str(e) for i, e in named.items()})
        if s.output is not None:
            outs[j] = s.output
        if j in failed or s.output is None:
            continue
        o = s.output
        offsets[j] = offset
        models += o.models
        names += o.pseudonyms
        valid += [offset + p for p in o.valid_positions]
        rejected.update({offset + p: why for p, why in o.rejected_rows.items()})
        decoys += [offset + p for p in o.decoy_positions]
        suspects += o.suspects
        for m, ids in o.online.items():
            online.setdefault(m, set()).update(ids)
        offset += o.n_positions
    return GroupedOutput(
        models, valid, offset, [], {m: tuple(sorted(ids)) for m, ids in online.items()}, all_errors,
        rejected_rows=rejected, blamed=blamed, evidence=evidence, suspects=sorted(suspects), decoy_positions=decoys,
        groups=tuple(groups), offsets=offsets, group_outputs=outs,
        group_params={j: s.params for j, s in servers.items()}, failed=dict(failed), assignment=assignment,
        assignment_log=list(log), pseudonyms=names,
    )


class GroupedServer:
    """The PS of a round in groups of about ``group_size``.

    Parameters
    ----------
    T, roster, signing_key, cert, ca, global_hash : as for :class:`Server`.
    d : model length in words.
    group_size : g ≥ 2; the round has about ⌈N/g⌉ groups.
    overrides : RoundParams overrides applied to every group (not ``n, k, t, c``: those follow each group's size).
    rng : the PS's randomness (each group's Server gets an independent child stream).
    make_server : builds each group's PS (a deviating PS behaviour's ``make``; default :class:`Server`).
    collusion : fraction of each group assumed to collude with the PS: c_j = max(1, ⌊collusion·N_j⌋) and
        t_j = ⌊(N_j + c_j)/2⌋ + 1 (default 0.2, the rule of one round). Larger values tolerate more
        colluders landing in one group and fewer dropouts; each member refuses a c_j below its own floor.
    """

    def __init__(self, T: int, roster: dict[int, Certificate], signing_key: SigningKey, cert: Certificate,
                 ca: CertificateAuthority, global_hash: bytes, d: int, group_size: int,
                 overrides: dict | None = None, rng: RandomSource | int | None = None,
                 make_server: Callable[..., Server] = Server, collusion: float | None = None) -> None:
        self.collusion = check_collusion(collusion)
        for pid, c in roster.items():
            ca.verify(c, subject=pid)
        ca.verify(cert, subject=SERVER_ID, role=ROLE_SERVER)
        if cert.key != signing_key.verify_key:
            raise ConfigError("the PS certificate does not certify its signing key")
        self.overrides = dict(overrides or {})
        # Validated once for the whole roster; each group re-derives n, k, t, c from its own size.
        self.params = RoundParams.default(len(roster), d, **self.overrides)
        self.T, self._roster, self._sk, self._cert, self._ca = T, dict(roster), signing_key, cert, ca
        self._hash, self._d = global_hash, d
        self._rng = as_source(rng)
        self._make = make_server
        self._collector = AssignmentCollector(T, roster, signing_key, cert, group_size)
        self.group_size = group_size
        self.errors: list[ErrorRecord] = []
        self.excluded: set[int] = set()
        self.servers: dict[int, Server] = {}
        self.failed: dict[int, str] = {}
        self.group_of: dict[int, int] = {}
        self.output: GroupedOutput | None = None
        self.assign_s = 0.0  # PS seconds spent on the assignment

    @property
    def assignment(self) -> Assignment | None:
        return self._collector.assignment

    @property
    def assignment_log(self) -> list[dict]:
        """Per attempt: candidates, listed members and the members whose reveal was missing."""
        return list(self._collector.attempts_log)

    @property
    def step(self) -> Step:
        """The schedule step now collected: the assignment, or the running groups'. Groups move in
        lockstep, but one may reach its upload earlier (fewer reservation iterations): the step is
        then online, since the next push carries a message that needs the models."""
        if self.assigning:
            return ASSIGN_STEP
        steps = [s.step for j, s in sorted(self.servers.items()) if j not in self.failed and not s.done]
        return next((st for st in steps if not st.offline), steps[0] if steps else ASSIGN_STEP)

    @property
    def assigning(self) -> bool:
        return self._collector.state is not PSState.DONE

    @property
    def done(self) -> bool:
        return self.output is not None

    @property
    def phase_name(self) -> str:
        if self.assigning:
            return ASSIGN_PHASE
        live = [s for j, s in sorted(self.servers.items()) if j not in self.failed and not s.done]
        return live[0].phase_name if live else "done"

    @property
    def culprits(self) -> dict:
        out = {}
        for s in self.servers.values():
            out.update(s.culprits)
        return out

    def start(self) -> Outbox:
        t0 = time.perf_counter()
        out = self._collector.start()
        self.assign_s += time.perf_counter() - t0
        return out

    # ------------------------------------------------------------------ #
    def receive(self, sender: int, data: bytes) -> None:
        """Route one message: to the assignment, or to the sender's group. Errors are recorded, never raised."""
        if not self.assigning:
            if msg.peek_type(data) in ASSIGNMENT_TYPES:
                # Late or repeated: the assignment is fixed; the first copy stood.
                self.errors.append(ErrorRecord(ASSIGN_PHASE, sender, AlreadyAnswered(
                    f"assignment message from {sender} after the assignment was fixed")))
                return
            j = self.group_of.get(sender)
            if j is None:
                self.errors.append(ErrorRecord(ASSIGN_PHASE, sender, UnexpectedMessage(
                    f"participant {sender} is in no group of this round")))
                return
            if j not in self.failed:
                self.servers[j].receive(sender, data)
            return
        t0 = time.perf_counter()
        try:
            m = admit(sender, data, self._roster, self.excluded, self.T, Context())
            self._collector.receive(sender, m)
        except ProtocolError as exc:
            self.errors.append(ErrorRecord(ASSIGN_PHASE, sender, exc))
            if sender in self._roster and not isinstance(exc, AlreadyAnswered):
                self.excluded.add(sender)
        finally:
            self.assign_s += time.perf_counter() - t0

    def close_phase(self) -> Outbox:
        """Close the assignment step, or the current phase of every running group."""
        if self.assigning:
            t0 = time.perf_counter()
            try:
                out = self._collector.close()  # BelowThreshold here ends the whole round
            finally:
                self.assign_s += time.perf_counter() - t0
            return out + self._start_groups() if not self.assigning else out
        out: Outbox = []
        for j, s in sorted(self.servers.items()):
            if j in self.failed or s.done:
                continue
            try:
                out += s.close_phase()
            except BelowThreshold as exc:
                self.failed[j] = str(exc)
        if all(j in self.failed or s.done for j, s in self.servers.items()):
            self.output = _pool(self.assignment.groups, self.servers, self.failed, self.errors,
                                self.assignment, self._collector.attempts_log)
            if len(self.failed) == len(self.servers):
                raise BelowThreshold("every group failed: " + "; ".join(
                    f"group {j}: {why}" for j, why in sorted(self.failed.items())))
        return out

    def failed_output(self) -> GroupedOutput:
        """What a round that delivered nothing leaves: the pooled output when every group failed, else
        (the assignment failed) the errors and the assignment's attempts."""
        if self.output is not None:
            return self.output
        return GroupedOutput([], [], 0, [], {}, list(self.errors), assignment_log=self.assignment_log)

    def needs_model(self, pid: int) -> bool:
        """Whether the step now pushed to ``pid`` needs its model: its group's step is online."""
        if self.assigning:
            return False
        j = self.group_of.get(pid)
        srv = self.servers.get(j) if j is not None else None
        return srv is not None and j not in self.failed and not srv.done and not srv.step.offline

    def _start_groups(self) -> Outbox:
        a = self.assignment
        out: Outbox = []
        for j, members in enumerate(a.groups):
            c = None if self.collusion is None else colluders(len(members), self.collusion)
            p = RoundParams.default(len(members), self._d, c=c, **self.overrides, **a.binding(j))
            rng = SeededRandom(self._rng.bytes(32), b"group-server") if self._rng is not OS_RANDOM else None
            s = self._make(p, self.T, {i: self._roster[i] for i in members}, self._sk, self._cert, self._ca,
                           self._hash, rng)
            self.servers[j] = s
            for i in members:
                self.group_of[i] = j
            out += s.start()
        return out


class GroupedParticipant:
    """P_i of a round in groups: the assignment, then an ordinary participant for its group.

    Takes :class:`Participant`'s arguments; ``make`` builds the inner participant
    (a deviating behaviour's ``make``, or a game's participant class) and
    ``cache`` holds checks passed and broadcasts parsed (shared in one process);
    ``floors`` are its own bounds on its group's parameters (c_j, t_j, decoys, R_max, the
    honest members of its group), handed to the inner participant; ``min_group`` is its
    floor on the group size (default: the least group its floors take part in).
    """

    def __init__(self, pid: int, T: int, model: np.ndarray, signing_key: SigningKey, cert: Certificate,
                 ca: CertificateAuthority, global_hash: bytes, rng: RandomSource | int | None = None, *,
                 make: Callable[..., Participant] = Participant, cache: CheckCache | None = None,
                 min_group: int | None = None, floors: TrustFloors | None = None) -> None:
        self._rng = as_source(rng)
        self.pid, self.T, self._sk = pid, T, signing_key
        self.floors = floors if floors is not None else TrustFloors()
        if min_group is None:
            min_group = max(MIN_GROUP, smallest_round(self.floors))
        # Built now: it checks the model (NaN/Inf) before anything is sent, and draws nothing yet.
        self.inner = make(pid, T, model, signing_key, cert, ca, global_hash, self._rng, floors=self.floors)
        self.client = AssignmentClient(pid, T, signing_key, cert, ca, self._rng, cache, min_group)
        self._cache = self.client._v
        self._started = False
        self._aborted = False

    @property
    def view(self):
        return self.inner.view

    def provide_model(self, model: np.ndarray) -> None:
        """Hand the trained model to the group's participant (see :meth:`Participant.provide_model`)."""
        self.inner.provide_model(model)

    @property
    def params(self) -> RoundParams | None:
        return self.inner.params

    @property
    def assignment(self) -> Assignment | None:
        return self.client.assignment

    def handle(self, data: bytes) -> list[bytes]:
        """Process one PS message; the replies to send."""
        if self._started:
            return self.inner.handle(data)
        if self._aborted:
            return []
        try:
            m = self._cache.decode(data) if msg.peek_type(data) in ASSIGNMENT_TYPES else msg.decode(data, Context())
            if m.TYPE is MsgType.ROUND_START:
                self._check_round_start(m)
                self._started = True
                return self.inner.handle(data)
            if m.TYPE not in ASSIGNMENT_TYPES:
                raise UnexpectedMessage(f"participant {self.pid} got {m.TYPE.name} before its group's ROUND_START")
            return [r.encode(self._sk) for r in self.client.handle(m)]
        except ProtocolError as exc:
            self.inner.view.errors.append(exc)
            self._aborted = True
            return [msg.Refusal(self.T, self.client.attempt, self.pid, type(exc).__name__, str(exc))
                    .encode(self._sk)]

    def _check_round_start(self, m: msg.RoundStart) -> None:
        a = self.client.assignment
        if self.client.state is not CState.ASSIGNED or a is None:
            raise UnexpectedMessage(f"ROUND_START before the group assignment finished "
                                    f"(state '{self.client.state.value}')")
        if m.sender != SERVER_ID or m.server_cert != self.client.server_cert:
            raise WrongAssignment("the group's ROUND_START comes from another PS than the assignment")
        msg.verify(m, self.client.server_key)
        j = a.index_of(self.pid)
        p = m.params
        if (p.cohort, p.cohorts, p.assignment) != (j, len(a.groups), a.digest):
            raise WrongAssignment(
                f"ROUND_START binds group {p.cohort} of {p.cohorts} (assignment {p.assignment.hex()[:16]}), "
                f"this participant computed group {j} of {len(a.groups)} ({a.digest.hex()[:16]})")
        roster = tuple(pid for pid, _ in m.roster)
        if roster != a.groups[j]:
            raise WrongAssignment(f"ROUND_START roster {list(roster)} is not group {j} = {list(a.groups[j])}")


__all__ = ["GroupedOutput", "GroupedParticipant", "GroupedServer"]

