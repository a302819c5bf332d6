"""An explorer of PS schedules: a PS that sends any message a participant's table accepts, in any order.

The shipped PS (:class:`~reshuffle.protocol.server.Server`) follows one schedule. A
malicious PS may send, at any step, any message that some participant's table
(:data:`~reshuffle.protocol.phases.PARTICIPANT_TABLE`) accepts in its state, signed,
with contents built from what it legitimately holds: its own keys, tokens and decoy
seeds, and every message the participants sent it. This module plays that PS over a
small real round (real participants, real crypto, N = 4 to 6, short vectors, few
slots, so that collisions, early ends and openings happen) and searches every order.

**Moves.** A move is one PS message kind built from the PS's knowledge (one builder per
message the schedule sends; :data:`NOT_BUILT` names the one left out and why), delivered
to every participant whose table and checks accept it (with ``split``, also to each
one alone, which lets the PS show participants different things):

- the round parameters: with ``announce``, a ROUND_START for every c and t the messages
  allow (0 <= c < N, (N + c)/2 < t <= N), so the PS may announce fewer colluders than it
  has (the colluders are the configuration's, whatever it announces);
- the steps of the round, each as soon as the PS can build it: ROUND_START, the
  advertisement list, the share delivery (whole, or without one dealer's shares, which
  makes its recipients complain), complaints (for the complainers that signed them, in
  everyone's name, or in t − 1 − c names), OT answers, U_m for every group of vectors it holds (and
  U_m less one member), certificates of every t consents on one statement, the next
  iteration's or the upload's MASK_REQUEST after any iteration whose counts it can
  unmask, the first request of a restarted slot phase, an opening of any certified
  iteration, a restart after an opening (resuming at r + 1 or r + 2), the restarted
  slot phase's OT answers, and the blame step after the upload;
- replays: every message it sent before, to every participant that has not had it.

A delivery a participant refuses is not made (it would only drop that participant,
which the PS can do by staying silent). The search is a depth-first walk with a
set of visited states: a state is what every participant received (a participant is a
deterministic function of its inbox and its seed), and the PS's knowledge is a
function of the same inboxes. Each (participant, inbox, message) is handled once and
cached. Delivering two messages to two participants in either order reaches one state,
so commuting deliveries are explored once.

**Checks, on every path.**

1. *One key, one plaintext*: no participant sends two masked vectors under the keys of
   one invocation m (its b_{i,m} and x_{i,m}).
2. *No reveal about an uploaded slot*: a participant that sent its model list never
   reveals x_r of an iteration of the slot phase that placed it (an OPEN_REVEAL before
   or after the upload of that slot phase).
3. *No link*: at every leaf the PS, as the attacker would, unmasks and links everything
   it can (:func:`~reshuffle.adversaries.linker.link`); a linked honest model is a break.
4. *Nobody honest named*: at every leaf the PS forges evidence of every kind against every
   honest participant from what it holds (:mod:`~reshuffle.adversaries.forger`); evidence a
   checker accepts is a break. Knowledge only grows along a path, so the leaves cover every state.
5. *No honest member silenced* (the round is the first of its epoch, §7.3): at every state, where
   the PS may stop, every honest participant it records as issued (``issuance``: at the certificate
   carrying the member's consent, or at the OT answer) keeps its pseudonym or the request that gets
   it again; else every later round of the epoch refuses its second request.
6. *Never asks twice*: a participant whose model list carried its pseudonym keeps it (a second
   request would name it as the owner of the pseudonym that vanished).

:func:`explore` reports the states and schedules (leaves) it covered, and every
violation with the schedule that reached it.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from reshuffle.adversaries.forger import accepted as forged_evidence
from reshuffle.adversaries.linker import PSView, correct_links, link, read_sum, secrets_of
from reshuffle.adversaries.ps import colluder_secrets
from reshuffle.adversaries.search import deliver_each, depth_first, move_kind
from reshuffle.crypto import voprf
from reshuffle.crypto.domain import label
from reshuffle.crypto.ot import OTRequest, OTSender
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.signatures import SERVER_ID, CertificateAuthority
from reshuffle.errors import ConfigError, ProtocolError
from reshuffle.harness.api import identities
from reshuffle.protocol import credential
from reshuffle.protocol import messages as msg
from reshuffle.protocol import pseudonym
from reshuffle.protocol.decoys import Decoys, commitment, decoy_positions
from reshuffle.protocol.messages import MsgType, ShareKind
from reshuffle.protocol.params import RoundParams, TrustFloors
from reshuffle.protocol.participant import Participant, global_model_hash, ot_proof_context
from reshuffle.protocol.phases import PPhase
from reshuffle.protocol.schedule import PS_SENDS

T = 1
REASON = "the PS asks"
#: When the explored PS records a pseudonym as issued (docs/protocol.md §7.3): at the certificate it sends a
#: member whose consent the certificate carries (the protocol's rule), or at the OT answer (the rule before).
ISSUANCE = {"certificate": "at the certificate carrying the member's consent", "answer": "at the OT answer"}


@dataclass(frozen=True)
class ExploreConfig:
    """The round explored and the search's bounds.

    ``colluders`` share every secret with the PS (honest behaviour otherwise); the checks
    and the links count the other participants. They may be more than an announced c, but
    at most the participants' own floor c (the guarantees assume no more). ``announce``: the
    PS announces every c and t the messages allow (else only ``c`` with its default t).
    ``forge``: at every leaf, forged evidence against every honest participant. ``depth``
    bounds the moves on one path, ``budget`` the distinct states visited. ``until_all_linked``:
    stop at the first leaf that links every honest model (no schedule can do better; the
    anonymity game's adversary wants the best schedule, not the whole map). ``issuance``: when the
    PS records a pseudonym as issued (:data:`ISSUANCE`; the checks hold it to what members keep).
    """

    N: int = 4
    d: int = 2
    n: int = 8
    k: int = 2
    R_max: int = 2
    decoys: int = 1
    c: int = 1
    colluders: tuple[int, ...] = (0,)
    depth: int = 60
    budget: int = 3000
    split: bool = False
    replays: bool = True
    announce: bool = True
    forge: bool = True
    until_all_linked: bool = False
    seed: int = 1
    issuance: str = "certificate"

    def params(self) -> RoundParams:
        return RoundParams.default(self.N, self.d, n=self.n, k=self.k, R_max=self.R_max, decoys=self.decoys,
                                   c=self.c)

    def announced(self) -> list[RoundParams]:
        """The parameters the PS may announce: every (c, t) the messages allow, or only :meth:`params`."""
        p = self.params()
        if not self.announce:
            return [p]
        out = [p]
        for c in range(self.N):
            for t in range((self.N + c) // 2 + 1, self.N + 1):
                q = replace(p, c=c, t=t)
                if q != p:
                    out.append(q.validated())
        return out

    def check(self) -> "ExploreConfig":
        self.params()
        if not 2 <= self.N <= 8:
            raise ConfigError(f"the explorer plays rounds of 2 to 8 participants, got N={self.N}")
        floor = TrustFloors().c(self.N)
        if any(not 0 <= i < self.N for i in self.colluders) or len(set(self.colluders)) > floor:
            raise ConfigError(f"colluders {self.colluders} must be at most the participants' own floor c={floor} "
                              "participant ids below N (the guarantees assume no more)")
        if self.depth < 1 or self.budget < 1:
            raise ConfigError(f"depth and budget must be >= 1, got {self.depth} and {self.budget}")
        if self.issuance not in ISSUANCE:
            raise ConfigError(f"issuance must be one of {sorted(ISSUANCE)}, got {self.issuance!r}")
        return self


@dataclass(frozen=True)
class Violation:
    """A check that failed, the participant it concerns, and the schedule (moves) that reached it."""

    check: str
    pid: int
    detail: str
    schedule: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.check} (participant {self.pid}): {self.detail}\n  schedule: {' → '.join(self.schedule)}"


@dataclass
class ExploreReport:
    """What the explorer covered and found."""

    states: int = 0
    schedules: int = 0  # paths searched to their end: no move left, the depth bound, or every next state seen
    transitions: int = 0  # participant deliveries made (after the cache)
    handled: int = 0  # participant deliveries computed (cache misses)
    max_depth: int = 0
    complete: bool = True  # False if the budget stopped the search
    links: int = 0  # the most honest models linked on any path
    uploads: int = 0  # paths on which some honest participant uploaded
    #: (honest models linked, honest uploaders) on the schedule an attacker would pick: most links, then most rows
    best: tuple[int, int] = (0, 0)
    evidence_tried: int = 0  # forged evidence candidates checked at the leaves (each refused, or a violation)
    #: the (c, t) of every ROUND_START some participant accepted (the others were refused below its floors)
    announced: list[tuple[int, int]] = field(default_factory=list)
    seconds: float = 0.0
    #: accepted moves by kind (message type, or "replay <type>"): what the search exercised
    kinds: dict[str, int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "violations"}
        out["violations"] = [str(v) for v in self.violations]
        return out


# --------------------------------------------------------------------------- the round's fixed material
class _Round:
    """Keys, parameters and the PS's secrets (tables, decoy seeds, γ), fixed for one exploration."""

    def __init__(self, cfg: ExploreConfig, participant_cls: type[Participant]) -> None:
        self.cfg, self.p = cfg, cfg.params()
        p = self.p
        self.group = p.group_obj()
        self.ctx = msg.Context(self.group, p)
        ident = identities(cfg.N, cfg.seed)
        self.sk, self.cert = ident.ps_key, ident.ps_cert
        self.roster = ident.roster
        self.gh = global_model_hash(b"explore")
        rng = SeededRandom(cfg.seed, b"explore/ps")
        self.gamma = self.group.random_scalar(rng)
        self.cred_key = self.group.base_mul(self.gamma)
        self._rng_seed = rng.bytes(32)
        self.nyms = pseudonym.EpochIssuer(p.group, T, self.group.random_scalar(rng))
        ca = CertificateAuthority.verifier(ident.ca.verify_key)
        # Model values only (numpy is never a source of secrets here).
        data = np.random.default_rng(cfg.seed)
        self.updates = [data.normal(size=cfg.d).astype(np.float32) for _ in range(cfg.N)]
        self.parts = {i: participant_cls(i, T, self.updates[i], ident.keys[i], ident.roster[i], ca, self.gh,
                                         ident.participant_rng[i]) for i in range(cfg.N)}
        self._tables: dict[int, OTSender] = {}
        self._signed: dict[bytes, bytes] = {}
        # One ROUND_START per announcement; n, k, decoys and R_max are the same in all of them.
        self.starts = {q: msg.RoundStart(T, 0, SERVER_ID, q, self.gh, self.cert, tuple(sorted(self.roster.items())),
                                         self.cred_key, self.nyms.epoch, self.nyms.key).encode(self.sk)
                       for q in cfg.announced()}
        self.keys = {i: c.key for i, c in self.roster.items()}

    def rng(self, *parts) -> SeededRandom:
        """Deterministic randomness for one PS message (the same message in every branch)."""
        return SeededRandom(self._rng_seed, label("explore/message", *parts))

    def table(self, phase: int) -> OTSender:
        if phase not in self._tables:
            self._tables[phase] = OTSender(self.group, T, self.p.n, self.p.k, self.rng(1, phase))
        return self._tables[phase]

    def decoy_seed(self, phase: int) -> bytes:
        return self.rng(2, phase).bytes(32)

    def sign(self, m: msg.Message) -> bytes:
        """The signed bytes (Ed25519 is deterministic: each distinct message is signed once)."""
        body = m.header() + m.body()
        if body not in self._signed:
            self._signed[body] = m.encode(self.sk)
        return self._signed[body]


# --------------------------------------------------------------------------- one node of the search
@dataclass
class _World:
    p: RoundParams  # the parameters announced (the configuration's until a ROUND_START is accepted)
    parts: dict[int, Participant]
    inbox: dict[int, bytes]  # pid -> hash chain of the messages it accepted
    got: dict[int, frozenset]  # pid -> hashes of the messages it accepted (no replay twice)
    view: PSView
    sent: tuple[tuple[int, bytes], ...]  # every delivery: (pid, bytes)
    chains: dict  # (m, h) -> (slot phase, counts published in it before m) for reservation vectors
    pending: dict  # (pid, m) -> the chain the PS used in the MASK_REQUEST it sent pid
    phase_of: dict  # pid -> the slot phase its last RESTART began
    phases: int  # slot phases drawn (0 is the one of SHARE_DELIVERY)
    events: dict[int, tuple]  # pid -> what it sent that the checks follow: ("vec", m, phase) / ("reveal", r, phase)
    asked: dict = field(default_factory=dict)  # (pid, m) -> the U_m it accepted to sign
    evaluated: frozenset = frozenset()  # pids sent their pseudonym's evaluation (§7.3)
    recorded: frozenset = frozenset()  # pids the PS records as issued, under the configured rule
    path: tuple[str, ...] = ()

    def key(self) -> bytes:
        h = hashlib.sha256()
        for pid in sorted(self.inbox):
            h.update(self.inbox[pid])
        return h.digest()

    def branch(self) -> "_World":
        return replace(self, parts=dict(self.parts), inbox=dict(self.inbox), got=dict(self.got), view=self.view.fork(),
                       chains=dict(self.chains), pending=dict(self.pending), phase_of=dict(self.phase_of),
                       events=dict(self.events), asked=dict(self.asked))


class Explorer:
    """Searches the PS's schedules over one small round (see the module docstring)."""

    def __init__(self, cfg: ExploreConfig = ExploreConfig(), participant_cls: type[Participant] = Participant) -> None:
        self.cfg = cfg.check()
        self.r = _Round(cfg, participant_cls)
        self.honest = [i for i in range(cfg.N) if i not in cfg.colluders]
        self._cache: dict[tuple, tuple[Participant, list[bytes]] | None] = {}
        self._secrets: dict[frozenset, dict] = {}
        self._sums: dict[tuple, np.ndarray | None] = {}
        self._links: dict[tuple, list[int]] = {}
        self._forged: dict[tuple, list] = {}
        self._checked: dict = {}  # each distinct forged candidate's verdict
        self._decoded: dict[bytes, msg.Message | None] = {}
        self.report = ExploreReport()

    def _decode(self, w: "_World", data: bytes) -> msg.Message | None:
        """Decoding is a pure function of the bytes and the announced parameters: each is decoded once."""
        key = (w.p, data)
        if key not in self._decoded:
            try:
                self._decoded[key] = msg.decode(data, msg.Context(self.r.group, w.p))
            except ProtocolError:
                self._decoded[key] = None
        return self._decoded[key]

    def _known_secrets(self, w: "_World") -> dict:
        """secrets_of(view), once per distinct knowledge."""
        key = (w.p, w.view.known)
        if key not in self._secrets:
            self._secrets[key] = secrets_of(w.view)
        return self._secrets[key]

    # -- delivering -------------------------------------------------------------------------------
    def _deliver(self, w: _World, pid: int, data: bytes) -> tuple[Participant, list[bytes]] | None:
        """pid's copy after ``data`` and its replies, or None if it refuses (cached per inbox and message)."""
        key = (pid, w.inbox[pid], hashlib.sha256(data).digest())
        if key not in self._cache:
            self.report.handled += 1
            p = w.parts[pid].fork()
            try:
                replies = p.handle(data)
            except Exception as exc:  # a participant must refuse bad input with a ProtocolError, never crash
                self._violate("refuses, never crashes", pid, f"{msg.peek_type(data).name} raised "
                              f"{type(exc).__name__}: {exc}", w)
                self._cache[key] = None
                return None
            self._cache[key] = None if p.phase is PPhase.ABORTED else (p, replies)
        hit = self._cache[key]
        if hit is None:
            return None
        self.report.transitions += 1
        return hit[0].fork(), hit[1]

    def _apply(self, w: _World, name: str, deliveries: list[tuple[int, bytes]], chain_for=None) -> _World | None:
        """The world after the deliveries that are accepted; None if none is.

        ``chain_for``: (m, chain) for a MASK_REQUEST (the counts it publishes in which slot phase), or
        ("restart", phase) for a RESTART that begins slot phase ``phase``."""
        out = w.branch()
        if chain_for is not None and chain_for[0] == "start":
            # The PS's knowledge is read under the parameters it announced.
            out.p, out.view, chain_for = chain_for[1], PSView(chain_for[1], T), None
        restart = chain_for is not None and chain_for[0] == "restart"
        if restart:
            out.phases = max(out.phases, chain_for[1] + 1)

        def absorb(pid: int, data: bytes, replies) -> None:
            if chain_for is not None and not restart:
                out.pending[(pid, chain_for[0])] = chain_for[1]
            self._absorb(out, pid, data, replies)

        def sent(pid: int, data: bytes) -> None:
            self._record(out, pid, data)  # the PS records what it sends, accepted or not

        if not deliver_each(out, deliveries, self._deliver, absorb, sent):
            return None
        out.path = w.path + (name,)
        return out

    def _record(self, w: _World, pid: int, data: bytes) -> None:
        """The PS's issuance record (§7.3), under :attr:`ExploreConfig.issuance`."""
        t = msg.peek_type(data)
        if t is MsgType.OT_RESPONSE:
            m = self._decode(w, data)
            if m is not None and m.nym_eval is not None:
                w.evaluated = w.evaluated | {pid}
                if self.cfg.issuance == "answer":
                    w.recorded = w.recorded | {pid}
        elif t is MsgType.CERTIFICATE and pid in w.evaluated:
            m = self._decode(w, data)
            if m is not None and pid in {j for j, _ in m.signatures}:
                w.recorded = w.recorded | {pid}

    def _absorb(self, w: _World, pid: int, data: bytes, replies: list[bytes]) -> None:
        t = msg.peek_type(data)
        if t is MsgType.UNMASK_REQUEST:
            req = self._decode(w, data)
            w.asked[(pid, req.m)] = req.online
        for raw in replies:
            m = w.view.absorb(pid, raw, self._decode(w, raw))
            if isinstance(m, msg.MaskedInput):
                chain = w.pending.get((pid, m.m))
                if m.m <= w.p.R_max and chain is not None:
                    w.chains[(m.m, bytes(m.h))] = chain
                    w.view.table_of = {**w.view.table_of, bytes(m.h): chain[0]}
                w.events[pid] = w.events[pid] + (("vec", m.m, w.phase_of.get(pid, 0)),)
            elif isinstance(m, msg.OpenReveal):
                w.events[pid] = w.events[pid] + (("reveal", m.m, w.phase_of.get(pid, 0)),)
            elif isinstance(m, msg.SlotRequest) and t is MsgType.RESTART:
                w.phase_of[pid] = w.phases - 1

    # -- the PS's moves ---------------------------------------------------------------------------
    def moves(self, w: _World) -> list[tuple[str, list[tuple[int, bytes]], object]]:
        """(name, deliveries, chain) for every message the PS can build now."""
        acc: dict[MsgType, list[int]] = {}
        for pid, p in w.parts.items():
            for t in p.TABLE[p.phase]:
                acc.setdefault(t, []).append(pid)
        out: list = []
        for t, pids in acc.items():
            builder = _BUILDERS.get(t)
            if builder is not None:
                out.extend(builder(self, w, pids))
        if self.cfg.replays:
            seen = set()
            for k, (_, data) in enumerate(w.sent):
                if data in seen:
                    continue
                seen.add(data)
                t = msg.peek_type(data)
                if t is MsgType.ROUND_START:
                    continue
                to = [(pid, data) for pid in acc.get(t, []) if hashlib.sha256(data).digest() not in w.got[pid]]
                if to:
                    out.append((f"replay {t.name} #{k}", to, None))
        return out

    def _targets(self, name: str, deliveries: list[tuple[int, bytes]], chain=None):
        """One move to everyone, and with ``split`` one to each recipient alone."""
        yield name, deliveries, chain
        if self.cfg.split and len({pid for pid, _ in deliveries}) > 1:
            for pid in sorted({pid for pid, _ in deliveries}):
                yield f"{name} [to {pid}]", [(q, d) for q, d in deliveries if q == pid], chain

    # One builder per message kind: the PS's legitimate way to make it from what it holds.
    def _round_start(self, w, pids):
        for q, data in self.r.starts.items():
            name = "ROUND_START" if q == self.r.p else f"ROUND_START (c={q.c}, t={q.t})"
            deliveries = [(i, data) for i in pids]
            # Only the configuration's own is also shown to each participant alone (a forked start).
            moves = self._targets(name, deliveries, ("start", q)) if q == self.r.p else [(name, deliveries, ("start", q))]
            yield from moves

    def _advertise_list(self, w, pids):
        adverts = w.view.adverts
        if len(adverts) >= w.p.t:
            data = self.r.sign(msg.AdvertiseList(T, 0, SERVER_ID, tuple(msg.relay_bytes(adverts[i])
                                                                        for i in sorted(adverts))))
            yield from self._targets("ADVERTISE_LIST", [(i, data) for i in pids])

    def _share_delivery(self, w, pids):
        bundles = w.view.bundles
        U0 = sorted(bundles)
        if len(U0) < w.p.t:
            return
        table = self.r.table(0).table.encode()
        commit = commitment(T, self.r.decoy_seed(0))
        dealers = tuple((d, bundles[d].digest(), bundles[d].combined) for d in U0)
        # All ciphertexts, or all but the last dealer's (its recipients then complain about it, honestly).
        for name, withheld in (("SHARE_DELIVERY", None), (f"SHARE_DELIVERY (without {U0[-1]}'s shares)", U0[-1])):
            out = []
            for j in pids:
                if j not in U0:
                    continue
                cts = tuple((d, dict(bundles[d].ciphertexts)[j]) for d in U0
                            if d not in (j, withheld) and j in dict(bundles[d].ciphertexts))
                out.append((j, self.r.sign(msg.ShareDelivery(T, 0, SERVER_ID, tuple(U0), table, commit, dealers,
                                                             cts))))
            if out:
                # The first reservation vector rides on the answer: iteration 1 of slot phase 0, no counts before it.
                yield from self._targets(name, out, (1, (0, ())))

    def _complaints(self, w, pids):
        signed = {d: sorted(i for i, r in w.view.ot_requests.items() if d in r.complaints) for d in pids}
        # Honest names first: a colluder's own shares come free, so the cap is spent on the others'.
        others = {d: sorted((j for j in w.view.bundles if j != d), key=lambda j: (j in self.cfg.colluders, j))
                  for d in pids}
        cap = w.p.t - 1 - w.p.c  # the most a dealer answers under the announced c
        for name, lists in (("COMPLAINTS (signed)", signed), ("COMPLAINTS (in everyone's name)", others),
                            (f"COMPLAINTS (in {cap} names)", {d: c[:cap] for d, c in others.items()})):
            out = [(d, self.r.sign(msg.Complaints(T, 0, SERVER_ID, tuple(sorted(c))))) for d, c in lists.items() if c]
            if out:
                yield from self._targets(name, out)

    def _ot_response(self, w, pids):
        g, out = self.r.group, []
        for i in pids:
            req = w.view.ot_requests.get(i)
            if req is None:
                continue
            try:
                ot_req = OTRequest.decode(g, req.request, w.p.k)
                sender = self.r.table(0)
                ans = sender.evaluate(ot_req)
            except ProtocolError:
                continue
            rng = self.r.rng(3, i)
            proof = sender.prove(ot_req, ans, ot_proof_context(T), rng)
            (ev,), cproof = voprf.blind_evaluate(credential.suite(g), self.r.gamma, [req.cred_request],
                                                 self.r.cred_key, rng)
            resolved = tuple((a.sender, msg.relay_bytes(a)) for a in w.view.answers if a.sender in req.complaints)
            nym_ev, nym_proof = None, b""
            if req.nym_request is not None:
                # Every branch issues anew: the explorer's issuer keeps no record between branches.
                self.r.nyms.issued.discard(i)
                self.r.nyms.requests.pop(i, None)
                nym_ev, nym_proof = self.r.nyms.issue(i, req.nym_request, rng)
            out.append((i, self.r.sign(msg.OTResponseMsg(T, 0, SERVER_ID, ans.encode(), proof.encode(g), ev,
                                                         cproof.encode(g), resolved, nym_ev, nym_proof))))
        if out:
            yield from self._targets("OT_RESPONSE", out)

    def _unmask_request(self, w, pids):
        groups: dict[tuple[int, bytes], set[int]] = {}
        for v in w.view.vectors:
            groups.setdefault((v.m, bytes(v.h)), set()).add(v.sender)
        t = w.p.t
        for (m, h), senders in sorted(groups.items()):
            U = tuple(sorted(senders))
            for name, online in ((f"U_{m}", U), (f"U_{m} less {U[-1]}", U[:-1])):
                if len(online) < t:
                    continue
                data = self.r.sign(msg.UnmaskRequest(T, m, SERVER_ID, online))
                to = [(i, data) for i in pids if i in online]
                if to:
                    yield from self._targets(f"UNMASK_REQUEST {name}", to)

    def _vector_h(self, w, pid, m):
        for v in w.view.vectors:
            if v.sender == pid and v.m == m:
                return bytes(v.h)
        return None

    def _certificate(self, w, pids):
        # A consent signs (T, m, U_m, h_m): the U_m the PS sent its signer and the h_m of its vector.
        asked = w.asked
        stmts: dict[tuple, list[tuple[int, bytes]]] = {}
        for c in w.view.consents:
            U, h = asked.get((c.sender, c.m)), self._vector_h(w, c.sender, c.m)
            if U is not None and h is not None:
                stmts.setdefault((c.m, U, h), []).append((c.sender, c.consent))
        for (m, U, h), sigs in sorted(stmts.items()):
            if len(sigs) >= w.p.t:
                data = self.r.sign(msg.CertificateMsg(T, m, SERVER_ID, U, tuple(sorted(sigs))))
                to = [(i, data) for i, _ in sigs if i in pids]
                if to:
                    yield from self._targets(f"CERTIFICATE U_{m}", to)

    def _mask_request(self, w, pids):
        p = w.p
        # After an iteration whose counts it can read: the next iteration, or the upload.
        for (r, h), (phase, history) in sorted(w.chains.items()):
            if r > p.R_max:
                continue
            key = (w.p, w.view.known, r, h)
            if key not in self._sums:
                self._sums[key] = read_sum(w.view, self._known_secrets(w), r, h)
            plain = self._sums[key]
            if plain is None:
                continue
            dec = Decoys(self.r.decoy_seed(phase), T, p.n, p.k, p.decoys)
            for past in history:
                dec.picks()
                dec.observe(past)
            counts = tuple(int(c) for c in plain + dec.picks())
            # The counts as they are, and a lie that hides one pick (its owner objects).
            hide = next((j for j, c in enumerate(counts) if c == 1), None)
            lies = [("", counts)] + ([(f", slot {hide} hidden", counts[:hide] + (0,) + counts[hide + 1:])]
                                     if hide is not None else [])
            for m in ([r + 1] if r + 1 <= p.R_max else []) + [p.upload_m]:
                for lie, shown in lies:
                    data = self.r.sign(msg.MaskRequest(T, m, SERVER_ID, shown))
                    to = [(i, data) for i in pids
                          if w.parts[i].state.inv.m == r and w.parts[i].state.inv.h.get(r) == h]
                    if to:
                        yield from self._targets(f"MASK_REQUEST {m} (counts of {r}{lie})", to,
                                                 (m, (phase, history + (shown,))))
        # The first request of a slot phase: after a restart, or invocation 2 after complaints.
        for i in pids:
            s = w.parts[i].state
            if s.slots is not None and s.inv.m + 1 == s.slots.start and s.slots.tokens is not None:
                start, phase = s.slots.start, w.phase_of.get(i, 0)
                data = self.r.sign(msg.MaskRequest(T, start, SERVER_ID, ()))
                to = [(j, data) for j in pids if w.parts[j].state.slots is not None
                      and w.parts[j].state.slots.start == start and w.phase_of.get(j, 0) == phase]
                yield from self._targets(f"MASK_REQUEST {start} (slot phase {phase} starts)", to, (start, (phase, ())))
                break
        first = [i for i in pids if w.parts[i].phase is PPhase.AWAIT_FIRST]
        if first and p.R_max >= 2:
            # Iteration 1 abandoned after complaints, with no dealer excluded or with the last member excluded.
            for name, excluded in (("", ()), (f", {first[-1]} excluded", (first[-1],))):
                data = self.r.sign(msg.MaskRequest(T, 2, SERVER_ID, (), excluded))
                yield from self._targets(f"MASK_REQUEST 2 (iteration 1 abandoned{name})", [(i, data) for i in first],
                                         (2, (0, ())))

    def _open_request(self, w, pids):
        rs = sorted({w.parts[i].state.inv.last_certified for i in pids} - {0})
        for r in rs:
            data = self.r.sign(msg.OpenRequest(T, r, SERVER_ID, REASON))
            yield from self._targets(f"OPEN_REQUEST {r}", [(i, data) for i in pids])

    def _restart(self, w, pids):
        by_r: dict[int, list[msg.OpenReveal]] = {}
        for rv in w.view.reveals:
            by_r.setdefault(rv.m, []).append(rv)
        phase = w.phases
        for r, reveals in sorted(by_r.items()):
            members = {reveals[0].sender, *(j for j, _ in reveals[0].peers)}
            silent = tuple(sorted(members - {rv.sender for rv in reveals}))
            sender = self.r.table(phase)
            commit = commitment(T, self.r.decoy_seed(phase))
            for resume in (r + 1, r + 2):
                if resume > w.p.R_max:
                    continue
                data = self.r.sign(msg.Restart(T, resume, SERVER_ID, r, sender.table.encode(), commit, (), silent))
                yield from self._targets(f"RESTART at {resume} after opening {r} (slot phase {phase})",
                                         [(i, data) for i in pids], ("restart", phase))

    def _slot_response(self, w, pids):
        g, out = self.r.group, []
        for i in pids:
            phase = w.phase_of.get(i)
            req = next((q for q in reversed(w.view.slot_requests) if q.sender == i), None)
            if phase is None or req is None:
                continue
            try:
                ot_req = OTRequest.decode(g, req.request, w.p.k)
                sender = self.r.table(phase)
                ans = sender.evaluate(ot_req)
            except ProtocolError:
                continue
            proof = sender.prove(ot_req, ans, ot_proof_context(T), self.r.rng(4, i, phase))
            out.append((i, self.r.sign(msg.SlotResponse(T, req.m, SERVER_ID, ans.encode(), proof.encode(g)))))
        if out:
            yield from self._targets("SLOT_RESPONSE", out)

    def _blame_request(self, w, pids):
        """Opens the decoy seed of the slot phase that placed the upload and asks for the decoy rows' keys."""
        p, up = w.p, w.p.upload_m
        secrets = None
        for i in pids:
            chain = w.pending.get((i, up))
            if chain is None:
                continue
            phase, history = chain
            seed = self.r.decoy_seed(phase)
            dec = Decoys(seed, T, p.n, p.k, p.decoys)
            for counts in history:
                dec.picks()
                dec.observe(counts)
            inv, slots = w.parts[i].state.inv, w.parts[i].state.slots
            secrets = secrets if secrets is not None else self._known_secrets(w)
            vectors, seeds, dropped = [], [], []
            for r in range(slots.start, slots.start + len(slots.counts)):
                h, U = inv.h[r], inv.consented.get(r, ())
                group = sorted((v for v in w.view.vectors if v.m == r and bytes(v.h) == h and v.sender in U),
                               key=lambda v: v.sender)
                vectors.append(tuple(msg.relay_bytes(v) for v in group))
                seeds.append(tuple((j, secrets[(j, r, ShareKind.SELF_SEED)]) for j in U
                                   if (j, r, ShareKind.SELF_SEED) in secrets))
                dropped.append(tuple((j, secrets[(j, r, ShareKind.DH_SECRET)]) for j in inv.mask_sets[r]
                                     if j not in U and (j, r, ShareKind.DH_SECRET) in secrets))
            data = self.r.sign(msg.BlameRequest(T, up, SERVER_ID, seed, tuple(decoy_positions(history, dec.slots)),
                                                tuple(vectors), tuple(seeds), tuple(dropped)))
            yield from self._targets("BLAME_REQUEST", [(j, data) for j in pids])
            return

    # -- the search ---------------------------------------------------------------------------------
    def _check(self, w: _World) -> None:
        up = w.p.upload_m
        for pid in self.honest:
            ev = w.events[pid]
            vecs = [m for kind, m, _ in ev if kind == "vec"]
            twice = sorted({m for m in vecs if vecs.count(m) > 1})
            if twice:
                self._violate("one key, one plaintext", pid, f"two masked vectors for invocation(s) {twice}", w)
            phases_up = {ph for kind, m, ph in ev if kind == "vec" and m == up}
            opened = sorted(r for kind, r, ph in ev if kind == "reveal" and ph in phases_up)
            if opened:
                self._violate("no reveal about an uploaded slot", pid,
                              f"revealed x of iteration(s) {opened} of the slot phase of its model list", w)
            # The round may end here (the PS stops): what the member keeps must match what the PS recorded.
            kept = w.parts[pid].pseudonym is not None
            if pid in w.recorded and not kept:
                self._violate("no honest member silenced", pid, "recorded as issued "
                              f"{ISSUANCE[self.cfg.issuance]}, it keeps no pseudonym: every later round of the "
                              "epoch refuses its second request", w)
            if phases_up and not kept:
                self._violate("never asks twice", pid, "its model list carried its pseudonym and it keeps none: "
                              "its second request names it as the owner of the one that vanished", w)

    def _violate(self, check: str, pid: int, detail: str, w: _World) -> None:
        if not any(v.check == check and v.pid == pid for v in self.report.violations):
            self.report.violations.append(Violation(check, pid, detail, w.path))

    def _leaf(self, w: _World) -> None:
        self.report.schedules += 1
        up = w.p.upload_m
        if any(("vec", up) == e[:2] for pid in self.honest for e in w.events[pid]):
            self.report.uploads += 1
        view = w.view.fork()
        view.tables = tuple(tuple(self.r.table(ph).tokens) for ph in range(max(w.phases, 1)))
        for pid in self.cfg.colluders:
            if w.parts[pid].state.session is not None:
                view.colluders = {**view.colluders, pid: colluder_secrets(w.parts[pid])}
        truth = {i: w.parts[i].view.row_tags for i in self.honest if w.parts[i].view.row_tags}
        key = (w.p, view.known, view.tables, tuple(sorted(truth.items())),
               tuple(w.inbox[c] for c in self.cfg.colluders))
        if key not in self._links:
            self._links[key] = correct_links(link(view), truth)
        linked = self._links[key]
        self.report.links = max(self.report.links, len(linked))
        self.report.best = max(self.report.best, (len(linked), len(truth)))
        if linked:
            self._violate("no link", linked[0], f"the PS linked the models of {linked}", w)
        if self.cfg.forge:
            fkey = (w.p, view.known, tuple(w.inbox[c] for c in self.cfg.colluders))
            if fkey not in self._forged:
                forged, tried = forged_evidence([view], self.honest, self.r.keys, self._checked, every_kind=False)
                self._forged[fkey] = forged
                self.report.evidence_tried += tried
            for f in self._forged[fkey]:
                self._violate("nobody honest named", f.pid, f"a checker accepts forged evidence: {f}", w)

    #: Called with the number of distinct states seen so far, every 100 states (a progress display).
    on_states: Callable[[int], None] | None = None

    def _successors(self, w: _World):
        for name, deliveries, chain in self.moves(w):
            child = self._apply(w, name, deliveries, chain)
            if child is not None and move_kind(name) == "ROUND_START":
                self.report.announced = sorted({*self.report.announced, (child.p.c, child.p.t)})
            yield name, child

    def _schedule_end(self, w: _World) -> bool:
        """Judge a schedule's end; True (stop) once every honest model is linked, if the search is for that."""
        self._leaf(w)
        linked, honest = self.report.best
        return self.cfg.until_all_linked and 0 < honest == linked

    def run(self) -> ExploreReport:
        t0 = time.perf_counter()
        N = self.cfg.N
        root = _World(self.r.p, dict(self.r.parts), {i: bytes(32) for i in range(N)}, {i: frozenset() for i in range(N)},
                      PSView(self.r.p, T), (), {}, {}, {}, 1, {i: () for i in range(N)})
        self.report.states = depth_first(root, self._successors, key=_World.key, check=self._check,
                                         leaf=self._schedule_end, depth=self.cfg.depth, budget=self.cfg.budget,
                                         report=self.report, on_states=self.on_states)
        self.report.seconds = time.perf_counter() - t0
        return self.report


#: PS messages the explorer builds no move for, and why.
NOT_BUILT: dict[MsgType, str] = {
    MsgType.DISPUTE: "a dispute with a colluder reveals a pair key the colluder's secrets give the PS anyway; one with "
                     "an honest partner needs its signed opening that conflicts, which an honest member never signs",
}


def builder_name(t: MsgType) -> str:
    """The explorer's builder of a PS message: ``_<message type>``."""
    return "_" + t.name.lower()


# One builder per message some step of the schedule sends, unless listed in NOT_BUILT: a message added to the
# schedule without a builder or a reason fails here, at import.
_BUILDERS = {t: getattr(Explorer, builder_name(t)) for t in sorted(PS_SENDS) if t not in NOT_BUILT}


def explore(cfg: ExploreConfig = ExploreConfig(), participant_cls: type[Participant] = Participant,
            on_states: Callable[[int], None] | None = None) -> ExploreReport:
    """Search the PS's schedules over one small round; see the module docstring. ``on_states`` is called
    with the distinct states seen so far, every 100 states."""
    ex = Explorer(cfg, participant_cls)
    ex.on_states = on_states
    return ex.run()
