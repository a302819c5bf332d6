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
"""

from __future__ import annotations

import secrets

import numpy as np

from reshuffle.adversaries.dclinker import _complete, readable_sums
from reshuffle.games.framework import Estimate, coin, estimate
from reshuffle.protocol.dcnet import DCParticipant, parties

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


__all__ = ["dcnet_game", "read_target", "ring", "ring_round", "trial"]
