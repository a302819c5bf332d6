"""End-to-end channels: group DH, HKDF, AES-256-GCM with bound associated data.

Shares travel from P_i to P_j through the PS; the PS must neither read nor
alter nor redirect them. :class:`Channel` derives one key per direction from
``DH(sk_i, pk_j)`` and both identities, picks its own random 96-bit nonces and
binds ``(T, sender, receiver, phase)`` as associated data, so a ciphertext
replayed into another round, phase or pair fails to open. Raw AEAD stays here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group
from reshuffle.crypto.rand import RandomSource, as_source
from reshuffle.errors import ConfigError, DecodeError, DecryptionError

NONCE_BYTES = 12
TAG_BYTES = 16


@dataclass(frozen=True)
class DHKeyPair:
    """A group DH key pair ``(x, X = g^x)``."""

    secret: int = field(repr=False)
    public: Element

    @classmethod
    def generate(cls, group: Group, rng: RandomSource | int | None = None) -> "DHKeyPair":
        x = group.random_scalar(rng)
        return cls(x, group.base_mul(x))

    @classmethod
    def from_secret(cls, group: Group, secret: int) -> "DHKeyPair":
        if not 0 < secret < group.order:
            raise ConfigError("DH secret must be in [1, q)")
        return cls(secret, group.base_mul(secret))


def dh_shared(secret: int, peer_public: Element) -> bytes:
    """Encoding of ``peer_public^secret`` (the peer key was validated at decode)."""
    shared = peer_public**secret
    if shared.is_identity:
        raise DecryptionError("DH produced the identity")
    return shared.to_bytes()


class Channel:
    """Authenticated encryption between ``me`` and ``peer`` for one round ``T``."""

    def __init__(
        self,
        my_keys: DHKeyPair,
        peer_public: Element,
        me: int,
        peer: int,
        T: int,
        rng: RandomSource | int | None = None,
    ) -> None:
        if me == peer:
            raise ConfigError("a channel needs two distinct parties")
        lo, hi = sorted((me, peer))
        pk = {me: my_keys.public.to_bytes(), peer: peer_public.to_bytes()}
        okm = HKDF(
            algorithm=hashes.SHA256(),
            length=64,
            salt=label("channel/salt"),
            info=label("channel/keys", T, lo, hi) + pk[lo] + pk[hi],
        ).derive(dh_shared(my_keys.secret, peer_public))
        k_lo_hi, k_hi_lo = okm[:32], okm[32:]
        self._send = AESGCM(k_lo_hi if me == lo else k_hi_lo)
        self._recv = AESGCM(k_hi_lo if me == lo else k_lo_hi)
        self.me, self.peer, self.T = me, peer, T
        self._rng = as_source(rng)

    def _ad(self, sender: int, receiver: int, phase: int) -> bytes:
        return label("channel/ad", self.T, sender, receiver, phase)

    def seal(self, phase: int, plaintext: bytes) -> bytes:
        nonce = self._rng.bytes(NONCE_BYTES)
        return nonce + self._send.encrypt(nonce, plaintext, self._ad(self.me, self.peer, phase))

    def open(self, phase: int, ciphertext: bytes) -> bytes:
        if len(ciphertext) < NONCE_BYTES + TAG_BYTES:
            raise DecodeError(
                f"ciphertext of {len(ciphertext)} bytes is shorter than nonce and tag"
            )
        nonce, body = ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:]
        try:
            return self._recv.decrypt(nonce, body, self._ad(self.peer, self.me, phase))
        except InvalidTag:
            raise DecryptionError(
                f"ciphertext from {self.peer} to {self.me} (round {self.T}, phase {phase}) "
                "failed authentication"
            ) from None
