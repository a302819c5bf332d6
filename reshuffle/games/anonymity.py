"""Source anonymity of a full round: which honest participant owns a given position?

The challenger runs a real round (the real :class:`Server` and
:class:`Participant` over bytes, in process) among N participants. The
adversary is the curious PS: it holds the PS's state and every message the PS
received, and colludes with c < t participants (their secrets). The challenge
is a uniformly drawn valid position whose owner is honest; the adversary names
an honest participant. Advantage = Pr[correct] − 1/h, h honest participants
whose models are in the output.

The adversary tries to strip participant i's upload y_i of every mask it can
compute: i's self mask (b_i is revealed for every survivor), and the pairwise
masks shared with colluders. If the token field at the challenge position then
equals that slot's token, it names i; otherwise it guesses. It also sends a
second, signed unmask request claiming i dropped, hoping to get shares of x_i
too. Honest participants answer once per invocation (docs/protocol.md §6.3) and refuse; the
*broken* variant (:class:`AnswersTwice`) answers, and then every mask of y_i is
known and the adversary always wins.

:func:`schedule_game` gives the adversary the schedule as well: an active PS that may
send any message the participants accept, in any order (the explorer of
:mod:`reshuffle.adversaries.explorer` searches them all), and keeps the schedule that
links the most honest models; the challenge row is drawn on that schedule. With the
participant of before the reorder fix (:class:`~reshuffle.adversaries.weak.ReopensAfterUpload`)
it always wins.
"""

from __future__ import annotations

import secrets

import numpy as np

from reshuffle.crypto.ot import sample_distinct
from reshuffle.crypto.rand import OS_RANDOM
from reshuffle.crypto.shamir import Shamir
from reshuffle.errors import ProtocolError
from reshuffle.games.framework import Estimate, estimate
from reshuffle.protocol import messages as msg
from reshuffle.harness.api import build_round
from reshuffle.protocol import credential
from reshuffle.protocol.masking import pair_key, pair_sign, self_key
from reshuffle.protocol.messages import Context, ShareKind
from reshuffle.protocol.groups import ASSIGNMENT_TYPES
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.participant import Participant, PPhase
from reshuffle.protocol.reservation import settled_slots
from reshuffle.harness.runner import InProcessRunner
from reshuffle.crypto.prg import accumulate_streams
from reshuffle.crypto.signatures import SERVER_ID


class AnswersTwice(Participant):
    """Broken participant: reveals for every U_m it is shown, certified or not, so both share kinds can leak."""

    def handle(self, data: bytes) -> list[bytes]:
        if self.phase is PPhase.DONE:
            m = msg.decode(data, self.ctx)
            if isinstance(m, msg.UnmaskRequest):
                # Each request is judged afresh against the state after the certified reveal.
                try:
                    return [self._reveal(self.state, m.m, m.online)[1].encode(self._sk)]
                except ProtocolError:
                    return []
        return super().handle(data)


