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
"""

from __future__ import annotations

import secrets

import numpy as np

from reshuffle.crypto.ot import sample_distinct
from reshuffle.crypto.rand import OS_RANDOM
from reshuffle.games.framework import Estimate, estimate
from reshuffle.harness.api import form_groups, shuffle
from reshuffle.protocol.grouped import GroupedParticipant

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
    cands = [i for i in honest if all((target in seen[r]) == (i in messaged[r]) for r in range(R))] or honest
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


__all__ = ["DeliversPartialGroups", "rounds_game", "rounds_trial", "ungrouped_game", "ungrouped_trial"]
