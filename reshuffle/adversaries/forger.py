"""An evidence forger: the PS writes evidence against honest members from what it holds.

A participant is named only with evidence that a third party checks from the roster's keys
(:func:`~reshuffle.protocol.blame.verify_evidence`,
:func:`~reshuffle.protocol.opening.verify_count_evidence`,
:func:`~reshuffle.protocol.complaints.verify_share_evidence`). The evidence is assembled by
the PS, so every field a checker reads but the accused did not sign is the PS's to choose.

The forger holds what a PS holds after one or more rounds with the same roster (a
:class:`~reshuffle.adversaries.linker.PSView` per round: every signed message the
participants sent it, the secrets it rebuilt or its colluders gave it, their signing keys).
For each honest member and each evidence kind it assembles the strongest evidence it can:
the member's own signed messages, the values the PS knows (self seeds, positions, counts),
a pair key and its DLEQ proof from a colluding partner. Then it changes each field the
checker reads, one at a time, to every value it can find or make: another of the member's
messages (of this round or another), another h, seed, position, partner, iteration, count
vector or set, a pair key proved under a second key of the colluder, a flipped byte. A
**forgery** is a candidate the checker accepts against an honest member; none may exist.

``forge-evidence`` (a PS behaviour, so ``reshuffle redteam`` plays it) runs a round that
collects every kind of signed statement an honest member makes (a colluder's complaints about
every dealer, an opening of a reservation iteration, a blame step with openings of the decoy
rows), then runs the forger on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from reshuffle.adversaries.base import Verdict, register_adversary
from reshuffle.adversaries.linker import PSView, secrets_of
from reshuffle.adversaries.ps import LinkingPS, _DCForcedBlame, _ForcedBlame, colluder_secrets
from reshuffle.crypto import voprf
from reshuffle.crypto.rand import OS_RANDOM, SeededRandom
from reshuffle.errors import ProtocolError
from reshuffle.protocol import complaints as cpl
from reshuffle.protocol import messages as msg
from reshuffle.protocol import opening
from reshuffle.protocol.blame import KIND_FALSE_OPENING, KIND_NONZERO, Evidence, dispute_context, verify_evidence
from reshuffle.protocol.messages import ShareKind
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.participant import Participant

CHECKERS = {Evidence: verify_evidence, opening.CountEvidence: opening.verify_count_evidence,
            cpl.ShareEvidence: cpl.verify_share_evidence}
_COUNT_FIELDS = ("pid", "r", "advert", "vector", "reveal", "self_seed")
#: the fields each kind's checker reads (the others never enter its verdict; the property tests vary them too)
READS = {
    KIND_NONZERO: ("pid", "position", "advert", "opening", "upload_header", "upload_h", "row_hashes", "row",
                   "upload_signature", "self_seed"),
    KIND_FALSE_OPENING: ("pid", "position", "advert", "opening", "upload_h", "partner", "secret", "proof"),
    opening.KIND_BAD_COUNT: _COUNT_FIELDS,
    opening.KIND_FALSE_OBJECTION: (*_COUNT_FIELDS, "objection", "counts", "certified"),
    cpl.KIND_BAD_COMMITMENT: ("pid", "advert", "bundle"),
    cpl.KIND_BAD_ANSWER: ("pid", "advert", "bundle", "message", "subject"),
}


@dataclass(frozen=True)
class Forgery:
    """One candidate: the evidence kind, the field changed from the assembled evidence ("assembled" for
    none), the participant it names and the evidence itself."""

    kind: str
    field: str
    pid: int
    evidence: object

    def __str__(self) -> str:
        return f"{self.kind} against {self.pid} ({self.field})"


def check(ev, keys, params) -> None:
    """The third party's check of any evidence kind: raises a ProtocolError unless it names ``ev.pid``."""
    CHECKERS[type(ev)](ev, keys, params)


