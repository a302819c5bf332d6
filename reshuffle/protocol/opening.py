"""Count checks and opening a failed reservation iteration (docs/protocol.md §8.2).

After iteration r is unmasked the PS checks the counts it is about to publish:
each count and their sum are at most B, the number of parties that can still be
picking (|U_r| + d, less the slots already settled in this slot phase whose
owners cannot all have dropped); every such party adds at most one. Each participant checks the same bound on what it is shown and
that its own pick shows a count >= 1; if not, it sends a signed
:class:`~reshuffle.protocol.messages.Objection` instead of its next vector.

A failed iteration is opened: every member of U_r reveals x_{i,r} (checked
against X_{i,r}) and the partner keys it masked against, signed. With the self
seeds the unmasking already revealed, the PS recomputes each member's plaintext
count vector; one that is not one-hot or zero names its sender, and an
objection that the objector's own vector or the counts it was shown contradict
names the objector. Each name comes with a :class:`CountEvidence` that a third
party checks with :func:`verify_count_evidence` from the roster's keys alone:
everything in it is signed by the culprit or fixed by a hash it signed. Members
that do not reveal are dropped, never named. The slot phase then restarts
without them (new OT table and β, new decoys; the credential stays), so no member that sent
its model list takes part: an opening comes before the upload of its slot phase or ends
the round, so the picks it exposes are never the slots of an upload.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reshuffle.errors import AlreadyAnswered, DecodeError, Refused, UnexpectedMessage
from reshuffle.protocol import messages as msg
from reshuffle.protocol.evidence import advert_of, one_round, signed_by
from reshuffle.protocol.masking import pair_row_key, pair_secret, row_mask
from reshuffle.protocol.transcript import Transcript
from reshuffle.wire import Parser, Writer

KIND_BAD_COUNT = "count vector neither one-hot nor zero"
KIND_FALSE_OBJECTION = "false objection"
_KINDS = (KIND_BAD_COUNT, KIND_FALSE_OBJECTION)


def count_bound(members: int, decoys: int, settled: int = 0, dropped: int = 0) -> int:
    """B: the most any count, or the sum of counts, of one iteration can be.

    ``members`` = |U_r|; ``settled`` slots settled earlier in this slot phase (each by a
    distinct party that now submits zeros); ``dropped`` members of the phase's first mask
    set missing from U_r (at most that many settled owners are gone).
    """
    return members + decoys - max(0, settled - dropped)


def slots_done(members: int, decoys: int, settled: int, dropped: int) -> bool:
    """After an iteration's counts: no party can still be picking (the bound of the next iteration is 0).

    Both sides compute it from the certified U_r and the published counts, so the reservation
    ends early at the same point for everyone (docs/protocol.md §5 step 3).
    """
    return count_bound(members, decoys, settled, dropped) <= 0


def check_counts(counts, bound: int) -> str | None:
    """Why ``counts`` cannot come from one-hot-or-zero vectors of ``bound`` parties, or None."""
    c = np.asarray(counts, dtype=np.uint64)
    if c.size and int(c.max()) > bound:
        return f"count {int(c.max())} at slot {int(c.argmax())} exceeds the bound {bound}"
    if int(c.sum()) > bound:
        return f"the counts sum to {int(c.sum())}, more than the bound {bound}"
    return None


def bad_form(v: np.ndarray) -> str | None:
    """Why a plaintext count vector is neither one-hot nor zero, or None."""
    big = np.flatnonzero(v > 1)
    if big.size:
        return f"value {int(v[big[0]])} at slot {int(big[0])}"
    ones = np.flatnonzero(v == 1)
    if ones.size > 1:
        return f"{ones.size} slots marked ({', '.join(map(str, ones[:4].tolist()))}...)"
    return None


def plaintext(group, vector: msg.MaskedInput, reveal: msg.OpenReveal, b: int) -> np.ndarray:
    """The count vector under ``vector``: its masked words minus the self stream and the pair streams
    that the sender's revealed x and claimed partners fix."""
    T, r, i, h = vector.T, vector.m, vector.sender, vector.h
    keys = {j: pair_row_key(pair_secret(reveal.x, X), T, r, i, j, h, 0) for j, X in reveal.peers if j != i}
    y = np.frombuffer(vector.words, dtype=np.uint32)
    return y - row_mask(group, T, r, i, b, keys, h, 0, y.size, np.dtype(np.uint32))


@dataclass(frozen=True)
class CountEvidence:
    """Why ``pid`` is named for iteration ``r``: its signed advert, count vector and reveal, its
    self seed (checked against the advert), and for an objection the objection with the counts and
    the certified U_r that chain its h_r to the objection's h_{r+1}."""

    kind: str
    pid: int
    r: int
    advert: bytes
    vector: bytes
    reveal: bytes
    self_seed: int
    objection: bytes = b""
    counts: tuple[int, ...] = ()
    certified: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"{self.kind} in reservation iteration {self.r} (its signed vector, reveal and self seed)"

    def encode(self) -> bytes:
        w = Writer().u8(_KINDS.index(self.kind)).u32(self.pid).u32(self.r)
        w.var(self.advert).var(self.vector).var(self.reveal).fixed(self.self_seed.to_bytes(32, "big"), 32)
        w.var(self.objection).u32_list(self.counts).u32_list(self.certified)
        return w.bytes()

    @classmethod
    def decode(cls, data: bytes) -> "CountEvidence":
        p = Parser(data, "count evidence")
        kind = p.u8("kind")
        if kind >= len(_KINDS):
            raise DecodeError(f"unknown evidence kind {kind}")
        pid, r = p.u32("pid"), p.u32("r")
        advert, vector, reveal = p.var("advert", 1 << 20), p.var("vector", 1 << 24), p.var("reveal", 1 << 20)
        seed = int.from_bytes(p.fixed(32, "self seed"), "big")
        objection = p.var("objection", 1024)
        counts, certified = tuple(p.u32_list("counts", 1 << 20)), tuple(p.u32_list("certified", 1 << 16))
        p.finish()
        return cls(_KINDS[kind], pid, r, advert, vector, reveal, seed, objection, counts, certified)


