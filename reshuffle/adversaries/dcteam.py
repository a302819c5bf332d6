"""The red team in the DC-net round of stable groups (docs/security/dcnet.md, docs/protocol.md).

Every registered behaviour with a form in the DC-net round (its ``dc_class``) is played
there through :func:`reshuffle.shuffle` with two stable groups of 5 (N = 10), the path
the simulator's real channel takes: the deviating member is participant 1 and the PS's
target participant 0, both in group 0, so group 1 is the control that must deliver all
its models. :func:`verdict` judges a round by what the behaviour claims (``dc_outcome``):

- **named with evidence**: every culprit is named, and each :class:`~reshuffle.protocol.dcnet.DCEvidence`
  checks with the roster's keys alone (:func:`~reshuffle.protocol.dcnet.verify_dc_evidence`);
- **refused**: the deviation is refused before it takes effect: no deviating row is delivered, and
  against a PS, the target never masked a model under the forked view;
- **its group delivers nothing this round**: the group fails, and where the claim says so the PS names the
  culprit as the silent member (``failed_groups``);
- **linked nobody** (every PS behaviour): no honest member's model is delivered from a forked view.

In every case no honest member is named and the other group delivers every model.

Besides, ``dcnet-colluders``: a curious PS with 2 and then 3 colluders in group 0 (the
setting in which the Shamir-shared round's complaints linked 3 of 3 honest members) unmasks
every set of honest members it can (:mod:`~reshuffle.adversaries.dclinker`). Holds when it
reads no honest member alone and every model is delivered.

The rows of the blame steps that h_M and the pair keys give (member 2 of group 0 deviates, in real
rounds of :data:`TWO`; the reservation jammers are the ``dcnet-count-abuse`` and ``dcnet-multi-slot``
rows of the matrix above):

- ``dcnet-lying-opening``: it masks with another key than K_ij for one partner and opens that key;
  ``dcnet-wrong-transcript``: it signs the h_M every member signed but masks over another transcript.
  Each holds when member 2 alone is named with evidence a third party checks from the roster's keys,
  no honest member is a suspect, and the other group delivers.
- ``dcnet-forged-blame``: a PS that names honest member 0 with the liar's evidence relabelled, a
  pair key it made up, or another round's counts, asks member 3 for a pair key whose openings agree,
  and announces member 0's exclusion on forged evidence. Holds when every forgery is refused.
- ``dcnet-drop``: member 2 of a group of 6 is named in round 1 and dropped in round 2 of the
  epoch. Holds when the other five check the evidence, keep their pair keys, and deliver all models.
"""

from __future__ import annotations

import hashlib
import re
import time

import numpy as np

from reshuffle.adversaries.base import Verdict, make_adversary
from reshuffle.errors import ProtocolError
from reshuffle.protocol import dcnet
from reshuffle.protocol import messages as msg

TWO = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
ROWS = ("dcnet-colluders", "dcnet-lying-opening", "dcnet-wrong-transcript", "dcnet-forged-blame", "dcnet-drop")
ROLE = {"dcnet-colluders": "ps", "dcnet-forged-blame": "ps"}
PREFIX = "dcnet-"
NAMED, REFUSED, GROUP_LOST = "named with evidence", "refused", "its group delivers nothing this round"


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


def _fake_keys(member):
    """(the partner it lies about, the per-row keys it uses for that partner instead of K_ij's)."""
    p = member.params
    j = min(i for i in member.members if i != member.pid)
    return j, dcnet.row_keys(b"\x01" * 32, member.T, p.upload_m, member.pid, j, member._h, dcnet.parties(p))


class PairLiar(dcnet.DCParticipant):
    """Masks every row but its own with another key than K_ij gives for one partner (the lowest other member), and
    opens that key: its own plaintext at a decoy row is zero, the pair's two openings disagree."""

    def _deviate(self, lw):
        p = self.params
        j, fake = _fake_keys(self)
        true = dcnet.row_keys(self._pairs[j], self.T, p.upload_m, self.pid, j, self._h, dcnet.parties(p))
        delta = _pads(self, j, fake, len(lw), lw.shape[1], lw.dtype) - _pads(self, j, true, len(lw), lw.shape[1],
                                                                             lw.dtype)
        delta[self.view.position] = 0
        return lw + delta

    def _opening(self, op):
        j, fake = _fake_keys(self)
        return msg.DCOpening(op.T, op.m, op.sender, op.h,
                             tuple((pos, i, fake[pos] if i == j else k) for pos, i, k in op.keys))


