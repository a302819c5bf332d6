"""Feldman verifiable secret sharing over the group's scalar field (docs/protocol.md §6.4).

A dealer shares S secrets at once (in the protocol b_{i,m} and x_{i,m} for
m = 1..M, so S = 2M) with degree t − 1 polynomials ``f_s(x) = sum_k a_{s,k} x^k``,
``a_{s,0}`` the secret, and publishes ``C_{s,k} = g^{a_{s,k}}``. Participant j
holds ``x = j + 1`` and the values ``y_s = f_s(x)`` (the polynomials are
evaluated by :meth:`Shamir.shares_from_coefficients`; Shamir itself knows
nothing of commitments).

A recipient checks all S shares of one dealer at once with Fiat–Shamir
weights ``rho_s`` derived from the context, the dealer id and every commitment:

    g^{sum_s rho_s y_s} = prod_k Ĉ_k^{x^k},   Ĉ_k = prod_s C_{s,k}^{rho_s}.

Given Ĉ this costs one fixed-base exponentiation and an evaluation of Ĉ at x
(:func:`evaluates_to`: Horner's rule in variable time on ristretto255, t
exponentiations otherwise); computing Ĉ costs S·t. A wrong share
passes only if its error is cancelled by the weights, probability 1/q per
dealer. :func:`verify_share` checks one share (one fixed-base exponentiation and
one evaluation) to pinpoint the bad one, and :func:`check_secret` a reconstructed secret against
``C_{s,0} = g^{secret}``.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from typing import Iterable, Sequence

from reshuffle.crypto import vartime
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group, Ristretto255, get_group
from reshuffle.crypto.rand import RandomSource, as_source
from reshuffle.crypto.shamir import Shamir
from reshuffle.crypto.voprf import hash_to_scalar
from reshuffle.errors import ConfigError, DecodeError, InvalidShare
from reshuffle.wire import Parser, Writer

Commitments = list[list[Element]]  # [secret s][coefficient k]
MAX_SECRETS = 1 << 10
MAX_THRESHOLD = 1 << 16


def deal(
    secrets: Sequence[int],
    t: int,
    xs: Iterable[int],
    rng: RandomSource | int | None = None,
    group: Group | None = None,
) -> tuple[dict[int, list[int]], Commitments]:
    """Share every secret with threshold t at the points xs; return (shares, commitments).

    ``shares[x][s] = f_s(x)``; ``commitments[s][k] = g^{a_{s,k}}``. Coefficients
    are uniform non-zero scalars so that no commitment is the identity; a zero
    secret is refused for the same reason.
    """
    group = group if group is not None else get_group()
    xs = list(xs)
    if not 0 < len(secrets) <= MAX_SECRETS:
        raise ConfigError(f"deal needs 1..{MAX_SECRETS} secrets, got {len(secrets)}")
    if not isinstance(t, int) or isinstance(t, bool) or not 1 <= t <= MAX_THRESHOLD:
        raise ConfigError(f"threshold t must be an int in [1, {MAX_THRESHOLD}], got {t!r}")
    for i, s in enumerate(secrets):
        if not isinstance(s, int) or not 0 < s < group.order:
            raise ConfigError(f"secret {i} must be a scalar in [1, q)")
    sh = Shamir(group.order, t)
    if len(set(xs)) != len(xs) or any(not 0 < x < group.order for x in xs) or len(xs) < t:
        raise ConfigError(f"need at least t={t} distinct share points in [1, q), got {xs}")
    src = as_source(rng)
    shares: dict[int, list[int]] = {x: [] for x in xs}
    commitments: Commitments = []
    for secret in secrets:
        coeffs = [secret] + [group.random_scalar(src) for _ in range(t - 1)]
        for share in sh.shares_from_coefficients(coeffs, xs):
            shares[share.x].append(share.y)
        commitments.append([group.base_mul(a) for a in coeffs])
    return shares, commitments


def _shape(commitments: Sequence[Sequence[Element]]) -> tuple[Group, int, int]:
    if not commitments or not commitments[0]:
        raise ConfigError("commitments must be a non-empty S × t list")
    t = len(commitments[0])
    group = commitments[0][0].group
    for s, row in enumerate(commitments):
        if len(row) != t:
            raise ConfigError(f"commitment row {s} has {len(row)} entries, expected t={t}")
        for e in row:
            if not isinstance(e, Element) or e.group is not group:
                raise ConfigError(f"commitment row {s} holds a non-element or another group's element")
    return group, len(commitments), t


def weights(
    commitments: Sequence[Sequence[Element]], dealer: int, context: bytes, encoded: bytes | None = None
) -> list[int]:
    """Fiat–Shamir weights ``rho_s = HashToScalar(context ‖ dealer ‖ all commitments ‖ s)``.

    ``context`` must name the round and invocation (e.g. ``label("...", T, m)``):
    the weights then differ per dealer, round and commitment set, so a dealer
    cannot choose shares whose errors cancel. ``encoded`` is
    :func:`encode_commitments` of ``commitments`` when the caller already holds it
    (a decoded advertisement does); it must be exactly that encoding.
    """
    group, S, t = _shape(commitments)
    if not context:
        raise ConfigError("Feldman weights need a non-empty context")
    if encoded is None:
        encoded = encode_commitments(commitments)
    elif len(encoded) != 4 + S * t * group.element_size or encoded[:4] != Writer().u16(S).u16(t).bytes():
        raise ConfigError(f"encoded commitments are not {S}×{t} elements of {group.name}")
    return list(_weights(group, S, t, dealer, bytes(context), bytes(encoded)))


@functools.lru_cache(maxsize=1024)
def _weights(group: Group, S: int, t: int, dealer: int, context: bytes, encoded: bytes) -> tuple[int, ...]:
    # A pure function of public values: every recipient of one dealer's sharing derives the same
    # weights, so simulated recipients in one process derive them once.
    seed = hashlib.sha512(
        label("feldman/weights", dealer, S, t) + len(context).to_bytes(4, "big") + context + encoded
    ).digest()
    dst = label("feldman/rho")
    return tuple(hash_to_scalar(group, seed + s.to_bytes(4, "big"), dst) for s in range(S))


def combine(commitments: Sequence[Sequence[Element]], rho: Sequence[int]) -> list[Element]:
    """``Ĉ_k = prod_s C_{s,k}^{rho_s}`` for k = 0..t−1 (S·t exponentiations)."""
    _, S, t = _shape(commitments)
    if len(rho) != S:
        raise ConfigError(f"{len(rho)} weights for {S} secrets")
    out = []
    for k in range(t):
        acc = commitments[0][k] ** rho[0]
        for s in range(1, S):
            acc = acc * commitments[s][k] ** rho[s]
        out.append(acc)
    return out


def combine_from_coefficients(group: Group, coefficients: Sequence[Sequence[int]], rho: Sequence[int]) -> list[Element]:
    """The dealer's :func:`combine`: ``Ĉ_k = g^{sum_s rho_s a_{s,k}}`` from its own coefficients.

    Equal to ``combine(commitments, rho)`` for ``commitments[s][k] = g^{a_{s,k}}``, at
    t fixed-base exponentiations instead of S·t.
    """
    if not coefficients or len(coefficients) != len(rho):
        raise ConfigError(f"{len(rho)} weights for {len(coefficients)} secrets")
    t = len(coefficients[0])
    if any(len(row) != t for row in coefficients):
        raise ConfigError("every secret needs the same number t of coefficients")
    q = group.order
    return [group.base_mul(sum(r * row[k] for r, row in zip(rho, coefficients)) % q) for k in range(t)]


def _eval_in_exponent(coms: Sequence[Element], x: int) -> Element:
    """``prod_k coms[k]^{x^k}`` (t exponentiations)."""
    q = coms[0].group.order
    acc, xk = coms[0], 1
    for C in coms[1:]:
        xk = xk * x % q
        acc = acc * C**xk
    return acc


def evaluates_to(coms: Sequence[Element], x: int, value: Element) -> bool:
    """Whether ``prod_k coms[k]^{x^k} == value``; all three are public.

    On ristretto255 with a small x this is Horner's rule in variable time
    (:mod:`reshuffle.crypto.vartime`, about a third of the cost); otherwise t
    exponentiations through the group backend.
    """
    if vartime.AVAILABLE and isinstance(value.group, Ristretto255) and x < vartime.MAX_X:
        return vartime.equal(vartime.horner([c.to_bytes() for c in coms], x), vartime.decode(value.to_bytes()))
    return hmac.compare_digest(value.to_bytes(), _eval_in_exponent(coms, x).to_bytes())


def _check_x(x: int, q: int) -> None:
    if not isinstance(x, int) or isinstance(x, bool) or not 0 < x < q:
        raise InvalidShare(f"share index x={x!r} must be in [1, q)")


def verify_batch(
    x: int,
    ys: Sequence[int],
    commitments: Sequence[Sequence[Element]] | None = None,
    rho: Sequence[int] | None = None,
    combined: Sequence[Element] | None = None,
) -> None:
    """Check all S shares ``ys`` at point x against one dealer's commitments at once.

    The third argument is either the raw S × t ``commitments`` (Ĉ is then
    computed here, S·t exponentiations) or the precomputed Ĉ (a flat list of t
    elements, from :func:`combine`; also accepted as ``combined=``), which
    costs t + 1 exponentiations. Raises InvalidShare.
    """
    if commitments and isinstance(commitments[0], Element):  # a flat list: Ĉ
        if combined is not None:
            raise ConfigError("pass either the commitments or the combined Ĉ, not both")
        commitments, combined = None, commitments
    if rho is None:
        raise ConfigError("verify_batch needs the weights rho")
    if combined is None:
        if commitments is None:
            raise ConfigError("verify_batch needs the commitments or the combined Ĉ")
        combined = combine(commitments, rho)
    elif commitments is not None:
        raise ConfigError("pass either the commitments or the combined Ĉ, not both")
    if not combined:
        raise ConfigError("combined commitments are empty")
    group = combined[0].group
    q = group.order
    _check_x(x, q)
    if len(ys) != len(rho):
        raise InvalidShare(f"{len(ys)} share values at x={x} for {len(rho)} committed secrets")
    for s, y in enumerate(ys):
        if not isinstance(y, int) or not 0 <= y < q:
            raise InvalidShare(f"share value {s} at x={x} is not a scalar in [0, q)")
    lhs = group.base_mul(sum(r * y for r, y in zip(rho, ys)) % q)
    if not evaluates_to(combined, x, lhs):
        raise InvalidShare(
            f"the {len(ys)} shares at x={x} fail the batched Feldman check (degree {len(combined) - 1})"
        )


def verify_share(x: int, y: int, commitment_row: Sequence[Element]) -> None:
    """Check one share ``y = f_s(x)`` against ``C_{s,0..t-1}``; raises InvalidShare."""
    if not commitment_row:
        raise ConfigError("empty commitment row")
    group = commitment_row[0].group
    _check_x(x, group.order)
    if not isinstance(y, int) or not 0 <= y < group.order:
        raise InvalidShare(f"share value at x={x} is not a scalar in [0, q)")
    if not evaluates_to(commitment_row, x, group.base_mul(y)):
        raise InvalidShare(f"share at x={x} does not match its Feldman commitments")


def find_bad_shares(x: int, ys: Sequence[int], commitments: Sequence[Sequence[Element]]) -> list[int]:
    """Indices s whose share fails :func:`verify_share` (after a failed batch check)."""
    bad = []
    for s, (y, row) in enumerate(zip(ys, commitments)):
        try:
            verify_share(x, y, row)
        except InvalidShare:
            bad.append(s)
    return bad


def check_secret(secret: int, commitment_row: Sequence[Element]) -> None:
    """A reconstructed secret must satisfy ``g^secret = C_{s,0}``; raises InvalidShare."""
    group = commitment_row[0].group
    if not isinstance(secret, int) or not 0 <= secret < group.order:
        raise InvalidShare("reconstructed secret is not a scalar in [0, q)")
    if not hmac.compare_digest(group.base_mul(secret).to_bytes(), commitment_row[0].to_bytes()):
        raise InvalidShare("reconstructed secret does not match its commitment C_0")


# ----------------------------------------------------------------- encoding
def encode_commitments(commitments: Sequence[Sequence[Element]]) -> bytes:
    """``S u16 | t u16 | S·t elements`` (row by row)."""
    group, S, t = _shape(commitments)
    w = Writer().u16(S).u16(t)
    for row in commitments:
        for e in row:
            w.fixed(e.to_bytes(), group.element_size)
    return w.bytes()


def decode_commitments(group: Group, data: bytes, n_secrets: int, t: int) -> Commitments:
    """Inverse of :func:`encode_commitments`; exact counts, every element validated."""
    p = Parser(data, "Feldman commitments")
    S, tt = p.u16("S"), p.u16("t")
    if (S, tt) != (n_secrets, t):
        raise DecodeError(f"Feldman commitments: {S}×{tt}, expected {n_secrets}×{t}")
    out = [
        [group.element_from_bytes(p.fixed(group.element_size, f"C[{s}][{k}]"), f"Feldman C[{s}][{k}]")
         for k in range(t)]
        for s in range(S)
    ]
    p.finish()
    return out


def encode_combined(combined: Sequence[Element]) -> bytes:
    """``t u16 | t elements`` (Ĉ as a dealer may send it)."""
    if not combined:
        raise ConfigError("combined commitments are empty")
    w = Writer().u16(len(combined))
    for e in combined:
        w.fixed(e.to_bytes(), e.group.element_size)
    return w.bytes()


def decode_combined(group: Group, data: bytes, t: int) -> list[Element]:
    """Inverse of :func:`encode_combined`; exactly t validated elements."""
    p = Parser(data, "combined Feldman commitments")
    n = p.u16("t")
    if n != t:
        raise DecodeError(f"combined Feldman commitments: {n} elements, expected t={t}")
    out = [group.element_from_bytes(p.fixed(group.element_size, f"Ĉ[{k}]"), f"Ĉ[{k}]") for k in range(t)]
    p.finish()
    return out


__all__ = [
    "check_secret", "combine", "combine_from_coefficients", "deal", "decode_combined", "decode_commitments", "encode_combined",
    "encode_commitments", "find_bad_shares", "verify_batch", "verify_share", "weights",
]
