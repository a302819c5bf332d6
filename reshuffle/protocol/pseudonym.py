"""Epoch pseudonyms: one per participant per epoch, issued blind (docs/protocol.md §7.3).

An epoch is the federation's life or a configured number of rounds. The PS
holds an epoch key π; P = g^π is in every ROUND_START of the epoch (hence in h),
and every member's advertisement carries :func:`key_digest` of (epoch, P), which
every member compares with its own before it asks for anything: a PS that gives
one member another key is refused with :class:`EpochKeyMismatch` by that member
and by every honest member that sees its advertisement.

A participant without a pseudonym for the epoch draws a random 16-byte ρ and
asks, inside its OT request, for the RFC 9497 VOPRF evaluation of
``label("row/pseudonym", epoch) ‖ ρ`` under π (the row credential's input is
labelled "row/credential" and its key γ is drawn per round: the two never
meet). The PS answers once per identity per epoch, with its proof against P.
It records whom it issued only once the member holds it: at the certificate of
the round (which t members signed over h, which holds P) sent to that member, or in
a stable group's DC-net round at the member's first count vector (sent only after
it checked and unblinded its pseudonym under the P every member's key signed). A
round that ends earlier records nothing, so one member's silence costs the
others that round, never the epoch. The participant unblinds z = F_π(epoch, ρ)
and keeps (epoch, P, ρ, z) for the epoch's rounds (:meth:`Pseudonym.encode`),
also when its round ended before a certificate: the next round of the epoch
must then announce the same P, and its certificate comes before any row carries
the pseudonym, so it never asks twice. Every row
carries ρ ‖ z; the PS recomputes F_π(epoch, ρ) and refuses a row whose z differs,
and every row whose ρ another row of the round also carries. ρ is the pseudonym
the PS's rules see: 16 bytes, as the simulator's ideal pseudonyms.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from reshuffle.crypto import voprf
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group, get_group
from reshuffle.crypto.rand import RandomSource, as_source
from reshuffle.errors import ConfigError, DecodeError, ProtocolError, Refused, UnexpectedMessage
from reshuffle.wire import Parser, Writer

#: Bytes of the pseudonym ρ (as :data:`reshuffle.run.pseudonyms.SIZE`).
NONCE_BYTES = 16
#: Bytes of z = F_π(epoch, ρ), the VOPRF output (SHA-512).
Z_BYTES = voprf.NH
#: Bytes a row carries for its pseudonym: ρ ‖ z.
ROW_BYTES = NONCE_BYTES + Z_BYTES
_VERSION = 1


class EpochKeyMismatch(Refused):
    """The PS announced an epoch key other than the one this member holds or other members were given."""


class AlreadyIssued(UnexpectedMessage):
    """A participant asked for a second pseudonym in one epoch."""


class InvalidPseudonym(ProtocolError):
    """A row's pseudonym is not F_π(epoch, ρ) under the epoch key."""


def suite(group: Group) -> voprf.Suite:
    """The VOPRF ciphersuite of pseudonyms (ristretto255-SHA512 on the default group)."""
    return voprf.Suite(group, voprf.MODE_VOPRF)


def nym_input(epoch: int, rho: bytes) -> bytes:
    """The VOPRF input of pseudonym ρ in ``epoch``; its label differs from the row credential's."""
    return label("row/pseudonym", epoch) + bytes(rho)


def key_digest(epoch: int, key: Element) -> bytes:
    """SHA-256 of (epoch, P): what every advertisement carries and every member compares."""
    return hashlib.sha256(label("epoch-key", epoch) + key.to_bytes()).digest()


