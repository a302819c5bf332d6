"""RFC 9497 OPRF and VOPRF (modes 0x00 and 0x01) and its batched DLEQ proof.

One implementation over :class:`reshuffle.crypto.group.Group`, following the
RFC's functions step by step (section numbers in the docstrings). On
Ristretto255 it is the ciphersuite ``ristretto255-SHA512`` and reproduces the
RFC's Appendix A vectors: HashToGroup is RFC 9380 ``hash_to_ristretto255``
(our ``Group.hash_to_group``), HashToScalar is expand_message_xmd(SHA-512, 64
bytes) read little-endian mod q, Hash is SHA-512, and **scalars serialize
little-endian** here (the RFC's encoding; ``Group.scalar_to_bytes`` elsewhere in
the project is big-endian). Other groups (the toy groups of the games) run the
same code with identifier ``<group name>-SHA512``.

docs/protocol.md uses it three ways:

- §7.1: the OT answers ``D_j = A_j^beta`` are blind evaluations under beta;
  :func:`generate_proof` / :func:`verify_proof` with ``A = g, B = g^beta``;
- §7.2: the row credential is a VOPRF evaluation under gamma
  (:func:`blind`, :func:`blind_evaluate`, :func:`finalize`; :func:`evaluate`
  checks a presented credential without interaction);
- §9 step 3 and any other DLEQ statement with arbitrary bases:
  :func:`prove_dleq` / :func:`verify_dleq`, the same proof under a context
  string bound to the base ``A`` and a caller-chosen context.

Verification raises :class:`~reshuffle.errors.InvalidProof`; it never returns a bool.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Sequence

from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group, expand_message_xmd, get_group
from reshuffle.crypto.rand import RandomSource
from reshuffle.errors import ConfigError, InvalidElement, InvalidProof, InvalidScalar
from reshuffle.wire import Parser

MODE_OPRF = 0x00
MODE_VOPRF = 0x01
NH = 64  # SHA-512 output bytes
MAX_BATCH = 0xFFFF  # the composite index is I2OSP(i, 2)


def _lp(data: bytes) -> bytes:
    """``I2OSP(len(data), 2) || data``."""
    if len(data) > 0xFFFF:
        raise ConfigError(f"a length-prefixed field holds at most 65535 bytes, got {len(data)}")
    return len(data).to_bytes(2, "big") + data


def hash_to_scalar(group: Group, msg: bytes, dst: bytes) -> int:
    """expand_message_xmd(SHA-512) to 64 bytes, little-endian, mod q (RFC 9497 §4.1)."""
    if not dst:
        raise ConfigError("hash_to_scalar needs a non-empty domain tag")
    return int.from_bytes(expand_message_xmd(msg, dst, 64), "little") % group.order


class Suite:
    """A ciphersuite in one mode: group, context string and the RFC's three hashes.

    The hashes are methods so that the security games can program them as
    random oracles (a subclass), while protocol code uses them as they are.
    """

    def __init__(
        self, group: Group | None = None, mode: int = MODE_VOPRF, context: bytes | None = None
    ) -> None:
        self.group = group if group is not None else get_group()
        if mode not in (MODE_OPRF, MODE_VOPRF):
            raise ConfigError(f"mode must be MODE_OPRF (0) or MODE_VOPRF (1), got {mode!r}")
        self.mode = mode
        self.identifier = f"{self.group.name}-SHA512"
        # §3.1 CreateContextString; an explicit context serves prove_dleq.
        self.context = context if context is not None else (
            b"OPRFV1-" + bytes([mode]) + b"-" + self.identifier.encode("ascii")
        )
        if len(self.context) > 200:
            raise ConfigError("context string too long for a hash-to-curve domain tag")

    # --- the RFC's Group/Hash interface (§2.1, §4.1) ---------------------------
    def hash_to_group(self, msg: bytes) -> Element:
        return self.group.hash_to_group(b"HashToGroup-" + self.context, msg)

    def hash_to_scalar(self, msg: bytes, dst: bytes | None = None) -> int:
        return hash_to_scalar(self.group, msg, dst or b"HashToScalar-" + self.context)

    def hash(self, data: bytes) -> bytes:
        return hashlib.sha512(data).digest()

    def serialize_scalar(self, s: int) -> bytes:
        if not 0 <= s < self.group.order:
            raise InvalidScalar("scalar out of range [0, q)")
        return s.to_bytes(self.group.scalar_size, "little")

    def deserialize_scalar(self, data: bytes, field: str = "scalar") -> int:
        if len(data) != self.group.scalar_size:
            raise InvalidScalar(f"{field}: must be {self.group.scalar_size} bytes, got {len(data)}")
        s = int.from_bytes(data, "little")
        if s >= self.group.order:
            raise InvalidScalar(f"{field}: not reduced modulo the group order")
        return s

    def random_scalar(self, rng: RandomSource | int | None = None) -> int:
        return self.group.random_scalar(rng)

    def __repr__(self) -> str:
        return f"Suite({self.context!r})"


def dleq_suite(A: Element, context: bytes) -> Suite:
    """The suite of a DLEQ with base ``A``: its context string binds ``A`` and ``context``.

    RFC 9497's challenge hashes B, M, Z, t2, t3 but not A (fixed to g in the
    VOPRF); a free base must be bound too, or a prover could pick A after the
    challenge.
    """
    if not isinstance(context, (bytes, bytearray)) or not context:
        raise ConfigError("a DLEQ proof needs a non-empty context (domain separation)")
    binder = hashlib.sha512(
        label("voprf/dleq-context") + _lp(A.group.name.encode()) + _lp(A.to_bytes()) + _lp(bytes(context))
    ).digest()[:32]
    return Suite(A.group, MODE_VOPRF, b"ReShuffle-DLEQ-V1-" + binder)


# ------------------------------------------------------------------ proofs
@dataclass(frozen=True)
class Proof:
    """A DLEQ proof ``(c, s)``; encodes as ``SerializeScalar(c) || SerializeScalar(s)``."""

    c: int
    s: int

    def encode(self, group: Group) -> bytes:
        suite = Suite(group)
        return suite.serialize_scalar(self.c) + suite.serialize_scalar(self.s)

    @classmethod
    def decode(cls, group: Group, data: bytes) -> "Proof":
        """Exactly two canonical scalars, else DecodeError / InvalidScalar."""
        suite = Suite(group)
        p = Parser(data, "DLEQ proof")
        c = suite.deserialize_scalar(p.fixed(group.scalar_size, "c"), "DLEQ proof c")
        s = suite.deserialize_scalar(p.fixed(group.scalar_size, "s"), "DLEQ proof s")
        p.finish()
        return cls(c, s)

    @staticmethod
    def size(group: Group) -> int:
        return 2 * group.scalar_size


def _check_statement(suite: Suite, A: Element, B: Element, Cs: Sequence[Element], Ds: Sequence[Element]) -> None:
    if len(Cs) != len(Ds):
        raise InvalidProof(f"DLEQ statement has {len(Cs)} inputs but {len(Ds)} outputs")
    if not 0 < len(Cs) <= MAX_BATCH:
        raise InvalidProof(f"DLEQ batch of {len(Cs)} pairs, expected 1..{MAX_BATCH}")
    named = [("A", A), ("B", B)] + [(f"C[{i}]", C) for i, C in enumerate(Cs)]
    named += [(f"D[{i}]", D) for i, D in enumerate(Ds)]
    for name, e in named:
        if not isinstance(e, Element) or e.group is not suite.group:
            raise InvalidProof(f"DLEQ statement: {name} is not an element of {suite.group.name}")
        if e.is_identity:
            raise InvalidProof(f"DLEQ statement: {name} is the identity element")


def _seed(suite: Suite, B: Element) -> bytes:
    return suite.hash(_lp(B.to_bytes()) + _lp(b"Seed-" + suite.context))


def _composite_weight(suite: Suite, seed: bytes, i: int, C: Element, D: Element) -> int:
    return suite.hash_to_scalar(
        _lp(seed) + i.to_bytes(2, "big") + _lp(C.to_bytes()) + _lp(D.to_bytes()) + b"Composite"
    )


def _sum(terms: list[Element]) -> Element:
    acc = terms[0]
    for t in terms[1:]:
        acc = acc * t
    return acc


def compute_composites(
    suite: Suite, B: Element, Cs: Sequence[Element], Ds: Sequence[Element]
) -> tuple[Element, Element]:
    """RFC 9497 §2.2.2 ComputeComposites: ``M = sum d_i C_i``, ``Z = sum d_i D_i`` (2m exponentiations)."""
    seed = _seed(suite, B)
    ds = [_composite_weight(suite, seed, i, C, D) for i, (C, D) in enumerate(zip(Cs, Ds))]
    return _sum([C**d for C, d in zip(Cs, ds)]), _sum([D**d for D, d in zip(Ds, ds)])


def compute_composites_fast(
    suite: Suite, k: int, B: Element, Cs: Sequence[Element], Ds: Sequence[Element]
) -> tuple[Element, Element]:
    """RFC 9497 §2.2.1 ComputeCompositesFast: the prover's ``Z = k·M`` (m + 1 exponentiations)."""
    seed = _seed(suite, B)
    ds = [_composite_weight(suite, seed, i, C, D) for i, (C, D) in enumerate(zip(Cs, Ds))]
    M = _sum([C**d for C, d in zip(Cs, ds)])
    return M, M**k


