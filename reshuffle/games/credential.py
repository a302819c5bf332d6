"""Row-credential unforgeability (docs/protocol.md §7.2): q evaluations give at most q credentials.

The credential game: the challenger is the PS with key gamma, C = g^gamma, and
the real RFC 9497 VOPRF code (:mod:`reshuffle.crypto.voprf`). The adversary A
gets C, the suite (its three hashes are the random oracles), and an issuing
oracle that blind-evaluates at most q elements in total, each answer with its
batch DLEQ proof. A wins by outputting q + 1 distinct inputs with valid
outputs (``output == Evaluate(gamma, input)``, the PS's check of a row).

The base problem, one-more Diffie–Hellman (= chosen-target CDH, Boldyreva,
PKC 2003; :class:`reshuffle.games.ot_sender.CTCDH`): a target oracle of fresh
uniform elements W, a help oracle X ↦ X^gamma usable q times; win with q + 1
pairs (W, W^gamma).

B^A programs the random oracles: HashToGroup(input) := a fresh target;
Hash (the output hash) lazily random, recording every Finalize query;
HashToScalar lazily random and programmable. It answers an issuing query with
the help oracle and *simulates* the proof (honest-verifier zero knowledge:
pick c, s, set t2 = g^s·C^c, t3 = M^s·Z^c and program the challenge hash at
that transcript to c). For each of A's valid pairs it outputs (W_input, N)
where N is the element A queried Hash on for that input and output.

Weak instances: a 17-bit group (A computes gamma) and a keyless credential
(gamma = 1: Y = H_2(T, r), anyone can mint rows).

Epoch pseudonyms (§7.3) are the same VOPRF under the epoch key π, evaluated once
per identity per epoch: c corrupt identities are c evaluations, so c + 1 valid
pseudonyms solve one-more DH by the same reduction (:func:`pseudonym_games`).
:func:`blinded_distribution` shows, exactly on a small group, that the PS's view
of an issuance is uniform whatever the pseudonym.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Callable

from reshuffle.crypto import voprf
from reshuffle.errors import ConfigError, InvalidElement
from reshuffle.games.channel import bounded_dlog
from reshuffle.games.framework import Estimate, estimate
from reshuffle.games.ot_sender import CTCDH
from reshuffle.protocol.pseudonym import nym_input

Q = 3  # blind evaluations the adversary may ask for


def _input(i: int) -> bytes:
    return b"T=1|r=" + i.to_bytes(16, "big")


# ---------------------------------------------------------------- adversary
def sanity_forger(suite: voprf.Suite, C, issue: Callable, q: int) -> list[tuple[bytes, bytes]]:
    """Tries a bounded discrete log of C; with gamma, mints q + 1 rows. Otherwise it
    obtains q credentials honestly (verifying each proof) and guesses one more."""
    gamma = bounded_dlog(suite.group, C)
    if gamma is not None:
        return [(_input(i), voprf.evaluate(suite, gamma, _input(i))) for i in range(q + 1)]
    out = []
    for i in range(q):
        b, B = voprf.blind(suite, _input(i))
        ev, proof = issue([B])
        out += list(zip([_input(i)], voprf.finalize(suite, [_input(i)], [b], ev, [B], C, proof)))
    return out + [(_input(q), secrets.token_bytes(voprf.NH))]


# ------------------------------------------------------------------ the game
class Issuer:
    """The PS's side: key gamma, at most q evaluations in total, each with its proof."""

    def __init__(self, suite: voprf.Suite, q: int, gamma: int | None = None) -> None:
        self.suite, self.q, self.used = suite, q, 0
        self.gamma = gamma if gamma is not None else suite.random_scalar()
        self.C = suite.group.base_mul(self.gamma)

    def issue(self, blinded: list) -> tuple:
        if self.used + len(blinded) > self.q:
            raise ConfigError(f"the issuer evaluates at most q={self.q} elements")
        self.used += len(blinded)
        return voprf.blind_evaluate(self.suite, self.gamma, blinded, self.C)

    def wins(self, pairs: list[tuple[bytes, bytes]]) -> bool:
        inputs = {x for x, _ in pairs}
        return len(inputs) == len(pairs) >= self.q + 1 and all(
            hmac.compare_digest(voprf.evaluate(self.suite, self.gamma, x), y) for x, y in pairs
        )


def credential_trial(group, adversary, q: int = Q, keyless: bool = False) -> bool:
    """The credential game against the real VOPRF (``keyless``: the weak gamma = 1)."""
    suite = voprf.Suite(group)
    iss = Issuer(suite, q, 1 if keyless else None)
    return iss.wins(adversary(suite, iss.C, iss.issue, q))


class ProgrammedSuite(voprf.Suite):
    """The suite with its hashes as lazily sampled, programmable random oracles."""

    def __init__(self, group, target: Callable) -> None:
        super().__init__(group)
        self._target = target
        self.h2g: dict[bytes, object] = {}
        self.h: dict[bytes, bytes] = {}
        self.h2s: dict[tuple[bytes, bytes], int] = {}
        self.finalize_queries: list[tuple[bytes, bytes, bytes]] = []  # (input, N, output)

    def hash_to_group(self, msg: bytes):
        if msg not in self.h2g:
            self.h2g[msg] = self._target()
        return self.h2g[msg]

    def hash(self, data: bytes) -> bytes:
        if data not in self.h:
            self.h[data] = secrets.token_bytes(voprf.NH)
            parsed = _parse_finalize(data)
            if parsed is not None:
                self.finalize_queries.append((*parsed, self.h[data]))
        return self.h[data]

    def hash_to_scalar(self, msg: bytes, dst: bytes | None = None) -> int:
        key = (dst or b"", msg)
        if key not in self.h2s:
            self.h2s[key] = secrets.randbelow(self.group.order)
        return self.h2s[key]

    def program_challenge(self, transcript: bytes, c: int) -> bool:
        """Set HashToScalar(transcript) := c; False if A already queried it (B then fails)."""
        key = (b"", transcript)
        if key in self.h2s:
            return False
        self.h2s[key] = c
        return True