@dataclass(frozen=True)
class Pseudonym:
    """A participant's pseudonym for one epoch: the epoch, the key P it was issued under, ρ and z, and the
    group of P.

    It is kept across the epoch's rounds; :meth:`encode` is its storage form.
    """

    epoch: int
    key: bytes  # P's encoding
    rho: bytes = field(repr=False)
    z: bytes = field(repr=False)
    group: str = "ristretto255"

    def __post_init__(self) -> None:
        if isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or not 0 <= self.epoch < 2**64:
            raise ConfigError(f"epoch must be an int in [0, 2^64), got {self.epoch!r}")
        for name, v, size in (("rho", self.rho, NONCE_BYTES), ("z", self.z, Z_BYTES)):
            if not isinstance(v, bytes) or len(v) != size:
                raise ConfigError(f"pseudonym {name} must be {size} bytes")

    @property
    def name(self) -> bytes:
        """What the PS sees in every row: ρ."""
        return self.rho

    def row_bytes(self) -> bytes:
        """ρ ‖ z, as a row carries them."""
        return self.rho + self.z

    def encode(self) -> bytes:
        """Version, group, epoch, P, ρ, z; :meth:`decode` is the inverse."""
        return (Writer().u8(_VERSION).var(self.group.encode("ascii")).u64(self.epoch).var(self.key)
                .fixed(self.rho, NONCE_BYTES).fixed(self.z, Z_BYTES).bytes())

    @classmethod
    def decode(cls, data: bytes) -> "Pseudonym":
        """Parse :meth:`encode`'s bytes; P must be a valid element of the named group."""
        p = Parser(bytes(data), "pseudonym")
        if p.u8("version") != _VERSION:
            raise DecodeError("pseudonym: unknown version")
        try:
            name = p.var("group", 64).decode("ascii")
            g = get_group(name)
        except (UnicodeDecodeError, ConfigError) as exc:
            raise DecodeError(f"pseudonym: unknown group ({exc})") from None
        epoch = p.u64("epoch")
        key = g.element_from_bytes(p.var("key", 256), "pseudonym key").to_bytes()
        rho, z = p.fixed(NONCE_BYTES, "rho"), p.fixed(Z_BYTES, "z")
        p.finish()
        return cls(epoch, key, rho, z, name)


@dataclass(frozen=True)
class Blinded:
    """A pending request: ρ, the blind and the blinded input."""

    epoch: int
    rho: bytes = field(repr=False)
    blind: int = field(repr=False)
    blinded: Element


def request(group: Group, epoch: int, rng: RandomSource | int | None = None) -> Blinded:
    """Draw ρ and blind its input (the participant's side of issuance)."""
    src = as_source(rng)
    rho = src.bytes(NONCE_BYTES)
    b, B = voprf.blind(suite(group), nym_input(epoch, rho), src)
    return Blinded(epoch, rho, b, B)


def finish(group: Group, req: Blinded, key: Element, evaluated: Element, proof: bytes) -> Pseudonym:
    """Verify the PS's proof against P and unblind z (InvalidProof, InvalidElement on failure)."""
    s = suite(group)
    (z,) = voprf.finalize(s, [nym_input(req.epoch, req.rho)], [req.blind], [evaluated], [req.blinded], key,
                          voprf.Proof.decode(group, proof))
    return Pseudonym(req.epoch, key.to_bytes(), req.rho, z, group.name)