def accepted(views: list[PSView], honest: Iterable[int], keys, memo: dict | None = None, every_kind: bool = True
             ) -> tuple[list[Forgery], int]:
    """(the forgeries the checkers accept, the candidates tried), over every view's round.

    A checker that raises anything but a :class:`ProtocolError` on a candidate is a forgery too: a third
    party must refuse forged evidence, never crash on it. ``memo`` keeps each distinct candidate's
    verdict across calls (the explorer forges at every leaf, from overlapping knowledge). Without
    ``every_kind``, a kind is skipped when the member sent none of a message its checker needs signed
    (an OPEN_REVEAL, an OBJECTION, a COMPLAINT_ANSWER): every candidate of it fails that signature."""
    memo = {} if memo is None else memo
    found, tried = [], 0
    for v in views:
        for f in forge(v, views, honest, every_kind):
            tried += 1
            key = (v.params, f.evidence)
            if key not in memo:
                memo[key] = _verdict(f.evidence, keys, v.params)
            if memo[key] is not None:
                found.append(dataclasses.replace(f, field=f.field + memo[key]))
    return found, tried


def _verdict(ev, keys, params) -> str | None:
    """None if the checker refuses ``ev``; what is wrong if it accepts it (or crashes on it)."""
    try:
        check(ev, keys, params)
    except ProtocolError:
        return None
    except Exception as exc:  # noqa: BLE001  (a crash is a finding, not a refusal)
        return f"; checker raised {type(exc).__name__}: {exc}"
    return ""


# --------------------------------------------------------------------------------------- the material
def _signed(m: msg.Message) -> bytes:
    return msg.relay_bytes(m)


def _of(views: list[PSView], pid: int, kind: type) -> list[msg.Message]:
    """Every message of ``pid`` of type ``kind`` the PS holds, in every round."""
    out = []
    for v in views:
        if kind is msg.Advertise:
            got = [v.adverts[pid]] if pid in v.adverts else []
        elif kind is msg.ShareBundle:
            got = [v.bundles[pid]] if pid in v.bundles else []
        else:
            name = {msg.MaskedInput: "vectors", msg.OpenReveal: "reveals", msg.ComplaintAnswer: "answers",
                    msg.Opening: "openings", msg.Objection: "objections"}[kind]
            got = [m for m in getattr(v, name) if m.sender == pid]
        out += got
    return out


def _everything(views: list[PSView], pid: int) -> list[bytes]:
    """Every signed message of ``pid``, of any type and round."""
    kinds = (msg.Advertise, msg.ShareBundle, msg.MaskedInput, msg.OpenReveal, msg.ComplaintAnswer, msg.Opening,
             msg.Objection)
    return list(dict.fromkeys(_signed(m) for k in kinds for m in _of(views, pid, k)))


def _flip(b: bytes) -> list[bytes]:
    return [b[:-1] + bytes([b[-1] ^ 1])] if b else [bytes(32)]


@dataclass
class _Round:
    """One round's material, with pools of values drawn from every round the forger holds."""

    v: PSView
    views: list[PSView]
    secrets: dict
    every_kind: bool = True

    @property
    def p(self):
        return self.v.params

    def hashes(self) -> list[bytes]:
        hs = [bytes(m.h) for w in self.views for m in (*w.vectors, *w.objections, *w.openings)]
        return list(dict.fromkeys(hs)) + [bytes(32)]

    def seeds(self, pid: int) -> list[int]:
        """Every self seed or DH secret the PS knows, this member's first (any round, any invocation)."""
        own = [s for (i, _, _), s in sorted(self.secrets.items(), key=lambda kv: (kv[0][0] != pid, kv[0][1]))
               if i == pid]
        rest = [s for (i, _, _), s in self.secrets.items() if i != pid][:8]
        return list(dict.fromkeys(own + rest + [1]))

    def colluder_partners(self) -> dict[int, dict]:
        return {j: c for j, c in self.v.colluders.items() if "sk" in c}



