"""Source anonymity over many rounds: perfect links between rounds, a PS that picks whom it messages and when.

The challenger forms stable groups once (:func:`~reshuffle.harness.api.form_groups`,
the real commit-reveal) among N participants and runs R real rounds of them
(:func:`~reshuffle.harness.api.shuffle` with ``groups``). The adversary is the PS with
c colluders. It gets more than any PS has: a perfect link between rounds (every
delivered row carries its sender's chain, a pseudonym fixed for the whole game), the
group each row came from, and its colluders' chains. It chooses the schedule: in round
1 it messages everyone; in round r ≥ 2 it leaves out the (r − 1)-th honest member of
every group, each at a phase it picks (never messaged, or dropped before its upload);
these are the rosters that name a sender once its chain goes missing.

The challenge is a uniformly drawn honest chain delivered at least once; the
adversary names the candidates consistent with every round (present exactly in the
rounds where it was messaged and its group delivered) and guesses among them. The
bound it is held to is the group's: 1/h_j, h_j the honest members of the chain's
group. With honest members (all or none) a group with a member left out delivers
nothing, every honest member of the group stays consistent, and the advantage is 0.
The *weak* wrapper (:class:`DeliversPartialGroups`) lets a group deliver without
a member: every chain is isolated in the round its owner was left out, and the
adversary always wins (advantage 1 − E[1/h_j]).

Forming groups is the PS's choice too (:func:`ungrouped_game`): a PS that never forms
them runs rounds of all N and leaves a different subset out of each (round r leaves out
the members whose index has bit r − 1 set), so a chain's presence pattern is its
owner's binary code. Participants with the default floors refuse every round bound to
no group: nothing is delivered, and the adversary's guess is uniform (advantage 0). The
*weak* variant has participants that opted in to ungrouped rounds: every chain is
named (advantage 1 − 1/h).

The rest of the epoch's start is the PS's too (docs/security/anonymity.md §7): whom the draw lists
and when it redraws (:func:`draw_game`: a list of exactly g with its colluders, then 2g padded with
them and redrawn while the target's group lacks one; the floors hold it to the padded list's
E[1/h_T]), and when a pseudonym counts as issued (:func:`issuance_game`: a colluder's drop in the
epoch's first round silences nobody; :func:`reissue_game`: a restarted node never asks twice, so a PS
that issues again names nobody). Each has a weak instance without the floor that stops it.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from reshuffle.crypto.ot import sample_distinct
from reshuffle.crypto.rand import OS_RANDOM
from reshuffle.crypto.signatures import CertificateAuthority
from reshuffle.errors import BelowThreshold, ProtocolError
from reshuffle.games.framework import Estimate, estimate, hoeffding
from reshuffle.harness.api import form_groups, shuffle
from reshuffle.protocol import groups as gr
from reshuffle.protocol.assignment import AssignmentClient, AssignmentCollector, RevealStep
from reshuffle.protocol.grouped import GroupedParticipant
from reshuffle.protocol.groups import Assignment, CheckCache
from reshuffle.protocol.params import TrustFloors

PHASES = ("setup", "upload")  # never messaged, or dropped after the offline steps and before its upload


class DeliversPartialGroups(GroupedParticipant):
    """Broken group member: consents to and unmasks an online set that lacks members of its group."""

    def _check_online(self, data: bytes) -> None:
        return None


def _uniform(n: int) -> int:
    return sample_distinct(n, 1, OS_RANDOM)[0]


def rounds_trial(N: int, g: int, c: int, weak: bool = False) -> tuple[bool, int, int]:
    """One game of R = (largest group's honest members) + 1 rounds.

    Returns (adversary correct, h_j, candidates it was left with). Groups need c_j ≥ 1 and t_j < N_j
    (g ≥ 5 with the default collusion) so that a group can go on without one member at all.
    """
    groups = form_groups(range(N), g)
    colluders = set(range(c))
    honest = {j: [i for i in grp if i not in colluders] for j, grp in enumerate(groups)}
    chain = {i: secrets.token_bytes(8) for i in range(N)}  # the perfect link: one pseudonym per sender
    R = 1 + max(len(h) for h in honest.values())
    messaged: list[set[int]] = []
    seen: list[dict[bytes, int]] = []  # per round: chain -> group its row came from
    delivered: list[set[int]] = []  # per round: groups that delivered
    order = {j: [h[k] for k in sample_distinct(len(h), len(h), OS_RANDOM)] for j, h in honest.items()}
    for r in range(R):
        out = {j: order[j][r - 1] for j in order if 0 < r <= len(order[j])}
        drops: dict[str, list[int]] = {}
        for i in out.values():
            drops.setdefault(PHASES[_uniform(len(PHASES))], []).append(i)
        ups = [np.frombuffer(secrets.token_bytes(16), np.int32).astype(np.float32) / 2**31 for _ in range(N)]
        res = _run(ups, groups, r + 1, drops, weak)
        group_of = {i: j for j, grp in enumerate(res.groups) for i in grp}
        messaged.append(set(range(N)) - set(out.values()))
        seen.append({chain[i]: group_of[i] for i in res.positions})
        delivered.append({group_of[i] for i in res.positions})
    owners = {chain[i]: i for i in range(N) if i not in colluders and any(chain[i] in s for s in seen)}
    target = list(owners)[_uniform(len(owners))]
    j = next(s[target] for s in seen if target in s)

    def consistent(i: int) -> bool:
        return all((target in seen[r]) == (i in messaged[r] and j in delivered[r]) for r in range(R))

    cands = [i for i in honest[j] if consistent(i)] or honest[j]
    return cands[_uniform(len(cands))] == owners[target], len(honest[j]), len(cands)


def _run(ups, groups, T: int, drops: dict, weak: bool):
    """One round of the stable groups: :func:`shuffle`, or the same round with the broken wrapper."""
    if not weak:
        return shuffle(ups, groups=groups, T=T, dropouts=drops, raise_on_failure=False)
    from reshuffle.harness.api import PreparedRound, ShuffleOptions, build_round
    from reshuffle.harness.parallel import make_runner
    from reshuffle.protocol.params import RoundParams

    o = ShuffleOptions.of(groups=groups, T=T, dropouts=drops, raise_on_failure=False)
    p = RoundParams.default(len(ups), ups[0].size)
    # The broken wrapper is a member of the Shamir-shared round (the DC-net round is all or none by arithmetic).
    server, parts = build_round(ups, p, T=T, groups=o.groups, grouped_cls=DeliversPartialGroups, dcnet=False)
    runner = make_runner(server, parts, o.dropouts, (), None)
    pr = PreparedRound(p, len(ups), server, parts, runner, server.group_size, False)
    return pr._finish()


def ungrouped_trial(N: int, c: int, opted_in: bool = False) -> tuple[bool, int, int]:
    """One game against a PS that never forms groups: ⌈log2 N⌉ + 1 rounds of everyone it messages.

    Returns (adversary correct, h = N − c, candidates it was left with)."""
    colluders = set(range(c))
    honest = [i for i in range(N) if i not in colluders]
    chain = {i: secrets.token_bytes(8) for i in range(N)}
    R = max(1, (N - 1).bit_length()) + 1
    messaged: list[set[int]] = []
    seen: list[set[bytes]] = []
    for r in range(R):
        roster = [i for i in range(N) if r == 0 or i in colluders or not (i >> (r - 1)) & 1]
        ups = [np.frombuffer(secrets.token_bytes(16), np.int32).astype(np.float32) / 2**31 for _ in roster]
        res = _run_ungrouped(ups, r + 1, opted_in)
        messaged.append(set(roster))
        seen.append({chain[roster[k]] for k in res.positions})
    owners = {chain[i]: i for i in honest if any(chain[i] in s for s in seen)}
    if not owners:  # nothing delivered: the challenge is any honest member, and the guess is blind
        return honest[_uniform(len(honest))] == honest[_uniform(len(honest))], len(honest), len(honest)
    target = list(owners)[_uniform(len(owners))]
    # A chain is seen only in rounds its owner was messaged in, but a messaged owner can miss a round (no slot
    # within R_max reservation iterations): the likeliest owners are those messaged in every round the chain was
    # seen and missing from the fewest of the others.
    fits = {i: sum(i in messaged[r] for r in range(R) if target not in seen[r]) for i in honest
            if all(i in messaged[r] for r in range(R) if target in seen[r])}
    cands = [i for i, missed in fits.items() if missed == min(fits.values())]
    return cands[_uniform(len(cands))] == owners[target], len(honest), len(cands)


def _run_ungrouped(ups, T: int, opted_in: bool):
    """One round of all ``ups`` bound to no group, among participants with the default floors (grouped
    participants: they refuse it) or, ``opted_in``, participants that take part in ungrouped rounds."""
    from reshuffle.harness.api import PreparedRound, build_round
    from reshuffle.harness.parallel import make_runner
    from reshuffle.protocol.params import RoundParams
    from reshuffle.protocol.participant import Participant

    p = RoundParams.default(len(ups), ups[0].size, R_max=2)  # fewer reservation iterations: a faster game
    server, parts = build_round(ups, p, T=T, participant_cls=Participant if opted_in else GroupedParticipant)
    pr = PreparedRound(p, len(ups), server, parts, make_runner(server, parts, None, (), None), None, False)
    return pr._finish()


def ungrouped_game(N: int, c: int, trials: int, opted_in: bool = False) -> Estimate:
    """Advantage over 1/h (h = N − c) of a PS that never forms groups."""
    results = [ungrouped_trial(N, c, opted_in) for _ in range(trials)]
    it = iter(results)
    return estimate(lambda: next(it)[0], trials, sum(1 / h for _, h, _ in results) / trials)


def rounds_game(N: int, g: int, c: int, trials: int, weak: bool = False) -> Estimate:
    """Advantage over 1/h_j, the honest members of the challenge chain's stable group."""
    results = [rounds_trial(N, g, c, weak) for _ in range(trials)]
    baseline = sum(1 / h for _, h, _ in results) / trials
    it = iter(results)
    return estimate(lambda: next(it)[0], trials, baseline)


# --------------------------------------------------------------------------- the PS picks the epoch's first rounds
# The assignment and the epoch's first rounds are the PS's to run: whom the draw lists (a list of exactly g with
# its colluders, a list padded with them to the members' floor, a redraw whenever the target's group lacks one),
# and when a pseudonym counts as issued. Each game below plays one of these choices against participants with
# the default floors and against a weak instance without the floor that stops it.

def _mean_estimate(values: list[float], baseline: float) -> Estimate:
    """Mean of [0, 1]-valued trials (the adversary's win probability given each trial's view) over
    ``baseline``; Hoeffding's bound holds for bounded variables, not only Bernoulli ones."""
    n = len(values)
    return Estimate(sum(values) / n - baseline, hoeffding(n), n, sum(1 for v in values if v >= 1))


def _expected_inverse_honest(listed: int, g: int, c: int) -> Fraction:
    """E[1/h_T] for a target drawn uniformly into a group of ``g`` from a list of ``listed`` (a multiple of
    g) holding it and ``c`` colluders: its g − 1 group-mates are a uniform draw of the listed others."""
    others, total = listed - 1, math.comb(listed - 1, g - 1)
    return sum((Fraction(math.comb(c, x) * math.comb(others - c, g - 1 - x), total) / (g - x)
                for x in range(min(c, g - 1) + 1)), Fraction(0))


@dataclass
class DrawOutcome:
    """What the PS's choice of candidates got: the target's group (None: no group formed with it), the lists
    tried and refused, and the attempts the last assignment took."""

    group: tuple[int, ...] | None
    refused: list[str] = field(default_factory=list)
    attempts: int = 0


def listed_assignment(T: int, listed: list[int], g: int, floors: TrustFloors, ident, redraw=None
                      ) -> tuple[Assignment | None, int]:
    """The real commit-reveal among the PS's ``listed`` candidates (their floors ``floors``; colluders follow the
    protocol). ``redraw(assignment)`` is the PS's choice once it holds every reveal: a listed member to claim
    silent (the next attempt excludes it), or None to publish. Returns (the assignment every listed member
    computed, or None if none formed; attempts)."""
    verifier = CertificateAuthority.verifier(ident.ca.verify_key)
    cache = CheckCache()
    clients = {i: AssignmentClient(i, T, ident.keys[i], ident.roster[i], verifier, OS_RANDOM, cache,
                                   floors.min_group, floors.draw, floors.federation) for i in listed}
    ps = AssignmentCollector(T, {i: ident.roster[i] for i in listed}, ident.ps_key, ident.ps_cert, g)
    out, refused = ps.start(), set()
    try:
        while out:  # the last outbox (the reveals) goes out after the PS has fixed the partition
            for pid, data in out:
                if pid in refused:
                    continue
                try:
                    replies = clients[pid].handle(cache.decode(data))
                except ProtocolError:
                    refused.add(pid)  # it takes no further part in this assignment
                    continue
                for r in replies:
                    ps.receive(pid, cache.decode(r.encode(ident.keys[pid])))
            st = ps.step
            if redraw is not None and isinstance(st, RevealStep) and len(st.reveals) == len(st.list.ids()):
                listed_now = st.list.ids()
                seed = gr.draw_seed(T, st.a, st.statement, [st.reveals[pid] for pid in listed_now])
                drop = redraw(Assignment.draw(T, st.a, g, listed_now, seed)) if st.a < gr.MAX_ATTEMPTS else None
                if drop is not None:
                    del st.reveals[drop]  # the PS claims its reveal was lost
            out = ps.close() if ps.assignment is None else []
    except BelowThreshold:
        return None, ps.attempt
    a = ps.assignment
    if any(clients[i].assignment is None or clients[i].assignment.digest != a.digest for grp in a.groups for i in grp):
        return None, a.attempt
    return a, a.attempt


def draw_trial(N: int, g: int, c: int, floors: TrustFloors) -> tuple[float, int, DrawOutcome]:
    """The PS's best choice of the draw's candidates against a target, round after round of the epoch's start.

    Round 1 lists the target, its c colluders and honest members up to exactly g (the draw is then a no-op);
    if the target refuses, round 2 lists the target, every colluder and honest members up to 2g (the least the
    default floor takes) and redraws while the target's group lacks one of the colluders; if that is
    refused, round 3 lists the same without redrawing. The PS then knows the target's group and its
    colluders' rows: its best guess of the target's row is uniform among the group's honest members.
    Returns (the adversary's win probability given the draw, 1/h_T; h_T; the outcome).
    """
    from reshuffle.harness.api import identities

    ident = identities(N)
    colluders, target = list(range(c)), c
    honest_others = [i for i in range(N) if i > target]
    need = 2 * g  # the default candidate floor
    plans = [("exactly g", [target, *colluders, *honest_others][:g], None),
             ("padded, redrawn", sorted([target, *colluders, *honest_others][:need]), "redraw"),
             ("padded", sorted([target, *colluders, *honest_others][:need]), None)]
    out = DrawOutcome(None)
    for T, (name, listed, how) in enumerate(plans, 1):
        def redraw(a: Assignment, listed=listed) -> int | None:
            mates = set(a.groups[a.index_of(target)])
            if set(colluders) <= mates:
                return None
            return next((i for i in reversed(listed) if i not in colluders and i != target and i not in mates), None)
        a, out.attempts = listed_assignment(T, listed, g, floors, ident, redraw if how else None)
        if a is not None and any(target in grp for grp in a.groups):
            out.group = a.groups[a.index_of(target)]
            break
        out.refused.append(name)
    if out.group is None:  # no group with the target: nothing of it is ever delivered
        return 0.0, 0, out
    h = len([i for i in out.group if i not in colluders])
    return 1 / h, h, out


def draw_game(N: int, g: int, c: int, trials: int, floors: TrustFloors = TrustFloors()) -> Estimate:
    """Advantage over E[1/h_T] of the worst list the default floors accept (2g candidates of the PS's choice,
    every colluder among them)."""
    baseline = float(_expected_inverse_honest(2 * g, g, c))
    return _mean_estimate([draw_trial(N, g, c, floors)[0] for _ in range(trials)], baseline)


def _epoch_models(T: int, n: int) -> list[np.ndarray]:
    return [np.frombuffer(secrets.token_bytes(16), np.int32).astype(np.float32) / 2**31 for _ in range(n)]


def issuance_trial(g: int, c: int, dcnet: bool, kept_after_failure: bool = True, stage: str = "upload") -> int:
    """A stable group's first two rounds of an epoch, under the issuance rule of the round: the colluders drop
    in round 1 at ``stage``, so the group delivers nothing (all or none); round 2 runs with what each member
    kept. At ``upload`` every honest member got its evaluation and (Shamir-shared round) certificates of the
    reservation, so it keeps its pseudonym; at ``ot`` (no OT request, or no DC key) the Shamir-shared round's
    members never consented, drop their evaluation and ask again in round 2. ``kept_after_failure=False`` is
    the weak node that keeps its pseudonym only after a round that delivered it (as a node without a state
    folder would lose it). Returns the honest members silenced in round 2."""
    from reshuffle.protocol.pseudonym import EpochIssuer

    group = [list(range(g))]
    iss, held = EpochIssuer("ristretto255", 1), {}
    r1 = shuffle(_epoch_models(1, g), T=1, groups=group, epoch_key=iss, identities=list(range(g)),
                 dropouts={stage: list(range(c))}, raise_on_failure=False, dcnet=dcnet)
    held = {i: n for i, n in r1.held.items() if n is not None and (kept_after_failure or i in r1.positions)}
    r2 = shuffle(_epoch_models(2, g), T=2, groups=group, epoch_key=iss, identities=list(range(g)),
                 pseudonyms=held, raise_on_failure=False, dcnet=dcnet)
    return sum(1 for i in range(c, g) if i not in r2.positions)


#: (DC-net round, stage of the colluders' drop) of successive issuance trials: both rounds, a drop before any
#: consent (the members ask again) and one before the upload (they keep what they were issued).
ISSUANCE_CASES = ((True, "ot"), (False, "upload"), (False, "ot"), (True, "upload"))


def issuance_game(g: int, c: int, trials: int, kept_after_failure: bool = True, stages=("ot", "upload")) -> Estimate:
    """The fraction of honest members silenced for the epoch by the colluders' drop in its first round, over
    :data:`ISSUANCE_CASES` at ``stages``; 0 when every recorded issuance is held."""
    cases = [case for case in ISSUANCE_CASES if case[1] in stages]
    silenced = []
    for k in range(trials):
        dcnet, stage = cases[k % len(cases)]
        silenced.append(issuance_trial(g, c, dcnet, kept_after_failure, stage) / (g - c))
    return _mean_estimate(silenced, 0.0)


def reissue_trial(g: int, c: int, dcnet: bool, keeps_state: bool = True) -> float:
    """Two rounds of a stable group in one epoch; before round 2 the target (an honest member drawn uniformly)
    restarts. A node keeps its pseudonym in its state folder (``keeps_state``); the weak node loses it and
    asks again, and this PS issues again. The PS's view: the pseudonyms of both rounds' rows and who asked in
    round 2. It names the target's round-1 pseudonym's owner: the one that asked, if one pseudonym vanished
    and one member asked, else uniform among the group's honest members. Returns its win probability."""
    from reshuffle.protocol.pseudonym import EpochIssuer

    group, honest = [list(range(g))], list(range(c, g))
    target = honest[_uniform(len(honest))]
    iss = EpochIssuer("ristretto255", 1)
    r1 = shuffle(_epoch_models(1, g), T=1, groups=group, epoch_key=iss, identities=list(range(g)),
                 raise_on_failure=False, dcnet=dcnet)
    held = {i: n for i, n in r1.held.items() if n is not None and (keeps_state or i != target)}
    # This PS forgets what it issued and the requests it evaluated (an honest issuer refuses a second element of
    # one identity): it answers every request of round 2, and what it records then is who asked.
    iss.issued.clear()
    iss.requests.clear()
    r2 = shuffle(_epoch_models(2, g), T=2, groups=group, epoch_key=iss, identities=list(range(g)), pseudonyms=held,
                 raise_on_failure=False, dcnet=dcnet)
    asked = sorted(iss.issued)
    rho = dict(zip(sorted(r1.positions, key=r1.positions.get), r1.pseudonyms))[target]  # the challenge
    vanished = set(r1.pseudonyms) - set(r2.pseudonyms)
    if rho in vanished and len(vanished) == 1 and len(asked) == 1:
        return 1.0 if asked[0] == target else 0.0
    return 1 / len(honest)


def reissue_game(g: int, c: int, trials: int, keeps_state: bool = True, baseline: float | None = None) -> Estimate:
    """Advantage over 1/h (or ``baseline``) of a PS that issues a second pseudonym to a member that asks again
    (the Shamir-shared and the DC-net round in turn)."""
    values = [reissue_trial(g, c, k % 2 == 0, keeps_state) for k in range(trials)]
    return _mean_estimate(values, 1 / (g - c) if baseline is None else baseline)


__all__ = ["DeliversPartialGroups", "DrawOutcome", "ISSUANCE_CASES", "draw_game", "draw_trial", "issuance_game", "issuance_trial",
           "listed_assignment", "reissue_game", "reissue_trial", "rounds_game", "rounds_trial", "ungrouped_game",
           "ungrouped_trial"]
