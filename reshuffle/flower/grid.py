"""``ReshuffleGrid``: any Flower strategy gets every client's raw train reply, unlinked from its sender.

It wraps the Grid a ServerApp receives and delegates everything to it, except
train messages (``train`` or ``train.<action>``): for those it runs one
Re-Shuffle round (:mod:`reshuffle.protocol.server`) over the wrapped Grid, with
its offline steps before the nodes train.

1. *Claim*: each train message goes out first with only the reserved record
   (:mod:`reshuffle.flower.reserved`): round ``T``, reply length ``d`` words, the
   key mode and H(W_g^T) of the strategy's content. The node's
   :func:`~reshuffle.flower.mod.reshuffle_mod` answers only with a claim of its
   participant id, signed with that participant's key (:mod:`reshuffle.flower.keys`);
   the valid claims form the roster.
2. *Offline*: the core's model-independent steps (setup, shares, OT, reservation;
   :mod:`reshuffle.protocol.schedule`), phase by phase, as messages of the same type.
3. *Train*: the first push that needs a node's model (the upload) carries the
   strategy's content beside the core's messages: the node trains, then answers
   them. The round's remaining online steps follow; a node that does not answer
   a phase in ``phase_timeout`` (the train push: ``train_timeout`` more) is a dropout.
4. *Stable groups* (``group_size``): the first train round goes to every connected node,
   whatever the strategy sampled, and forms the anonymity groups by the commit-reveal
   assignment among the nodes that claimed; the run's federation state keeps them
   (:class:`~reshuffle.run.federation.Federation`, which the FL round holds and the
   ServerApp's checkpoint saves; :attr:`ReshuffleGrid.epochs` reads them) and every later
   round runs whole groups with no new assignment. A strategy's sampled nodes are
   widened or narrowed to whole groups: a group runs when at least half its members
   were sampled and all its members' nodes are connected (its unsampled members get
   the same train message), else none of its members is messaged. Sampled nodes in no
   group (they joined later, or left a group that stopped) wait until at least
   2·``group_size`` of them are sampled together (a node refuses a shorter candidate list:
   the draw would have no choice); those then form new groups of their own
   by a new assignment among them alone (a new epoch), in the same round as the others'
   (:class:`~reshuffle.protocol.grouped.JointServer`). A group with a member that does
   not answer before its upload delivers nothing: its members refuse to unmask.
   Each reply's group is known (:meth:`ReshuffleGrid.set_of`: its members' nodes), so
   the FL round applies the same all-or-none rule to Flower's deliveries as to the
   simulator's.
5. *Replies*: each recovered model is decoded back into a RecordDict
   (:mod:`reshuffle.flower.records`, bit-exact) and becomes
   ``Message(content, reply_to=m)`` for a message ``m`` of a surviving node,
   under a uniformly random bijection: no reply's metadata says who produced it.

The core is driven only through ``start`` / ``receive`` / ``close_phase`` /
``done`` / ``output``, so nothing here depends on its number of phases.
Polling is adaptive (``poll_interval``): Flower's own ``send_and_receive``
sleeps 3 s between pulls, which would cost 3 s per phase.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from logging import ERROR, INFO, WARNING
from typing import Iterable

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from reshuffle.crypto.ot import sample_distinct
from reshuffle.crypto.rand import OS_RANDOM
from reshuffle.crypto.signatures import Certificate
from reshuffle.errors import BelowThreshold, ConfigError, ProtocolError, ReShuffleError
from reshuffle.flower import records, reserved
from reshuffle.flower.keys import MODE_FILES, MODE_SIMULATION, server_identity, verify_claim
from reshuffle.flower.reserved import RECORD, STAGE_CLAIM, STAGE_PROTOCOL, STAGE_TRAIN
from reshuffle.protocol.driver import PS, make_ps
from reshuffle.protocol.grouped import JointServer, formed_groups
from reshuffle.protocol.groups import MIN_GROUP, Assignment, check_collusion, check_group_size
from reshuffle.protocol.params import GROUP_SIZE, RoundParams, TrustFloors, smallest_round
from reshuffle.protocol.participant import global_model_hash
from reshuffle.run.federation import Federation
from reshuffle.run.pseudonyms import EpochBook, run_base

ROUND_PARAMS = {"n", "k", "t", "c", "R_max", "group"}
NEW = -1  # a plan's part that forms new groups among participants in none
DRAW = TrustFloors().draw  # a node's default floor: an assignment lists at least DRAW·g candidates


#: The longest wait, before the first train round, for enough nodes to connect (a deployment's nodes may still be
#: connecting; a simulation's are all there): at most the phase timeout.
NODE_WAIT = 15.0

#: How many train rounds in a row may deliver nothing, while none ever delivered, before the grid ends the run.
MAX_EMPTY_ROUNDS = 3
#: The most characters of a round's failure that :class:`NothingTrained`'s line quotes.
CAUSE_CHARS = 240


class FederationTooSmall(ConfigError):
    """Fewer nodes are connected than a group (or a round) needs: refused before any message goes out."""


class GroupsCannotForm(ConfigError):
    """The nodes' own answers leave too few of them to form one stable group; no later round would differ."""


