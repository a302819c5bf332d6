"""Channel confidentiality (docs/protocol.md §3, docs/security/README.md): IND-CPA of DH + HKDF + AES-GCM.

The game: the challenger draws x_i, x_j, publishes X_i = g^{x_i}, X_j = g^{x_j}
and builds the real :class:`~reshuffle.crypto.channel.Channel` from i to j in
round T. The adversary may ask for encryptions of messages of its choice, then
names (m_0, m_1) of equal length, receives c* = seal(m_b) and outputs a guess
for b. Advantage: Pr[win] − ½.

Hybrids: H0 is the real channel; H1 derives the channel keys from HKDF(Z) with
Z uniform instead of g^{x_i x_j}; H2 uses uniform keys (HKDF on a uniform
element, a KDF in the random-oracle model: H1 = H2). Two reductions:

- B_DDH^A gets (U, V, Z), sets X_i = U, X_j = V and keys the real channel code
  with Z (the DH value is programmed, everything else runs unchanged); it says
  "real" iff A wins: Adv_DDH(B_DDH) = (Adv_H0(A) − Adv_H1(A)) / 2.
- B_AEAD^A plays AEAD IND-CPA: the challenger's key is the channel key, its
  encryption oracle answers A's queries and its left-or-right oracle the
  challenge, through the channel's own seal (nonce and associated data):
  Adv_AEAD(B_AEAD) = Adv_H2(A).

Hence Adv(A) = 2·Adv_DDH(B_DDH) + Adv_AEAD(B_AEAD): the harness measures all
three in one run and checks the identity. Weak instances: a 17-bit group (A
computes x_j) and a channel whose nonce source is constant (A compares the
challenge with an earlier encryption).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from reshuffle.crypto.channel import NONCE_BYTES, Channel, DHKeyPair
from reshuffle.crypto.rand import RandomSource, as_source
from reshuffle.errors import ConfigError, DecryptionError
from reshuffle.games.framework import Estimate, coin, estimate

T, I, J, PHASE = 1, 0, 1, 3
M0, M1 = bytes(16), b"\x01" * 16
BSGS_STEPS = 512  # the sanity adversary's dlog budget: exponents below 2^18


class FixedNonces:
    """The weak instance's randomness: every nonce is the same."""

    def bytes(self, n: int) -> bytes:
        return bytes(n)


# ----------------------------------------------------------------- adversary
@lru_cache(maxsize=8)
def _baby_steps(group, m: int) -> dict[bytes, int]:
    g, table, e = group.generator(), {}, group.base_mul(0)
    for j in range(m):
        table.setdefault(e.to_bytes(), j)
        e = e * g
    return table


def bounded_dlog(group, X, m: int = BSGS_STEPS) -> int | None:
    """log_g X if it is below m², by baby-step giant-step (2m group operations); else None."""
    table = _baby_steps(group, m)
    step = group.base_mul(group.order - m)  # g^{-m}
    y = X
    for i in range(m):
        j = table.get(y.to_bytes())
        if j is not None:
            return (i * m + j) % group.order
        y = y * step
    return None


def sanity_adversary(group, X_i, X_j, seal: Callable, challenge: Callable) -> int:
    """Tries a repeated nonce, then a bounded discrete log of X_j; else guesses."""
    c0 = seal(M0)
    cstar = challenge(M0, M1)
    if cstar[:NONCE_BYTES] == c0[:NONCE_BYTES]:
        # one key, one nonce: equal plaintexts give equal ciphertexts
        return int(cstar != c0)
    x_j = bounded_dlog(group, X_j)
    if x_j is not None:
        try:
            return int(Channel(DHKeyPair(x_j, X_j), X_i, J, I, T).open(PHASE, cstar) == M1)
        except DecryptionError:
            pass  # the channel was not keyed by g^{x_i x_j} (a hybrid)
    return coin()


# ------------------------------------------------------------------- the game
def _run(adversary, group, X_i, X_j, channel: Channel, b: int, on_challenge=None) -> bool:
    used = []

    def challenge(m0: bytes, m1: bytes) -> bytes:
        if used or len(m0) != len(m1):
            raise ConfigError("one challenge, two messages of equal length")
        used.append(True)
        if on_challenge is not None:
            return on_challenge(m0, m1)
        return channel.seal(PHASE, (m0, m1)[b])

    return adversary(group, X_i, X_j, lambda m: channel.seal(PHASE, m), challenge) == b


