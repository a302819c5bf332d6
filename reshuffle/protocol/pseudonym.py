"""Epoch pseudonyms: one per participant per epoch, issued blind (docs/protocol.md §7.3).

An epoch is the federation's life or a configured number of rounds. The PS
holds an epoch key π; P = g^π is in every ROUND_START of the epoch (hence in h),
and every member's advertisement carries :func:`key_digest` of (epoch, P), which
every member compares with its own before it asks for anything: a PS that gives
one member another key is refused with :class:`EpochKeyMismatch` by that member
and by every honest member that sees its advertisement.

**Issuance is idempotent per identity per epoch.** A participant without a
pseudonym for the epoch draws a random 16-byte ρ and a blind, and blinds
``label("row/pseudonym", epoch) ‖ ρ`` into B (RFC 9497 VOPRF; the row credential's
input is labelled "row/credential" and its key γ is drawn per round: the two never
meet). It keeps (epoch, P, ρ, blind, B) as its :class:`Pseudonym` record, pending,
*before* anything that carries B leaves it (the driver writes the record to the
node's state first), and sends the same B in every round of the epoch until it
holds the evaluation. The PS (:class:`EpochIssuer`) records the first B each
identity sends in the epoch, at the first evaluation: a later request with the same
B gets the same evaluation π·B (the VOPRF is deterministic, so nothing new is
learned), one with another B is refused with :class:`OtherRequest`. So a member
that goes silent after its evaluation can never collect a second pseudonym, and a
member whose round fails at any step is never locked out: it asks again with the
element the PS recorded. The participant unblinds z = F_π(epoch, ρ) and keeps the
record, with z, for the epoch's rounds (:meth:`Pseudonym.encode`).

**Members see issuance.** Every ADVERTISE and DC_KEY carries the sender's
:class:`Commitment`: c = SHA-256(label("pseudonym/request", epoch) ‖ B) signed
(context "nym") with the epoch-key digest, the same in every round of the epoch. The
PS evaluates only the B whose c its sender signed; every member of a stable group
keeps the commitment each group mate signed in the epoch (in its record) and
refuses to continue the group when a mate signs another one
(:class:`IssuanceChanged`, with :class:`NymEvidence` that anyone holding the CA key
checks): a PS that issues a second pseudonym to a node, so as to link the two, gets
no round of that group delivered.

Every row carries ρ ‖ z; the PS recomputes F_π(epoch, ρ) and refuses a row whose z
differs, and every row whose ρ another row of the round also carries. ρ is the
pseudonym the PS's rules see: 16 bytes, as the simulator's ideal pseudonyms.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field, replace
from typing import Mapping

from reshuffle.crypto import voprf
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group, get_group
from reshuffle.crypto.rand import RandomSource, as_source
from reshuffle.crypto.signatures import (
    ROLE_PARTICIPANT, SIG_BYTES, Certificate, CertificateAuthority, SigningKey, VerifyKey,
)
from reshuffle.errors import ConfigError, DecodeError, ProtocolError, Refused, UnexpectedMessage
from reshuffle.wire import Parser, Writer

#: Bytes of the pseudonym ρ (as :data:`reshuffle.run.pseudonyms.SIZE`).
NONCE_BYTES = 16
#: Bytes of z = F_π(epoch, ρ), the VOPRF output (SHA-512).
Z_BYTES = voprf.NH
#: Bytes a row carries for its pseudonym: ρ ‖ z.
ROW_BYTES = NONCE_BYTES + Z_BYTES
#: Bytes of a request commitment and of an epoch-key digest.
DIGEST_BYTES = 32
#: The most bytes a kept record may take (its group mates' commitments included).
MAX_RECORD_BYTES = 1 << 20
_VERSION = 2  # the record keeps its request (blind, B) and its group mates' signed commitments
_ISSUER_VERSION = 2  # the issuer keeps each identity's first blinded element
_MAX_MATES = 1 << 16
_SIG_CONTEXT = "nym"


class EpochKeyMismatch(Refused):
    """The PS announced an epoch key other than the one this member holds or other members were given."""


class AlreadyIssued(UnexpectedMessage):
    """A participant asked for a second pseudonym in one epoch."""


class OtherRequest(AlreadyIssued):
    """A participant asked again in an epoch with another blinded element than its first (a second pseudonym)."""


class InvalidPseudonym(ProtocolError):
    """A row's pseudonym is not F_π(epoch, ρ) under the epoch key."""