def challenge_transcript(B: Element, M: Element, Z: Element, t2: Element, t3: Element) -> bytes:
    """The input of the proof's challenge HashToScalar (RFC 9497 §2.2.1)."""
    return b"".join(_lp(e.to_bytes()) for e in (B, M, Z, t2, t3)) + b"Challenge"


def finalize_transcript(data: bytes, element: Element) -> bytes:
    """The input of the output Hash in Finalize/Evaluate (RFC 9497 §3.3.1)."""
    return _lp(bytes(data)) + _lp(element.to_bytes()) + b"Finalize"


def _challenge(suite: Suite, B: Element, M: Element, Z: Element, t2: Element, t3: Element) -> int:
    return suite.hash_to_scalar(challenge_transcript(B, M, Z, t2, t3))


def generate_proof(
    suite: Suite,
    k: int,
    A: Element,
    B: Element,
    Cs: Sequence[Element],
    Ds: Sequence[Element],
    rng: RandomSource | int | None = None,
    r: int | None = None,
) -> Proof:
    """RFC 9497 §2.2.1 GenerateProof: ``k·A == B`` and ``k·C[i] == D[i]`` for all i.

    ``r`` fixes the proof's random scalar (known-answer tests only); otherwise it
    is drawn from ``rng`` (default: OS randomness).
    """
    if not 0 < k < suite.group.order:
        raise ConfigError("DLEQ witness must be a scalar in [1, q)")
    if len(Cs) != len(Ds) or not 0 < len(Cs) <= MAX_BATCH:
        raise ConfigError(f"DLEQ needs 1..{MAX_BATCH} pairs, got {len(Cs)} and {len(Ds)}")
    M, Z = compute_composites_fast(suite, k, B, Cs, Ds)
    if r is None:
        r = suite.random_scalar(rng)
    elif not 0 < r < suite.group.order:
        raise ConfigError("proof random scalar must be in [1, q)")
    t2, t3 = A**r, M**r
    c = _challenge(suite, B, M, Z, t2, t3)
    return Proof(c, (r - c * k) % suite.group.order)