def forge(v: PSView, views: list[PSView], honest: Iterable[int], every_kind: bool = True) -> Iterator[Forgery]:
    """Every candidate against each honest member of round ``v``, with values from all ``views``
    (see :func:`accepted` for ``every_kind``)."""
    rd = _Round(v, views, secrets_of(v), every_kind)
    for i in sorted(honest):
        if i in v.adverts:
            yield from _blame_evidence(rd, i)
            yield from _count_evidence(rd, i)
            yield from _share_evidence(rd, i)


def _vary(kind: str, pid: int, base, candidates: dict[str, list]) -> Iterator[Forgery]:
    """The assembled evidence, then each field the checker reads, one at a time, to each candidate value
    (and a generic corruption)."""
    yield Forgery(kind, "assembled", pid, base)
    names = {f.name for f in dataclasses.fields(base)}
    for f in dataclasses.fields(base):
        if f.name not in READS[kind]:
            continue
        now = getattr(base, f.name)
        values = list(candidates.get(f.name, []))
        if isinstance(now, bytes):
            values += _flip(now)
        elif isinstance(now, int) and not isinstance(now, bool):
            values += [now + 1, max(now - 1, 0)]
        elif isinstance(now, tuple) and now:
            values += [now[:-1], now[::-1]]
        for val in values:
            if f.name in names and val != now:
                yield Forgery(kind, f.name, pid, dataclasses.replace(base, **{f.name: val}))


# --------------------------------------------------------------------------------------- §9 evidence
def _blame_evidence(rd: _Round, i: int) -> Iterator[Forgery]:
    v, p, g = rd.v, rd.p, rd.p.group_obj()
    M = p.upload_m
    ops = [op for op in v.openings if op.sender == i]
    ups = [u for u in v.vectors if u.sender == i and u.m == M]
    if not ops or not ups:
        return
    op, up = ops[0], ups[0]
    adv = v.adverts[i]
    pos = op.rows[0][0] if op.rows else 0
    words = np.frombuffer(up.words, dtype=np.uint8).reshape(up.rows, -1)
    hashes = tuple(up._hashes())
    seed = rd.secrets.get((i, M, ShareKind.SELF_SEED), 0)
    common = {"pid": i, "position": pos, "advert": _signed(adv), "opening": _signed(op)}
    advs = [_signed(a) for a in _of(rd.views, i, msg.Advertise)]
    opens = [_signed(o) for o in _of(rd.views, i, msg.Opening)]
    positions = list(range(up.rows + 2))
    nonzero = Evidence(KIND_NONZERO, **common, upload_header=up.header(), upload_h=bytes(up.h), row_hashes=hashes,
                       row=words[pos % up.rows].tobytes(), upload_signature=up._signature, self_seed=seed)
    others = [u for u in _of(rd.views, i, msg.MaskedInput) if u is not up]
    yield from _vary(KIND_NONZERO, i, nonzero, {
        "position": positions, "advert": advs, "opening": opens,
        "upload_header": [u.header() for u in others], "upload_h": rd.hashes(),
        "row_hashes": [hashes[1:] + hashes[:1], tuple(hashlib.sha256(bytes(len(nonzero.row))).digest()
                                                       for _ in hashes)],
        "row": [r.tobytes() for r in words] + [bytes(len(nonzero.row))],
        "upload_signature": [u._signature for u in others], "self_seed": rd.seeds(i),
    })
    # Another round's advertisement with that round's self seed (both the member's own).
    for w in rd.views:
        if w is not v and i in w.adverts:
            s = secrets_of(w).get((i, M, ShareKind.SELF_SEED))
            if s is not None:
                yield Forgery(KIND_NONZERO, "advert and self_seed of another round", i,
                              dataclasses.replace(nonzero, advert=_signed(w.adverts[i]), self_seed=s))
    # A false opening: a colluding partner proves K_ij = X_i^{x_j}; every field is then the PS's to vary.
    X_i = adv.mask_keys[M - 1]
    for j, sec in rd.colluder_partners().items():
        x_j = sec.get((M, ShareKind.DH_SECRET))
        if x_j is None or j == i or j not in v.adverts:
            continue
        for label_, x in _partner_keys(rd, j, x_j):
            K = X_i ** x
            proof = voprf.prove_dleq(x, g.generator(), g.base_mul(x), [X_i], [K], SeededRandom(x, b"forger"),
                                     dispute_context(op.T, i, j))
            ev = Evidence(KIND_FALSE_OPENING, **common, upload_h=bytes(op.h), partner=j, secret=K.to_bytes(),
                          proof=proof.encode(g))
            if label_:
                yield Forgery(KIND_FALSE_OPENING, label_, i, ev)
                continue
            yield from _vary(KIND_FALSE_OPENING, i, ev, {
                "position": positions, "advert": advs, "opening": opens, "upload_h": rd.hashes(),
                "partner": sorted(set(range(p.N)) - {i}),
            })