class IssuanceChanged(Refused):
    """A group mate signed another pseudonym request in this epoch than before: a second pseudonym for one
    member. ``evidence`` (:class:`NymEvidence`) names it with both signed commitments."""

    def __init__(self, text: str, evidence: "NymEvidence") -> None:
        super().__init__(text)
        self.evidence = evidence


def suite(group: Group) -> voprf.Suite:
    """The VOPRF ciphersuite of pseudonyms (ristretto255-SHA512 on the default group)."""
    return voprf.Suite(group, voprf.MODE_VOPRF)


def nym_input(epoch: int, rho: bytes) -> bytes:
    """The VOPRF input of pseudonym ρ in ``epoch``; its label differs from the row credential's."""
    return label("row/pseudonym", epoch) + bytes(rho)


def key_digest(epoch: int, key: Element) -> bytes:
    """SHA-256 of (epoch, P): what every advertisement carries and every member compares."""
    return hashlib.sha256(label("epoch-key", epoch) + key.to_bytes()).digest()


def request_digest(epoch: int, blinded: bytes) -> bytes:
    """c = SHA-256(label("pseudonym/request", epoch) ‖ B): the commitment to a request. B is uniform whatever
    ρ is, so c says nothing of the pseudonym; it changes with every fresh request."""
    return hashlib.sha256(label("pseudonym/request", epoch) + bytes(blinded)).digest()


def _commit_statement(pid: int, epoch_key: bytes, commit: bytes) -> bytes:
    return label("pseudonym/commit", pid) + bytes(epoch_key) + bytes(commit)


def sign_commitment(sk: SigningKey, pid: int, epoch_key: bytes, commit: bytes) -> bytes:
    """The member's signature (context "nym") on its commitment under the epoch-key digest."""
    return sk.sign(_SIG_CONTEXT, _commit_statement(pid, epoch_key, commit))


def check_commitment(vk: VerifyKey, pid: int, epoch_key: bytes, commit: bytes, signature: bytes) -> None:
    """InvalidSignature unless ``signature`` is ``pid``'s on (epoch_key, commit)."""
    vk.verify(_SIG_CONTEXT, _commit_statement(pid, epoch_key, commit), signature)


@dataclass(frozen=True)
class Commitment:
    """A group mate's signed commitment as a member keeps it: its id, its key, c and the signature."""

    pid: int
    key: bytes  # the mate's Ed25519 verify key (a commitment is compared only under the same key)
    commit: bytes
    signature: bytes = field(repr=False)

    def _write(self, w: Writer) -> None:
        w.u32(self.pid).fixed(self.key, 32).fixed(self.commit, DIGEST_BYTES).fixed(self.signature, SIG_BYTES)

    @classmethod
    def _read(cls, p: Parser) -> "Commitment":
        return cls(p.u32("mate"), p.fixed(32, "mate key"), p.fixed(DIGEST_BYTES, "commit"),
                   p.fixed(SIG_BYTES, "commit signature"))