class NothingTrained(ReShuffleError):
    """``max_empty_rounds`` train rounds in a row delivered no reply, and none before them did: the run ends."""


def _cause(report: "RoundReport") -> str:
    """Why a round delivered nothing, in one line: the nodes that did not answer in time, then its failure (or
    its groups'), then its last error."""
    why = report.failed or "; ".join(sorted(set(report.groups.get("failed", {}).values()))) or "no reply"
    why += f"; {report.errors[-1]}" if report.errors else ""
    # A dropout is a node that sent an error reply or none: count the silent ones apart
    silent = {phase: n - sum(e.startswith(f"[{phase}] node ") and " failed: " in e for e in report.errors)
              for phase, n in report.dropouts.items()}
    said = ", ".join(f"{n} node(s) at {phase}" for phase, n in silent.items() if n > 0)
    why = " ".join(why.split())
    if len(why) > CAUSE_CHARS:  # one reason per group: the whole of it is in the round's warnings and report
        why = why[:CAUSE_CHARS].rsplit(" ", 1)[0] + " ..."
    return (f"{said} did not answer in time; " if said else "") + why


def too_small(connected: int, group_size: int | None) -> str | None:
    """Why ``connected`` nodes can run no round with ``group_size`` (None: one group per round), or None."""
    least = smallest_round() if group_size is None else group_size
    if connected >= least:
        return None
    what = (f"a round needs at least {least}" if group_size is None else
            f"stable anonymity groups of at least {group_size} need {group_size} (one group of fewer would "
            f"break that floor)")
    return (f"{connected} node(s) connected; {what}: run at least {least} nodes (Flower's simulation: "
            f"--federation-config \"num-supernodes={least}\" or more)"
            + ("" if group_size is None else f", or a smaller group size (at least {MIN_GROUP})"))


@dataclass
class RoundReport:
    """What one train round did; never any reply content."""

    T: int
    sent: int
    roster: int = 0
    replies: int = 0
    dropouts: dict[str, int] = field(default_factory=dict)  # phase -> nodes that did not answer it
    blamed: dict[int, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    failed: str = ""
    seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)  # "train", then the core's phase names
    protocol_bytes: int = 0  # core messages both ways
    # Pushes through the Grid (round trips): the claim push, then one per protocol step
    # (protocol/schedule.py). The train stage rides on the first online step's push; that
    # push and the ones after it are after local training (the node answers once trained).
    round_trips: int = 0
    round_trips_after_training: int = 0
    steps: list[str] = field(default_factory=list)
    # With anonymity groups: group_size, the groups' sizes, and why a group delivered nothing.
    groups: dict = field(default_factory=dict)


def _copy_with(msg: Message, content: RecordDict, ttl: float) -> Message:
    return Message(content, dst_node_id=msg.metadata.dst_node_id, message_type=msg.metadata.message_type,
                   group_id=msg.metadata.group_id, ttl=ttl)