def channel_trial(group, adversary, nonces: Callable[[], RandomSource]) -> bool:
    """IND-CPA against the real channel (H0)."""
    b = coin()
    ki, kj = DHKeyPair.generate(group), DHKeyPair.generate(group)
    ch = Channel(ki, kj.public, I, J, T, rng=nonces())
    return _run(adversary, group, ki.public, kj.public, ch, b)


class _ProgrammedPeer:
    """X_j as the channel sees it, with the DH value ``X_j^{x_i}`` replaced by Z."""

    def __init__(self, X, Z) -> None:
        self._X, self._Z = X, Z

    def to_bytes(self) -> bytes:
        return self._X.to_bytes()

    def __pow__(self, _secret: int):
        return self._Z


def programmed_channel(U, V, Z, rng: RandomSource) -> Channel:
    """The real Channel from i (public U) to j (public V) keyed by HKDF(Z)."""
    return Channel(DHKeyPair(1, U), _ProgrammedPeer(V, Z), I, J, T, rng=rng)


def ddh_reduction_trial(group, adversary, nonces: Callable[[], RandomSource]) -> bool:
    """B_DDH^A in the DDH game: 'real' iff A wins on the channel keyed by Z."""
    real = coin()
    a, c = group.random_scalar(), group.random_scalar()
    U, V = group.base_mul(a), group.base_mul(c)
    Z = U**c if real else group.base_mul(group.random_scalar())
    b = coin()
    won = _run(adversary, group, U, V, programmed_channel(U, V, Z, nonces()), b)
    return int(won) == real


class AEADChallenger:
    """IND-CPA of AES-256-GCM: a uniform key, an encryption oracle and one left-or-right query."""

    def __init__(self) -> None:
        self._aead = AESGCM(AESGCM.generate_key(256))
        self.b = coin()
        self.nonces: list[bytes] = []

    def encrypt(self, nonce: bytes, data: bytes, ad: bytes) -> bytes:
        self.nonces.append(nonce)
        return self._aead.encrypt(nonce, data, ad)

    def left_or_right(self, nonce: bytes, m0: bytes, m1: bytes, ad: bytes) -> bytes:
        return self.encrypt(nonce, (m0, m1)[self.b], ad)

    @property
    def nonce_respecting(self) -> bool:
        """AES-GCM's IND-CPA holds only for adversaries that never repeat a nonce."""
        return len(set(self.nonces)) == len(self.nonces)


class _OracleAEAD:
    """Stands for the channel's sending AEAD: forwards to the challenger."""

    def __init__(self, ch: AEADChallenger) -> None:
        self.ch, self.lr = ch, None

    def encrypt(self, nonce: bytes, data: bytes, ad: bytes) -> bytes:
        if self.lr is not None:
            return self.ch.left_or_right(nonce, *self.lr, ad)
        return self.ch.encrypt(nonce, data, ad)


class OracleChannel(Channel):
    """The real Channel's ``seal`` (nonce choice, associated data, format) over an oracle AEAD."""

    def __init__(self, aead, me: int, peer: int, T: int, rng: RandomSource | None = None) -> None:
        # No key derivation: the key is the challenger's. seal/_ad are the real ones.
        self._send = self._recv = aead
        self.me, self.peer, self.T = me, peer, T
        self._rng = as_source(rng)


def aead_reduction_trial(group, adversary, nonces: Callable[[], RandomSource]) -> bool:
    """B_AEAD^A in the AEAD IND-CPA game: the channel's key is the challenger's."""
    ch = AEADChallenger()
    oracle = _OracleAEAD(ch)
    chan = OracleChannel(oracle, I, J, T, rng=nonces())
    X_i, X_j = group.base_mul(group.random_scalar()), group.base_mul(group.random_scalar())

    def on_challenge(m0: bytes, m1: bytes) -> bytes:
        oracle.lr = (m0, m1)
        try:
            return chan.seal(PHASE, m0)
        finally:
            oracle.lr = None

    # B never reads ch.b: the comparison below is the AEAD challenger's verdict on A's guess.
    return _run(adversary, group, X_i, X_j, chan, ch.b, on_challenge)


def channel_games(
    group, adversary, trials: int, nonces: Callable[[], RandomSource] = lambda: None
) -> tuple[Estimate, Estimate, Estimate]:
    """(Adv of A against the channel, Adv of B_DDH^A against DDH, Adv of B_AEAD^A against AEAD)."""
    return (
        estimate(lambda: channel_trial(group, adversary, nonces), trials, 0.5),
        estimate(lambda: ddh_reduction_trial(group, adversary, nonces), trials, 0.5),
        estimate(lambda: aead_reduction_trial(group, adversary, nonces), trials, 0.5),
    )