def _partner_keys(rd: _Round, j: int, x_j: int) -> list[tuple[str, int]]:
    """The colluder's x_j, and a second key x' it could advertise for the same round (a colluder may sign as
    many advertisements as it likes): a K_ij proved under either."""
    return [("", x_j), ("partner's second key", (x_j * 7 + 3) % rd.p.group_obj().order)]


# --------------------------------------------------------------------------------------- §8.2 evidence
def _count_evidence(rd: _Round, i: int) -> Iterator[Forgery]:
    v, p = rd.v, rd.p
    reveals = [r for r in v.reveals if r.sender == i]
    vectors = [u for u in v.vectors if u.sender == i and u.m <= p.R_max]
    if not vectors or not (rd.every_kind or _of(rd.views, i, msg.OpenReveal)):
        return
    rv = reveals[0] if reveals else None
    r = rv.m if rv is not None else vectors[0].m
    vec = next((u for u in vectors if u.m == r), vectors[0])
    objections = [_signed(o) for o in _of(rd.views, i, msg.Objection)]
    sets = list(dict.fromkeys(tuple(s) for s in v.mask_sets.values())) + [tuple(range(p.N))]
    counts = [tuple([0] * p.n), tuple([1] * p.n)]
    base = opening.CountEvidence(
        opening.KIND_BAD_COUNT, i, r, _signed(v.adverts[i]), _signed(vec), _signed(rv) if rv else b"",
        rd.secrets.get((i, r, ShareKind.SELF_SEED), 0), objections[0] if objections else b"", counts[0],
        sets[0] if sets else (),
    )
    pools = {
        "r": list(range(1, p.upload_m + 1)), "advert": [_signed(a) for a in _of(rd.views, i, msg.Advertise)],
        "vector": [_signed(u) for u in _of(rd.views, i, msg.MaskedInput)],
        "reveal": [_signed(x) for x in _of(rd.views, i, msg.OpenReveal)], "self_seed": rd.seeds(i),
        "objection": objections + _everything(rd.views, i)[:4], "counts": counts, "certified": sets,
    }
    for kind in (opening.KIND_BAD_COUNT, opening.KIND_FALSE_OBJECTION):
        if kind == opening.KIND_BAD_COUNT or rd.every_kind or objections:
            yield from _vary(kind, i, dataclasses.replace(base, kind=kind), pools)


