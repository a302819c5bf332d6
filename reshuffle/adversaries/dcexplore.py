"""An explorer of PS schedules for the DC-net round of a stable group (docs/protocol.md, "The DC-net round").

The PS may send, at any step, any message a member's table accepts, signed, built from
what it holds: its own keys, γ, the epoch key and the decoy seed, and every message the
members sent it. This module plays that PS over one small real group (5 real
``DCParticipant`` members, few slots, short models) and
searches every order of (n = 16 slots by default: collisions and second iterations happen):

- DC_START; DC_KEYS relaying the keys it holds (all of them, or all but one);
- for every iteration whose vectors it holds from the whole group under one h: the
  next DC_COUNTS and a DC_UPLOAD_REQUEST, each with the honest counts (real sum plus the
  decoys' picks) and with forged counts (a settled count moved to a free slot, which
  changes positions, or the decoys' picks left out);
- for every upload it holds from the whole group under one h: DC_BLAME opening the decoys'
  rows, and DC_BLAME opening each other row (a member's);
- replays of every message it sent, to every member that has not had it;

each delivered to the whole group and, with ``split``, to each member alone (a PS that
shows members different things). A refused delivery is not made.

**Checks, on every path.** (1) *Refuses, never crashes*: a member meets bad input with a
ProtocolError. (2) *One key, one plaintext*: no member sends two different vectors under one
(m, h), the inputs of its keys. (3) *Opening never touches a real row*: no member opens a row
that a member of its view wrote. (4) *No link*: at every leaf the coalition unmasks every set
of honest members it can, vectors and uploads (:mod:`~reshuffle.adversaries.dclinker`); a
set of one is a break. (5) *No honest member silenced* (the epoch's first round, §7.3): at
every state, where the PS may stop, every honest member it records as issued (at its first
count vector) keeps its pseudonym, and (6) *never asks twice*: a member whose upload carried
its pseudonym keeps it (asking again would name it as the owner of the one that vanished).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace

import numpy as np

from reshuffle.adversaries.dclinker import _unmask
from reshuffle.adversaries.search import deliver_each, depth_first
from reshuffle.crypto import voprf
from reshuffle.crypto.signatures import SERVER_ID, CertificateAuthority
from reshuffle.errors import ConfigError
from reshuffle.protocol import credential, dcnet, pseudonym
from reshuffle.protocol import messages as msg
from reshuffle.protocol.groups import Assignment
from reshuffle.protocol.messages import MsgType
from reshuffle.protocol.participant import global_model_hash

T = 1


@dataclass(frozen=True)
class DCExploreConfig:
    """The group explored (5 members, ``colluders`` hand the PS their epoch secrets) and the search's bounds."""

    colluders: tuple[int, ...] = (3, 4)
    n: int = 16
    R_max: int = 4
    d: int = 2
    depth: int = 12
    budget: int = 2000
    split: bool = True
    seed: int = 1

    def check(self) -> "DCExploreConfig":
        if len(set(self.colluders)) > 3 or any(not 0 <= c < 5 for c in self.colluders):
            raise ConfigError(f"colluders {self.colluders}: at most 3 of the 5 members (two stay honest)")
        if self.depth < 1 or self.budget < 1 or self.n < 6:
            raise ConfigError("depth and budget must be >= 1 and n >= 6 (5 members and a decoy)")
        return self


@dataclass
class DCExploreReport:
    states: int = 0
    schedules: int = 0
    max_depth: int = 0
    complete: bool = True
    uploads: int = 0  # leaves at which the whole group uploaded under one view
    links: int = 0
    seconds: float = 0.0
    kinds: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _World:
    parts: dict
    inbox: dict  # pid -> hash chain of what it accepted
    got: dict  # pid -> digests it accepted
    sent: tuple  # (pid, bytes) of every delivery
    keys: dict  # pid -> its DC_KEY
    vectors: dict  # (m, h) -> {pid: MaskedInput}
    recorded: frozenset = frozenset()  # members the PS records as issued: at their first count vector (§7.3)
    path: tuple = ()

    def key(self) -> bytes:
        h = hashlib.sha256()
        for pid in sorted(self.inbox):
            h.update(self.inbox[pid])
        return h.digest()

    def branch(self) -> "_World":
        return replace(self, parts=dict(self.parts), inbox=dict(self.inbox), got=dict(self.got), keys=dict(self.keys),
                       vectors={k: dict(v) for k, v in self.vectors.items()})


