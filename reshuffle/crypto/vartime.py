"""Variable-time ristretto255 arithmetic for **public** values (Feldman checks).

A recipient's Feldman check evaluates a dealer's committed polynomial in the
exponent at its own point x: ``prod_k Ĉ_k^{x^k}``. With libsodium that is t − 1
constant-time 253-bit exponentiations (about 50 µs each) plus t − 1 additions
that each decode and re-encode their operands. Here the commitments are decoded
once (RFC 9496 §4.3.1) into extended Edwards coordinates and the polynomial is
evaluated by Horner's rule, ``acc = acc^x · Ĉ_k``, where ``acc^x`` is a
double-and-add over the few bits of x (x ≤ N + 1). Every operand is public (the
commitments, x, and ``g^{f(x)}``, which anyone computes from them), so variable
time leaks nothing; never pass a secret here.

Field arithmetic uses gmpy2 when it is installed (the decode's inverse square
root is a 255-bit modular power: about 10 µs with gmpy2, 90 µs with Python
ints); :data:`AVAILABLE` is False without it and callers keep libsodium.
"""

from __future__ import annotations

from typing import Sequence

from reshuffle.errors import InvalidElement

try:
    from gmpy2 import mpz, powmod

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only where gmpy2 has no wheel
    AVAILABLE = False

    def mpz(v: int) -> int:  # type: ignore[misc]
        return int(v)

    powmod = pow  # type: ignore[assignment]

P = mpz(2**255 - 19)
D = mpz(-121665) * powmod(mpz(121666), P - 2, P) % P  # Edwards d of edwards25519
D2 = 2 * D % P
SQRT_M1 = powmod(mpz(2), (P - 1) // 4, P)
_EXP = (P - 5) // 8
MAX_X = 1 << 16  # Horner's acc^x stays a short double-and-add

Point = tuple  # extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, xy = T/Z


def _sqrt_ratio_m1(u, v):
    """RFC 9496 §4.2 SQRT_RATIO_M1: (u/v is square, non-negative root of u/v or of i·u/v)."""
    v3 = v * v % P * v % P
    v7 = v3 * v3 % P * v % P
    r = u * v3 % P * powmod(u * v7 % P, _EXP, P) % P
    check = v * r % P * r % P
    correct, flipped = check == u % P, check == -u % P
    if flipped or check == -u * SQRT_M1 % P:
        r = r * SQRT_M1 % P
    return correct or flipped, (P - r if r & 1 else r)


def decode(data: bytes) -> Point:
    """RFC 9496 §4.3.1 decode; InvalidElement on any non-canonical or off-group encoding."""
    if len(data) != 32:
        raise InvalidElement(f"a ristretto255 encoding is 32 bytes, got {len(data)}")
    s = mpz(int.from_bytes(data, "little"))
    if s >= P or s & 1:
        raise InvalidElement("not a canonical ristretto255 encoding")
    ss = s * s % P
    u1, u2 = (1 - ss) % P, (1 + ss) % P
    u2_sqr = u2 * u2 % P
    v = (-(D * u1 % P * u1) - u2_sqr) % P
    was_square, invsqrt = _sqrt_ratio_m1(mpz(1), v * u2_sqr % P)
    den_x = invsqrt * u2 % P
    den_y = invsqrt * den_x % P * v % P
    x = 2 * s * den_x % P
    if x & 1:
        x = P - x
    y = u1 * den_y % P
    t = x * y % P
    if not was_square or t & 1 or y == 0:
        raise InvalidElement("not a canonical ristretto255 encoding")
    return (x, y, mpz(1), t)


def add(a: Point, b: Point) -> Point:
    """a + b (add-2008-hwcd-3, a = −1)."""
    X1, Y1, Z1, T1 = a
    X2, Y2, Z2, T2 = b
    A = (Y1 - X1) * (Y2 - X2) % P
    B = (Y1 + X1) * (Y2 + X2) % P
    C = T1 * D2 % P * T2 % P
    Dz = 2 * Z1 * Z2 % P
    E, F, G, H = B - A, Dz - C, Dz + C, B + A
    return (E * F % P, G * H % P, F * G % P, E * H % P)


def double(a: Point) -> Point:
    """2a (dbl-2008-hwcd, a = −1)."""
    X1, Y1, Z1, _ = a
    A, B = X1 * X1 % P, Y1 * Y1 % P
    C = 2 * Z1 * Z1 % P
    H = -(A + B) % P  # D − B with D = aA = −A
    E = ((X1 + Y1) * (X1 + Y1) + H) % P
    G = B - A
    F = G - C
    return (E * F % P, G * H % P, F * G % P, E * H % P)


def mul_small(a: Point, x: int) -> Point:
    """x·a for 1 <= x < MAX_X by double-and-add (variable time in x)."""
    if not 1 <= x < MAX_X:
        raise ValueError(f"mul_small needs 1 <= x < {MAX_X}, got {x}")
    r = a
    for bit in bin(x)[3:]:
        r = double(r)
        if bit == "1":
            r = add(r, a)
    return r


def equal(a: Point, b: Point) -> bool:
    """RFC 9496 §4.3.3 equality of the ristretto255 elements that a and b represent."""
    X1, Y1 = a[0], a[1]
    X2, Y2 = b[0], b[1]
    return (X1 * Y2 - Y1 * X2) % P == 0 or (Y1 * Y2 - X1 * X2) % P == 0


def horner(coefficients: Sequence[bytes], x: int) -> Point:
    """``prod_k C_k^{x^k}`` (written additively: sum_k x^k·C_k) of encoded elements C_0..C_{t−1}."""
    if not coefficients:
        raise ValueError("no coefficients")
    pts = [decode(c) for c in coefficients]
    acc = pts[-1]
    for c in reversed(pts[:-1]):
        acc = add(mul_small(acc, x), c)
    return acc


__all__ = ["AVAILABLE", "MAX_X", "add", "decode", "double", "equal", "horner", "mul_small"]
