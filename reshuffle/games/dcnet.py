"""Sender anonymity inside a stable group of 5 running the DC-net round (docs/security/dcnet.md).

The challenger runs the real round (:class:`~reshuffle.protocol.dcnet.DCServer` and
its members, in process) for one stable group of 5. Members 0 and 2 are honest
targets; the adversary chooses their two models v_0, v_1, the colluders (any of
members 1, 3, 4) hand it their epoch secrets, and it sees everything the PS
sees. The challenger gives member 0 v_b and member 2 v_{1−b}. The adversary
(:func:`read_target`) unmasks every set of honest members it can
(:func:`~reshuffle.adversaries.dclinker.readable_sums`) and answers from the
target's row when it reads member 0 alone; otherwise it guesses. Advantage over
1/2: about 0 with 1, 2 or 3 colluders (two honest members remain, and the sum of
the honest uploads is all the coalition reads).

Weak instance: a DC-net whose members share keys only with their two ring
neighbours (the masks still cancel in the full sum). With the target's two
neighbours (members 1 and 4 of the ring 0-1-2-3-4) colluding the adversary reads the target alone: advantage 1/2.
Dropping a named member (:func:`dc_drop_game`): member 5 of a group of 6 is named in round 1
after a dispute that proves K_05 (its key with target 0); round 2 of the epoch runs without it,
targets 0 and 2 as above, and members 3, 4 and 5 collude (their epoch secrets, K_05 and both
rounds' PS views). Advantage about 0: the smaller group keeps every other pair key and two honest
members besides the targets' pair. Weak instance: members that drop whomever the PS names, with no
floor, lose members 1 and 2 as well, and the colluders read target 0 alone in every trial
(:func:`dc_drop_reads`).

Blame soundness in the DC-net round (:func:`dc_blame_game`): the challenger plays a real round of
two groups of 5 in which colluder member 2 lies in its opening of one pair key (so the round
runs the blame and dispute steps). The adversary holds the PS's whole view (every signed message,
the proved K_02) and the colluder's signing key and epoch secret, and builds evidence naming each
honest member of group 0: its own signed opening against K_02, against a pair key of a second
DC_KEY the colluder signs (another epoch key Y_2', proved by the colluder), its upload as a nonzero
row, under another round's counts. It wins if the checker (:func:`verify_round_evidence`, from the
roster's keys alone) accepts one. Advantage = Pr[win], 0 expected. Weak instance: a checker that
takes the h the opening signs without recomputing it from the transcript: the colluder's second
key frames an honest member in every trial.
"""

from __future__ import annotations

import dataclasses
import secrets

import numpy as np

from reshuffle.adversaries.dclinker import _complete, readable_sums
from reshuffle.games.framework import Estimate, coin, estimate
from reshuffle.protocol.dcnet import DCParticipant, parties
from reshuffle.protocol.grouped import GroupedParticipant

G, D = 5, 8
V = [np.zeros(D, np.float32), np.arange(1, D + 1, dtype=np.float32) / 8]  # the adversary's v_0, v_1


def ring(i: int, members) -> list[int]:
    k = list(members).index(i)
    return sorted({members[(k - 1) % len(members)], members[(k + 1) % len(members)]})


class RingMember(DCParticipant):
    """A member of the weak scheme: pair keys with its two ring neighbours only."""

    def _vector(self):
        keep = ring(self.pid, self.members)
        self._pairs = {j: K for j, K in self._pairs.items() if j in keep}
        return super()._vector()


def _round(models, seed: int, weak: bool):
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner
    from reshuffle.protocol.params import RoundParams

    ps, parts = build_round(models, RoundParams.default(G, D), seed=seed, groups=[list(range(G))])
    if weak:
        for p in parts.values():
            p.dc_class = RingMember
    InProcessRunner(ps, parts).run()
    return ps.servers[0], parts


def ring_round(seed: int = 1):
    """One round of the weak scheme: (its PS, {"secrets": member → y, "tags": member → its row's tag})."""
    rng = np.random.default_rng(seed)  # model values only
    srv, parts = _round([rng.normal(size=D).astype(np.float32) for _ in range(G)], seed, True)
    return srv, {"secrets": {i: p.dc._y for i, p in parts.items()},
                 "tags": {i: p.view.row_tags[0] for i, p in parts.items()}}