def _other_keys(member, j: int):
    """member's per-row keys with partner j over another transcript than its h_M."""
    p = member.params
    return dcnet.row_keys(member._pairs[j], member.T, p.upload_m, member.pid, j,
                          hashlib.sha256(b"other" + member._h).digest(), dcnet.parties(p))


class WrongTranscript(dcnet.DCParticipant):
    """Signs the h_M every member signed but masks its whole upload with keys derived over another transcript;
    opens the keys it masked with (``consistent``) or the true ones."""

    consistent = True

    def _deviate(self, lw):
        p = self.params
        lw = lw.copy()
        for j in self._pairs:
            true = dcnet.row_keys(self._pairs[j], self.T, p.upload_m, self.pid, j, self._h, dcnet.parties(p))
            lw += _pads(self, j, _other_keys(self, j), len(lw), lw.shape[1], lw.dtype)
            lw -= _pads(self, j, true, len(lw), lw.shape[1], lw.dtype)
        return lw

    def _opening(self, op):
        if not self.consistent:
            return op
        other = {j: _other_keys(self, j) for j in self._pairs}
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


def play_round(b, seed: int, d: int = 16, T: int = 1):
    """One DC-net round of :data:`TWO` with behaviour ``b``: (result, the grouped PS)."""
    from reshuffle.harness.api import ShuffleOptions, _check_updates, _prepare

    rng = np.random.default_rng(seed)  # model values only
    ups = _check_updates([rng.normal(size=d).astype(np.float32) for _ in range(10)])
    o = ShuffleOptions.of(seed=seed, T=T, groups=TWO, adversaries=[b], raise_on_failure=False, dcnet=True)
    pr = _prepare(ups, len(ups), d, o)
    return pr._finish(), pr._server


def _evidence_checks(server, culprit: int) -> bool:
    """Whether the evidence naming ``culprit`` checks with its group's roster keys alone."""
    for s in server.servers.values():
        if culprit in s._roster and culprit in s.culprits:
            keys = {i: c.key for i, c in s._roster.items()}
            try:
                dcnet.verify_round_evidence(s.culprits[culprit], keys)
                return True
            except dcnet.InvalidEvidence:
                return False
    return False


def verdict(b, result, honest: list[int], server=None, claim: str | None = None) -> Verdict:
    """Whether ``b``'s claim (``claim``, default its ``dc_outcome``) held in one DC-net round of :data:`TWO`."""
    ps = b.role == "ps"
    culprits = () if ps else tuple(b.pids)
    target = getattr(b, "target", None)
    attacked = {j for j, g in enumerate(TWO) if set(g) & {*culprits, *([target] if ps and target is not None else [])}}
    control = [i for j, g in enumerate(TWO) if j not in attacked for i in g]
    got = sum(i in result.positions for i in control)
    wrong = sorted(set(result.blamed) & set(honest))
    named = set(culprits) <= set(result.blamed)
    claim = b.dc_outcome if claim is None else claim
    ok = not wrong and got == len(control)
    evidence = bool(culprits) and named and server is not None and all(_evidence_checks(server, c) for c in culprits)
    if claim.startswith(NAMED):
        ok = ok and evidence
    if claim.startswith(REFUSED) and culprits:
        # The PS refused something the culprit sent (and recorded why).
        ok = ok and any(e.sender in culprits for e in result.errors)
    if GROUP_LOST in claim:
        ok = ok and attacked <= set(result.failed_groups)
        if "names it silent" in claim:
            silent = {int(i) for j in attacked for ids in re.findall(r"\[([\d, ]+)\]", result.failed_groups.get(j, ""))
                      for i in ids.split(",")}
            ok = ok and set(culprits) <= silent
    hit = getattr(b, "hit", None)
    if claim.startswith("never delivered"):
        ok = ok and hit is not None
    if hit is not None and result.output is not None:
        # A row it wrote over is never delivered; a decoy's names it.
        offs = result.output.offsets.get(min(attacked)) if attacked else None
        if offs is not None:
            ok = ok and offs + hit not in result.output.valid_positions
            if offs + hit in result.output.decoy_positions:
                ok = ok and named and evidence
    if ps and target is not None:
        # Against a PS: the target never masked its model under a view the others did not share, so nothing of
        # it is delivered from a fork; refused means before its upload.
        errs = [type(e).__name__ for e in result.views[target].errors]
        if claim.startswith(REFUSED):
            ok = ok and bool(errs) and not result.views[target].uploaded
        if claim.startswith("its fork"):
            ok = ok and not any(set(result.positions) & set(TWO[j]) for j in attacked)
    detail = (f"named: {sorted(result.blamed)}{' (evidence checks)' if evidence else ''}; "
              f"suspects: {sorted(result.output.suspects) if result.output else []}; "
              f"groups failed: {sorted(result.failed_groups)}; delivered {len(result.positions)} of 10")
    if ps and target is not None:
        detail += f"; target errors: {[type(e).__name__ for e in result.views[target].errors]}"
    refused = sorted({type(e.error).__name__ for e in result.errors if e.sender in culprits})
    if refused:
        detail += f"; the PS refused its messages: {refused}"
    if hit is not None:
        detail += f"; row hit: {hit}"
    return Verdict(ok, got, len(control), named or ps, wrong, b.stopped_by, detail)