def verify_proof(
    suite: Suite, A: Element, B: Element, Cs: Sequence[Element], Ds: Sequence[Element], proof: Proof
) -> None:
    """RFC 9497 §2.2.2 VerifyProof; raises InvalidProof (2m + 4 exponentiations)."""
    _check_statement(suite, A, B, Cs, Ds)
    if not isinstance(proof, Proof):
        raise InvalidProof(f"expected a Proof, got {type(proof).__name__}")
    q = suite.group.order
    if not (0 <= proof.c < q and 0 <= proof.s < q):
        raise InvalidProof("DLEQ proof scalars are not reduced modulo q")
    M, Z = compute_composites(suite, B, Cs, Ds)
    t2 = A**proof.s * B**proof.c
    t3 = M**proof.s * Z**proof.c
    expected = _challenge(suite, B, M, Z, t2, t3)
    if not hmac.compare_digest(suite.serialize_scalar(expected), suite.serialize_scalar(proof.c)):
        raise InvalidProof(
            f"DLEQ proof over {len(Cs)} pair(s) does not verify under context {suite.context!r}"
        )


def prove_dleq(
    k: int,
    A: Element,
    B: Element,
    Cs: Sequence[Element],
    Ds: Sequence[Element],
    rng: RandomSource | int | None,
    context: bytes,
) -> Proof:
    """Proof that ``log_A B = log_{C_i} D_i`` for every i, bound to ``A`` and ``context``."""
    return generate_proof(dleq_suite(A, context), k, A, B, Cs, Ds, rng)


def verify_dleq(
    A: Element, B: Element, Cs: Sequence[Element], Ds: Sequence[Element], proof: Proof, context: bytes
) -> None:
    """Check a :func:`prove_dleq` proof; raises InvalidProof."""
    if not isinstance(A, Element):
        raise InvalidProof("DLEQ statement: A is not a group element")
    verify_proof(dleq_suite(A, context), A, B, Cs, Ds, proof)


# ------------------------------------------------------------- OPRF / VOPRF
def derive_key_pair(suite: Suite, seed: bytes, info: bytes) -> tuple[int, Element]:
    """RFC 9497 §3.2.1 DeriveKeyPair(seed, info) -> (skS, pkS)."""
    if len(seed) != suite.group.scalar_size:
        raise ConfigError(f"DeriveKeyPair seed must be {suite.group.scalar_size} bytes, got {len(seed)}")
    derive_input = bytes(seed) + _lp(bytes(info))
    for counter in range(256):
        sk = suite.hash_to_scalar(derive_input + bytes([counter]), b"DeriveKeyPair" + suite.context)
        if sk:
            return sk, suite.group.base_mul(sk)
    raise ConfigError("DeriveKeyPair: 256 zero scalars (probability 2^-64000)")