def read_target(srv, coalition, partners) -> int | None:
    """A: b if it reads member 0's row alone, else None."""
    p = srv.params
    for A, rows in readable_sums(srv, coalition, partners).items():
        if A != frozenset({0}):
            continue
        for ρ in range(parties(p)):
            if rows[ρ].any():
                w = p.codec.decode(rows[ρ, : p.d])
                return 0 if np.allclose(w, V[0], atol=1e-4) else 1
    return None


def trial(colluders: tuple[int, ...], weak: bool) -> bool:
    b = coin()
    rng = np.random.default_rng(secrets.randbits(32))  # the other members' model values only
    models = [rng.normal(size=D).astype(np.float32) for _ in range(G)]
    models[0], models[2] = V[b].copy(), V[1 - b].copy()
    srv, parts = _round(models, secrets.randbits(32), weak)
    coalition = {c: parts[c].dc._y for c in colluders}
    guess = read_target(srv, coalition, ring if weak else _complete)
    return (guess if guess is not None else coin()) == b


def dcnet_game(colluders: tuple[int, ...], trials: int, weak: bool = False) -> Estimate:
    """Adv over 1/2 of the adversary above, with ``colluders`` ⊆ {1, 3, 4} of the group (targets 0 and 2)."""
    if any(c not in (1, 3, 4) for c in colluders):
        raise ValueError("colluders are among members 1, 3 and 4 (0 and 2 are the honest targets)")
    return estimate(lambda: trial(colluders, weak), trials, 0.5)


def _forgeries(ps, parts, T: int):
    """Every piece of evidence the adversary builds against each honest member of group 0."""
    from reshuffle.crypto import voprf
    from reshuffle.protocol import dcnet
    from reshuffle.protocol import messages as msg

    s = ps.servers[0]
    ev = s.culprits[2]  # the colluder's own evidence: its transcript and the proved K_02
    g = s.group
    col = parts[2]
    k2 = s.keys[2]
    # The colluder signs a second DC_KEY of this round with another epoch key Y_2' = g^{y'}.
    y2 = g.random_scalar(None)
    k2b = msg.DCKey(k2.T, k2.m, 2, k2.global_hash, k2.params_hash, k2.epoch_key, g.base_mul(y2), k2.nonce,
                    k2.cred_request, k2.nym_request).encode(col._sk)
    tr2 = dataclasses.replace(ev.transcript, keys=tuple(k2b if msg.decode(b, s._ctx).sender == 2 else b
                                                        for b in ev.transcript.keys))
    counts = list(ev.transcript.history[-1])
    counts[0] += 1
    tr3 = dataclasses.replace(ev.transcript, history=ev.transcript.history[:-1] + (tuple(counts),))
    out = []
    for i in (0, 1, 3, 4):
        op = msg.relay_bytes(s._opened[i][2])
        Y = s.keys[i].dh_key
        K2 = Y ** y2
        proof2 = voprf.prove_dleq(y2, g.generator(), g.base_mul(y2), [Y], [K2], None,
                                  dcnet.dispute_context(T, 2, i)).encode(g)
        for pos in s.decoy_positions:
            base = dcnet.DCRoundEvidence(dcnet.KIND_FALSE_OPENING, i, ev.transcript, op, pos, 2, ev.secret,
                                         ev.proof)
            out += [base, dataclasses.replace(base, transcript=tr2, secret=K2.to_bytes(), proof=proof2),
                    dataclasses.replace(base, transcript=tr3)]
            header, h, hashes, sig, rows = s._kept[i]
            z = dcnet.DCEvidence(i, pos, header, h, hashes, sig, rows[pos], op)
            out.append(dcnet.DCRoundEvidence(dcnet.KIND_NONZERO, i, ev.transcript, op, pos, nonzero=z))
    return out


def unbound_checker(ev, keys):
    """The weak checker: it takes the h the culprit's opening signs as the transcript's, unchecked."""
    from reshuffle.protocol import dcnet
    from reshuffle.protocol.messages import HASH_BYTES, HEADER_BYTES

    class Unbound(dcnet.DCTranscript):
        def h_at(self, T, m, p):
            return ev.opening[HEADER_BYTES:HEADER_BYTES + HASH_BYTES]

    tr = Unbound(ev.transcript.start, ev.transcript.keys, ev.transcript.history)
    return dcnet.verify_round_evidence(dataclasses.replace(ev, transcript=tr), keys)


