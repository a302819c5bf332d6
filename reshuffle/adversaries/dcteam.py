"""Red-team rows of the DC-net round of stable groups (docs/security/dcnet.md).

Each row plays real rounds of two stable groups of 5 (N = 10) in the DC-net round:

- ``dcnet-colluders``: a curious PS with 2 and then 3 colluders in group 0 (the setting in
  which the Shamir-shared round's complaints linked 3 of 3 honest members); it unmasks every
  set of honest members it can (:mod:`~reshuffle.adversaries.dclinker`). Holds when it reads
  no honest member alone and every model is delivered.
- ``dcnet-jam``: member 2 adds garbage to every row of its upload, decoy rows included. Holds
  when it is named with evidence a third party checks, no honest member is named, and the
  other group delivers all its models.
- ``dcnet-jam-reservation``: member 2 jams its count vector of iteration 1 (two picks, garbage or
  no pick, by seed); ``dcnet-lying-opening``: it masks with another key than K_ij for one partner
  and opens that key; ``dcnet-wrong-transcript``: it signs the h_M every member signed but masks
  over another transcript. Each holds when member 2 alone is named with evidence a third party
  checks from the roster's keys, no honest member is a suspect, and the other group delivers.
- ``dcnet-forged-blame``: a PS that names honest member 0 with the liar's evidence relabelled, a
  pair key it made up, or another round's counts, asks member 3 for a pair key whose openings agree,
  and announces member 0's exclusion on forged evidence. Holds when every forgery is refused.
- ``dcnet-drop``: member 2 of a group of 6 is named in round 1 and dropped in round 2 of the
  epoch. Holds when the other five check the evidence, keep their pair keys, and deliver all models.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from reshuffle.errors import ProtocolError
from reshuffle.protocol import dcnet
from reshuffle.protocol import messages as msg

TWO = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
ROWS = ("dcnet-colluders", "dcnet-jam", "dcnet-jam-reservation", "dcnet-lying-opening", "dcnet-wrong-transcript",
        "dcnet-forged-blame", "dcnet-drop")
ROLE = {"dcnet-colluders": "ps", "dcnet-forged-blame": "ps"}


class Jammer(dcnet.DCParticipant):
    """Adds garbage to every row of its model list (decoy rows included)."""

    def _deviate(self, lw):
        lw = lw.copy()
        lw[:, :4] += np.uint32(12345)
        return lw


class VectorJammer(dcnet.DCParticipant):
    """Jams the reservation: its count vector of iteration 1 holds a second pick (``"double"``), garbage at every
    slot (``"garbage"``) or no pick at all (``"none"``); or (``"again"``) once its pick settled it picks a free
    slot again in a later iteration."""

    mode = "double"

    def _deviate_vector(self, v):
        if self.mode == "again":
            if self.view.slot is not None and not v.any():
                v = v.copy()
                v[self.res.free()[0]] = 1
            return v
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


def _named_row(cls_of, rounds: int):
    """member 2 of group 0 deviates as ``cls_of(seed)`` builds it: named alone, with evidence that checks."""
    got = want = right = wrong = 0
    ok, details = True, []
    for seed in range(1, rounds + 1):
        ps, parts, out, _ = _round(seed, {2: cls_of(seed)})
        s = ps.servers[0]
        keys = {i: c.key for i, c in s._roster.items()}
        named = set(out.blamed)
        try:
            dcnet.verify_round_evidence(out.evidence[2], keys)
            checked = True
        except (KeyError, dcnet.InvalidEvidence):
            checked = False
        suspects = set(out.suspects) - {2}
        got, want = got + (len(TWO[1]) if 1 not in ps.failed else 0), want + len(TWO[1])
        right += int(named == {2} and checked)
        wrong += len(named - {2})
        ok = ok and named == {2} and checked and not suspects and 1 not in ps.failed
        kind = out.evidence[2].kind if 2 in out.evidence else "none"
        details.append(f"named {sorted(named)} ({kind}), evidence {'checks' if checked else 'fails'}, "
                       f"suspects {sorted(suspects)}")
    return got, want, right, wrong, ok, "; ".join(dict.fromkeys(details))


def _variant(base, **attrs):
    return type(base.__name__, (base,), attrs)


def reservation_row(rounds: int):
    modes = ("double", "garbage", "none")
    return _named_row(lambda seed: _variant(VectorJammer, mode=modes[(seed - 1) % 3]), rounds)


def lying_row(rounds: int):
    return _named_row(lambda seed: PairLiar, rounds)


def transcript_row(rounds: int):
    return _named_row(lambda seed: _variant(WrongTranscript, consistent=seed % 2 == 1), rounds)


def forged_row(rounds: int):
    import dataclasses

    from reshuffle.crypto.signatures import SERVER_ID

    refused = tried = 0
    for seed in range(1, rounds + 1):
        ps, parts, out, _ = _round(seed, {2: PairLiar})
        s = ps.servers[0]
        keys = {i: c.key for i, c in s._roster.items()}
        ev = out.evidence[2]
        honest = msg.relay_bytes(s._opened[0][2])
        tr = ev.transcript
        counts = list(tr.history[-1])
        counts[0] += 1
        framed = dataclasses.replace(ev, culprit=0, opening=honest, partner=2)
        forgeries = [framed, dataclasses.replace(framed, secret=s.group.base_mul(12345).to_bytes()),
                     dataclasses.replace(ev, transcript=dataclasses.replace(
                         tr, history=tr.history[:-1] + (tuple(counts),)))]
        for f in forgeries:
            tried += 1
            try:
                dcnet.verify_round_evidence(f, keys)
            except dcnet.InvalidEvidence:
                refused += 1
        # Fishing for K_13: member 1's opening agrees with member 3's.
        m3 = parts[3].dc
        fish = msg.Dispute(s.T, s.params.upload_m, SERVER_ID, 1, msg.relay_bytes(s._opened[1][2])).encode(s._sk)
        tried += 1
        refused += int(msg.peek_type(m3.handle(fish)[0]) is msg.MsgType.REFUSAL and 1 not in m3._answered)
        # An exclusion of member 0 on member 2's evidence.
        ex = msg.decode(msg.DCExclude(2, 0, SERVER_ID, 0, dataclasses.replace(ev, culprit=0).encode())
                        .encode(ps._sk), msg.Context())
        mem = parts[1].membership
        tried += 1
        try:
            dcnet.check_exclusion(ex, mem.members, (mem.index, mem.count, mem.digest), parts[1]._ca, 5)
        except ProtocolError:
            refused += 1
    return 0, 0, refused, tried - refused, refused == tried, f"{refused} of {tried} forgeries refused"


def drop_row(rounds: int):
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner
    from reshuffle.protocol.params import RoundParams

    groups = [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    got = want = right = 0
    ok, details = True, []
    for seed in range(1, rounds + 1):
        rng = np.random.default_rng(seed)  # model values only
        ups = [rng.normal(size=16).astype(np.float32) for _ in range(11)]
        ps, parts = build_round(ups, RoundParams.default(11, 16), seed=seed, groups=groups, T=1)
        parts[2].dc_class = VectorJammer
        out = InProcessRunner(ps, parts).run()
        ps2, parts2 = build_round(ups, RoundParams.default(11, 16), seed=seed, groups=groups, T=2,
                                  excluded={2: out.evidence[2]})
        out2 = InProcessRunner(ps2, parts2).run()
        rest = (0, 1, 3, 4, 5)
        kept = all(parts2[i].dc._pairs == {j: k for j, k in parts[i].dc._pairs.items() if j != 2} for i in rest)
        accepted = all(parts2[i].membership.members == rest for i in rest)
        got, want = got + len(out2.models), want + 10
        right += int(accepted)
        ok = ok and kept and accepted and len(out2.models) == 10
        details.append(f"group of 6 -> {len(rest)}, pair keys {'kept' if kept else 'changed'}, "
                       f"{len(out2.models)} of 10 models delivered")
    return got, want, right, 0, ok, "; ".join(dict.fromkeys(details))


def play(name: str, rounds: int):
    """(delivered, expected, culprit rounds right, honest named, holds, detail) of one row."""
    return {"dcnet-colluders": colluders_row, "dcnet-jam": jam_row, "dcnet-jam-reservation": reservation_row,
            "dcnet-lying-opening": lying_row, "dcnet-wrong-transcript": transcript_row,
            "dcnet-forged-blame": forged_row, "dcnet-drop": drop_row}[name](rounds)


STOPPED_BY = {
    "dcnet-colluders": "DC-net: masks cancel only in the full sum (no threshold to reach)",
    "dcnet-jam": "decoy rows opened with the members' pairwise keys; DCRoundEvidence",
    "dcnet-jam-reservation": "the jammed iteration's pairwise keys opened; its signed vector and opening",
    "dcnet-lying-opening": "dispute: K_ij with a DLEQ proof against the signed epoch keys",
    "dcnet-wrong-transcript": "openings under the signed h_M; dispute or nonzero decoy row",
    "dcnet-forged-blame": "evidence bound to the culprit's signed h; DLEQ; members check before revealing",
    "dcnet-drop": "DC_EXCLUDE checked by every member; epoch keys unchanged; floor",
}