def _input_element(suite: Suite, data: bytes) -> Element:
    if not isinstance(data, (bytes, bytearray)):
        raise ConfigError(f"OPRF input must be bytes, got {type(data).__name__}")
    P = suite.hash_to_group(bytes(data))
    if P.is_identity:  # RFC InvalidInputError; probability ~2^-252
        raise ConfigError("OPRF input hashes to the identity element")
    return P


def blind(
    suite: Suite, data: bytes, rng: RandomSource | int | None = None, blind: int | None = None
) -> tuple[int, Element]:
    """RFC 9497 §3.3.1 Blind(input) -> (blind, blindedElement); ``blind`` fixes the scalar."""
    P = _input_element(suite, data)
    if blind is None:
        blind = suite.random_scalar(rng)
    elif not 0 < blind < suite.group.order:
        raise ConfigError("blind must be a scalar in [1, q)")
    return blind, P**blind


def blind_evaluate(
    suite: Suite,
    sk: int,
    blinded: Sequence[Element],
    pk: Element | None = None,
    rng: RandomSource | int | None = None,
    r: int | None = None,
) -> tuple[tuple[Element, ...], Proof | None]:
    """RFC 9497 §3.3.1/§3.3.2 BlindEvaluate over a batch: evaluated elements and ONE proof.

    OPRF mode returns ``proof = None``. Received elements must be valid
    non-identity elements of the suite's group (InvalidElement otherwise).
    """
    if not 0 < sk < suite.group.order:
        raise ConfigError("OPRF key must be a scalar in [1, q)")
    if not 0 < len(blinded) <= MAX_BATCH:
        raise ConfigError(f"BlindEvaluate needs 1..{MAX_BATCH} elements, got {len(blinded)}")
    for i, e in enumerate(blinded):
        if not isinstance(e, Element) or e.group is not suite.group or e.is_identity:
            raise InvalidElement(f"blinded element {i} is not a non-identity element of {suite.group.name}")
    evaluated = tuple(e**sk for e in blinded)
    if suite.mode == MODE_OPRF:
        return evaluated, None
    pk = pk if pk is not None else suite.group.base_mul(sk)
    return evaluated, generate_proof(suite, sk, suite.group.generator(), pk, blinded, evaluated, rng, r)


def _finalize_hash(suite: Suite, data: bytes, element: Element) -> bytes:
    return suite.hash(finalize_transcript(data, element))


def finalize(
    suite: Suite,
    inputs: Sequence[bytes],
    blinds: Sequence[int],
    evaluated: Sequence[Element],
    blinded: Sequence[Element] | None = None,
    pk: Element | None = None,
    proof: Proof | None = None,
) -> list[bytes]:
    """RFC 9497 §3.3.1/§3.3.2 Finalize for a batch; VOPRF mode verifies the batch proof first."""
    n = len(inputs)
    if not (len(blinds) == len(evaluated) == n) or n == 0:
        raise ConfigError(f"Finalize: {n} inputs, {len(blinds)} blinds, {len(evaluated)} evaluations")
    for i, e in enumerate(evaluated):
        if not isinstance(e, Element) or e.group is not suite.group or e.is_identity:
            raise InvalidElement(f"evaluated element {i} is not a non-identity element of {suite.group.name}")
    if suite.mode == MODE_VOPRF:
        if blinded is None or pk is None or proof is None:
            raise ConfigError("VOPRF Finalize needs the blinded elements, pkS and the proof")
        if len(blinded) != n:
            raise InvalidProof(f"{len(blinded)} blinded elements for {n} inputs")
        verify_proof(suite, suite.group.generator(), pk, blinded, evaluated, proof)
    q = suite.group.order
    return [
        _finalize_hash(suite, x, e ** pow(b, -1, q)) for x, b, e in zip(inputs, blinds, evaluated)
    ]


def evaluate(suite: Suite, sk: int, data: bytes) -> bytes:
    """RFC 9497 §3.3.1 Evaluate(skS, input): the PRF output without interaction."""
    return _finalize_hash(suite, data, _input_element(suite, data) ** sk)


__all__ = [
    "MODE_OPRF", "MODE_VOPRF", "Proof", "Suite", "blind", "blind_evaluate", "challenge_transcript",
    "compute_composites", "compute_composites_fast", "derive_key_pair", "dleq_suite", "evaluate",
    "finalize", "finalize_transcript", "generate_proof", "hash_to_scalar", "prove_dleq",
    "verify_dleq", "verify_proof",
]
