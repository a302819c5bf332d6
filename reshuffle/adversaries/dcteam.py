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
"""

from __future__ import annotations

import re
import time

import numpy as np

from reshuffle.adversaries.base import Verdict, make_adversary
from reshuffle.protocol import dcnet

TWO = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
ROWS = ("dcnet-colluders",)
PREFIX = "dcnet-"
NAMED, REFUSED, GROUP_LOST = "named with evidence", "refused", "its group delivers nothing this round"


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
                dcnet.verify_dc_evidence(s.culprits[culprit], keys, s.params, s.T)
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
    if name == "dcnet-colluders":
        return colluders_row(rounds)
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


STOPPED_BY = {
    "dcnet-colluders": "DC-net: masks cancel only in the full sum (no threshold to reach)",
}


def timed(name: str, rounds: int):
    """:func:`play` and its seconds per round."""
    t0 = time.perf_counter()
    out = play(name, rounds)
    return out, (time.perf_counter() - t0) / rounds
