"""OT sender privacy: a receiver obtains at most k tokens (chosen-target CDH, random oracles).

The OT game: the challenger is the real :class:`OTSender` (n slots, k answers);
the adversary gets the table, one answer to a request of its choice, and the
two random oracles H1(T, ℓ) and H(T, ℓ, Z) as callables. It wins by outputting
k + 1 correct (slot, token) pairs.

The base problem, chosen-target CDH (Boldyreva, PKC 2003): given B = g^β, a
target oracle returning fresh uniform elements and a help oracle X ↦ X^β usable
q_h times, output q_h + 1 distinct pairs (W, W^β) with W from the targets.

The reduction B^A answers H1 with targets, H lazily with random strings, A's
request with the help oracle (k calls), and outputs, for each slot A got right,
the target and the Z that A queried H on for that slot.
"""

from __future__ import annotations

import secrets
from typing import Callable, Protocol

from reshuffle.crypto.ot import TOKEN_BYTES, OTRequest, OTSender, _xor, h1, h_mask
from reshuffle.errors import ConfigError
from reshuffle.games.framework import Estimate, estimate

T = 1


class Oracles(Protocol):
    def h1(self, slot: int): ...
    def h(self, slot: int, Z) -> bytes: ...


class OTAdversary(Protocol):
    def __call__(self, group, table, ask: Callable, ro: Oracles, n: int, k: int) -> list[tuple[int, bytes]]: ...


def honest_then_guess(group, table, ask, ro, n, k):
    """Runs the receiver's steps for k slots, then guesses one more token at random."""
    choices = list(range(k))
    blinds = [group.random_scalar() for _ in choices]
    g = group.generator()
    D = ask(OTRequest(T, tuple(ro.h1(s) * g**a for s, a in zip(choices, blinds))))
    out = [(s, _xor(table.cipher[s], ro.h(s, d * table.B ** (group.order - a)))) for s, a, d in zip(choices, blinds, D)]
    return out + [(k, secrets.token_bytes(TOKEN_BYTES))]


def dlog_adversary(group, table, ask, ro, n, k):
    """In a tiny group: β = log_g B by baby-step giant-step, then every H1(ℓ)^β."""
    beta = group.dlog(int.from_bytes(table.B.to_bytes(), "big"))
    return [(s, _xor(table.cipher[s], ro.h(s, ro.h1(s) ** beta))) for s in range(k + 1)]


class _RealOracles:
    def __init__(self, group) -> None:
        self.group = group

    def h1(self, slot: int):
        return h1(self.group, T, slot)

    def h(self, slot: int, Z) -> bytes:
        return h_mask(T, slot, Z)


def ot_sender_trial(group, adversary: OTAdversary, n: int, k: int) -> bool:
    """The OT game against the real sender."""
    sender = OTSender(group, T, n, k)
    out = adversary(group, sender.table, lambda req: sender.answer(0, req).answers, _RealOracles(group), n, k)
    slots = {s for s, _ in out}
    return len(slots) == len(out) >= k + 1 and all(sender.token_matches(s, tok) for s, tok in out)


class CTCDH:
    """The chosen-target CDH challenger with q_h help queries."""

    def __init__(self, group, q_h: int) -> None:
        self.group, self.q_h = group, q_h
        self._beta = group.random_scalar()
        self.B = group.base_mul(self._beta)
        self.targets: list = []
        self.helped = 0

    def target(self):
        W = self.group.base_mul(self.group.random_scalar())
        self.targets.append(W)
        return W

    def help(self, X):
        if self.helped >= self.q_h:
            raise ConfigError("help oracle exhausted")
        self.helped += 1
        return X**self._beta

    def wins(self, pairs: list) -> bool:
        known = {W.to_bytes() for W in self.targets}
        distinct = {W.to_bytes() for W, _ in pairs}
        return (
            len(distinct) == len(pairs) >= self.q_h + 1
            and distinct <= known
            and all(V == W**self._beta for W, V in pairs)
        )


class Reduction:
    """B^A: an adversary against CT-CDH (q_h = k) from an adversary A against the OT."""

    def __init__(self, adversary: OTAdversary, n: int, k: int) -> None:
        self.A, self.n, self.k = adversary, n, k

    def __call__(self, ch: CTCDH) -> list:
        from reshuffle.crypto.ot import OTResponse, OTTable

        group = ch.group
        targets = {s: ch.target() for s in range(self.n)}  # H1(T, ℓ) := target ℓ
        h_table: dict[tuple[int, bytes], bytes] = {}
        queried: dict[int, list] = {}

        class Programmed:
            def h1(self, slot):
                return targets[slot]

            def h(self, slot, Z):
                key = (slot, Z.to_bytes())
                if key not in h_table:
                    h_table[key] = secrets.token_bytes(TOKEN_BYTES)
                    queried.setdefault(slot, []).append(Z)
                return h_table[key]

        # c_ℓ uniform: it defines τ_ℓ = c_ℓ ⊕ H(T, ℓ, H1(ℓ)^β) implicitly.
        table = OTTable(T, ch.B, tuple(secrets.token_bytes(TOKEN_BYTES) for _ in range(self.n)))
        answered = []

        def ask(req: OTRequest):
            if answered or not 0 < len(req.blinded) <= self.k:
                raise ConfigError("the OT answers once, with at most k elements")
            answered.append(True)
            return OTResponse(T, tuple(ch.help(X) for X in req.blinded)).answers

        out = self.A(group, table, ask, Programmed(), self.n, self.k)
        pairs = []
        for s, tok in out:
            # the Z for which A's token is consistent with the programmed H
            for Z in queried.get(s, []):
                if _xor(table.cipher[s], h_table[(s, Z.to_bytes())]) == tok:
                    pairs.append((targets[s], Z))
                    break
        return pairs


def ot_sender_games(group, adversary: OTAdversary, n: int, k: int, trials: int) -> tuple[Estimate, Estimate]:
    """(Adv of A against the real OT, Adv of B^A against CT-CDH), both over ``trials``."""
    direct = estimate(lambda: ot_sender_trial(group, adversary, n, k), trials, 0.0)

    def reduced() -> bool:
        ch = CTCDH(group, k)
        return ch.wins(Reduction(adversary, n, k)(ch))

    return direct, estimate(reduced, trials, 0.0)
