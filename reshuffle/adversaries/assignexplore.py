"""An explorer of PS schedules for the group assignment and the start of the epoch's first round.

Whether groups exist, whom the draw lists and how often it is drawn are the PS's choices
(docs/protocol.md, "Anonymity groups"). This module plays a PS that makes them over one small
federation of real :class:`~reshuffle.protocol.grouped.GroupedParticipant` members (N = 9,
groups of 4 and one colluder by default: a list of 2g = 8 or more is taken, so one redraw
is too) and searches every order of its moves, each built from what it holds (its key, the
roster's certificates, every message the members sent it):

- GROUP_OPEN of attempt 1 for each group size it may announce (g, and g − 1 where the protocol
  allows it) and each candidate list: the whole federation, exactly g (the target, the
  colluders and honest members: the draw is then a no-op), and 2g − 1 padded with the colluders;
- GROUP_COMMITS of the commitments it holds: all of them, or all but one honest member's, and
  the two at once (the whole list to half the members, the shorter one to the rest: a PS that
  shows members different lists); with ``split``, each also to each member alone;
- GROUP_CERT of the acknowledgements on one list, once they reach the threshold;
- GROUP_REVEALS of every listed nonce, and the same with one nonce changed;
- a redraw (GROUP_OPEN of the next attempt) once it holds the reveals: without the last honest
  member, without the colluder, or without one member and with an unlisted one added;
- ROUND_START of a round bound to no group (all N), and of each group a member computed;
- replays of every message it sent, to every member that has not had it.

A delivery a member refuses is not made. The search is a depth-first walk over distinct
states (what every member received), as in :mod:`reshuffle.adversaries.explorer`.

**Checks, at every state** (the PS may stop anywhere), against ``required``, the default
floors at this scale, whatever floors the members under test hold:

1. *No group below the floor*: no member holds an assignment whose announced g or whose own
   group is below the required group floor.
2. *No draw the PS chose*: no member holds an assignment drawn from fewer candidates than the
   required candidate floor (2g, or the whole federation where that is smaller): with fewer,
   the list the PS chose is the target's group.
3. *One partition per draw*: the members holding an assignment of one attempt computed the same
   one (a PS that redraws may leave members of an earlier attempt with its partition: that is the
   refusal bias, at most ``MAX_ATTEMPTS`` draws, each uniform).
4. *No round without a group*: no member accepts a ROUND_START unless it binds the group the
   member computed (a round of all N, or of a roster the PS picks, names senders by their
   presence across rounds).
"""

from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import dataclass, field, replace

import numpy as np

from reshuffle.adversaries.search import deliver_each, depth_first
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.signatures import SERVER_ID, CertificateAuthority
from reshuffle.errors import ConfigError
from reshuffle.protocol import groups as gr
from reshuffle.protocol import messages as msg
from reshuffle.protocol import pseudonym
from reshuffle.protocol.assignment import CState
from reshuffle.protocol.grouped import GroupedParticipant
from reshuffle.protocol.groups import (
    CheckCache,
    GroupCert,
    GroupCommits,
    GroupOpen,
    GroupReveals,
)
from reshuffle.protocol.messages import MsgType
from reshuffle.protocol.params import RoundParams, TrustFloors
from reshuffle.protocol.participant import global_model_hash
from reshuffle.protocol.phases import PPhase

T = 1


@dataclass(frozen=True)
class AssignExploreConfig:
    """The federation explored and the search's bounds.

    ``floors``: the members' own floors (weaken them to see the checks fire); ``required``: the floors
    the checks hold every member to (by default the project's defaults, with a group floor of ``g``
    at this small scale). ``colluders`` follow the protocol and tell the PS everything.
    """

    N: int = 9
    g: int = 4
    colluders: tuple[int, ...] = (0,)
    floors: TrustFloors = TrustFloors(group=4)
    required: TrustFloors = TrustFloors(group=4)
    depth: int = 14
    budget: int = 3000
    split: bool = False
    replays: bool = False
    seed: int = 1

    def check(self) -> "AssignExploreConfig":
        if not 2 * gr.MIN_GROUP <= self.N <= 12:
            raise ConfigError(f"the assignment explorer plays federations of {2 * gr.MIN_GROUP} to 12, got N={self.N}")
        gr.check_group_size(self.g)
        if 2 * self.g > self.N:
            raise ConfigError(f"N={self.N} holds fewer than two groups of {self.g}: every list would be one group")
        if not self.colluders or any(not 0 <= i < self.N for i in self.colluders) or len(self.colluders) >= self.g:
            raise ConfigError(f"colluders {self.colluders}: one to g − 1 participant ids below N")
        if self.depth < 1 or self.budget < 1:
            raise ConfigError(f"depth and budget must be >= 1, got {self.depth} and {self.budget}")
        return self