def verify_count_evidence(ev: CountEvidence, keys, params) -> np.ndarray:
    """Check evidence from the roster's keys alone and return the culprit's plaintext vector.

    Everything it reads is the culprit's: its advertisement (under ``params``), count vector, reveal and
    objection, all of one round, and the counts and U_r, fixed by the hash chain from the vector's
    h_r to the objection's h_{r+1}. Raises Refused, DecodeError or InvalidSignature when the evidence
    does not name ``ev.pid``.
    """
    g = params.group_obj()
    ctx = msg.Context(g, params)
    adv = advert_of(ev.advert, ev.pid, keys, params, ctx)
    vec = signed_by(ev.vector, msg.MaskedInput, ev.pid, keys, ctx, "the count vector")
    rev = signed_by(ev.reveal, msg.OpenReveal, ev.pid, keys, ctx, "the reveal")
    one_round(adv, vec, rev)
    if not 1 <= ev.r <= params.R_max or (vec.m, rev.m) != (ev.r, ev.r):
        raise Refused(f"count evidence is not about reservation iteration {ev.r}")
    if vec.rows != 1 or len(vec.words) != 4 * params.n:
        raise Refused("count evidence holds a vector that is not one count vector")
    msg.check_rows(vec)
    if g.base_mul(rev.x) != adv.mask_keys[ev.r - 1] or g.base_mul(ev.self_seed) != adv.seed_commits[ev.r - 1]:
        raise Refused(f"revealed x or self seed of {ev.pid} does not match its commitments")
    plain = plaintext(g, vec, rev, ev.self_seed)
    if ev.kind == KIND_BAD_COUNT:
        if bad_form(plain) is None:
            raise Refused(f"the count vector of {ev.pid} is one-hot or zero: nothing to blame")
        return plain
    if ev.kind != KIND_FALSE_OBJECTION:
        raise DecodeError(f"unknown evidence kind {ev.kind!r}")
    obj = signed_by(ev.objection, msg.Objection, ev.pid, keys, ctx, "the objection")
    one_round(vec, obj)
    # The request after iteration r's counts is iteration r + 1's, or the upload's when they settled everyone.
    if obj.m not in (ev.r + 1, params.upload_m):
        raise Refused("count evidence holds no objection of the culprit to this iteration")
    if len(ev.counts) != params.n:
        raise Refused(f"count evidence holds {len(ev.counts)} counts, the round has n={params.n}")
    tx = Transcript.at(vec.h)
    tx.absorb_certified(ev.r, ev.certified)
    if tx.absorb_counts(obj.m, ev.counts) != obj.h:
        raise Refused("the counts in the evidence are not the ones the objector was shown")
    if plain[obj.slot] == 1 and ev.counts[obj.slot] == 0:
        raise Refused(f"the objection of {ev.pid} is true: its pick {obj.slot} shows count 0")
    return plain


class OpeningCollector:
    """The PS side of opening iteration r: reveals in, evidence and the silent out."""

    def __init__(self, group, params, r: int, members, adverts, vectors: dict[int, bytes], seeds: dict[int, int],
                 objections: dict[int, bytes], counts=(), certified=()) -> None:
        self.g, self.p, self.r = group, params, r
        self.members = sorted(members)
        self.adverts, self.vectors, self.seeds = adverts, vectors, seeds
        self.objections, self.counts, self.certified = objections, tuple(counts), tuple(certified)
        self.reveals: dict[int, bytes] = {}

    def on_reveal(self, sender: int, rv: msg.OpenReveal) -> None:
        if sender not in self.members:
            raise UnexpectedMessage(f"open reveal from {sender}, who is not in U_{self.r}")
        if sender in self.reveals:
            raise AlreadyAnswered(f"second open reveal from {sender}")
        if self.g.base_mul(rv.x) != self.adverts[sender].mask_keys[self.r - 1]:
            raise Refused(f"x revealed by {sender} does not match its X_{sender},{self.r}")
        self.reveals[sender] = msg.relay_bytes(rv)

    def result(self) -> tuple[dict[int, CountEvidence], list[int]]:
        """(culprit → evidence, members that did not reveal)."""
        ctx = msg.Context(self.g, self.p)
        evidence = {}
        for i, raw in sorted(self.reveals.items()):
            vec = msg.decode(self.vectors[i], ctx)
            plain = plaintext(self.g, vec, msg.decode(raw, ctx), self.seeds[i])
            common = (i, self.r, msg.relay_bytes(self.adverts[i]), self.vectors[i], raw, self.seeds[i])
            if bad_form(plain) is not None:
                evidence[i] = CountEvidence(KIND_BAD_COUNT, *common)
            elif i in self.objections:
                slot = msg.decode(self.objections[i], ctx).slot
                if not (plain[slot] == 1 and self.counts[slot] == 0):
                    evidence[i] = CountEvidence(KIND_FALSE_OBJECTION, *common, self.objections[i], self.counts,
                                                self.certified)
        return evidence, sorted(set(self.members) - set(self.reveals))


__all__ = [
    "KIND_BAD_COUNT", "KIND_FALSE_OBJECTION", "CountEvidence", "OpeningCollector", "bad_form", "check_counts",
    "count_bound", "plaintext", "slots_done", "verify_count_evidence",
]