class _Round:
    """One train round as a non-blocking state machine; :meth:`step` moves it on."""

    def __init__(self, owner: "ReshuffleGrid", train: list[Message], T: int, deadline: float,
                 plan: list[tuple[int, tuple[int, ...]]] | None = None) -> None:
        # plan: (epoch, its sampled groups) per part of a round in stable groups, (NEW, ()) for newcomers
        self.g, self.T, self.deadline, self.plan = owner, T, deadline, plan
        self.t0 = time.monotonic()
        nodes = [m.metadata.dst_node_id for m in train]
        if len(set(nodes)) != len(nodes):
            raise ConfigError("a train round sends at most one message per node")
        contents = {m.content.object_id for m in train}
        if len(contents) != 1:
            # Different content per node would let the PS tell replies apart by their lineage.
            raise ConfigError("every train message of a round must carry the same content")
        content = train[0].content
        if RECORD in content:
            raise ConfigError(f"record key {RECORD!r} is reserved for Re-Shuffle")
        self.hash = global_model_hash(content.object_id.encode())
        self.d = records.reply_words(content, owner.metrics_budget)
        self.report = RoundReport(T, len(train))
        self.replies: list[Message] | None = None
        self.run_id = owner.run.run_id
        self.content = content
        self.trained: set[int] = set()  # nodes sent the train stage
        # The claim push: the reserved record only; the strategy's content waits for the train stage.
        stage = ConfigRecord({"stage": STAGE_CLAIM, "T": T, "words": self.d, "hash": self.hash,
                              "keys": MODE_FILES if owner.key_dir else MODE_SIMULATION})
        out = [_copy_with(m, RecordDict({RECORD: stage}), max(1.0, deadline - time.time())) for m in train]
        self.claim_out = out
        self.phase_t0 = time.monotonic()
        ids = list(owner._grid.push_messages(out))
        self._trip(STAGE_CLAIM, after_training=False)
        self.ids = [i for i in ids if i]
        self.by_id = {i: m for i, m in zip(ids, out) if i}
        self.phase = STAGE_CLAIM
        self._open({i: m.metadata.dst_node_id for i, m in self.by_id.items()},
                   min(deadline, time.time() + owner.phase_timeout))
        self.server: PS | None = None

    # --- phase bookkeeping ----------------------------------------------------
    def _trip(self, step: str, after_training: bool) -> None:
        self.report.round_trips += 1
        self.report.round_trips_after_training += after_training
        self.report.steps.append(step)

    def _open(self, pending: dict[str, int], phase_deadline: float) -> None:
        self.pending, self.answers = dict(pending), {}
        self.phase_deadline = phase_deadline

    def _pull(self) -> None:
        if not self.pending:
            return
        for r in self.g._grid.pull_messages(list(self.pending)):
            node = self.pending.pop(r.metadata.reply_to_message_id, None)
            if node is None:
                continue
            if r.has_error():  # a node that fails is a dropout of the round, like one that is silent
                self.report.dropouts[self.phase] = self.report.dropouts.get(self.phase, 0) + 1
                self.report.errors.append(f"[{self.phase}] node {node} failed: {r.error.reason}")
            else:
                self.answers[node] = r

    def step(self) -> bool:
        """Pull what arrived; close the phase when all answered or its deadline passed. True when done."""
        if self.replies is not None:
            return True
        self._pull()
        while self.replies is None and (not self.pending or time.time() >= self.phase_deadline):
            self.g._progress += 1
            missing = len(self.pending)
            if missing:
                self.report.dropouts[self.phase] = self.report.dropouts.get(self.phase, 0) + missing
            self.pending = {}
            sec = self.report.phase_seconds
            sec[self.phase] = sec.get(self.phase, 0.0) + time.monotonic() - self.phase_t0
            self.phase_t0 = time.monotonic()  # the next phase starts with its push
            try:
                self._close()
            except GroupsCannotForm as exc:
                self._fail(str(exc))
                raise  # the run cannot go on: its ServerApp fails with this one line
            except (BelowThreshold, ConfigError) as exc:
                self._fail(str(exc))
            if self.replies is None:
                self._pull()  # a fast transport may have answered already
        return self.replies is not None

    def _fail(self, why: str) -> None:
        self.report.failed = why
        self._adopt()
        if self.server is not None:
            self._report_groups(self.server.failed_output())  # a round in groups: every group failed
            self.report.errors += [str(e) for e in self.server.errors]
        self._finish([])

    def _report_groups(self, out) -> None:
        if out.groups:
            self.report.groups = {"group_size": self.g.group_size, "sizes": [len(m) for m in out.groups],
                                  "failed": {str(j): why for j, why in out.failed.items()}}
            if self.plan is not None:
                self.report.groups["sampled"] = [[e, j] for e, sample in self.plan if e != NEW for j in sample]

    def _adopt(self) -> None:
        """Keep the groups a new assignment of this round formed, as a new epoch (the nodes keep theirs once it
        completed, whether or not the round then delivered), and which node each member answered from."""
        for a in formed_groups(self.server):
            self.g.federation.adopt(a, self.node_of)

    def _finish(self, replies: list[Message]) -> None:
        self.replies = replies
        self.report.replies = len(replies)
        self.report.seconds = time.monotonic() - self.t0
        self.g._record(self.report)

    # --- phases ---------------------------------------------------------------
    def _close(self) -> None:
        if self.server is None:
            outbox = self._start_protocol()
        else:
            for node, r in sorted(self.answers.items()):
                try:
                    data = reserved.data_list(reserved.record_of(r.content))
                except ProtocolError:
                    data = []  # malformed: as if the node had not answered
                for item in data:
                    self.report.protocol_bytes += len(item)
                    self.server.receive(self.pid_of[node], item)
            outbox = self.server.close_phase()
        if self.server.done:
            self._deliver()
            return
        per_node: dict[int, list[bytes]] = {}
        for pid, data in outbox:
            per_node.setdefault(self.node_of[pid], []).append(data)
            self.report.protocol_bytes += len(data)
        msgs, train = {}, False
        for node, items in sorted(per_node.items()):
            m, trains = self._message(node, items)
            msgs[node], train = m, train or trains
        self.phase = STAGE_TRAIN if train else self.server.stage_name
        ids = list(self.g._grid.push_messages(list(msgs.values())))
        if msgs:
            self._trip(self.server.step.name, after_training=bool(self.trained))
        pending = {i: node for i, node in zip(ids, msgs) if i}
        wait = self.g.train_timeout + self.g.phase_timeout if train else self.g.phase_timeout
        self._open(pending, min(self.deadline, time.time() + wait))

    def _message(self, node: int, items: list[bytes]) -> tuple[Message, bool]:
        """The push to ``node``: the core's messages, with the strategy's content and the train stage
        on the first one that needs this node's model. True when it carries the train stage."""
        ttl = max(1.0, self.deadline - time.time())
        if node in self.trained or not self.server.needs_model(self.pid_of[node]):
            rec = ConfigRecord({"stage": STAGE_PROTOCOL, "T": self.T, "data": items})
            return _copy_with(self.claim_by_node[node], RecordDict({RECORD: rec}), ttl), False
        self.trained.add(node)
        c = RecordDict(dict(self.content.items()))
        c[RECORD] = ConfigRecord({"stage": STAGE_TRAIN, "T": self.T, "words": self.d, "data": items})
        return _copy_with(self.claim_by_node[node], c, ttl), True


    def _start_protocol(self) -> list[tuple[int, bytes]]:
        g = self.g
        roster: dict[int, Certificate] = {}
        self.node_of: dict[int, int] = {}
        for node, r in sorted(self.answers.items()):
            try:
                rec = reserved.record_of(r.content)
                pid = reserved.uint(rec, "pid", 1 << 32)
                cert = Certificate.decode(reserved.field(rec, "cert", bytes))  # type: ignore[arg-type]
                verify_claim(g._ca, pid, cert, reserved.field(rec, "claim", bytes),  # type: ignore[arg-type]
                             self.run_id, self.T, node)
            except ProtocolError as exc:
                self.report.errors.append(f"[claim] node {node}: {type(exc).__name__}: {exc}")
                continue
            if pid in roster:
                self.report.errors.append(f"[claim] node {node}: participant {pid} already claimed")
                continue
            roster[pid], self.node_of[pid] = cert, node
        self.pid_of = {node: pid for pid, node in self.node_of.items()}
        self.claim_by_node = {m.metadata.dst_node_id: m for m in self.claim_out}
        self.report.roster = len(roster)
        if self.plan is None and g.group_size is not None and len(roster) < g.group_size:
            self._too_few_to_group(len(roster))
        if len(roster) < smallest_round():
            raise BelowThreshold(f"{len(roster)} node(s) answered the claim message with a valid claim; a round "
                                 f"needs at least {smallest_round()}")
        log(INFO, "[reshuffle] round %d: roster of %d participants, protocol starts", self.T, len(roster))
        if self.plan is None:
            self.server = make_ps(self.T, roster, g._sk, g._cert, g._ca, self.hash, d=self.d,
                                  overrides={"payload": "words", **g.round_params}, group_size=g.group_size,
                                  collusion=g.group_collusion, pseudonyms=g.pseudonym_keys.issuer(self.T))
        else:
            self.server = self._parts(roster)
        return self.server.start()

    def _too_few_to_group(self, claimed: int) -> None:
        """The round that forms the stable groups has fewer valid claims than a group's size: it fails, naming
        why. When every node answered (those left out refused, or sent an invalid claim), the same nodes
        would answer the same next round: GroupsCannotForm ends the run."""
        g = self.g.group_size
        refusals = [e.split("] ", 1)[1] for e in self.report.errors if e.startswith(f"[{STAGE_CLAIM}] node ")]
        silent = self.report.dropouts.get(STAGE_CLAIM, 0) - sum(" failed: " in r for r in refusals)
        why = (f"stable groups cannot form: {claimed} of {self.report.sent} nodes claimed a place with a valid "
               f"claim; groups of at least {g} need {g}")
        if silent > 0:
            raise BelowThreshold(f"{why} ({silent} did not answer in time"
                                 + (f"; {'; '.join(refusals)})" if refusals else ")"))
        raise GroupsCannotForm(f"{why}: {'; '.join(refusals)}" if refusals else why)

    def _parts(self, roster: dict[int, Certificate]) -> PS:
        """One grouped PS per epoch with sampled groups whose members all claimed, and one new assignment
        among the claimed participants in no group (if there are at least the nodes' draw floor,
        ``DRAW``·``group_size``)."""
        g = self.g
        formation_of = {pid: e for e, a in enumerate(g.epochs) for grp in a.groups for pid in grp}
        kw = {"d": self.d, "overrides": {"payload": "words", **g.round_params}, "collusion": g.group_collusion,
              "pseudonyms": g.pseudonym_keys.issuer(self.T)}  # one epoch key for every part of the round
        parts = []
        for e, sample in self.plan:
            if e == NEW:
                new = {pid: c for pid, c in roster.items() if pid not in formation_of}
                if len(new) < DRAW * g.group_size:
                    self.report.errors.append(f"[claim] {len(new)} participant(s) in no group claimed; a new draw "
                                              f"needs {DRAW * g.group_size}: they wait")
                    continue
                parts.append(make_ps(self.T, new, g._sk, g._cert, g._ca, self.hash, group_size=g.group_size, **kw))
                continue
            groups = g.epochs[e].groups
            whole = tuple(j for j in sample if all(pid in roster for pid in groups[j]))
            for j in sorted(set(sample) - set(whole)):
                absent = [pid for pid in groups[j] if pid not in roster]
                self.report.errors.append(f"[claim] group {j} of epoch {e}: member(s) {absent} did not claim; "
                                          "it delivers nothing")
            if whole:
                members = {pid: roster[pid] for j in whole for pid in groups[j]}
                parts.append(make_ps(self.T, members, g._sk, g._cert, g._ca, self.hash, stable=g.epochs[e],
                                     sample=whole, **kw))
        if not parts:
            raise BelowThreshold("no sampled group had all its members claim, and no new group could form")
        return parts[0] if len(parts) == 1 else JointServer(parts)

    def _deliver(self) -> None:
        out = self.server.output
        self._adopt()
        self._report_groups(out)
        self.report.blamed = dict(out.blamed)
        self.report.errors += [str(e) for e in out.errors]
        contents, names, sets = [], [], []
        nyms = list(out.pseudonyms) if len(out.pseudonyms) == len(out.models) else [None] * len(out.models)
        for words, nym, members in zip(out.models, nyms, self._row_sets(out)):
            try:
                contents.append(records.from_words(words))
                names.append(nym)
                sets.append(members)
            except ProtocolError as exc:  # an anonymous row that does not decode is dropped
                self.report.errors.append(f"[deliver] a recovered reply does not decode: {exc}")
        final = out.online[max(out.online)] if out.online else ()
        # Replies answer the claim messages: their ids are the ones push_messages returned.
        survivors = [self.claim_by_node[self.node_of[pid]] for pid in final]
        if len(contents) > len(survivors):
            self.report.errors.append(f"[deliver] {len(contents)} replies for {len(survivors)} survivors")
            contents = contents[: len(survivors)]
        # A uniformly random injection of the replies into the survivors' messages.
        perm = sample_distinct(len(survivors), len(survivors), OS_RANDOM) if survivors else []
        replies = [Message(c, reply_to=survivors[j]) for c, j in zip(contents, perm)]
        # Each reply's epoch pseudonym, the row's own (§7.3): it names no node, only a row's history.
        self.g._pseudonyms = [(m, n) for m, n in zip(replies, names) if n is not None]
        self.g._sets = [(m, s) for m, s in zip(replies, sets) if s is not None]
        self._finish(replies)

    def _row_sets(self, out) -> list[tuple[int, ...] | None]:
        """Each recovered row's stable group, as its members' nodes (the PS knows which group's round a row came
        from); None for every row where the round ran in no groups."""
        outs = getattr(out, "group_outputs", None)
        if not out.groups or outs is None:
            return [None] * len(out.models)
        nodes = self.g.federation.nodes
        col: list[tuple[int, ...] | None] = []
        for j in sorted(out.offsets):
            members = tuple(sorted(nodes.get(pid, self.node_of.get(pid, -1)) for pid in out.groups[j]))
            col += [members] * len(outs[j].models)
        if len(col) != len(out.models):
            self.report.errors.append(f"[deliver] {len(col)} rows placed in groups for {len(out.models)} models")
            return [None] * len(out.models)
        return col