def _parse_finalize(data: bytes) -> tuple[bytes, bytes] | None:
    if not data.endswith(b"Finalize") or len(data) < 4:
        return None
    n = int.from_bytes(data[:2], "big")
    rest = data[2 + n:]
    if len(rest) < 2:
        return None
    m = int.from_bytes(rest[:2], "big")
    if rest[2 + m:] != b"Finalize":
        return None
    return data[2:2 + n], rest[2:2 + m]


class _Abort(Exception):
    """The proof simulation cannot program the challenge oracle."""


class Reduction:
    """B^A: a one-more-DH solver (q help queries) from a credential forger A."""

    def __init__(self, adversary, q: int = Q) -> None:
        self.A, self.q = adversary, q

    def __call__(self, ch: CTCDH) -> list:
        group = ch.group
        suite = ProgrammedSuite(group, ch.target)
        g, C = group.generator(), ch.B

        def issue(blinded: list):
            evaluated = [ch.help(X) for X in blinded]  # at most q in total: CTCDH enforces it
            M, Z = voprf.compute_composites(suite, C, blinded, evaluated)
            c, s = secrets.randbelow(group.order), secrets.randbelow(group.order)
            t2, t3 = g**s * C**c, M**s * Z**c
            if not suite.program_challenge(voprf.challenge_transcript(C, M, Z, t2, t3), c):
                raise _Abort  # A queried that transcript already: probability ≤ Q_H/q
            return tuple(evaluated), voprf.Proof(c, s)

        try:
            forged = self.A(suite, C, issue, self.q)
        except _Abort:
            return []  # B gives up: it loses this run of the one-more-DH game
        pairs = []
        for x, y in forged:
            for inp, N, out in suite.finalize_queries:
                if inp == x and out == y and x in suite.h2g:
                    try:
                        pairs.append((suite.h2g[x], group.element_from_bytes(N)))
                    except InvalidElement:  # an invalid N cannot be W^gamma
                        continue
                    break
        return pairs


# ------------------------------------------------------------ epoch pseudonyms
def pseudonym_input(i: int, epoch: int = 0) -> bytes:
    """The i-th pseudonym input of ``epoch``: the protocol's own label (§7.3) and a 16-byte ρ."""
    return nym_input(epoch, i.to_bytes(16, "big"))


def pseudonym_forger(suite: voprf.Suite, P, issue: Callable, c: int) -> list[tuple[bytes, bytes]]:
    """A coalition of c identities: one pseudonym each, honestly, then one more guessed (or minted with π
    where P's discrete log is small)."""
    pi = bounded_dlog(suite.group, P)
    if pi is not None:
        return [(pseudonym_input(i), voprf.evaluate(suite, pi, pseudonym_input(i))) for i in range(c + 1)]
    out = []
    for i in range(c):
        b, B = voprf.blind(suite, pseudonym_input(i))
        ev, proof = issue([B])
        out += list(zip([pseudonym_input(i)], voprf.finalize(suite, [pseudonym_input(i)], [b], ev, [B], P, proof)))
    return out + [(pseudonym_input(c), secrets.token_bytes(voprf.NH))]


def pseudonym_trial(group, adversary, c: int = Q) -> bool:
    """One epoch: the issuer answers each of the c corrupt identities once (q = c evaluations); A wins with
    c + 1 distinct valid pseudonyms. The credential game with q = c, on the pseudonym's inputs."""
    suite = voprf.Suite(group)
    iss = Issuer(suite, c)
    pairs = adversary(suite, iss.C, iss.issue, c)
    return iss.wins(pairs) and all(x.startswith(nym_input(0, b"")) for x, _ in pairs)


def blinded_distribution(group, data: bytes) -> dict[bytes, int]:
    """How often each element is the PS's view of a request for ``data``, over every blind in [1, q):
    exact, so for a small group only. Uniform over the non-identity elements for every input (perfect
    hiding): the issuance view is independent of the pseudonym."""
    P = voprf.Suite(group).hash_to_group(data)
    out: dict[bytes, int] = {}
    for b in range(1, group.order):
        key = (P**b).to_bytes()
        out[key] = out.get(key, 0) + 1
    return out


def pseudonym_games(group, adversary, trials: int, c: int = Q) -> tuple[Estimate, Estimate]:
    """(Adv of A against one pseudonym per identity per epoch, Adv of B^A against one-more DH)."""
    direct = estimate(lambda: pseudonym_trial(group, adversary, c), trials, 0.0)

    def reduced() -> bool:
        ch = CTCDH(group, c)
        return ch.wins(Reduction(adversary, c)(ch))

    return direct, estimate(reduced, trials, 0.0)


def credential_games(group, adversary, trials: int, q: int = Q) -> tuple[Estimate, Estimate]:
    """(Adv of A against the credential, Adv of B^A against one-more DH)."""
    direct = estimate(lambda: credential_trial(group, adversary, q), trials, 0.0)

    def reduced() -> bool:
        ch = CTCDH(group, q)
        return ch.wins(Reduction(adversary, q)(ch))

    return direct, estimate(reduced, trials, 0.0)