class DCExplorer:
    def __init__(self, cfg: DCExploreConfig = DCExploreConfig(), member_cls=dcnet.DCParticipant) -> None:
        from reshuffle.harness.api import identities

        self.cfg = cfg.check()
        ident = identities(5, cfg.seed)
        a = Assignment.given([list(range(5))])
        self.p = dcnet.dc_params(5, cfg.d, n=cfg.n, R_max=cfg.R_max, decoys=1, **a.binding(0))
        self.g = self.p.group_obj()
        self.ctx = msg.Context(self.g, self.p)
        self.sk, self.cert, self.roster = ident.ps_key, ident.ps_cert, ident.roster
        gh = global_model_hash(b"explore")
        ca = CertificateAuthority.verifier(ident.ca.verify_key)
        from reshuffle.crypto.rand import SeededRandom

        rng = SeededRandom(cfg.seed, b"dc-explore/ps")
        self.gamma = self.g.random_scalar(rng)
        self.cred_key = self.g.base_mul(self.gamma)
        self.nyms = pseudonym.EpochIssuer(self.p.group, T, self.g.random_scalar(rng))
        self.seed = rng.bytes(32)
        self._rng = rng
        data = np.random.default_rng(cfg.seed)  # model values only
        models = [data.normal(size=cfg.d).astype(np.float32) for _ in range(5)]
        self.parts = {i: member_cls(i, T, ident.keys[i], ident.roster[i], ca, gh, ident.participant_rng[i],
                                             tuple(range(5)), (lambda m=models[i]: m)) for i in range(5)}
        self.start = msg.DCStart(T, 0, SERVER_ID, self.p, gh, self.cert, tuple(sorted(self.roster.items())),
                                 self.cred_key, self.nyms.epoch, self.nyms.key,
                                 dcnet.decoy_commit(T, self.seed)).encode(self.sk)
        self.honest = [i for i in range(5) if i not in cfg.colluders]
        self._cache: dict = {}
        self._signed: dict = {}
        self._evals: dict = {}
        self._flagged: set = set()
        self.report = DCExploreReport()

    def sign(self, m: msg.Message) -> bytes:
        body = m.header() + m.body()
        if body not in self._signed:
            self._signed[body] = m.encode(self.sk)
        return self._signed[body]

    # -- delivering -- #
    def _deliver(self, w: _World, pid: int, data: bytes):
        key = (pid, w.inbox[pid], hashlib.sha256(data).digest())
        if key not in self._cache:
            p = w.parts[pid].fork()
            try:
                replies = p.handle(data)
            except Exception as exc:  # a member refuses bad input with a ProtocolError, never crashes
                self._violate(f"refuses, never crashes: member {pid} raised {type(exc).__name__}: {exc}", w)
                self._cache[key] = None
                return None
            self._cache[key] = None if p.state is dcnet.DCState.ABORTED else (p, replies)
        hit = self._cache[key]
        return None if hit is None else (hit[0].fork(), hit[1])

    def _apply(self, w: _World, name: str, deliveries) -> _World | None:
        out = w.branch()

        def absorb(pid: int, data: bytes, replies) -> None:
            for r in replies:
                self._absorb(out, pid, r)

        if not deliver_each(out, deliveries, self._deliver, absorb):
            return None
        out.path = w.path + (name,)
        return out

    def _absorb(self, w: _World, pid: int, data: bytes) -> None:
        m = msg.decode(data, self.ctx)
        if m.TYPE is MsgType.DC_KEY:
            w.keys[pid] = m
        elif m.TYPE is MsgType.MASKED_INPUT:
            w.recorded = w.recorded | {pid}
            prior = w.vectors.setdefault((m.m, bytes(m.h)), {}).get(pid)
            if prior is not None and bytes(prior.words) != bytes(m.words):
                self._violate(f"one key, one plaintext: member {pid} sent two vectors under (m={m.m}, one h)", w)
            w.vectors[(m.m, bytes(m.h))][pid] = m
        elif m.TYPE is MsgType.DC_OPENING:
            own = {q.view.position for q in w.parts.values() if q.view.uploaded and getattr(q, "_hM", None) == m.h}
            opened = {pos for pos, _, _ in m.keys}
            if opened & own:
                self._violate(f"opening never touches a real row: member {pid} opened rows {sorted(opened & own)}", w)

    def _violate(self, text: str, w: _World) -> None:
        self.report.violations.append(f"{text}\n  schedule: {' → '.join(w.path)}")

    def _check(self, w: _World) -> None:
        """At every state (the PS may stop anywhere): what each honest member keeps matches the PS's record."""
        for i in self.honest:
            kept = w.parts[i].pseudonym is not None
            if i in w.recorded and not kept and ("silenced", i) not in self._flagged:
                self._flagged.add(("silenced", i))
                self._violate(f"no honest member silenced: member {i} is recorded as issued at its first count "
                              "vector and keeps no pseudonym (every later round of the epoch refuses it)", w)
            if w.parts[i].view.uploaded and not kept and ("twice", i) not in self._flagged:
                self._flagged.add(("twice", i))
                self._violate(f"never asks twice: member {i}'s upload carried its pseudonym and it keeps none", w)

    # -- moves -- #
    def _to(self, name: str, data_for) -> list:
        """(name, deliveries): to the whole group, and with ``split`` to each member alone."""
        out = [(name, [(i, data_for(i)) for i in range(5)])]
        if self.cfg.split:
            out += [(f"{name} to {i}", [(i, data_for(i))]) for i in range(5)]
        return out

    def _cred(self, k: msg.DCKey):
        key = k.cred_request.to_bytes()
        if key not in self._evals:
            (ev,), proof = voprf.blind_evaluate(credential.suite(self.g), self.gamma, [k.cred_request],
                                                self.cred_key, self._rng)
            nym = self.nyms.issue(-len(self._evals) - 1, k.nym_request) if k.nym_request is not None else (None, b"")
            self._evals[key] = (ev, proof.encode(self.g), *nym)
        return self._evals[key]

    def moves(self, w: _World) -> list:
        out = self._to("DC_START", lambda i: self.start)
        if w.keys:
            for leave_out in [None, *sorted(w.keys)]:
                held = {i: k for i, k in sorted(w.keys.items()) if i != leave_out}
                if not held:
                    continue
                relayed = tuple(msg.relay_bytes(k) for k in held.values())

                def keys_for(i, relayed=relayed):
                    if i not in w.keys:
                        return b""
                    ev, proof, nev, nproof = self._cred(w.keys[i])
                    return self.sign(msg.DCKeys(T, 1, SERVER_ID, relayed, ev, proof, nev, nproof))

                tag = "all" if leave_out is None else f"without {leave_out}"
                out += [(n, [(i, d) for i, d in dl if d]) for n, dl in self._to(f"DC_KEYS {tag}", keys_for)]
        for (m, h), vs in sorted(w.vectors.items()):
            if sorted(vs) != list(range(5)):
                continue
            if m == self.p.upload_m:
                out += self._blames(w, h)
                continue
            for label_, counts in self._counts(w, m, h, vs):
                up = self.sign(msg.DCUploadRequest(T, self.p.upload_m, SERVER_ID, counts))
                nxt = self.sign(msg.DCCounts(T, m + 1, SERVER_ID, counts))
                out += self._to(f"DC_UPLOAD_REQUEST {label_} after {m}", lambda i, up=up: up)
                out += self._to(f"DC_COUNTS {label_} after {m}", lambda i, nxt=nxt: nxt)
        for k, (pid, data) in enumerate(w.sent):
            t = msg.peek_type(data).name
            out += [(f"replay {t} #{k} to {i}", [(i, data)]) for i in range(5) if i != pid]
        return out

    def _history(self, w: _World, m: int, h: bytes) -> list:
        """The counts published before iteration m in the view that led to h (from a member that holds h)."""
        for q in w.parts.values():
            if getattr(q, "_hs", {}).get(m) == h:
                return list(q.res.history)
        return []

    def _counts(self, w, m, h, vs):
        real = np.zeros(self.p.n, dtype=np.uint32)
        for v in vs.values():
            real += np.frombuffer(v.words, dtype=np.uint32)
        history = self._history(w, m, h)
        dvec = dcnet.decoy_slots(self.seed, T, self.p.decoys, self.p.n, history + [tuple([1] * self.p.n)])[0][-1]
        honest = tuple(int(x) for x in real.astype(np.int64) + np.asarray(dvec))
        out = [("honest", honest), ("without decoys", tuple(int(x) for x in real))]
        ones = [s for s, c in enumerate(honest) if c == 1]
        free = [s for s, c in enumerate(honest) if c == 0 and all(h_[s] == 0 for h_ in history)]
        if ones and free:
            moved = list(honest)
            moved[ones[0]], moved[free[0]] = 0, 1
            out.append(("moved", tuple(moved)))
        return out

    def _blames(self, w: _World, h: bytes) -> list:
        holder = next((q for q in w.parts.values() if getattr(q, "_hM", None) == h), None)
        if holder is None:
            return []
        vectors = tuple(msg.relay_bytes(v) for (m, hh), vs in sorted(w.vectors.items())
                        if m != self.p.upload_m and holder._hs.get(m) == hh for v in vs.values())
        _, dslots = dcnet.decoy_slots(self.seed, T, self.p.decoys, self.p.n, holder.res.history)
        decoys = tuple(sorted(holder.res.position(s) for s in dslots))
        out = []
        for label_, positions in [("decoys", decoys), *((f"row {r}", (r,)) for r in range(dcnet.parties(self.p))
                                                         if (r,) != decoys)]:
            data = self.sign(msg.DCBlame(T, self.p.upload_m, SERVER_ID, self.seed, positions, vectors))
            out += self._to(f"DC_BLAME {label_}", lambda i, data=data: data)
        return out

    # -- checks at a leaf -- #
    def _leaf(self, w: _World) -> None:
        coalition = {c: w.parts[c]._y for c in self.cfg.colluders if hasattr(w.parts[c], "_y")}
        keys = {i: k.dh_key for i, k in w.keys.items()}
        if len(keys) < 5:
            return
        for (m, h), vs in w.vectors.items():
            if sorted(vs) != list(range(5)):
                continue
            if m == self.p.upload_m:
                self.report.uploads += 1
            dtype = self.p.codec.dtype if m == self.p.upload_m else np.uint32
            for i in self.honest:
                if _unmask(vs, (i,), coalition, keys, T, m, h, dtype, lambda a, members: [j for j in members if j != a]
                           ) is not None:
                    self.report.links += 1
                    self._violate(f"no link: member {i}'s vector of invocation {m} read alone", w)

    def _successors(self, w: _World):
        return ((name, self._apply(w, name, deliveries)) for name, deliveries in self.moves(w))

    def _schedule_end(self, w: _World) -> bool:
        self.report.schedules += 1
        self._leaf(w)
        return False

    def run(self) -> DCExploreReport:
        t0 = time.perf_counter()
        root = _World(dict(self.parts), {i: bytes(32) for i in range(5)}, {i: frozenset() for i in range(5)}, (),
                      {}, {})
        self.report.states = depth_first(root, self._successors, key=_World.key, check=self._check,
                                         leaf=self._schedule_end, depth=self.cfg.depth, budget=self.cfg.budget,
                                         report=self.report)
        self.report.seconds = time.perf_counter() - t0
        return self.report


def explore_dc(cfg: DCExploreConfig = DCExploreConfig(), member_cls=dcnet.DCParticipant) -> DCExploreReport:
    """Search the PS's schedules over one small DC-net group; see the module docstring. ``member_cls``: the
    members' class (a weak one shows that the checks fire)."""
    return DCExplorer(cfg, member_cls).run()


__all__ = ["DCExploreConfig", "DCExploreReport", "DCExplorer", "explore_dc"]
