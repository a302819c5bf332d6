"""A round in anonymity groups: the assignment, then one complete round per group (docs/protocol.md, "Anonymity groups").

:class:`GroupedServer` meets the driver contract of :class:`~reshuffle.protocol.server.Server`
(:class:`reshuffle.protocol.driver.PS`), so the in-process runner and the Flower grid drive it unchanged. It
runs the assignment (:class:`~reshuffle.protocol.assignment.AssignmentCollector`),
then one ``Server`` per group with the same PS identity and that group's own
parameters, in lockstep: closing a phase closes it in every group still running.
A group that falls below its threshold delivers nothing; the others go on.
Its output pools the delivered rows (group by group) in a :class:`GroupedOutput`.
Given a stable :class:`Assignment` (kept from an earlier round), it runs no new
assignment: it starts the sampled groups at once, each only if all its members
are in the roster (a group delivers all its members' models or none).

:class:`GroupedParticipant` runs a participant's side of the assignment, then
checks the group's ROUND_START (PS, roster, group index, group count and
assignment digest against the partition it computed) before handing it, and
everything after it, to an ordinary participant. Given its stored
:class:`Membership` it skips the assignment and checks the ROUND_START against
it. In either case it refuses to consent to, or unmask, an online set U_m that
lacks a member of its group (:class:`IncompleteGroup`): a member missing before
the upload would be named by its model's absence, so the group then delivers
nothing. A member that drops after its upload is in U_M, and is recovered
through the shares as in any round.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from reshuffle.crypto.prg import cores_available
from reshuffle.crypto.rand import OS_RANDOM, RandomSource, SeededRandom, as_source, substream
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, Certificate, CertificateAuthority, SigningKey
from reshuffle.errors import AlreadyAnswered, BelowThreshold, ConfigError, ProtocolError, UnexpectedMessage
from reshuffle.protocol import messages as msg
from reshuffle.protocol.dcnet import PS_TYPES as DC_PS_TYPES
from reshuffle.protocol.dcnet import DCParticipant, DCServer, GroupPool, dc_params
from reshuffle.protocol.assignment import AssignmentClient, AssignmentCollector, CState, PSState
from reshuffle.protocol.groups import (
    ASSIGNMENT_TYPES,
    Assignment,
    CheckCache,
    Membership,
    UngroupedRound,
    WrongAssignment,
    WrongGroup,
    check_collusion,
)
from reshuffle.protocol.messages import Context, MsgType
from reshuffle.protocol.params import RoundParams, TrustFloors, colluders
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.phases import PPhase
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
    """The PS of a round in groups of at least ``group_size``.

    Parameters
    ----------
    T, roster, signing_key, cert, ca, global_hash : as for :class:`Server`.
    d : model length in words.
    group_size : g ≥ 3; the round has ⌊N/g⌋ groups of g to 2g − 1 (one group of N if N < g).
    overrides : RoundParams overrides applied to every group (not ``n, k, t, c``: those follow each group's size).
    rng : the PS's randomness (each group's Server gets an independent child stream).
    make_server : builds each group's PS (a deviating PS behaviour's ``make``; default :class:`Server`).
    collusion : fraction of each group assumed to collude with the PS: c_j = max(1, ⌊collusion·N_j⌋) and
        t_j = ⌊(N_j + c_j)/2⌋ + 1 (default 0.2, the rule of one round). Larger values tolerate more
        colluders landing in one group and fewer dropouts; each member refuses a c_j below its own floor.
    stable : the stable groups kept from an earlier round (no new assignment is run); ``group_size``
        is then ignored.
    sample : with ``stable``, the indices of the groups this round runs (default every group). A
        sampled group with a member missing from ``roster`` is not started: it delivers nothing.

    ``workers`` (an attribute, default the cores available) is how many threads the DC-net groups' upload and
    blame steps run on side by side (:class:`~reshuffle.protocol.dcnet.GroupPool`); 1 runs them group by group.
    Either way every group ends in the same state.
    """

    def __init__(self, T: int, roster: dict[int, Certificate], signing_key: SigningKey, cert: Certificate,
                 ca: CertificateAuthority, global_hash: bytes, d: int, group_size: int,
                 overrides: dict | None = None, rng: RandomSource | int | None = None,
                 make_server: Callable[..., Server] = Server, collusion: float | None = None,
                 stable: Assignment | None = None, sample: Sequence[int] | None = None,
                 dcnet: bool = False, dc_options: dict | None = None) -> None:
        self.collusion = check_collusion(collusion)
        # --- DC-net round (protocol/dcnet.py): stable groups run it instead of the Shamir-shared round ---
        if dcnet and stable is None:
            raise ConfigError("the DC-net round needs stable groups (a new assignment runs the Shamir-shared round)")
        self.dcnet, self._dc_options = dcnet, dict(dc_options or {})
        self._held: dict[int, Outbox] = {}  # groups whose reservation is done, upload request held back
        self.others_offline: Callable[[], bool] = lambda: False  # a joint round's other parts still reserving
        # Threads the groups' upload steps run on side by side (GroupPool); 1 runs every group in turn.
        self.workers: int = cores_available()
        self._pool: GroupPool | None = None
        # --- end DC-net ---
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
        self._stable = stable
        if stable is None:
            if sample is not None:
                raise ConfigError("sample needs stable groups")
            self._collector: AssignmentCollector | None = AssignmentCollector(T, roster, signing_key, cert,
                                                                             group_size)
            self.sample: tuple[int, ...] = ()
        else:
            self._collector = None
            group_size = stable.group_size
            self.sample = tuple(range(len(stable.groups))) if sample is None else tuple(sorted(set(sample)))
            if not self.sample or not all(isinstance(j, int) and 0 <= j < len(stable.groups) for j in self.sample):
                raise ConfigError(f"sample {list(sample or [])} must name groups 0..{len(stable.groups) - 1}")
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
        return self._stable if self._collector is None else self._collector.assignment

    @property
    def assignment_log(self) -> list[dict]:
        """Per attempt: candidates, listed members and the members whose reveal was missing (none when the
        groups are stable)."""
        return [] if self._collector is None else list(self._collector.attempts_log)

    @property
    def step(self) -> Step:
        """The schedule step now collected: the assignment, or the running groups'. Groups move in
        lockstep, but one may reach its upload earlier (fewer reservation iterations): the step is
        then online, since the next push carries a message that needs the models."""
        if self.assigning:
            return ASSIGN_STEP
        steps = [s.step for j, s in sorted(self.servers.items())
                 if j not in self.failed and not s.done and j not in self._held]
        return next((st for st in steps if not st.offline), steps[0] if steps else ASSIGN_STEP)

    @property
    def assigning(self) -> bool:
        return self._collector is not None and self._collector.state is not PSState.DONE

    @property
    def done(self) -> bool:
        return self.output is not None

    @property
    def stage_name(self) -> str:
        if self.assigning:
            return ASSIGN_PHASE
        live = [s for j, s in sorted(self.servers.items()) if j not in self.failed and not s.done]
        return live[0].stage_name if live else "done"

    @property
    def culprits(self) -> dict:
        out = {}
        for s in self.servers.values():
            out.update(s.culprits)
        return out

    def start(self) -> Outbox:
        if self._collector is None:
            return self._start_groups()
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
                srv = self.servers[j]
                if self._pooled(srv):  # DC-net: the group's upload work, beside the other groups'
                    self._group_pool().submit(j, srv.receive, sender, data)
                else:
                    srv.receive(sender, data)
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
        live = {j: s for j, s in sorted(self.servers.items()) if j not in self.failed and not s.done
                and j not in self._held}
        # DC-net: the groups in an upload step close side by side (each after its queued messages); the rest,
        # and the results, in group order.
        closed = self._group_pool().run({j: s.close_phase for j, s in live.items() if self._pooled(s)}) \
            if self._pool is not None or any(self._pooled(s) for s in live.values()) else {}
        for j, s in live.items():
            try:
                if j in closed:
                    nxt, exc = closed[j]
                    if exc is not None:
                        raise exc
                else:
                    nxt = s.close_phase()
            except BelowThreshold as exc:
                self.failed[j] = str(exc)
                continue
            # --- DC-net: a group whose reservation is done holds its upload request until every group's
            # reservation is done, so that no group reserves after training (groups otherwise run on alone).
            if self.dcnet and nxt and not s.done and not s.step.offline and s.step.name == "dc-upload":
                self._held[j] = nxt
                continue
            out += nxt
        out += self.release_held()
        # --- end DC-net ---
        if all(j in self.failed or s.done for j, s in self.servers.items()):
            if self._pool is not None:
                self._pool.close()
                self._pool = None
            self.output = _pool(self.assignment.groups, self.servers, self.failed, self.errors,
                                self.assignment, self.assignment_log)
            if all(j in self.failed for j in self.sample):
                raise BelowThreshold("every group failed: " + "; ".join(
                    f"group {j}: {why}" for j, why in sorted(self.failed.items())))
        return out

    def _pooled(self, srv) -> bool:
        return self.dcnet and self.workers > 1 and getattr(srv, "pooled", False)

    def _group_pool(self) -> GroupPool:
        if self._pool is None:
            self._pool = GroupPool(self.workers)
        return self._pool

    @property
    def reserving(self) -> bool:
        """Some group still runs an offline step (not one whose upload request is held)."""
        return any(not s.done and j not in self.failed and j not in self._held and s.step.offline
                   for j, s in self.servers.items())

    def release_held(self) -> Outbox:
        """The held upload requests, once no group (and no other part of a joint round) is still reserving."""
        if not self._held or self.reserving or self.others_offline():
            return []
        out = [item for j in sorted(self._held) if j not in self.failed for item in self._held[j]]
        self._held.clear()
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
        return (srv is not None and j not in self.failed and not srv.done and j not in self._held
                and not srv.step.offline)

    def _start_groups(self) -> Outbox:
        a = self.assignment
        if self._collector is not None:
            self.sample = tuple(range(len(a.groups)))
        out: Outbox = []
        for j in self.sample:
            members = a.groups[j]
            absent = [i for i in members if i not in self._roster]
            if absent:
                # All or none: the members present would be refused anyway (their ROUND_START must list
                # the whole group), so the group is not started.
                self.failed[j] = f"member(s) {absent} of stable group {j} are not in the roster: it delivers nothing"
                continue
            c = None if self.collusion is None else colluders(len(members), self.collusion)
            rng = SeededRandom(self._rng.bytes(32), b"group-server") if self._rng is not OS_RANDOM else None
            if self.dcnet:  # --- DC-net round of a stable group ---
                p = dc_params(len(members), self._d, c=c, **self.overrides, **a.binding(j))
                opts = dict(self._dc_options)
                make_dc = opts.pop("make", None) or DCServer  # a deviating PS's subclass (reshuffle.adversaries)
                s = make_dc(p, self.T, {i: self._roster[i] for i in members}, self._sk, self._cert, self._ca,
                            self._hash, rng, **opts)
            else:
                p = RoundParams.default(len(members), self._d, c=c, **self.overrides, **a.binding(j))
                s = self._make(p, self.T, {i: self._roster[i] for i in members}, self._sk, self._cert, self._ca,
                               self._hash, rng)
            self.servers[j] = s
            for i in members:
                self.group_of[i] = j
            out += s.start()
        return out


class JointServer:
    """Several grouped PSs of one round number over disjoint rosters, driven as one (the driver contract).

    A federation whose groups were formed at different times (epochs: each a stable
    :class:`Assignment` of its own) runs each epoch's sampled groups in one part, and
    may form the groups of newcomers in another (a new assignment among participants
    in no group). Closing a step closes it in every part still running; a part whose
    every group failed delivers nothing and the others go on. The output pools every
    part's groups in part order (group indices run on across parts).
    """

    def __init__(self, parts: Sequence[GroupedServer]) -> None:
        if not parts:
            raise ConfigError("a joint round needs at least one part")
        self.parts = list(parts)
        self._part_of = {pid: k for k, ps in enumerate(self.parts) for pid in ps._roster}
        if len(self._part_of) != sum(len(ps._roster) for ps in self.parts):
            raise ConfigError("the parts of a joint round must have disjoint rosters")
        self.params = self.parts[0].params
        self.failed_parts: dict[int, str] = {}
        self.output: GroupedOutput | None = None
        self._own_errors: list[ErrorRecord] = []
        # DC-net parts hold their upload requests while another part still reserves (none reserves after training).
        for k, ps in enumerate(self.parts):
            ps.others_offline = functools.partial(self._others_offline, k)

    def _others_offline(self, k: int) -> bool:
        return any(i != k and i not in self.failed_parts and not ps.done
                   and (ps.assigning or ps.reserving) for i, ps in enumerate(self.parts))

    @property
    def errors(self) -> list[ErrorRecord]:
        return self._own_errors + [e for ps in self.parts for e in ps.errors]

    def _live(self) -> list[GroupedServer]:
        return [ps for k, ps in enumerate(self.parts) if k not in self.failed_parts and not ps.done]

    @property
    def done(self) -> bool:
        return self.output is not None

    @property
    def step(self) -> Step:
        steps = [ps.step for ps in self._live()]
        return next((st for st in steps if not st.offline), steps[0] if steps else ASSIGN_STEP)

    @property
    def stage_name(self) -> str:
        live = self._live()
        return live[0].stage_name if live else "done"

    @property
    def culprits(self) -> dict:
        return {pid: why for ps in self.parts for pid, why in ps.culprits.items()}

    def start(self) -> Outbox:
        return [item for ps in self.parts for item in ps.start()]

    def receive(self, sender: int, data: bytes) -> None:
        k = self._part_of.get(sender)
        if k is None:
            self._own_errors.append(ErrorRecord(ASSIGN_PHASE, sender, UnexpectedMessage(
                f"participant {sender} is in no part of this round")))
        elif k not in self.failed_parts:
            self.parts[k].receive(sender, data)

    def close_phase(self) -> Outbox:
        out: Outbox = []
        for k, ps in enumerate(self.parts):
            if k in self.failed_parts or ps.done:
                continue
            try:
                out += ps.close_phase()
            except BelowThreshold as exc:
                self.failed_parts[k] = str(exc)
        for k, ps in enumerate(self.parts):
            if k not in self.failed_parts:
                out += ps.release_held()
        if not self._live():
            self.output = self._pool()
            if len(self.failed_parts) == len(self.parts):
                raise BelowThreshold("every part failed: " + "; ".join(
                    f"part {k}: {why}" for k, why in sorted(self.failed_parts.items())))
        return out

    def _pool(self) -> GroupedOutput:
        groups, servers, failed, log = [], {}, {}, []
        for ps in self.parts:
            base = len(groups)
            a = ps.assignment
            if a is not None:
                groups += list(a.groups)
            servers.update({base + j: s for j, s in ps.servers.items()})
            failed.update({base + j: why for j, why in ps.failed.items()})
            log += ps.assignment_log
        return _pool(groups, servers, failed, self.errors, None, log)

    def failed_output(self) -> GroupedOutput:
        return self.output if self.output is not None else self._pool()

    def needs_model(self, pid: int) -> bool:
        k = self._part_of.get(pid)
        return k is not None and k not in self.failed_parts and self.parts[k].needs_model(pid)


def formed_groups(ps) -> list[Assignment]:
    """The partitions a new assignment of this round fixed (none for one round, or for stable groups alone):
    what a driver keeps as new epochs, whether or not the groups then delivered."""
    parts = ps.parts if isinstance(ps, JointServer) else [ps]
    return [p.assignment for p in parts
            if isinstance(p, GroupedServer) and p._collector is not None and p.assignment is not None]


class GroupedParticipant:
    """P_i of a round in groups: the assignment (or its stored group), then an ordinary participant for its group.

    Takes :class:`Participant`'s arguments; ``make`` builds the inner participant
    (a deviating behaviour's ``make``, or a game's participant class) and
    ``cache`` holds checks passed and broadcasts parsed (shared in one process);
    ``floors`` are its own bounds on its group's parameters (c_j, t_j, decoys, R_max, the
    honest members of its group), handed to the inner participant; ``min_group`` is its
    floor on the group size (default ``floors.min_group``: 5 with the default floors).
    ``membership`` is its stable group from an earlier round: no assignment runs, and the
    round's ROUND_START must bind exactly that group. It refuses a round bound to no group
    (:class:`UngroupedRound`) and an assignment listing fewer than ``floors.draw``·g candidates
    (or than ``federation``, default ``floors.federation``, the federation's size where it knows it and
    that is smaller).
    """

    def __init__(self, pid: int, T: int, model: np.ndarray, signing_key: SigningKey, cert: Certificate,
                 ca: CertificateAuthority, global_hash: bytes, rng: RandomSource | int | None = None, *,
                 make: Callable[..., Participant] = Participant, cache: CheckCache | None = None,
                 min_group: int | None = None, floors: TrustFloors | None = None,
                 membership: Membership | None = None, federation: int | None = None) -> None:
        self._rng = as_source(rng)
        self.pid, self.T, self._sk, self._ca = pid, T, signing_key, ca
        self.floors = floors if floors is not None else TrustFloors()
        if min_group is None:
            min_group = self.floors.min_group
        if membership is not None and membership.pid != pid:
            raise ConfigError(f"participant {pid} was handed participant {membership.pid}'s stable group")
        # Built now: it checks the model (NaN/Inf) before anything is sent, and draws nothing yet.
        self.inner = make(pid, T, model, signing_key, cert, ca, global_hash, self._rng, floors=self.floors)
        self.inner.group_round = True  # every round it takes part in is its group's (§7.3: mates' commitments)
        self.client = AssignmentClient(pid, T, signing_key, cert, ca, self._rng, cache, min_group, self.floors.draw,
                                       self.floors.federation if federation is None else federation)
        self.min_group = self.client.min_group
        self._cache = self.client._v
        self._membership = membership
        self._started = False
        self._aborted = False
        # --- DC-net round (protocol/dcnet.py): a stable group's round, run by its own state machine ---
        self._cert, self._gh = cert, global_hash
        self.dc: DCParticipant | None = None
        self.dc_class: type[DCParticipant] = DCParticipant  # a deviating member's or a game's subclass

    def _dc_handle(self, data: bytes) -> list[bytes]:
        if self.dc is None:
            inner = self.inner
            held = inner.state.nym  # the record it was handed (DC_START comes instead of a ROUND_START)
            self.dc = self.dc_class(self.pid, self.T, self._sk, self._cert, self._ca, self._gh,
                                    substream(self._rng, b"dc-participant"), self._membership.members,
                                    lambda: inner._model, floors=self.floors, min_group=self.min_group, nym=held)
        out = self.dc.handle(data)
        nym = self.dc.pseudonym
        if self.dc.params is not None and nym is not self.inner.pseudonym:
            # What it keeps for the epoch is read from the inner participant by every driver: the DC round's
            # record (the one held, or the request drawn at DC_START, with z once issued and its mates' commitments).
            self.inner.state = replace(self.inner.state, nym=nym, nym_held=False, nym_certified=nym is not None)
        return out
    # --- end DC-net ---

    @property
    def view(self):
        return self.dc.view if self.dc is not None else self.inner.view

    def provide_model(self, model: np.ndarray) -> None:
        """Hand the trained model to the group's participant (see :meth:`Participant.provide_model`)."""
        self.inner.provide_model(model)

    @property
    def params(self) -> RoundParams | None:
        return self.inner.params

    @property
    def assignment(self) -> Assignment | None:
        return self.client.assignment

    @property
    def membership(self) -> Membership | None:
        """Its stable group: the one it was given, or the one the assignment of this round formed."""
        if self._membership is None and self.client.assignment is not None:
            return Membership.of(self.client.assignment, self.pid)
        return self._membership

    def handle(self, data: bytes) -> list[bytes]:
        """Process one PS message; the replies to send."""
        if self._aborted:
            return []
        if self.dc is not None or (self._membership is not None and not self._started
                                   and msg.peek_type(data) in DC_PS_TYPES):
            return self._dc_handle(data)  # DC-net round of its stable group
        try:
            if self._started:
                if msg.peek_type(data) is MsgType.UNMASK_REQUEST:
                    self._check_online(data)
                return self.inner.handle(data)
            m = self._cache.decode(data) if msg.peek_type(data) in ASSIGNMENT_TYPES else msg.decode(data, Context())
            if m.TYPE is MsgType.ROUND_START:
                self._check_round_start(m)
                self._started = True
                return self.inner.handle(data)
            if m.TYPE not in ASSIGNMENT_TYPES:
                raise UnexpectedMessage(f"participant {self.pid} got {m.TYPE.name} before its group's ROUND_START")
            if self._membership is not None:
                # Joining a new draw would let the PS intersect the old group with the new one.
                raise WrongGroup(f"participant {self.pid} keeps stable group {self._membership.index}: it takes "
                                 "part in no new assignment")
            return [r.encode(self._sk) for r in self.client.handle(m)]
        except ProtocolError as exc:
            self.inner.view.errors.append(exc)
            self._aborted = True
            if self._started:
                # The inner participant stops too: nothing of this round is answered any more.
                self.inner.state = replace(self.inner.state, phase=PPhase.ABORTED)
            m_ = self.inner.state.inv.m if self._started else self.client.attempt
            return [msg.Refusal(self.T, m_, self.pid, type(exc).__name__, str(exc)).encode(self._sk)]

    def _check_online(self, data: bytes) -> None:
        """All or none: refuse U_m that lacks a member of the group (checked before the inner participant
        consents, so no share of this round is revealed for it)."""
        m = msg.decode(data, self.inner.ctx)
        msg.verify(m, self.inner.state.session.server_vk)
        self.membership.check_online(m.m, m.online)

    def _check_round_start(self, m: msg.RoundStart) -> None:
        if self._membership is not None:
            self._ca.verify(m.server_cert, subject=SERVER_ID, role=ROLE_SERVER)
            msg.verify(m, m.server_cert.key)
            if len(self._membership.members) < self.min_group:
                raise WrongAssignment(f"stable group {self._membership.index} has {len(self._membership.members)} "
                                      f"members, below this participant's floor {self.min_group}")
            self._membership.check_round_start(m.params, tuple(pid for pid, _ in m.roster))
            return
        a = self.client.assignment
        if self.client.phase is CState.AWAIT_OPEN and not m.params.assignment:
            # A round of all N whose roster the PS changes names senders by their presence pattern.
            raise UngroupedRound(f"ROUND_START of a round bound to no group: participant {self.pid} takes part "
                                 f"only in rounds of its stable group (floor {self.min_group})")
        if self.client.phase is not CState.ASSIGNED or a is None:
            raise UnexpectedMessage(f"ROUND_START before the group assignment finished "
                                    f"(state '{self.client.phase.value}')")
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


__all__ = ["GroupedOutput", "GroupedParticipant", "GroupedServer", "JointServer", "formed_groups"]

