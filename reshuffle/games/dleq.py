"""DLEQ soundness (docs/protocol.md §7.1, §7.2, §9): no accepting proof for a false statement.

The proof (RFC 9497 §2.2, :func:`reshuffle.crypto.voprf.prove_dleq`) shows
log_A B = log_{C_i} D_i for all i through the composites M = Σ d_i C_i,
Z = Σ d_i D_i and a Chaum–Pedersen proof for (A, B, M, Z): commitment
(t2, t3) = (r·A, r·M), challenge c = H(B, M, Z, t2, t3), response s = r − c·k.

Special soundness: two accepting transcripts (t2, t3, c, s) and
(t2, t3, c', s') with c ≠ c' for one statement give k = (s − s')/(c' − c) with
B = k·A and Z = k·M. So for a false statement each commitment has at most one
answerable challenge, and a prover making Q hash queries convinces with
probability at most (Q + 1)/q (plus 1/q for composites that hide a false pair).

Three executable parts:

- the soundness game: the challenger fixes A = g and a random C = g^γ; the
  adversary outputs (B, D, proof) and wins if the proof verifies and the
  statement is false (D ≠ B^γ, which the challenger decides with γ);
- the extractor: it runs the real prover twice from the same commitment
  (rewinding its randomness) with two different challenges (the challenge hash
  programmed as a random oracle) and recovers the witness from the two answers;
- the weak variant: the challenge and the composite seed do not hash B and Z,
  so a forger fixes (M, t2, t3), reads c, and only then picks B.
"""

from __future__ import annotations

import hashlib
import secrets

from reshuffle.crypto import voprf
from reshuffle.crypto.voprf import Proof, hash_to_scalar
from reshuffle.errors import InvalidProof
from reshuffle.games.framework import Estimate, estimate

CONTEXT = b"reshuffle/games/dleq"


# ------------------------------------------------------------- weak variant
def _lp(data: bytes) -> bytes:
    return len(data).to_bytes(2, "big") + data


def _weak_weight(group, C, D) -> int:
    # seed without B: "Seed-" || context only
    seed = hashlib.sha512(_lp(b"Seed-" + CONTEXT)).digest()
    return hash_to_scalar(group, _lp(seed) + _lp(C.to_bytes()) + _lp(D.to_bytes()) + b"Composite",
                          b"HashToScalar-weak-" + CONTEXT)


def weak_challenge(group, M, t2, t3) -> int:
    """The weak Fiat–Shamir challenge: neither B nor Z is hashed."""
    return hash_to_scalar(group, b"".join(_lp(e.to_bytes()) for e in (M, t2, t3)) + b"Challenge",
                          b"HashToScalar-weak-" + CONTEXT)


def weak_verify(A, B, C, D, proof: Proof) -> None:
    """Verification of the weak variant (one pair); raises InvalidProof."""
    group = A.group
    d = _weak_weight(group, C, D)
    M, Z = C**d, D**d
    t2 = A**proof.s * B**proof.c
    t3 = M**proof.s * Z**proof.c
    if weak_challenge(group, M, t2, t3) != proof.c:
        raise InvalidProof("weak DLEQ proof does not verify")


def real_verify(A, B, C, D, proof: Proof) -> None:
    voprf.verify_dleq(A, B, [C], [D], proof, CONTEXT)


# --------------------------------------------------------------- adversary
def weak_fs_forger(group, A, C):
    """Proves log_A B = log_C D for a false pair by choosing B after the challenge.

    D = C^z for a z it picks; M = d·C, Z = d·D = z·M; t2 = r2·A, t3 = r3·M;
    c from the weak hash; s = r3 − c·z (so t3 = s·M + c·Z); B = ((r2 − s)/c)·A,
    whose exponent differs from z unless r2 = r3.
    """
    q = group.order
    z, r2, r3 = (secrets.randbelow(q - 1) + 1 for _ in range(3))
    D = C**z
    d = _weak_weight(group, C, D)
    M = C**d
    t2, t3 = A**r2, M**r3
    c = weak_challenge(group, M, t2, t3) or 1
    s = (r3 - c * z) % q
    B = A ** ((r2 - s) * pow(c, -1, q) % q)
    return B, D, Proof(c, s)


def soundness_trial(group, forger, verify) -> bool:
    """The forger wins with an accepting proof for a false statement (A = g, C = g^γ)."""
    gamma = group.random_scalar()
    A, C = group.generator(), group.base_mul(gamma)
    B, D, proof = forger(group, A, C)
    if D == B**gamma:
        return False  # a true statement proves nothing
    try:
        verify(A, B, C, D, proof)
    except InvalidProof:
        return False
    return True


# ---------------------------------------------------------------- extractor
class ForkedSuite(voprf.Suite):
    """The DLEQ suite with the challenge hash answered from a given value (a forked oracle)."""

    def __init__(self, base: voprf.Suite, challenge: int) -> None:
        super().__init__(base.group, base.mode, base.context)
        self._c = challenge

    def hash_to_scalar(self, msg: bytes, dst: bytes | None = None) -> int:
        if dst is None and msg.endswith(b"Challenge"):
            return self._c
        return super().hash_to_scalar(msg, dst)


def extract(proof1: Proof, proof2: Proof, q: int) -> int:
    """k = (s − s') / (c' − c) from two answers to one commitment."""
    if proof1.c == proof2.c:
        raise ValueError("extraction needs two different challenges")
    return (proof1.s - proof2.s) * pow(proof2.c - proof1.c, -1, q) % q


def extraction_trial(group, m: int = 3) -> bool:
    """Fork the real prover at its challenge; both transcripts verify; the witness comes out."""
    q = group.order
    k = group.random_scalar()
    A = group.hash_to_group(b"games/dleq", secrets.token_bytes(8))
    Cs = [group.base_mul(group.random_scalar()) for _ in range(m)]
    Ds = [C**k for C in Cs]
    base = voprf.dleq_suite(A, CONTEXT)
    r = group.random_scalar()  # the prover's randomness, replayed by the rewinding
    c1, c2 = secrets.randbelow(q), secrets.randbelow(q)
    if c1 == c2:
        return False
    proofs = []
    for c in (c1, c2):
        suite = ForkedSuite(base, c)
        proof = voprf.generate_proof(suite, k, A, A**k, Cs, Ds, r=r)
        voprf.verify_proof(suite, A, A**k, Cs, Ds, proof)
        proofs.append(proof)
    k2 = extract(proofs[0], proofs[1], q)
    return k2 == k and A**k2 == A**k


def dleq_games(group, trials: int, weak: bool = False) -> tuple[Estimate, Estimate | None]:
    """(forger's success against the real or weak verifier, extractor's success rate)."""
    verify = weak_verify if weak else real_verify
    forge = estimate(lambda: soundness_trial(group, weak_fs_forger, verify), trials, 0.0)
    if weak:
        return forge, None
    return forge, estimate(lambda: extraction_trial(group), max(trials // 4, 1), 0.0)