class CuriousPS:
    """The adversary: the PS's state and received messages, plus the colluders' secrets."""

    def __init__(self, server, transcript, colluders, participants) -> None:
        self.server, self.transcript = server, transcript
        self.colluders = colluders  # id -> Participant (their secrets)
        self._send = participants  # how the PS reaches participants (it is the PS)

    def _uploads(self) -> dict[int, np.ndarray]:
        s = self.server
        p = s.params
        ctx = Context(s.group, p)
        out = {}
        for sender, data in self.transcript:
            m = msg.decode(data, ctx)
            if isinstance(m, msg.MaskedInput) and m.m == p.upload_m:
                out[sender] = (np.frombuffer(m.words, dtype=p.codec.dtype).copy(), bytes(m.h))
        return out

    def _ask_dropped(self, i: int) -> int | None:
        """Claim i dropped: a second signed U_m without i; reconstruct x_i if t shares come back."""
        s = self.server
        p, m = s.params, s.params.upload_m
        Um = tuple(j for j in s.online[m] if j != i)
        if len(Um) < p.t:
            return None
        req = msg.UnmaskRequest(s.T, m, SERVER_ID, Um).encode(s._sk)
        shares = []
        for j in Um:
            for data in self._send[j].handle(req):
                r = msg.decode(data, Context(s.group, p))
                if isinstance(r, msg.UnmaskResponse):
                    shares += [sh for owner, kind, sh in r.shares if owner == i and kind is ShareKind.DH_SECRET]
        if len(shares) < p.t:
            return None
        return Shamir(s.group.order, p.t).reconstruct(shares[: p.t], check=False)

    def guess(self, position: int, candidates: list[int]) -> int:
        s = self.server
        p, m, g = s.params, s.params.upload_m, s.group
        uploads = self._uploads()
        slot = settled_slots(s.counts)[position]
        token = np.frombuffer(s.tokens()[slot], dtype=p.codec.dtype)
        mask_set = s.online[m - 1] if m - 1 in s.online else s.online[m]
        keys = {j: s.adverts[j].mask_keys[m - 1] for j in mask_set}
        for i in candidates:
            # Only the challenge row matters: strip i's self mask and every pairwise mask it can key.
            words, h = uploads[i]
            row = words.reshape(-1, p.row_words)[position].copy()
            streams = [(self_key(g, s.T, m, i, s.seeds[m][i], h, position), -1)]
            x_i = self._ask_dropped(i)
            for j in mask_set:
                if j == i:
                    continue
                if x_i is not None:
                    streams.append((pair_key(s.T, m, i, j, x_i, keys[j], h, position), -pair_sign(i, j)))
                elif j in self.colluders:
                    x_j = self.colluders[j].state.session.keys.mask[m - 1].secret
                    streams.append((pair_key(s.T, m, j, i, x_j, keys[i], h, position), -pair_sign(i, j)))
            accumulate_streams(row, streams)
            off = p.d + credential.pad_bytes(p.d * row.itemsize) // row.itemsize
            if np.array_equal(row[off : off + token.size], token):
                return i
        return candidates[sample_distinct(len(candidates), 1, OS_RANDOM)[0]]


def _run_tapped(server, parts) -> list[tuple[int, bytes]]:
    """Run the round; return every (sender, bytes) the PS received: the adversary's transcript."""
    transcript: list[tuple[int, bytes]] = []

    def tap(env):
        if env.recipient == SERVER_ID:
            transcript.append((env.sender, env.data))
        return [env]

    InProcessRunner(server, parts, None, [tap]).run()
    return transcript


def anonymity_trial(N: int, c: int, d: int, broken: bool) -> tuple[bool, int]:
    """One real round and one challenge; returns (adversary correct, h)."""
    ups = [np.frombuffer(secrets.token_bytes(4 * d), np.int32).astype(np.float32) / 2**31 for _ in range(N)]
    p = RoundParams.default(N, d)
    server, parts = build_round(ups, p, participant_cls=AnswersTwice if broken else None)
    transcript = _run_tapped(server, parts)
    out = server.output
    colluders = {j: parts[j] for j in range(c)}
    honest_owner = {
        pp.view.position: i for i, pp in parts.items()
        if i >= c and pp.view.position is not None and pp.view.position in out.valid_positions
    }
    h = len(honest_owner)
    position = list(honest_owner)[sample_distinct(h, 1, OS_RANDOM)[0]]
    adv = CuriousPS(server, transcript, colluders, parts)
    return adv.guess(position, sorted(honest_owner.values())) == honest_owner[position], h


def anonymity_game(N: int, c: int, d: int, trials: int, broken: bool = False) -> Estimate:
    results = [anonymity_trial(N, c, d, broken) for _ in range(trials)]
    # the trivial strategy's success, averaged over the trials' h
    baseline = sum(1 / h for _, h in results) / trials
    it = iter(results)
    return estimate(lambda: next(it)[0], trials, baseline)


# --------------------------------------------------------------------------- #
# Anonymity groups (docs/protocol.md, "Anonymity groups")
def _group_view(server, transcript, members):
    """The PS's record of one group's round: what the group's members sent it, assignment messages left out."""
    return [(s, d) for s, d in transcript if s in members and msg.peek_type(d) not in ASSIGNMENT_TYPES]


