"""Red-team rows of the DC-net round of stable groups (docs/security/dcnet.md).

Each row plays real rounds of two stable groups of 5 (N = 10) in the DC-net round:

- ``dcnet-colluders``: a curious PS with 2 and then 3 colluders in group 0 (the setting in
  which the Shamir-shared round's complaints linked 3 of 3 honest members); it unmasks every
  set of honest members it can (:mod:`~reshuffle.adversaries.dclinker`). Holds when it reads
  no honest member alone and every model is delivered.
- ``dcnet-jam``: member 2 adds garbage to every row of its upload, decoy rows included. Holds
  when it is named with evidence a third party checks, no honest member is named, and the
  other group delivers all its models.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from reshuffle.protocol import dcnet
from reshuffle.protocol import messages as msg

TWO = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
ROWS = ("dcnet-colluders", "dcnet-jam")


class Jammer(dcnet.DCParticipant):
    """Adds garbage to every row of its model list (decoy rows included)."""

    def _deviate(self, lw):
        lw = lw.copy()
        lw[:, :4] += np.uint32(12345)
        return lw


class VectorJammer(dcnet.DCParticipant):
    """Jams the reservation: its count vector of iteration 1 holds a second pick (``"double"``), garbage at every
    slot (``"garbage"``) or no pick at all (``"none"``)."""

    mode = "double"

    def _deviate_vector(self, v):
        if self.m != 1:
            return v
        v = v.copy()
        if self.mode == "double":
            v[(self._pick + 1) % v.size] += 1
        elif self.mode == "garbage":
            v += np.uint32(7)
        else:
            v[:] = 0
        return v


def _pads(member, j: int, keys, rows: int, width: int, dtype) -> np.ndarray:
    """member's pads of partner j alone, row by row, from per-row keys."""
    return np.stack([dcnet.row_pad({j: keys[ρ]}, member.pid, width, dtype) for ρ in range(rows)])


class PairLiar(dcnet.DCParticipant):
    """Masks every row but its own with another key than K_ij gives for one partner (the lowest other member), and
    opens that key: its own plaintext at a decoy row is zero, the pair's two openings disagree."""

    def _fake(self):
        p = self.params
        j = min(i for i in self.members if i != self.pid)
        fake = dcnet.row_keys(b"\x01" * 32, self.T, p.upload_m, self.pid, j, self._h, dcnet.parties(p))
        return j, fake

    def _deviate(self, lw):
        p = self.params
        j, fake = self._fake()
        true = dcnet.row_keys(self._pairs[j], self.T, p.upload_m, self.pid, j, self._h, dcnet.parties(p))
        delta = _pads(self, j, fake, len(lw), lw.shape[1], lw.dtype) - _pads(self, j, true, len(lw), lw.shape[1],
                                                                             lw.dtype)
        delta[self.view.position] = 0
        return lw + delta

    def _opening(self, op):
        j, fake = self._fake()
        return msg.DCOpening(op.T, op.m, op.sender, op.h,
                             tuple((pos, i, fake[pos] if i == j else k) for pos, i, k in op.keys))


class WrongTranscript(dcnet.DCParticipant):
    """Signs the h_M every member signed but masks its whole upload with keys derived over another transcript;
    opens the keys it masked with (``consistent``) or the true ones."""

    consistent = True

    def _other(self, j: int):
        p = self.params
        return dcnet.row_keys(self._pairs[j], self.T, p.upload_m, self.pid, j, hashlib.sha256(b"other" + self._h)
                              .digest(), dcnet.parties(p))

    def _deviate(self, lw):
        p = self.params
        lw = lw.copy()
        for j in self._pairs:
            true = dcnet.row_keys(self._pairs[j], self.T, p.upload_m, self.pid, j, self._h, dcnet.parties(p))
            lw += _pads(self, j, self._other(j), len(lw), lw.shape[1], lw.dtype)
            lw -= _pads(self, j, true, len(lw), lw.shape[1], lw.dtype)
        return lw

    def _opening(self, op):
        if not self.consistent:
            return op
        other = {j: self._other(j) for j in self._pairs}
        return msg.DCOpening(op.T, op.m, op.sender, op.h, tuple((pos, j, other[j][pos]) for pos, j, _ in op.keys))


def _round(seed: int, classes=None, d: int = 16, T: int = 1):
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner
    from reshuffle.protocol.params import RoundParams

    rng = np.random.default_rng(seed)  # model values only
    ups = [rng.normal(size=d).astype(np.float32) for _ in range(10)]
    ps, parts = build_round(ups, RoundParams.default(10, d), seed=seed, groups=TWO, T=T)
    for pid, cls in (classes or {}).items():
        parts[pid].dc_class = cls
    t0 = time.perf_counter()
    out = InProcessRunner(ps, parts).run()
    return ps, parts, out, time.perf_counter() - t0


def colluders_row(rounds: int):
    from reshuffle.adversaries.dclinker import links

    got = want = wrong = 0
    ok, details = True, []
    for seed in range(1, rounds + 1):
        ps, parts, out, _ = _round(seed)
        for coalition in ((3, 4), (2, 3, 4)):
            linked = links(ps.servers[0], {c: parts[c].dc._y for c in coalition})
            honest = [i for i in range(10) if i not in coalition]
            got, want = got + min(len(honest), len(out.models) - len(coalition)), want + len(honest)
            ok = ok and not linked and len(out.models) == 10
            details.append(f"{len(coalition)} colluders: {len(linked)} linked")
    return got, want, rounds, wrong, ok, "; ".join(dict.fromkeys(details))


def jam_row(rounds: int):
    got = want = right = wrong = 0
    ok, details = True, []
    for seed in range(1, rounds + 1):
        ps, parts, out, _ = _round(seed, {2: Jammer})
        s = ps.servers[0]
        keys = {i: c.key for i, c in s._roster.items()}
        named = set(out.blamed)
        try:
            dcnet.verify_dc_evidence(out.evidence[2], keys, s.params, s.T)
            checked = True
        except (KeyError, dcnet.InvalidEvidence):
            checked = False
        # The jammer's rows and the rows it wrote over are lost; the other group delivers all of its own.
        got, want = got + (len(TWO[1]) if 1 not in ps.failed else 0), want + len(TWO[1])
        right += int(named == {2} and checked)
        wrong += len(named - {2})
        ok = ok and named == {2} and checked and len(out.models) >= len(TWO[1])
        details.append(f"named {sorted(named)}, evidence {'checks' if checked else 'fails'}, "
                       f"{len(out.models)} models delivered")
    return got, want, right, wrong, ok, "; ".join(dict.fromkeys(details))


def play(name: str, rounds: int):
    """(delivered, expected, culprit rounds right, honest named, holds, detail) of one row."""
    return {"dcnet-colluders": colluders_row, "dcnet-jam": jam_row}[name](rounds)


STOPPED_BY = {
    "dcnet-colluders": "DC-net: masks cancel only in the full sum (no threshold to reach)",
    "dcnet-jam": "decoy rows opened with the members' pairwise keys; DCEvidence",
}