class ReshuffleGrid(Grid):
    """A Grid whose train replies arrive as Re-Shuffle delivers them: raw, bit-exact and unlinked.

    Parameters
    ----------
    grid : the Grid the ServerApp was given (deployment or simulation).
    key_dir : directory of ``reshuffle ca`` files (the PS's ``server.key``/``.cert`` and
        ``ca.pub``); ``None`` for simulation keys derived from the run id.
    phase_timeout : seconds a protocol phase waits for its answers.
    train_timeout : seconds local training may take: the train push waits this plus ``phase_timeout``;
        default half the round's timeout.
    metrics_budget : bytes each reply may use beyond the sent arrays' size (MetricRecords, record names).
    poll_interval : longest pause between two pulls (pauses start at 10 ms and grow).
    round_timeout : the round's timeout for :meth:`push_messages` (``send_and_receive`` takes its own).
    group_size : stable anonymity groups of at least this size (default 5; docs/protocol.md, "Anonymity
        groups"): the first round's nodes are split once by a commit-reveal, the groups are kept, sampled
        whole and deliver all their members' models or none. ``None`` runs one round among all the
        sampled nodes, whose changing rosters name senders across rounds (docs/security/linking.md).
    group_collusion : fraction of each group assumed to collude with the PS (c_j = max(1, ⌊f·N_j⌋);
        default 0.2); with ``group_size`` only.
    groups : the stable groups of an earlier run (:meth:`group_state`'s dict, from a checkpoint): they are
        kept, and no new assignment runs but among nodes in none. ``group_size`` is then theirs.
    federation : the run's cross-round state (:class:`~reshuffle.run.federation.Federation`), which keeps the
        groups and the epoch pseudonyms; a ServerApp passes its FL round's, so that its checkpoint holds them
        (default: the grid's own, one epoch numbered above every earlier run's).
    max_empty_rounds : when this many train rounds in a row delivered no reply and none before them did (nodes
        that never answer, a federation that cannot run a round), the train round's pull raises
        :class:`NothingTrained` naming the last round's cause, so the run fails instead of ending having
        trained nothing (default 3; ``None``: never). Once a round delivered, empty rounds never end the run.
    **round_params : RoundParams overrides ``n``, ``k``, ``t``, ``c``, ``R_max``, ``group`` (``c`` and ``t`` at
        least what the nodes' own floors demand, or they refuse the round).

    Attributes
    ----------
    rounds : a :class:`RoundReport` per train round: dropouts per phase, ``blamed``, errors.
    """

    def __init__(
        self,
        grid: Grid,
        *,
        key_dir: str | None = None,
        phase_timeout: float = 60.0,
        train_timeout: float | None = None,
        metrics_budget: int = records.DEFAULT_METRICS_BUDGET,
        poll_interval: float = 0.2,
        round_timeout: float = 3600.0,
        group_size: int | None = GROUP_SIZE,
        group_collusion: float | None = None,
        groups: dict | None = None,
        max_empty_rounds: int | None = MAX_EMPTY_ROUNDS,
        federation: Federation | None = None,
        **round_params,
    ) -> None:
        if not isinstance(grid, Grid):
            raise ConfigError(f"ReshuffleGrid wraps a flwr Grid, got {type(grid).__name__}")
        check_collusion(group_collusion)
        if max_empty_rounds is not None and (not isinstance(max_empty_rounds, int) or isinstance(max_empty_rounds, bool)
                                             or max_empty_rounds < 1):
            raise ConfigError(f"max_empty_rounds must be a positive int or None, got {max_empty_rounds!r}")
        restored = groups is not None or (federation is not None and bool(federation.assignments))
        if group_collusion is not None and group_size is None and not restored:
            raise ConfigError("group_collusion needs group_size (or stable groups)")
        if group_size is not None or restored:
            if group_size is not None:
                check_group_size(group_size)
            fixed = set(round_params) & {"n", "k", "t", "c"}
            if fixed:
                raise ConfigError(f"{sorted(fixed)} follow each group's size and cannot be set with group_size")
        unknown = set(round_params) - ROUND_PARAMS
        if unknown:
            raise ConfigError(f"unknown round parameter(s) {sorted(unknown)}; allowed: {sorted(ROUND_PARAMS)}")
        for name, v in (("phase_timeout", phase_timeout), ("poll_interval", poll_interval),
                        ("round_timeout", round_timeout), ("train_timeout", train_timeout)):
            if name == "train_timeout" and v is None:
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"{name} must be a positive number, got {v!r}")
        # Reject bad overrides now (c against the federation's size at each round: it must leave two honest).
        RoundParams.default(smallest_round(), 1, payload="words", **{k: v for k, v in round_params.items() if k != "c"})
        records.reply_words(RecordDict(), metrics_budget)
        self._grid = grid
        self.key_dir = key_dir
        self.phase_timeout, self.poll_interval = float(phase_timeout), float(poll_interval)
        self._train_timeout, self.round_timeout = train_timeout, float(round_timeout)
        self.metrics_budget, self.round_params = metrics_budget, dict(round_params)
        self.group_collusion = group_collusion
        self.max_empty_rounds = max_empty_rounds
        if federation is None:
            # One epoch key for its life, numbered above every earlier run's (its nodes keep their pseudonyms)
            federation = Federation(book=EpochBook(self.round_params.get("group", "ristretto255"), base=run_base()))
        self.federation = federation
        if not federation.assignments:
            federation.group_size = group_size
        if groups is not None:
            self.restore_groups(groups)
        self.rounds: list[RoundReport] = []
        self._T = 0
        self._active: dict[str, _Round] = {}
        self._keys: tuple | None = None
        self._progress = 0  # phases closed so far: a pull that moved a round on is progress
        self._pseudonyms: list[tuple[Message, bytes]] = []  # the last round's replies and their pseudonyms
        self._sets: list[tuple[Message, tuple[int, ...]]] = []  # the last round's replies and their groups

    # --- the federation's state, by the names the round reads -------------------------------
    @property
    def epochs(self) -> list[Assignment]:
        """The stable groups, one Assignment per formation (the first train round's, then each newcomers', or
        restored): the federation's."""
        return self.federation.assignments

    @property
    def group_nodes(self) -> dict[int, int]:
        """The node each group member (participant id) answered from: the federation's."""
        return self.federation.nodes

    @property
    def group_size(self) -> int | None:
        return self.federation.group_size

    @group_size.setter
    def group_size(self, k: int | None) -> None:
        self.federation.group_size = k

    @property
    def pseudonym_keys(self) -> EpochBook:
        """The PS's epoch keys: the federation's pseudonym book."""
        return self.federation.book

    def set_of(self, reply: Message) -> tuple[int, ...] | None:
        """The stable group of one of the last train round's replies, as its members' nodes (None: no groups).

        The PS knows it (each group runs a round of its own); it says which group a reply came from, not which
        member sent it."""
        return next((s for m, s in self._sets if m is reply), None)

    def pseudonym_of(self, reply: Message) -> bytes | None:
        """The epoch pseudonym of one of the last train round's replies (the PS checked it in its row), or None.

        A pseudonymous rule keeps its history per pseudonym (docs/fl.md, "Rules that remember"); the
        pseudonym is the row's, issued blind, so it says which history a reply continues, not who sent it.
        """
        return next((n for m, n in self._pseudonyms if m is reply), None)

    # --- delegation -------------------------------------------------------------
    def set_run(self, run) -> None:
        self._grid.set_run(run)

    @property
    def run(self):
        return self._grid.run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return self._grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self._grid.get_node_ids()

    def get_nodes(self):
        return self._grid.get_nodes()

    # --- round numbers --------------------------------------------------------------
    @property
    def next_round(self) -> int:
        """The round number the next train round will carry (1, 2, ... unless :meth:`skip_to` moved it)."""
        return self._T + 1

    def skip_to(self, T: int) -> None:
        """Number the next train round T, above every round number this grid used.

        A resumed ServerApp starts its grid above the last round it started before it stopped:
        nodes take part in each round number once, and a round is never run twice.
        """
        if not isinstance(T, int) or isinstance(T, bool) or T < self.next_round:
            raise ConfigError(f"skip_to({T!r}): round numbers only go up; the next round is {self.next_round}")
        self._T = T - 1

    # --- stable groups ----------------------------------------------------------------
    def group_state(self) -> dict | None:
        """The stable groups as plain data for a checkpoint (``groups=`` restores them); None before any."""
        return self.federation.group_state()

    def restore_groups(self, state: dict) -> None:
        """Keep the stable groups of ``state`` (:meth:`group_state`); ConfigError if it is malformed."""
        self.federation.restore_groups(state)

    def _everyone(self, train: list[Message]) -> list[Message]:
        """The round that forms the groups goes to every connected node, whatever the strategy sampled: groups
        formed among a sample would leave the others to wait as newcomers."""
        sent = {m.metadata.dst_node_id for m in train}
        proto = train[0]
        return train + [Message(proto.content, dst_node_id=n, message_type=proto.metadata.message_type,
                                group_id=proto.metadata.group_id)
                        for n in sorted(set(self._grid.get_node_ids()) - sent)]

    def _plan(self, train: list[Message]) -> tuple[list[Message], list[tuple[int, tuple[int, ...]]]]:
        """The strategy's train messages widened or narrowed to whole stable groups, plus the newcomers':
        (messages, plan), the plan's parts as :class:`_Round` takes them.

        A group runs when at least half its members' nodes were sampled and every member's node is
        connected; its unsampled members get the same message. Any other group gets nothing: its members'
        models would be named by a roster that changes. Sampled nodes in no group are sent the round only
        when at least ``DRAW``·``group_size`` of them were sampled: they then form new groups among themselves.
        """
        by_node = {m.metadata.dst_node_id: m for m in train}
        connected = set(self._grid.get_node_ids())
        known = set(self.group_nodes.values())
        proto = train[0]
        out, plan = [], []
        for e, a in enumerate(self.epochs):
            sample = []
            for j, members in enumerate(a.groups):
                nodes = [self.group_nodes.get(pid) for pid in members]
                picked = sum(n in by_node for n in nodes)
                if 2 * picked < len(members) or any(n not in connected for n in nodes):
                    continue
                sample.append(j)
                out += [by_node[n] if n in by_node else
                        Message(proto.content, dst_node_id=n, message_type=proto.metadata.message_type,
                                group_id=proto.metadata.group_id) for n in nodes]
            if sample:
                plan.append((e, tuple(sample)))
        newcomers = [m for m in train if m.metadata.dst_node_id not in known]
        if len(newcomers) >= DRAW * self.group_size:
            out += newcomers
            plan.append((NEW, ()))
        return out, plan

    def _enough_nodes(self) -> None:
        """Before the first train round: wait (at most the phase timeout and :data:`NODE_WAIT`) until enough
        nodes are connected for one group (or one round); FederationTooSmall, before any message, if not.
        Later rounds with too few nodes fail and the run goes on (nodes come back)."""
        deadline = time.monotonic() + min(self.phase_timeout, NODE_WAIT)
        while (why := too_small(len(list(self._grid.get_node_ids())), self.group_size)) is not None:
            if time.monotonic() >= deadline:
                log(ERROR, "[reshuffle] %s", why)
                raise FederationTooSmall(why)
            time.sleep(0.5)

    # --- keys and reports -----------------------------------------------------------
    @property
    def train_timeout(self) -> float:
        return self._train_timeout if self._train_timeout is not None else self._round_budget / 2

    def _load_keys(self) -> None:
        if self._keys is None:
            self._keys = server_identity(self.key_dir, self.run.run_id)
        self._sk, self._cert, self._ca = self._keys

    def _record(self, report: RoundReport) -> None:
        self.rounds.append(report)
        drop = ", ".join(f"{k}: {v}" for k, v in report.dropouts.items()) or "none"
        log(INFO, "[reshuffle] round %d: %d sent, %d in roster, %d replies, dropouts %s, blamed %s (%.1f s)",
            report.T, report.sent, report.roster, report.replies, drop, report.blamed or "none", report.seconds)
        if report.failed:
            log(WARNING, "[reshuffle] round %d failed: %s", report.T, report.failed)
        for e in report.errors:
            log(WARNING, "[reshuffle] round %d: %s", report.T, e)

    def _check_trained(self) -> None:
        """NothingTrained when the last ``max_empty_rounds`` train rounds, and every one before them, delivered
        nothing."""
        n = len(self.rounds)
        if self.max_empty_rounds is None or n < self.max_empty_rounds or any(r.replies for r in self.rounds):
            return
        last = self.rounds[-1]
        why = f"no train round delivered a reply ({n} round(s) in a row); round {last.T}: {_cause(last)}"
        log(ERROR, "[reshuffle] %s", why)
        raise NothingTrained(why)

    # --- messages -----------------------------------------------------------------
    def _push(self, messages: Iterable[Message], timeout: float) -> list[str]:
        msgs = list(messages)
        train = [m for m in msgs if reserved.is_train(m.metadata.message_type)]
        other = [m for m in msgs if not reserved.is_train(m.metadata.message_type)]
        ids = [i for i in self._grid.push_messages(other) if i] if other else []
        if train:
            self._load_keys()
            self._T += 1
            self._round_budget = timeout
            plan = None
            if not self.epochs and not self.rounds:
                self._enough_nodes()
            if self.group_size is not None and not self.epochs:
                train = self._everyone(train)
            elif self.epochs:
                train, plan = self._plan(train)
                if not train:
                    self._record(RoundReport(self._T, 0, failed="no whole stable group was sampled with all its "
                                                                 "members connected, and too few nodes in no group "
                                                                 "to form one"))
                    self._check_trained()
                    return ids
            rnd = _Round(self, train, self._T, time.time() + timeout, plan)
            for i in rnd.ids:
                self._active[i] = rnd
            ids += rnd.ids
        return ids

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Push messages; train messages start a Re-Shuffle round, which :meth:`pull_messages` moves on."""
        return self._push(messages, self.round_timeout)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Replies to ``message_ids``; a train round's replies all arrive together when it ends."""
        ids = list(message_ids)
        mine = [i for i in ids if i in self._active]
        other = [i for i in ids if i not in self._active]
        out = list(self._grid.pull_messages(other)) if other else []
        for rnd in {id(self._active[i]): self._active[i] for i in mine}.values():
            if rnd.step():
                wanted = set(mine)
                out += [r for r in rnd.replies if r.metadata.reply_to_message_id in wanted]
                for i in rnd.ids:
                    if i in wanted:
                        self._active.pop(i, None)
                if not rnd.replies:
                    self._check_trained()
        return out

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push, then pull until every message is answered or ``timeout`` (the whole round) has passed."""
        budget = self.round_timeout if timeout is None else float(timeout)
        pending = set(self._push(messages, budget))
        train_ids = {i for i in pending if i in self._active}
        end = time.time() + budget
        out: list[Message] = []
        pause = 0.01
        while pending:
            before = self._progress
            got = list(self.pull_messages(list(pending)))
            out += got
            pending -= {r.metadata.reply_to_message_id for r in got}
            pending -= {i for i in train_ids if i not in self._active}  # its round has ended
            if not pending or time.time() >= end:
                break
            pause = 0.01 if got or self._progress != before else min(pause * 1.5, self.poll_interval)
            time.sleep(pause)
        for i in pending & train_ids:
            self._active.pop(i, None)
        return out