@dataclass
class AssignExploreReport:
    states: int = 0
    schedules: int = 0
    max_depth: int = 0
    complete: bool = True
    assigned: int = 0  # states in which every honest member holds one partition
    rounds_started: int = 0  # states in which some member accepted its group's ROUND_START
    seconds: float = 0.0
    kinds: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _World:
    parts: dict  # pid -> GroupedParticipant
    inbox: dict  # pid -> hash chain of what it accepted
    got: dict  # pid -> digests it accepted
    sent: tuple  # (pid, bytes) of every delivery
    opens: dict  # pid -> the GroupOpen it accepted last
    commits: dict  # attempt -> {pid: (commitment, signature)}
    lists: dict  # pid -> the GroupCommits it acknowledged
    acks: dict  # (attempt, list bytes) -> {pid: signature}
    reveals: dict  # attempt -> {pid: nonce}
    started: dict  # pid -> the roster of the ROUND_START it accepted
    path: tuple = ()

    def key(self) -> bytes:
        h = hashlib.sha256()
        for pid in sorted(self.inbox):
            h.update(self.inbox[pid])
        return h.digest()

    def branch(self) -> "_World":
        return replace(self, parts=dict(self.parts), inbox=dict(self.inbox), got=dict(self.got), opens=dict(self.opens),
                       commits={a: dict(c) for a, c in self.commits.items()}, lists=dict(self.lists),
                       acks={k: dict(v) for k, v in self.acks.items()},
                       reveals={a: dict(r) for a, r in self.reveals.items()}, started=dict(self.started))


def _fork(p: GroupedParticipant) -> GroupedParticipant:
    """An independent copy of a grouped member (its assignment state is a value; its randomness is copied)."""
    out = copy.copy(p)
    out._rng = p._rng.copy()
    out.client = copy.copy(p.client)
    out.client._rng = out._rng
    out.inner = p.inner.fork()
    return out


