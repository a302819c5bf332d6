"""Toy groups small enough for thousands of trials per second.

``ToyGroup.schnorr(bits)``: the order-q subgroup (the quadratic residues) of
Z_p^* for a safe prime p = 2q + 1; DDH is believed hard there for large q, and
at q ≈ 2^40 nothing in the games breaks it except brute force. ``full=True``
gives all of Z_p^* (order 2q), where DDH is easy (Legendre symbols), and
``bits=16`` a group where discrete logarithms take ~2^8 steps: the deliberately
weak instances. Both implement :class:`reshuffle.crypto.group.Group`, so the
real OT and masking code runs on them unchanged.
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache

from reshuffle.crypto.group import Group
from reshuffle.errors import InvalidElement


def _is_probable_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):  # deterministic below 3.3e24
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


@lru_cache(maxsize=None)
def safe_prime(bits: int) -> int:
    """The smallest safe prime p = 2q + 1 with q ≥ 2^(bits−1) (deterministic)."""
    q = (1 << (bits - 1)) + 1
    while not (_is_probable_prime(q) and _is_probable_prime(2 * q + 1)):
        q += 2
    return 2 * q + 1


class ToyGroup(Group):
    """Z_p^* or its order-q subgroup; elements are ints in [1, p)."""

    def __init__(self, p: int, full: bool = False) -> None:
        q = (p - 1) // 2
        self.p, self.q, self.full = p, q, full
        self.order = p - 1 if full else q
        self.name = f"toy-{'zp' if full else 'qr'}-{p.bit_length()}"
        # Encodings are padded to 16 bytes, the shortest seed derive_key accepts,
        # so DH outputs and self-mask seeds feed the real KDF unchanged.
        self.element_size = max(16, (p.bit_length() + 7) // 8)
        self.scalar_size = max(16, (self.order.bit_length() + 7) // 8)
        self._identity_encoding = (1).to_bytes(self.element_size, "big")
        # 4 is a QR of order q; a generator of Z_p^* is a non-residue of order 2q.
        self._g = 4 if not full else next(x for x in range(2, p) if pow(x, q, p) != 1 and pow(x, 2, p) != 1)

    @classmethod
    def schnorr(cls, bits: int = 41, full: bool = False) -> "ToyGroup":
        return cls(safe_prime(bits), full)

    def _op(self, a: int, b: int) -> int:
        return a * b % self.p

    def _exp(self, a: int, s: int) -> int:
        return pow(a, s % self.order, self.p)

    def _inv(self, a: int) -> int:
        return pow(a, -1, self.p)

    def _encode(self, a: int) -> bytes:
        return a.to_bytes(self.element_size, "big")

    def _decode(self, data: bytes) -> int:
        x = int.from_bytes(data, "big")
        if not 1 < x < self.p:
            raise InvalidElement(f"not in [2, p) for p={self.p}")
        if not self.full and pow(x, self.q, self.p) != 1:
            raise InvalidElement("not in the order-q subgroup")
        return x

    def _generator(self) -> int:
        return self._g

    def _hash(self, dst: bytes, msg: bytes) -> int:
        ctr = 0
        while True:
            h = hashlib.sha512(len(dst).to_bytes(2, "big") + dst + msg + ctr.to_bytes(4, "big")).digest()
            x = int.from_bytes(h, "big") % self.p
            x = x * x % self.p if not self.full else x  # squaring lands in the QR subgroup
            if x > 1:
                return x
            ctr += 1

    def legendre(self, x: int) -> int:
        """+1 for a quadratic residue, −1 otherwise."""
        return 1 if pow(x, self.q, self.p) == 1 else -1

    def dlog(self, h: int) -> int:
        """Baby-step giant-step discrete log to base g: ~√order work (only for tiny groups)."""
        m = math.isqrt(self.order) + 1
        table = {}
        e = 1
        for j in range(m):
            table.setdefault(e, j)
            e = e * self._g % self.p
        factor = pow(self._g, -m, self.p)
        gamma = h
        for i in range(m + 1):
            if gamma in table:
                return (i * m + table[gamma]) % self.order
            gamma = gamma * factor % self.p
        raise ValueError("no discrete log found")