def judge(b, result, honest: list[int], server=None) -> Verdict:
    """``b``'s verdict of one DC-net round of :data:`TWO`: its own (``dc_holds``), else :func:`verdict`."""
    return b.dc_holds(result, honest, server) or verdict(b, result, honest, server)


def play(name: str, rounds: int):
    """(delivered, expected, culprit rounds right, honest named, holds, detail) of one row: ``dcnet-colluders``, or
    ``dcnet-<behaviour>``."""
    if name in ROWS:
        return {"dcnet-colluders": colluders_row, "dcnet-lying-opening": lying_row,
                "dcnet-wrong-transcript": transcript_row, "dcnet-forged-blame": forged_row,
                "dcnet-drop": drop_row}[name](rounds)
    base = name[len(PREFIX):]
    b0 = make_adversary(base)
    controlled = set(getattr(b0, "pids", ()))
    honest = [i for i in range(10) if i not in controlled]
    got = want = right = wrong = 0
    ok, details = True, []
    for seed in range(1, rounds + 1):
        b = make_adversary(base)
        r, server = play_round(b, seed)
        v = judge(b, r, honest, server)
        got, want, right, wrong = got + v.delivered, want + v.expected, right + v.culprits_right, wrong + len(v.wrong)
        ok = ok and v.holds
        details.append(v.detail)
    return got, want, right, wrong, ok, "; ".join(dict.fromkeys(details))


def colluders_row(rounds: int):
    from reshuffle.adversaries.dclinker import links
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner
    from reshuffle.protocol.params import RoundParams

    got = want = wrong = 0
    ok, details = True, []
    for seed in range(1, rounds + 1):
        rng = np.random.default_rng(seed)  # model values only
        ups = [rng.normal(size=16).astype(np.float32) for _ in range(10)]
        ps, parts = build_round(ups, RoundParams.default(10, 16), seed=seed, groups=TWO)
        out = InProcessRunner(ps, parts).run()
        for coalition in ((3, 4), (2, 3, 4)):
            linked = links(ps.servers[0], {c: parts[c].dc._y for c in coalition})
            honest = [i for i in range(10) if i not in coalition]
            got, want = got + min(len(honest), len(out.models) - len(coalition)), want + len(honest)
            ok = ok and not linked and len(out.models) == 10
            details.append(f"{len(coalition)} colluders: {len(linked)} linked")
    return got, want, rounds, wrong, ok, "; ".join(dict.fromkeys(details))


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


STOPPED_BY = {
    "dcnet-colluders": "DC-net: masks cancel only in the full sum (no threshold to reach)",
    "dcnet-lying-opening": "dispute: K_ij with a DLEQ proof against the signed epoch keys",
    "dcnet-wrong-transcript": "openings under the signed h_M; dispute or nonzero decoy row",
    "dcnet-forged-blame": "evidence bound to the culprit's signed h; DLEQ; members check before revealing",
    "dcnet-drop": "DC_EXCLUDE checked by every member; epoch keys unchanged; floor",
}

#: What holds against each row (as a behaviour's ``dc_outcome``).
OUTCOME = {
    "dcnet-colluders": "linked nobody",
    "dcnet-lying-opening": NAMED,
    "dcnet-wrong-transcript": NAMED,
    "dcnet-forged-blame": REFUSED,
    "dcnet-drop": "the others check the evidence and deliver",
}


def timed(name: str, rounds: int):
    """:func:`play` and its seconds per round."""
    t0 = time.perf_counter()
    out = play(name, rounds)
    return out, (time.perf_counter() - t0) / rounds
