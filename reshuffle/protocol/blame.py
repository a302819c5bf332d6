"""Blame for rows (docs/protocol.md §9): audit, openings, disputes and checkable evidence.

After the upload is unmasked, a nonzero row that fails its token, credential or
tag, or a nonzero decoy row, starts the blame step. Decoy rows are rows no
participant owns, so every honest upload holds zeros there. The PS opens the
decoy seed; each participant audits every reservation iteration (published
counts = real counts + decoy picks) and, only if that holds, opens its per-row
pairwise keys of the decoy rows, signed. It never opens its own position. From
the signed masked uploads, the self seeds and the openings the PS computes each
participant's plaintext at each decoy row: a nonzero one names its sender. Two
openings of one pair that disagree make a dispute: each side is shown the
other's signed opening and the honest one reveals ``K_ij`` with a DLEQ proof
against ``X_i`` and ``X_j``, which names the liar. A participant that cannot
answer is a suspect, never a culprit.

Everything a culprit is named with is an :class:`Evidence` that a third party
checks with :func:`verify_evidence` from the roster's keys alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reshuffle.crypto import voprf
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group
from reshuffle.crypto.signatures import SERVER_ID, VerifyKey
from reshuffle.errors import AlreadyAnswered, DecodeError, InvalidProof, Refused
from reshuffle.protocol import messages as msg
from reshuffle.protocol.evidence import advert_of, one_round, signed_by
from reshuffle.protocol.masking import pair_row_key, row_mask, unmask_in_place

KIND_NONZERO = "nonzero plaintext in a decoy row"
KIND_FALSE_OPENING = "false opening of a pairwise key"


def dispute_context(T: int, i: int, j: int) -> bytes:
    lo, hi = min(i, j), max(i, j)
    return label("blame/dispute", T, lo, hi)


def audit_iteration(
    group: Group,
    T: int,
    r: int,
    h: bytes,
    members: list[int],
    mask_set: list[int],
    vectors: list[msg.Message],
    seeds: dict[int, int],
    dropped: dict[int, int],
    adverts: dict,
    keys: dict[int, VerifyKey],
    published: tuple[int, ...],
    decoy_picks: np.ndarray,
) -> None:
    """Check ``published = sum of real count vectors + decoy picks`` for iteration r; Refused if not."""
    got = {v.sender: v for v in vectors}
    if sorted(got) != sorted(members) or len(got) != len(vectors):
        raise Refused(f"audit of iteration {r}: vectors from {sorted(got)}, U_{r} is {sorted(members)}")
    total = np.zeros(len(published), dtype=np.uint32)
    for i, v in got.items():
        if not isinstance(v, msg.MaskedInput) or v.T != T or v.m != r or v.h != h or v.rows != 1:
            raise Refused(f"audit of iteration {r}: the vector of {i} is not its count vector under this view")
        msg.verify(v, keys[i])
        msg.check_rows(v)
        if len(v.words) != total.nbytes:
            raise Refused(f"audit of iteration {r}: the vector of {i} has {len(v.words)} bytes")
        np.add(total, np.frombuffer(v.words, dtype=np.uint32), out=total)
    if sorted(seeds) != sorted(members) or sorted(dropped) != sorted(set(mask_set) - set(members)):
        raise Refused(f"audit of iteration {r}: seeds or dropped secrets do not match U_{r}")
    for i, b in seeds.items():
        if group.base_mul(b) != adverts[i].seed_commits[r - 1]:
            raise Refused(f"audit of iteration {r}: self seed of {i} does not match its commitment")
    for j, x in dropped.items():
        if group.base_mul(x) != adverts[j].mask_keys[r - 1]:
            raise Refused(f"audit of iteration {r}: secret of dropped {j} does not match X_{j}")
    X = {k: adverts[k].mask_keys[r - 1] for k in members}
    unmask_in_place(total, group, T, r, members, seeds, dropped, X, h)
    total += decoy_picks.astype(np.uint32)
    if not np.array_equal(total, np.asarray(published, dtype=np.uint32)):
        raise Refused(f"audit of iteration {r}: published counts differ from the real counts plus the decoys")


@dataclass(frozen=True)
class Evidence:
    """What a culprit is named with; every field the checker reads is signed by the culprit.

    ``kind`` is :data:`KIND_NONZERO` (its masked upload, its self seed and its opening give a
    nonzero plaintext in a decoy row) or :data:`KIND_FALSE_OPENING` (its signed opening of a
    pair key differs from the key that ``K_ij`` and its DLEQ proof fix). The opening signs h_M and
    the partner keys X_j the keys were derived from; ``upload_h`` must equal that h_M.
    """

    kind: str
    pid: int
    position: int
    advert: bytes  # the culprit's signed ADVERTISE (it signs the round parameters' digest)
    opening: bytes  # the culprit's signed OPENING (h_M, the X_j it used, its keys)
    upload_header: bytes = b""  # KIND_NONZERO: header, h, row hashes, row and signature of its upload
    upload_h: bytes = b""
    row_hashes: tuple[bytes, ...] = ()
    row: bytes = b""
    upload_signature: bytes = b""
    self_seed: int = 0
    partner: int = 0  # KIND_FALSE_OPENING: the partner, K_ij and the DLEQ proof (of either side)
    secret: bytes = b""
    proof: bytes = b""

    def __str__(self) -> str:
        if self.kind == KIND_NONZERO:
            return f"{self.kind} at position {self.position} (its signed upload, self seed and opening)"
        return f"{self.kind} with participant {self.partner} at position {self.position} (signed opening vs DLEQ-proved K)"


def _opening_keys(op: msg.Opening, position: int) -> dict[int, bytes]:
    for pos, keys in op.rows:
        if pos == position:
            return dict(keys)
    raise Refused(f"the opening has no keys for position {position}")


def verify_evidence(ev: Evidence, keys: dict[int, VerifyKey], params) -> np.ndarray | None:
    """Check evidence from the roster's keys alone; InvalidSignature/Refused/InvalidProof if it fails.

    Everything it reads is signed by ``ev.pid``: its advertisement (under ``params``, whose digest it
    signs), its opening (h_M, the partner keys X_j, the per-row keys) and its upload (h_M, the row
    hashes), all of one round; K_ij is fixed by a DLEQ proof against X_i and the opening's X_j.
    Returns the culprit's nonzero plaintext row (KIND_NONZERO) or None (KIND_FALSE_OPENING).
    """
    g = params.group_obj()
    ctx = msg.Context(g, params)
    adv = advert_of(ev.advert, ev.pid, keys, params, ctx)
    op = signed_by(ev.opening, msg.Opening, ev.pid, keys, ctx, "the opening")
    T = one_round(adv, op)
    m = params.upload_m
    if op.m != m:
        raise Refused(f"evidence: the opening is for invocation {op.m}, the upload is invocation {m}")
    if ev.upload_h != op.h:
        raise Refused("evidence: its h_M is not the one the opening signs")
    claimed = _opening_keys(op, ev.position)
    if ev.kind == KIND_NONZERO:
        hdr = msg.MaskedInput(T, m, ev.pid, op.h, len(ev.row_hashes), b"").header()
        if ev.upload_header != hdr:
            raise Refused("evidence: upload header does not match")
        if not 0 <= ev.position < len(ev.row_hashes) or msg.hashlib.sha256(ev.row).digest() != ev.row_hashes[ev.position]:
            raise Refused("evidence: the row is not the one the signature covers")
        stmt = hdr + op.h + msg.digest_of_row_hashes(ev.row_hashes)
        keys[ev.pid].verify("msg", stmt, ev.upload_signature)
        if g.base_mul(ev.self_seed) != adv.seed_commits[m - 1]:
            raise Refused("evidence: the self seed does not match the culprit's commitment")
        dtype = params.codec.dtype
        y = np.frombuffer(ev.row, dtype=dtype)
        plain = y - row_mask(g, T, m, ev.pid, ev.self_seed, claimed, op.h, ev.position, y.size, dtype)
        if not plain.any():
            raise Refused("evidence: the plaintext at the decoy row is zero")
        return plain
    if ev.kind == KIND_FALSE_OPENING:
        Xj = dict(op.peers).get(ev.partner)
        if Xj is None or ev.partner == ev.pid:
            raise Refused(f"evidence: the opening names no key of partner {ev.partner}")
        K = g.element_from_bytes(ev.secret, "K_ij")
        Xi = adv.mask_keys[m - 1]
        # Either side may have proved it: log_g X_p = log_{X_q} K for (p, q) one of the two orders.
        proof = voprf.Proof.decode(g, ev.proof)
        ctxb = dispute_context(T, ev.pid, ev.partner)
        try:
            voprf.verify_dleq(g.generator(), Xj, [Xi], [K], proof, ctxb)
        except InvalidProof:
            voprf.verify_dleq(g.generator(), Xi, [Xj], [K], proof, ctxb)
        true = pair_row_key(K.to_bytes(), T, m, ev.pid, ev.partner, op.h, ev.position)
        if claimed.get(ev.partner) == true:
            raise Refused("evidence: the opening matches the proved key")
        return None
    raise DecodeError(f"unknown evidence kind {ev.kind!r}")


def plaintext_at(group: Group, T: int, m: int, h: bytes, i: int, b: int, row: np.ndarray,
                 pair_keys: dict[int, bytes], position: int) -> np.ndarray:
    """Participant i's plaintext at one row: its masked row minus its self and pairwise row masks."""
    return row - row_mask(group, T, m, i, b, pair_keys, h, position, row.size, row.dtype)