def anonymity_trial_groups(N: int, c: int, d: int, g: int, broken: bool) -> tuple[bool, int]:
    """One real round in groups of about g and one challenge; returns (adversary correct, h_j).

    The challenge is a uniformly drawn delivered position whose owner is honest;
    the pooled list tells the PS which group j the row came from (rows are pooled
    group by group), so the adversary attacks that group's round with the
    colluders that landed in it, and h_j is the honest members of group j whose
    models were delivered: the anonymity set the protocol claims.
    """
    ups = [np.frombuffer(secrets.token_bytes(4 * d), np.int32).astype(np.float32) / 2**31 for _ in range(N)]
    server, parts = build_round(ups, RoundParams.default(N, d), participant_cls=AnswersTwice if broken else None,
                                group_size=g, overrides={})
    transcript = _run_tapped(server, parts)
    out = server.output
    owners = {}  # global position -> (group, local position, owner)
    for i, pp in parts.items():
        j = server.group_of.get(i)
        pos = pp.view.position
        if i >= c and j in out.offsets and pos is not None and pos in out.group_outputs[j].valid_positions:
            owners[out.offsets[j] + pos] = (j, pos, i)
    j, position, owner = owners[list(owners)[sample_distinct(len(owners), 1, OS_RANDOM)[0]]]
    members = set(server.assignment.groups[j])
    candidates = sorted(i for gj, _, i in owners.values() if gj == j)
    colluders = {k: parts[k].inner for k in range(c) if k in members}
    adv = CuriousPS(server.servers[j], _group_view(server, transcript, members), colluders, parts)
    return adv.guess(position, candidates) == owner, len(candidates)


def anonymity_game_groups(N: int, c: int, d: int, g: int, trials: int, broken: bool = False) -> Estimate:
    """Advantage over 1/h_j, the honest members of the challenge row's group."""
    results = [anonymity_trial_groups(N, c, d, g, broken) for _ in range(trials)]
    baseline = sum(1 / h for _, h in results) / trials
    it = iter(results)
    return estimate(lambda: next(it)[0], trials, baseline)


# --------------------------------------------------------------------------- #
# The adversary chooses the schedule (docs/security/anonymity.md, section 5)
def schedule_trial(N: int, n: int, budget: int, participant_cls=None) -> tuple[bool, int]:
    """One real round whose PS plays every legal order of its messages; returns (adversary correct, h).

    The adversary keeps the schedule with the most honest models linked (L of them) among h honest
    rows; the challenge is a uniform one of those h rows: a linked row it names, any other it guesses.
    Participant 0 colludes with the PS; keys and randomness are fresh in every trial. With n slots
    for N + 1 parties the first reservation iteration settles everyone with chance
    Π_{i<N+1}(1 − i/n) (0.99 for N = 4, n = 1024), so the upload usually follows it (R_max = 2).
    """
    from reshuffle.adversaries.explorer import ExploreConfig, explore
    from reshuffle.protocol.participant import Participant

    seed = int.from_bytes(secrets.token_bytes(4), "big")
    # Forged evidence names nobody and links nothing: the anonymity adversary leaves it out.
    r = explore(ExploreConfig(N=N, n=n, R_max=2, budget=budget, seed=seed, forge=False, until_all_linked=True),
                participant_cls or Participant)
    linked, h = r.best
    challenge = sample_distinct(h, 1, OS_RANDOM)[0]
    return challenge < linked or sample_distinct(h, 1, OS_RANDOM)[0] == 0, h


def schedule_game(N: int, n: int, budget: int, trials: int, participant_cls=None) -> Estimate:
    """Advantage over 1/h of the adversary that chooses the schedule."""
    results = [schedule_trial(N, n, budget, participant_cls) for _ in range(trials)]
    baseline = sum(1 / h for _, h in results) / trials
    it = iter(results)
    return estimate(lambda: next(it)[0], trials, baseline)