# --------------------------------------------------------------------------------------- §6.4 evidence
def _share_evidence(rd: _Round, i: int) -> Iterator[Forgery]:
    v = rd.v
    if i not in v.bundles:
        return
    answers = [_signed(a) for a in _of(rd.views, i, msg.ComplaintAnswer)]
    first = next((a for a in v.answers if a.sender == i), None)
    subject = first.shares[0][0] if first is not None and first.shares else 0
    base = cpl.ShareEvidence(cpl.KIND_BAD_COMMITMENT, i, _signed(v.adverts[i]), _signed(v.bundles[i]),
                             _signed(first) if first is not None else b"", subject)
    pools = {
        "advert": [_signed(a) for a in _of(rd.views, i, msg.Advertise)],
        "bundle": [_signed(b) for b in _of(rd.views, i, msg.ShareBundle)],
        "message": answers + _everything(rd.views, i)[:4], "subject": list(range(rd.p.N)),
    }
    for kind in (cpl.KIND_BAD_COMMITMENT, cpl.KIND_BAD_ANSWER):
        if kind == cpl.KIND_BAD_COMMITMENT or rd.every_kind or answers:
            yield from _vary(kind, i, dataclasses.replace(base, kind=kind), pools)


# --------------------------------------------------------------------------------------- several rounds
@dataclass
class Holdings:
    """What a forging PS holds after :func:`play_rounds`: its view of each round (colluders' secrets
    included), the honest participants and the roster keys a third party checks with."""

    views: list[PSView]
    honest: list[int]
    keys: dict


def play_rounds(N: int = 8, rounds: int = 2, d: int = 4, seed: int | None = None, colluders: tuple[int, ...] = (1,),
                participant_cls: type[Participant] = Participant) -> Holdings:
    """Play ``forge-evidence`` for ``rounds`` rounds T = 1, 2, ... with one roster (one CA, the same
    long-term keys) and fresh round randomness each time, as a PS running a federation would.

    ``seed`` makes it reproducible (a cryptographic PRG is seeded; without it OS randomness)."""
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner

    src = SeededRandom(seed, b"forger/rounds") if seed is not None else OS_RANDOM
    ident_seed = int.from_bytes(src.bytes(8), "big")
    data = np.random.default_rng(ident_seed)  # model values only
    ups = [data.normal(size=d).astype(np.float32) for _ in range(N)]
    views, keys = [], {}
    for T in range(1, rounds + 1):
        fresh = {i: SeededRandom(src.bytes(32), b"participant") for i in range(N)}

        def make(pid, T_, model, sk, cert, ca, gh, _rng, cls=participant_cls, **kw):
            return cls(pid, T_, model, sk, cert, ca, gh, fresh[pid], **kw)

        b = ForgeEvidence(colluders)
        b.colluder_class = lambda pid, *a, **kw: make(pid, *a, cls=Participant, **kw)
        # Slots to spare: the decoys settle (so the blame step has decoy rows to open) all but never fail to.
        p = RoundParams.default(N, d, n=256)
        server, parts = build_round(ups, p, seed=ident_seed, T=T, participant_cls=make, adversaries=[b])
        InProcessRunner(server, parts).run()
        views += b.views()
        keys = {pid: c.key for pid, c in server._roster.items()}
    return Holdings(views, [i for i in range(N) if i not in colluders], keys)