@dataclass(frozen=True)
class Pseudonym:
    """A participant's pseudonym record for one epoch: the epoch, the key P it is issued under, ρ, z (empty
    while the request is pending), the group of P, the request (blind and B) and the commitments its group
    mates signed in the epoch.

    It is kept across the epoch's rounds from the moment the request is drawn; :meth:`encode` is its storage
    form. A record built from ρ and z alone (``blinded`` empty) carries a pseudonym but cannot take part in a
    round: it commits to no request.
    """

    epoch: int
    key: bytes  # P's encoding
    rho: bytes = field(repr=False)
    z: bytes = field(repr=False)
    group: str = "ristretto255"
    blind: int = field(default=0, repr=False)
    blinded: bytes = field(default=b"", repr=False)  # B's encoding
    mates: tuple[Commitment, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or not 0 <= self.epoch < 2**64:
            raise ConfigError(f"epoch must be an int in [0, 2^64), got {self.epoch!r}")
        if not isinstance(self.rho, bytes) or len(self.rho) != NONCE_BYTES:
            raise ConfigError(f"pseudonym rho must be {NONCE_BYTES} bytes")
        if not isinstance(self.z, bytes) or len(self.z) not in (0, Z_BYTES):
            raise ConfigError(f"pseudonym z must be {Z_BYTES} bytes (empty while pending)")
        if not self.z and not self.blinded:
            raise ConfigError("a pending pseudonym keeps its request")
        ids = [c.pid for c in self.mates]
        if ids != sorted(set(ids)):
            raise ConfigError("a pseudonym record keeps one commitment per group mate, sorted")

    @property
    def pending(self) -> bool:
        """Asked for, not yet evaluated: the same B is sent again."""
        return not self.z

    @property
    def name(self) -> bytes:
        """What the PS sees in every row: ρ."""
        return self.rho

    def commitment(self) -> bytes:
        """c of its request (what every ADVERTISE and DC_KEY of the epoch carries)."""
        if not self.blinded:
            raise ConfigError(f"this pseudonym of epoch {self.epoch} keeps no request to commit to")
        return request_digest(self.epoch, self.blinded)

    def blinded_element(self) -> Element:
        return get_group(self.group).element_from_bytes(self.blinded, "pseudonym request")

    def row_bytes(self) -> bytes:
        """ρ ‖ z, as a row carries them."""
        if self.pending:
            raise ConfigError("a pending pseudonym has no z yet")
        return self.rho + self.z

    def mate(self, pid: int) -> Commitment | None:
        return next((c for c in self.mates if c.pid == pid), None)

    def with_mates(self, seen: Mapping[int, Commitment]) -> "Pseudonym":
        """This record remembering ``seen`` too (a mate already kept keeps its first commitment)."""
        new = {c.pid: c for c in self.mates}
        for pid, c in seen.items():
            new.setdefault(pid, c)
        if len(new) == len(self.mates):
            return self
        return replace(self, mates=tuple(new[p] for p in sorted(new)))

    def encode(self) -> bytes:
        """Version, group, epoch, P, ρ, z (empty while pending), blind, B, the mates' commitments;
        :meth:`decode` is the inverse."""
        g = get_group(self.group)
        w = (Writer().u8(_VERSION).var(self.group.encode("ascii")).u64(self.epoch).var(self.key)
             .fixed(self.rho, NONCE_BYTES).var(self.z).var(self.blinded))
        if self.blinded:
            w.fixed(self.blind.to_bytes(g.scalar_size, "big"), g.scalar_size)
        w.u32(len(self.mates))
        for c in self.mates:
            c._write(w)
        return w.bytes()

    @classmethod
    def decode(cls, data: bytes) -> "Pseudonym":
        """Parse :meth:`encode`'s bytes; P and B must be valid elements of the named group, and B the blind
        applied to the input of ρ."""
        if len(data) > MAX_RECORD_BYTES:
            raise DecodeError(f"pseudonym: {len(data)} bytes, at most {MAX_RECORD_BYTES}")
        p = Parser(bytes(data), "pseudonym")
        if (v := p.u8("version")) != _VERSION:
            raise DecodeError(f"pseudonym: record version {v}, expected {_VERSION} (a version 1 record keeps no "
                              "request: move it away and ask in the next epoch)")
        try:
            name = p.var("group", 64).decode("ascii")
            g = get_group(name)
        except (UnicodeDecodeError, ConfigError) as exc:
            raise DecodeError(f"pseudonym: unknown group ({exc})") from None
        epoch = p.u64("epoch")
        key = g.element_from_bytes(p.var("key", 256), "pseudonym key").to_bytes()
        rho = p.fixed(NONCE_BYTES, "rho")
        z = p.var("z", Z_BYTES)
        if len(z) not in (0, Z_BYTES):
            raise DecodeError(f"pseudonym: z of {len(z)} bytes")
        blinded = p.var("blinded", 256)
        blind = 0
        if blinded:
            B = g.element_from_bytes(blinded, "pseudonym request")
            blind = g.scalar_from_bytes(p.fixed(g.scalar_size, "blind"), "blind")
            if blind == 0 or voprf.blind(suite(g), nym_input(epoch, rho), blind=blind)[1] != B:
                raise DecodeError("pseudonym: the kept request is not the blind applied to ρ's input")
        elif not z:
            raise DecodeError("pseudonym: a pending record without its request")
        n = p.u32("mates")
        if n > _MAX_MATES:
            raise DecodeError(f"pseudonym: {n} group mates")
        mates = tuple(Commitment._read(p) for _ in range(n))
        p.finish()
        if [c.pid for c in mates] != sorted({c.pid for c in mates}):
            raise DecodeError("pseudonym: group mates not sorted and distinct")
        return cls(epoch, key, rho, z, name, blind, blinded, mates)


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


def pending(group: Group, req: Blinded, key: Element) -> Pseudonym:
    """The record of a request drawn under P = ``key``, kept before the request leaves."""
    return Pseudonym(req.epoch, key.to_bytes(), req.rho, b"", group.name, req.blind, req.blinded.to_bytes())


def record_for(held: Pseudonym | None, group: Group, epoch: int, key: Element,
               rng: RandomSource | int | None = None) -> Pseudonym:
    """The member's record for a round of ``epoch`` under P: the one it holds (pending or not, checked by
    :func:`held_for`), else a fresh request's."""
    nym = held_for(held, epoch, key)
    if nym is not None:
        if not nym.blinded:
            raise ConfigError(f"the pseudonym held for epoch {epoch} keeps no request: it cannot commit to one")
        return nym
    return pending(group, request(group, epoch, rng), key)


def finish(group: Group, req: Blinded | Pseudonym, key: Element, evaluated: Element, proof: bytes) -> Pseudonym:
    """Verify the PS's proof against P and unblind z (InvalidProof, InvalidElement on failure); a pending
    record is returned with z (its mates kept)."""
    s = suite(group)
    B = req.blinded_element() if isinstance(req, Pseudonym) else req.blinded
    (z,) = voprf.finalize(s, [nym_input(req.epoch, req.rho)], [req.blind], [evaluated], [B], key,
                          voprf.Proof.decode(group, proof))
    if isinstance(req, Pseudonym):
        return replace(req, z=z)
    return Pseudonym(req.epoch, key.to_bytes(), req.rho, z, group.name, req.blind, req.blinded.to_bytes())


def check_mates(nym: Pseudonym, epoch_key: bytes, roster: Mapping[int, Certificate],
                signed: Mapping[int, tuple[bytes, bytes]], mates) -> Pseudonym:
    """A stable-group member's check of its group mates' signed commitments (``signed[j]`` = (c, signature),
    from the ADVERTISE or DC_KEY of j it verified): each signature must be j's, and c the one j signed
    earlier in the epoch if this member kept one under the same key (:class:`IssuanceChanged` otherwise,
    with the evidence). The record is returned remembering the mates seen."""
    seen = {}
    for j in sorted(set(mates) & set(signed)):
        commit, sig = signed[j]
        cert = roster[j]
        check_commitment(cert.key, j, epoch_key, commit, sig)
        now = Commitment(j, cert.key.to_bytes(), commit, sig)
        before = nym.mate(j)
        if before is not None and before.key == now.key and before.commit != commit:
            raise IssuanceChanged(
                f"group mate {j} signed another pseudonym request in epoch {nym.epoch} than before: a second "
                "pseudonym for one member; this member does not continue the group",
                NymEvidence(cert, epoch_key, (before.commit, before.signature), (commit, sig)))
        seen[j] = now if before is None or before.key != now.key else before
    # A mate under a new key (a new federation's certificate) is remembered afresh.
    kept = {c.pid: c for c in nym.mates if c.pid not in seen}
    kept.update(seen)
    return replace(nym, mates=tuple(kept[p] for p in sorted(kept)))


@dataclass(frozen=True)
class NymEvidence:
    """A member's two signed commitments to different pseudonym requests under one epoch key: it was
    issued (or asked) twice in one epoch. Checked by :meth:`verify` with the CA key alone."""

    cert: Certificate
    epoch_key: bytes
    first: tuple[bytes, bytes]  # (c, signature)
    second: tuple[bytes, bytes]

    def verify(self, ca: CertificateAuthority) -> int:
        """The named member's id; Refused (or InvalidSignature) unless the CA certified its key, both
        commitments are its signed ones under the same epoch key, and they differ."""
        ca.verify(self.cert, role=ROLE_PARTICIPANT)
        pid = self.cert.subject
        for c, sig in (self.first, self.second):
            if len(c) != DIGEST_BYTES:
                raise Refused("pseudonym evidence: a commitment is not a digest")
            check_commitment(self.cert.key, pid, self.epoch_key, c, sig)
        if hmac.compare_digest(self.first[0], self.second[0]):
            raise Refused(f"pseudonym evidence: participant {pid} signed one request only")
        return pid

    def encode(self) -> bytes:
        w = Writer().u8(1).var(self.cert.encode()).fixed(self.epoch_key, DIGEST_BYTES)
        for c, sig in (self.first, self.second):
            w.fixed(c, DIGEST_BYTES).fixed(sig, SIG_BYTES)
        return w.bytes()

    @classmethod
    def decode(cls, data: bytes) -> "NymEvidence":
        p = Parser(bytes(data), "pseudonym evidence")
        if (v := p.u8("version")) != 1:
            raise DecodeError(f"pseudonym evidence version {v}, expected 1")
        cert = Certificate.decode(p.var("certificate", 1024))
        ek = p.fixed(DIGEST_BYTES, "epoch_key")
        pairs = tuple((p.fixed(DIGEST_BYTES, "commit"), p.fixed(SIG_BYTES, "signature")) for _ in range(2))
        p.finish()
        return cls(cert, ek, *pairs)


class EpochIssuer:
    """The PS's epoch key π, the first blinded element each identity sent in this epoch, and the identities
    known to hold their pseudonym.

    Parameters
    ----------
    group : the group's name.
    epoch : the epoch number.
    secret : π (default: drawn from ``rng``).
    issued : identities known to hold a pseudonym (a resumed epoch).
    requests : identity -> the encoding of the first B it sent (a resumed epoch).
    rng : randomness for π and the proofs (default OS randomness).
    """

    def __init__(self, group: str, epoch: int, secret: int | None = None, issued=(),
                 rng: RandomSource | int | None = None, requests: Mapping[int, bytes] | None = None) -> None:
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
        self.requests: dict[int, bytes] = dict(requests or {})

    def __repr__(self) -> str:
        return (f"EpochIssuer(group={self.group_name!r}, epoch={self.epoch}, asked={len(self.requests)}, "
                f"issued={len(self.issued)})")

    def check(self, identity: int, blinded: Element) -> None:
        """:class:`OtherRequest` if ``identity`` sent another B earlier in this epoch (one pseudonym each)."""
        first = self.requests.get(identity)
        if first is not None and not hmac.compare_digest(first, blinded.to_bytes()):
            raise OtherRequest(f"participant {identity} already holds a pseudonym of epoch {self.epoch}: it asks "
                               "with another blinded element than its first")

    def evaluate(self, identity: int, blinded: Element, rng: RandomSource | int | None = None
                 ) -> tuple[Element, bytes]:
        """π·B with its proof against P. The first B of ``identity`` in the epoch is recorded now; the same B
        again gets the same evaluation (a member whose round failed asks again), another B
        :class:`OtherRequest`."""
        self.check(identity, blinded)
        (ev,), proof = voprf.blind_evaluate(suite(self.group), self._pi, [blinded], self.key,
                                            rng if rng is not None else self._rng)
        self.requests.setdefault(identity, blinded.to_bytes())
        return ev, proof.encode(self.group)

    def confirm(self, identities) -> None:
        """Note ``identities`` as holding their pseudonym (each got its evaluation and a certificate of the
        round, or answered with its first count vector). Only a statistic: the binding is :attr:`requests`."""
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
        """Group name, epoch, π, the identities holding, and each identity's first B (the PS's checkpoint; π
        is a secret)."""
        w = Writer().u8(_ISSUER_VERSION).var(self.group_name.encode("ascii")).u64(self.epoch)
        w.fixed(self._pi.to_bytes(self.group.scalar_size, "big"), self.group.scalar_size)
        w.u32_list(sorted(self.issued)).u32(len(self.requests))
        for i in sorted(self.requests):
            w.u32(i).fixed(self.requests[i], self.group.element_size)
        return w.bytes()

    @classmethod
    def decode(cls, data: bytes, rng: RandomSource | int | None = None) -> "EpochIssuer":
        p = Parser(bytes(data), "epoch issuer")
        if (v := p.u8("version")) not in (1, _ISSUER_VERSION):
            raise DecodeError(f"epoch issuer: unknown version {v}")
        name = p.var("group", 64).decode("ascii")
        epoch = p.u64("epoch")
        g = get_group(name)
        pi = g.scalar_from_bytes(p.fixed(g.scalar_size, "secret"), "epoch key")
        issued = p.u32_list("issued", 1 << 24)
        requests: dict[int, bytes] = {}
        if v == _ISSUER_VERSION:  # version 1 kept no requests: its issued identities ask with any first B
            n = p.u32("requests")
            if n > 1 << 24:
                raise DecodeError(f"epoch issuer: {n} requests")
            for _ in range(n):
                i = p.u32("identity")
                if i in requests:
                    raise DecodeError(f"epoch issuer: identity {i} recorded twice")
                requests[i] = g.element_from_bytes(p.fixed(g.element_size, "request"), "request").to_bytes()
        p.finish()
        return cls(name, epoch, pi, issued, rng, requests)


def for_epoch(issuer: EpochIssuer | None, group: str, epoch: int,
              rng: RandomSource | int | None = None) -> EpochIssuer:
    """``issuer`` while it is of ``epoch`` and ``group``; a fresh key for a new epoch."""
    if issuer is not None and issuer.epoch == epoch and issuer.group_name == group:
        return issuer
    return EpochIssuer(group, epoch, rng=rng)


def held_for(held: Pseudonym | None, epoch: int, key: Element) -> Pseudonym | None:
    """The member's check at ROUND_START: its record if it is of this epoch (under the same P), None
    for a later epoch; a changed key or an epoch gone back is refused."""
    if held is None or held.epoch < epoch:
        return None
    if held.epoch > epoch:
        raise EpochKeyMismatch(f"round of epoch {epoch}, but this member holds a pseudonym of epoch {held.epoch}")
    if not hmac.compare_digest(held.key, key.to_bytes()):
        raise EpochKeyMismatch(f"the epoch key of epoch {epoch} differs from the one this member's pseudonym "
                               "was issued under")
    return held