__all__ = ["Evidence", "KIND_FALSE_OPENING", "KIND_NONZERO", "audit_iteration", "dispute_context",
           "plaintext_at", "verify_evidence"]


@dataclass
class BlameResult:
    evidence: dict[int, Evidence]
    suspects: list[int]


class BlameCollector:
    """The PS side of the blame step for one round: the upload's decoy rows as they arrive, then the
    openings and disputes once the upload is unmasked (:meth:`begin`)."""

    def __init__(self, group: Group, params, T: int, m: int, positions: list[int], adverts: dict) -> None:
        self.g, self.p, self.T, self.m = group, params, T, m
        self.positions = list(positions)
        self.adverts = adverts
        self.uploads: dict[int, tuple] = {}
        self.openings: dict[int, tuple[msg.Opening, bytes]] = {}
        self.proved: dict[tuple[int, int], tuple[Element, bytes]] = {}
        self._disputed: set[tuple[int, int]] = set()
        self.online: tuple[int, ...] = ()
        self.mask_set: tuple[int, ...] = ()
        self.seeds: dict[int, int] = {}
        self.lw: np.ndarray | None = None

    def keep_upload(self, sender: int, mi: msg.MaskedInput, rows: np.ndarray) -> None:
        """Keep a member's decoy rows and what its signature covers (the rest is only summed)."""
        kept = {pos: rows[pos].copy() for pos in self.positions}
        self.uploads[sender] = (kept, tuple(mi._row_hashes), mi._signature, mi.h, mi.header())

    def needed(self, failed: dict[int, str]) -> bool:
        """A nonzero row that failed its checks (decoy rows included) starts blame, if there are decoys."""
        return bool(self.positions) and any(reason != "empty" for reason in failed.values())

    def begin(self, online, mask_set, seeds: dict[int, int], lw: np.ndarray) -> None:
        """The upload is unmasked: U_M, its mask set U_{M-1}, the self seeds of U_M and the model list."""
        self.online, self.mask_set, self.seeds, self.lw = tuple(online), tuple(mask_set), dict(seeds), lw

    # -- openings ---------------------------------------------------------
    def on_opening(self, sender: int, op: msg.Opening) -> None:
        if sender not in self.online or sender not in self.uploads:
            raise DecodeError(f"opening from {sender}, whose upload is not in U_{self.m}")
        if sender in self.openings:
            raise AlreadyAnswered(f"second opening from {sender}")
        partners = set(self.mask_set) - {sender}
        if [pos for pos, _ in op.rows] != self.positions:
            raise Refused(f"opening of {sender} covers positions {[p for p, _ in op.rows]}, asked {self.positions}")
        # What its keys were derived from, as it signs it: its upload's h_M and the advertised X_j.
        X = {j: self.adverts[j].mask_keys[self.m - 1] for j in partners}
        if op.h != self.uploads[sender][3] or dict(op.peers) != X:
            raise Refused(f"opening of {sender} is not under its upload's h_M and its partners' advertised keys")
        self.openings[sender] = (op, msg.relay_bytes(op))

    def _claims(self, i: int, pos: int) -> dict[int, bytes]:
        return _opening_keys(self.openings[i][0], pos)

    def disputes(self) -> list[tuple[int, msg.Dispute]]:
        """One DISPUTE to each side of every pair whose openings disagree."""
        out = []
        ids = sorted(self.openings)
        for a_idx, i in enumerate(ids):
            for j in ids[a_idx + 1 :]:
                if any(self._claims(i, pos).get(j) != self._claims(j, pos).get(i) for pos in self.positions):
                    self._disputed.add((i, j))
                    out.append((i, msg.Dispute(self.T, self.m, SERVER_ID, j, self.openings[j][1])))
                    out.append((j, msg.Dispute(self.T, self.m, SERVER_ID, i, self.openings[i][1])))
        return out

    def on_dispute_answer(self, sender: int, a: msg.DisputeAnswer) -> None:
        g = self.g
        pair = (min(sender, a.partner), max(sender, a.partner))
        if pair not in self._disputed:
            raise Refused(f"dispute answer of {sender} about {a.partner}, which is not disputed")
        X_s, X_p = self.adverts[sender].mask_keys[self.m - 1], self.adverts[a.partner].mask_keys[self.m - 1]
        voprf.verify_dleq(g.generator(), X_s, [X_p], [a.secret], voprf.Proof.decode(g, a.proof),
                          dispute_context(self.T, sender, a.partner))
        self.proved[pair] = (a.secret, a.proof)

    # -- verdict ----------------------------------------------------------
    def result(self) -> BlameResult:
        g, m, T, seeds = self.g, self.m, self.T, self.seeds
        evidence: dict[int, Evidence] = {}
        explained = {pos: np.zeros(self.p.row_words, dtype=self.lw.dtype) for pos in self.positions}
        for (i, j), (K, proof) in sorted(self.proved.items()):
            for pos in self.positions:
                for liar, partner in ((i, j), (j, i)):
                    # The key the liar's own signed h_M gives (the same h_M for every opening on_opening took).
                    true = pair_row_key(K.to_bytes(), T, m, i, j, self.openings[liar][0].h, pos)
                    if self._claims(liar, pos).get(partner) != true and liar not in evidence:
                        evidence[liar] = Evidence(
                            KIND_FALSE_OPENING, liar, pos, msg.relay_bytes(self.adverts[liar]),
                            self.openings[liar][1], upload_h=self.openings[liar][0].h, partner=partner,
                            secret=K.to_bytes(), proof=proof,
                        )
        for i, (op, op_bytes) in sorted(self.openings.items()):
            rows, hashes, sig, h, hdr = self.uploads[i]
            for pos in self.positions:
                if pos not in rows:
                    continue
                plain = plaintext_at(g, T, m, h, i, seeds[i], rows[pos], self._claims(i, pos), pos)
                explained[pos] += plain
                if plain.any() and i not in evidence:
                    evidence[i] = Evidence(
                        KIND_NONZERO, i, pos, msg.relay_bytes(self.adverts[i]), op_bytes, hdr, h, hashes,
                        rows[pos].tobytes(), sig, seeds[i],
                    )
        lw = self.lw.reshape(-1, self.p.row_words)
        unexplained = any(not np.array_equal(explained.get(pos), lw[pos]) for pos in self.positions)
        silent = sorted(set(self.online) - set(self.openings))
        return BlameResult(evidence, silent if unexplained else [])