# --------------------------------------------------------------------------------------- the PS behaviour
@register_adversary("forge-evidence")
class ForgeEvidence(LinkingPS):
    """Collects every kind of signed statement an honest member makes, then forges evidence against it.

    With one colluder: the colluder complains about every honest dealer (each publishes that share),
    the PS opens the first certified reservation iteration (every member reveals x_r) and restarts,
    and forces the blame step after the upload (every member opens its keys of the decoy rows; the
    colluder proves any pair key the forger needs).
    """

    stopped_by = "every checker reads only what the accused signed (docs/protocol.md §9, §8.2, §6.4)"

    def __init__(self, colluders: tuple[int, ...] = (1,)) -> None:
        super().__init__()
        self.colluders = tuple(colluders)
        self.tried = 0
        self.forged: list[Forgery] = []

    dc_outcome = "linked nobody; no forged DCEvidence checks against an honest member"

    class dc_class(_DCForcedBlame):
        """Forces the blame step of the decoys' rows on a clean round (every member opens its keys there)."""

    def dc_holds(self, result, honest, server=None) -> Verdict:
        from reshuffle.adversaries.dcteam import verdict

        v = verdict(self, result, honest, server, claim="linked nobody")
        tried, forged = dc_forge(server, [i for i in honest if i not in self.colluders])
        v.holds = v.holds and tried > 0 and not forged
        v.detail += f"; DCEvidence candidates against honest members: {tried}, accepted: {forged or 'none'}"
        return v

    class server_class(_ForcedBlame):
        _opened = False

        def _on_ot_request(self, st, sender, m):
            super()._on_ot_request(st, sender, m)
            if sender in self.behaviour.colluders:
                for dealer in self.online[0]:
                    if dealer not in self.behaviour.colluders:
                        st.complaints.setdefault(dealer, set()).add(sender)

        def _publish(self, st, counts_v):
            if not self._opened and st.m < self.params.R_max:
                self._opened = True
                return self._open(st.sum, st.m, "the PS asks")
            return super()._publish(st, counts_v)

    def views(self) -> list[PSView]:
        """Its view of the round (of each group's round), its colluders' secrets filed in."""
        secrets = {pid: colluder_secrets(p) for pid, p in self.coalition.items() if p.state.session is not None}
        for s in self.servers:
            s.view.colluders = {**s.view.colluders, **secrets}
        return [s.view for s in self.servers]

    def forge(self, honest) -> list[Forgery]:
        """Run the forger over every round this PS played (each group's, in a round in groups)."""
        keys = {pid: c.key for s in self.servers for pid, c in s._roster.items()}
        self.forged, self.tried = accepted(self.views(), honest, keys)
        return self.forged

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        forged = self.forge(honest)
        v.wrong = sorted(set(v.wrong) | {f.pid for f in forged})
        v.holds = v.holds and not forged
        kinds = sorted({f"{f.kind} ({f.field})" for f in forged})
        v.detail += f"; forged evidence: {len(forged)} of {self.tried} candidates accepted" + (
            f": {'; '.join(kinds[:6])}" if kinds else "")
        return v



def dc_forge(server, honest) -> tuple[int, list[tuple[int, str]]]:
    """DCEvidence the PS assembles against each honest member from what it holds after a DC-net round's blame
    step (every upload, its kept decoy rows, every signed opening): the member's own statement and opening at
    each decoy row, and each field changed to another value it holds (another row, position, h, member's
    opening, a flipped byte). (candidates tried, the (member, candidate) the checker accepted)."""
    from reshuffle.protocol import dcnet

    tried, forged = 0, []
    for s in server.servers.values():
        keys = {i: c.key for i, c in s._roster.items()}
        ops = {i: msg.relay_bytes(op) for i, op in s.openings.items()}
        for i in (j for j in honest if j in s._kept and j in ops):
            header, h, hashes, sig, rows = s._kept[i]
            base = dcnet.DCEvidence(i, 0, header, h, hashes, sig, b"", ops[i])
            cands = []
            for pos, row in rows.items():
                cands.append(dataclasses.replace(base, position=pos, row=row))
                cands.append(dataclasses.replace(base, position=pos, row=bytes([row[0] ^ 1]) + row[1:]))
                cands += [dataclasses.replace(base, position=pos, row=row, opening=o) for j, o in ops.items() if j != i]
                cands += [dataclasses.replace(base, position=pos, row=r2) for j, (*_, rs) in s._kept.items()
                          if j != i for r2 in rs.values()]
                cands.append(dataclasses.replace(base, position=pos, row=row, h=bytes(len(h))))
                cands += [dataclasses.replace(base, position=q, row=row) for q in range(len(hashes)) if q != pos]
            for ev in cands:
                tried += 1
                try:
                    dcnet.verify_dc_evidence(ev, keys, s.params, s.T)
                    forged.append((i, f"position {ev.position}"))
                except (dcnet.InvalidEvidence, ProtocolError):
                    pass
    return tried, forged