class AssignExplorer:
    """Searches the PS's schedules over one assignment and the ROUND_START after it (see the module docstring)."""

    def __init__(self, cfg: AssignExploreConfig = AssignExploreConfig(),
                 member_cls: type[GroupedParticipant] = GroupedParticipant) -> None:
        from reshuffle.harness.api import identities

        self.cfg = cfg.check()
        N = cfg.N
        ident = identities(N, cfg.seed)
        self.sk, self.cert, self.roster = ident.ps_key, ident.ps_cert, ident.roster
        ca = CertificateAuthority.verifier(ident.ca.verify_key)
        self.cache = CheckCache()
        self.gh = global_model_hash(b"explore")
        rng = SeededRandom(cfg.seed, b"assign-explore/ps")
        g = RoundParams.default(N, 2).group_obj()
        self.cred_key = g.base_mul(g.random_scalar(rng))
        self.nyms = pseudonym.EpochIssuer("ristretto255", T, g.random_scalar(rng))
        data = np.random.default_rng(cfg.seed)  # model values only
        self.parts = {i: member_cls(i, T, data.normal(size=2).astype(np.float32), ident.keys[i], ident.roster[i], ca,
                                    self.gh, SeededRandom(ident.participant_rng[i].bytes(32), b"member"),
                                    cache=self.cache, floors=cfg.floors) for i in range(N)}
        self.honest = [i for i in range(N) if i not in cfg.colluders]
        self.target = self.honest[0]
        self._cache: dict = {}
        self._signed: dict = {}
        self._flagged: set = set()
        self._list_of: dict = {}  # every list some member acknowledged, by its signed statement
        self.report = AssignExploreReport()

    def sign(self, m: msg.Message) -> bytes:
        body = m.header() + m.body()
        if body not in self._signed:
            self._signed[body] = m.encode(self.sk)
        return self._signed[body]

    # -- delivering -- #
    def _deliver(self, w: _World, pid: int, data: bytes):
        key = (pid, w.inbox[pid], hashlib.sha256(data).digest())
        if key not in self._cache:
            p = _fork(w.parts[pid])
            try:
                replies = p.handle(data)
            except Exception as exc:  # a member refuses bad input with a ProtocolError, never crashes
                self._violate("refuses, never crashes", pid, f"member {pid} raised {type(exc).__name__}: {exc}", w)
                self._cache[key] = None
                return None
            refused = p._aborted or p.inner.phase is PPhase.ABORTED
            self._cache[key] = None if refused else (p, replies)
        hit = self._cache[key]
        return None if hit is None else (_fork(hit[0]), hit[1])

    def _apply(self, w: _World, name: str, deliveries) -> _World | None:
        out = w.branch()
        if not deliver_each(out, deliveries, self._deliver,
                            lambda pid, data, replies: self._absorb(out, pid, data, replies)):
            return None
        out.path = w.path + (name,)
        return out

    def _absorb(self, w: _World, pid: int, data: bytes, replies) -> None:
        t = msg.peek_type(data)
        if t is MsgType.GROUP_OPEN:
            w.opens[pid] = self.cache.decode(data)
        elif t is MsgType.GROUP_COMMITS:
            w.lists[pid] = self.cache.decode(data)
            self._list_of[gr.signed_statement(w.lists[pid])] = w.lists[pid]
        elif t is MsgType.ROUND_START:
            w.started[pid] = tuple(i for i, _ in msg.decode(data, msg.Context()).roster)
        for raw in replies:
            if msg.peek_type(raw) not in gr.ASSIGNMENT_TYPES:
                continue
            m = self.cache.decode(raw)
            if m.TYPE is MsgType.GROUP_COMMIT:
                w.commits.setdefault(m.m, {})[pid] = (m.commitment, m._signature)
            elif m.TYPE is MsgType.GROUP_ACK:
                w.acks.setdefault((m.m, gr.signed_statement(w.lists[pid])), {})[pid] = m.signature
            elif m.TYPE is MsgType.GROUP_REVEAL:
                w.reveals.setdefault(m.m, {})[pid] = m.nonce

    def _violate(self, check: str, pid: int | None, detail: str, w: _World) -> None:
        """Record the first schedule that breaks ``check`` for ``pid``."""
        if (check, pid) not in self._flagged:
            self._flagged.add((check, pid))
            self.report.violations.append(f"{check}: {detail}\n  schedule: {' → '.join(w.path)}")

    # -- the PS's moves -- #
    def _to(self, name: str, deliveries, split: bool = False) -> list:
        out = [(name, deliveries)]
        if split and self.cfg.split and len(deliveries) > 1:
            out += [(f"{name} to {pid}", [(pid, d)]) for pid, d in deliveries]
        return out

    def _open(self, a: int, g: int, listed) -> bytes:
        return self.sign(GroupOpen(T, a, SERVER_ID, g, self.cert, tuple((i, self.roster[i]) for i in sorted(listed))))

    def _lists(self, g: int) -> list[tuple[str, list[int]]]:
        N, col = self.cfg.N, list(self.cfg.colluders)
        first = [self.target, *col, *(i for i in self.honest if i != self.target)]
        # The narrowest first: the depth-first search then meets the PS's own choice of a group first.
        out = [("exactly g", sorted(first[:g]))]
        if 2 * g - 1 < N:
            out.append(("2g − 1 padded", sorted(first[:2 * g - 1])))
        return out + [("all", list(range(N)))]

    def moves(self, w: _World) -> list:
        out = []
        if not w.opens:
            for g in sorted({self.cfg.g, self.cfg.g - 1} - set(range(gr.MIN_GROUP))):
                for name, listed in self._lists(g):
                    data = self._open(1, g, listed)
                    out += self._to(f"GROUP_OPEN g={g} {name}", [(i, data) for i in listed])
        # Per distinct opening some members hold, every commitment of its attempt the PS holds (a commitment
        # signs T, the attempt, the member and c: the PS may list it against another opening of the attempt).
        current = {gr.signed_statement(o): o for o in w.opens.values()}
        for _, o in sorted(current.items(), key=lambda kv: (kv[1].m, kv[0])):
            a, listed = o.m, [i for i, _ in o.roster]
            commits = w.commits.get(a, {})
            need = gr.assignment_threshold(len(listed))
            if len(commits) >= need:
                honest_in = [i for i in sorted(commits) if i in self.honest]
                variants = {}
                shorter = [(f"without {honest_in[-1]}", honest_in[-1])] if len(commits) > need else []
                for tag, drop in [("all", None), *shorter]:
                    entries = tuple((i, c, s) for i, (c, s) in sorted(commits.items()) if i != drop)
                    variants[tag] = [(i, self.sign(GroupCommits(T, a, SERVER_ID, entries))) for i, _, _ in entries]
                    out += self._to(f"GROUP_COMMITS {a} {tag}", variants[tag], split=True)
                if len(variants) == 2:
                    # Equivocation: the whole list to the first half of the members, the shorter one to the rest.
                    (t1, d1), (t2, d2) = variants.items()
                    half = len(d2) // 2
                    out.append((f"GROUP_COMMITS {a} equivocated ({t1} to {half}, {t2} to the rest)",
                                d1[:half] + [(i, d) for i, d in d2 if i not in dict(d1[:half])]))
            for (aa, stmt), acks in sorted(w.acks.items()):
                if aa != a or len(acks) < need:
                    continue
                lst = self._list_of[stmt]
                data = self.sign(GroupCert(T, a, SERVER_ID, tuple(sorted(acks.items()))))
                out += self._to(f"GROUP_CERT {a}", [(i, data) for i in lst.ids()])
            revealed = w.reveals.get(a, {})
            lists = [lm for lm in w.lists.values() if lm.m == a]
            for lm in {gr.signed_statement(x): x for x in lists}.values():
                ids = lm.ids()
                if not set(ids) <= set(revealed):
                    continue
                nonces = [revealed[i] for i in ids]
                data = self.sign(GroupReveals(T, a, SERVER_ID, tuple(nonces)))
                out += self._to(f"GROUP_REVEALS {a}", [(i, data) for i in ids])
                bad = self.sign(GroupReveals(T, a, SERVER_ID, tuple([bytes(len(nonces[0]))] + nonces[1:])))
                out += self._to(f"GROUP_REVEALS {a} (one nonce changed)", [(i, bad) for i in ids])
                if a < gr.MAX_ATTEMPTS:
                    out += self._redraws(a, o.group_size, ids)
        # ROUND_START: of no group, and of each group a member computed.
        everyone = tuple(sorted(self.roster.items()))
        data = self.sign(msg.RoundStart(T, 0, SERVER_ID, RoundParams.default(self.cfg.N, 2), self.gh, self.cert,
                                        everyone, self.cred_key, self.nyms.epoch, self.nyms.key))
        out.append(("ROUND_START of no group", [(i, data) for i in range(self.cfg.N)]))
        seen = set()
        for p in w.parts.values():
            a = p.client.assignment
            if a is None or a.digest in seen:
                continue
            seen.add(a.digest)
            for j, members in enumerate(a.groups):
                params = RoundParams.default(len(members), 2, **a.binding(j))
                data = self.sign(msg.RoundStart(T, 0, SERVER_ID, params, self.gh, self.cert,
                                                tuple((i, self.roster[i]) for i in members), self.cred_key,
                                                self.nyms.epoch, self.nyms.key))
                out.append((f"ROUND_START group {j}", [(i, data) for i in members]))
        if self.cfg.replays:
            for k, (pid, data) in enumerate(w.sent):
                t = msg.peek_type(data).name
                out += [(f"replay {t} #{k} to {i}", [(i, data)]) for i in range(self.cfg.N)
                        if i != pid and hashlib.sha256(data).digest() not in w.got[i]]
        return out

    def _redraws(self, a: int, g: int, ids) -> list:
        """The next attempt, once the PS holds every reveal (it claims one was lost): without the last honest
        member, without a colluder, and (refused) without one and with an unlisted member added."""
        out = []
        honest = [i for i in ids if i in self.honest and i != self.target]
        drops = ([("the last honest member", honest[-1])] if honest else []) + \
            [("a colluder", c) for c in self.cfg.colluders if c in ids][:1]
        for name, drop in drops:
            rest = [i for i in ids if i != drop]
            data = self._open(a + 1, g, rest)
            out.append((f"GROUP_OPEN {a + 1} (redraw without {name})", [(i, data) for i in rest]))
        unlisted = [i for i in range(self.cfg.N) if i not in ids]
        if unlisted and honest:
            rest = sorted([i for i in ids if i != honest[-1]] + unlisted[:1])
            data = self._open(a + 1, g, rest)
            out.append((f"GROUP_OPEN {a + 1} (redraw adding {unlisted[0]})", [(i, data) for i in rest]))
        return out

    # -- checks at every state -- #
    def _check(self, w: _World) -> None:
        req, N = self.cfg.required, self.cfg.N
        digests: dict[int, set] = {}
        for i in self.honest:
            p = w.parts[i]
            c = p.client
            if c.phase is CState.ASSIGNED:
                a, att = c.assignment, c.state.attempt
                digests.setdefault(a.attempt, set()).add(a.digest)
                g, listed = att.open.group_size, len(att.list.ids())
                own = len(a.groups[a.index_of(i)])
                if min(g, own) < req.min_group:
                    self._violate("no group below the floor", i, f"member {i} holds a group of {own} (g={g}), below "
                                  f"the floor of {req.min_group}", w)
                need = min(req.min_candidates(g), N)
                if listed < need:
                    self._violate("no draw the PS chose", i, f"member {i} holds a group drawn from {listed} candidates "
                                  f"for groups of {g} (floor {need}): the PS's list was its group", w)
            if i in w.started:
                a = c.assignment
                if a is None or c.phase is not CState.ASSIGNED or w.started[i] != a.groups[a.index_of(i)]:
                    self._violate("no round without a group", i, f"member {i} took part in a round of "
                                  f"{list(w.started[i])}, not bound to a group it computed", w)
        for a, held in digests.items():
            if len(held) > 1:
                self._violate("one partition per draw", None, f"honest members hold {len(held)} partitions of attempt "
                              f"{a}", w)
        if all(w.parts[i].client.phase is CState.ASSIGNED for i in self.honest) and len(digests) == 1:
            self.report.assigned += 1
        if w.started:
            self.report.rounds_started += 1

    def _successors(self, w: _World):
        return ((name, self._apply(w, name, deliveries)) for name, deliveries in self.moves(w))

    def _schedule_end(self, w: _World) -> bool:
        self.report.schedules += 1
        return False

    def run(self) -> AssignExploreReport:
        t0 = time.perf_counter()
        N = self.cfg.N
        root = _World(dict(self.parts), {i: bytes(32) for i in range(N)}, {i: frozenset() for i in range(N)}, (),
                      {}, {}, {}, {}, {}, {})
        self.report.states = depth_first(root, self._successors, key=_World.key, check=self._check,
                                         leaf=self._schedule_end, depth=self.cfg.depth, budget=self.cfg.budget,
                                         report=self.report)
        self.report.seconds = time.perf_counter() - t0
        return self.report


def explore_assignment(cfg: AssignExploreConfig = AssignExploreConfig(),
                       member_cls: type[GroupedParticipant] = GroupedParticipant) -> AssignExploreReport:
    """Search the PS's schedules over one assignment and the ROUND_START after it; see the module docstring."""
    return AssignExplorer(cfg, member_cls).run()


__all__ = ["AssignExploreConfig", "AssignExploreReport", "AssignExplorer", "explore_assignment"]