class EpochIssuer:
    """The PS's epoch key π and the identities it issued a pseudonym to in this epoch.

    Parameters
    ----------
    group : the group's name.
    epoch : the epoch number.
    secret : π (default: drawn from ``rng``).
    issued : identities already issued (a resumed epoch).
    rng : randomness for π and the proofs (default OS randomness).
    """

    def __init__(self, group: str, epoch: int, secret: int | None = None, issued=(),
                 rng: RandomSource | int | None = None) -> None:
        self.group_name = group
        self.group = get_group(group)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < 2**64:
            raise ConfigError(f"epoch must be an int in [0, 2^64), got {epoch!r}")
        self.epoch = epoch
        self._rng = as_source(rng)
        self._pi = secret if secret is not None else self.group.random_scalar(self._rng)
        if not 0 < self._pi < self.group.order:
            raise ConfigError("the epoch key must be a scalar in [1, q)")
        self.key = self.group.base_mul(self._pi)
        self.issued: set[int] = set(issued)

    def __repr__(self) -> str:
        return f"EpochIssuer(group={self.group_name!r}, epoch={self.epoch}, issued={len(self.issued)})"

    def evaluate(self, identity: int, blinded: Element, rng: RandomSource | int | None = None
                 ) -> tuple[Element, bytes]:
        """Evaluate ``blinded`` under π with its proof, recording nothing yet; AlreadyIssued if ``identity``
        holds a pseudonym of this epoch. The issuance counts once its holder holds it (:meth:`confirm`)."""
        if identity in self.issued:
            raise AlreadyIssued(f"participant {identity} already holds a pseudonym of epoch {self.epoch}")
        (ev,), proof = voprf.blind_evaluate(suite(self.group), self._pi, [blinded], self.key,
                                            rng if rng is not None else self._rng)
        return ev, proof.encode(self.group)

    def confirm(self, identities) -> None:
        """Record ``identities`` as issued: each got its evaluation and a certificate of the round that
        confirms the key (the member then holds its pseudonym and never asks again in this epoch)."""
        self.issued.update(identities)

    def issue(self, identity: int, blinded: Element, rng: RandomSource | int | None = None
              ) -> tuple[Element, bytes]:
        """:meth:`evaluate` and :meth:`confirm` at once (a holder known to keep what it is sent)."""
        out = self.evaluate(identity, blinded, rng)
        self.confirm([identity])
        return out

    def verify(self, rho: bytes, z: bytes) -> None:
        """Check z = F_π(epoch, ρ) in constant time; :class:`InvalidPseudonym` if it differs."""
        if not hmac.compare_digest(z, voprf.evaluate(suite(self.group), self._pi, nym_input(self.epoch, rho))):
            raise InvalidPseudonym(f"not a pseudonym of epoch {self.epoch} under its key")

    def encode(self) -> bytes:
        """Group name, epoch, π and the issued identities (the PS's checkpoint; π is a secret)."""
        w = Writer().u8(_VERSION).var(self.group_name.encode("ascii")).u64(self.epoch)
        w.fixed(self._pi.to_bytes(self.group.scalar_size, "big"), self.group.scalar_size)
        return w.u32_list(sorted(self.issued)).bytes()

    @classmethod
    def decode(cls, data: bytes, rng: RandomSource | int | None = None) -> "EpochIssuer":
        p = Parser(bytes(data), "epoch issuer")
        if p.u8("version") != _VERSION:
            raise DecodeError("epoch issuer: unknown version")
        name = p.var("group", 64).decode("ascii")
        epoch = p.u64("epoch")
        g = get_group(name)
        pi = g.scalar_from_bytes(p.fixed(g.scalar_size, "secret"), "epoch key")
        issued = p.u32_list("issued", 1 << 24)
        p.finish()
        return cls(name, epoch, pi, issued, rng)


def for_epoch(issuer: EpochIssuer | None, group: str, epoch: int,
              rng: RandomSource | int | None = None) -> EpochIssuer:
    """``issuer`` while it is of ``epoch`` and ``group``; a fresh key for a new epoch."""
    if issuer is not None and issuer.epoch == epoch and issuer.group_name == group:
        return issuer
    return EpochIssuer(group, epoch, rng=rng)


def held_for(held: Pseudonym | None, epoch: int, key: Element) -> Pseudonym | None:
    """The member's check at ROUND_START: its pseudonym if it is of this epoch (under the same P), None
    for a later epoch; a changed key or an epoch gone back is refused."""
    if held is None or held.epoch < epoch:
        return None
    if held.epoch > epoch:
        raise EpochKeyMismatch(f"round of epoch {epoch}, but this member holds a pseudonym of epoch {held.epoch}")
    if not hmac.compare_digest(held.key, key.to_bytes()):
        raise EpochKeyMismatch(f"the epoch key of epoch {epoch} differs from the one this member's pseudonym "
                               "was issued under")
    return held