def dc_blame_trial(checker=None) -> bool:
    """One trial with a fresh seed: True if evidence naming an honest member passes ``checker``."""
    from reshuffle.adversaries.dcteam import PairLiar, _round
    from reshuffle.protocol import dcnet

    checker = checker or dcnet.verify_round_evidence
    ps, parts, out, _ = _round(secrets.randbits(32), {2: PairLiar})
    s = ps.servers[0]
    keys = {i: c.key for i, c in s._roster.items()}
    for ev in _forgeries(ps, parts, s.T):
        try:
            checker(ev, keys)
            return True
        except dcnet.InvalidEvidence:
            continue
    return False


def dc_blame_game(trials: int, checker=None) -> Estimate:
    """Pr[forged evidence names an honest member of the DC-net round] (baseline 0)."""
    return estimate(lambda: dc_blame_trial(checker), trials, 0.0)


class Floor5(GroupedParticipant):
    """A member whose floor is 5 (a group of 6 may lose one member)."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **{**kw, "min_group": 5})


class Credulous(Floor5):
    """The weak member of the drop game: it drops whomever the PS names, unchecked and with no floor."""

    def _on_exclude(self, data: bytes) -> list[bytes]:
        from reshuffle.protocol import messages as msg

        m = msg.decode(data, msg.Context())
        self._membership = dataclasses.replace(self._membership, members=tuple(
            i for i in self._membership.members if i != m.culprit))
        self.min_group = 2
        return []


def drop_round(b: int, weak: bool = False):
    """Round 1: member 5 of a group of 6 lies in an opening of its key with member 0 (K_05 is proved in the
    dispute). Round 2 of the epoch: member 5 dropped; members 0 and 2 hold v_b and v_{1−b}; members 3, 4 and 5
    collude (the adversary holds their epoch secrets, K_05 and the PS's view of both rounds). The weak members
    also drop honest members 1 and 2 on the PS's word. Returns round 2's PS and the coalition's secrets."""
    from reshuffle.adversaries.dcteam import PairLiar
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner
    from reshuffle.protocol.params import RoundParams

    G6, seed = [list(range(6))], secrets.randbits(32)
    rng = np.random.default_rng(secrets.randbits(32))  # the other members' model values only
    models = [rng.normal(size=D).astype(np.float32) for _ in range(6)]
    ps, parts = build_round(models, RoundParams.default(6, D), seed=seed, groups=G6, T=1)
    parts[5].dc_class = PairLiar
    out = InProcessRunner(ps, parts).run()
    ev = out.evidence[5]
    models[0], models[2] = V[b].copy(), V[1 - b].copy()
    excluded = {5: ev}
    if weak:
        excluded.update({i: dataclasses.replace(ev, culprit=i) for i in (1, 2)})
    ps2, parts2 = build_round(models, RoundParams.default(6, D), seed=seed, groups=G6, T=2, excluded=excluded,
                              grouped_cls=Credulous if weak else Floor5)
    InProcessRunner(ps2, parts2).run()
    return ps2.servers[0], {c: parts2[c].dc._y for c in (3, 4)}


def drop_trial(weak: bool = False) -> bool:
    """True if the adversary's guess of b is right (it reads target 0 alone, or guesses)."""
    b = coin()
    srv, coalition = drop_round(b, weak)
    guess = read_target(srv, coalition, _complete)
    return (guess if guess is not None else coin()) == b


def dc_drop_game(trials: int, weak: bool = False) -> Estimate:
    """Adv over 1/2 of the adversary above (0 expected; 1/2 against members that drop on the PS's word)."""
    return estimate(lambda: drop_trial(weak), trials, 0.5)


def dc_drop_reads(trials: int, weak: bool = True) -> Estimate:
    """Pr[the adversary reads target 0's row alone] after the drop (baseline 0; 1 against the weak members)."""
    return estimate(lambda: read_target(*drop_round(coin(), weak), _complete) is not None, trials, 0.0)


__all__ = ["Credulous", "Floor5", "dc_blame_game", "dc_drop_game", "dc_drop_reads", "drop_round", "drop_trial", "dc_blame_trial", "dcnet_game", "read_target", "ring", "ring_round", "trial",
           "unbound_checker"]
