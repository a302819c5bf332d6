"""Shamir secret sharing over a prime field (the group's scalar field by default).

Used only for short secrets: PRG seeds and DH secret keys, both scalars. A share
is ``(x, y)`` with ``x`` in ``[1, q)``; participant ``j`` holds ``x = j + 1``.
Reconstruction uses the barycentric Lagrange form (O(t^2) once, O(t) per
point), so extra shares beyond ``t`` can be checked for consistency cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Sequence

from reshuffle.crypto.rand import RandomSource, as_source
from reshuffle.errors import BelowThreshold, ConfigError, InvalidShare
from reshuffle.wire import Parser, Writer


@dataclass(frozen=True)
class Share:
    """One Shamir share ``(x, y)`` of a secret over ``Z_q``."""

    x: int
    y: int = field(repr=False)

    def encode(self, scalar_size: int = 32) -> bytes:
        return Writer().u32(self.x).fixed(self.y.to_bytes(scalar_size, "big"), scalar_size).bytes()

    @classmethod
    def checked(cls, x: int, y: int, q: int) -> "Share":
        """A share from parsed integers, with the checks of :meth:`decode` (InvalidShare)."""
        share = cls(x, y)
        _check_share(share, q)
        return share

    @classmethod
    def decode(cls, data: bytes, q: int, scalar_size: int = 32) -> "Share":
        p = Parser(data, "share")
        x = p.u32("x")
        y = int.from_bytes(p.fixed(scalar_size, "y"), "big")
        p.finish()
        share = cls(x, y)
        _check_share(share, q)
        return share


def _check_share(s: Share, q: int) -> None:
    if not isinstance(s, Share):
        raise InvalidShare(f"expected a Share, got {type(s).__name__}")
    if not 0 < s.x < q:
        raise InvalidShare(f"share index x={s.x} must be in [1, q)")
    if not 0 <= s.y < q:
        raise InvalidShare(f"share value of x={s.x} is not reduced modulo q")


class Shamir:
    """(t, n) threshold sharing over ``Z_q``: any t shares reconstruct, t-1 reveal nothing."""

    def __init__(self, q: int, t: int) -> None:
        if not isinstance(t, int) or isinstance(t, bool) or t < 1:
            raise ConfigError(f"threshold t must be a positive int, got {t!r}")
        if q < 3:
            raise ConfigError(f"field order q must be a prime >= 3, got {q}")
        self.q = q
        self.t = t

    def split(
        self, secret: int, xs: Iterable[int], rng: RandomSource | int | None = None
    ) -> list[Share]:
        """Shares of ``secret`` at the points ``xs`` (distinct, non-zero, at least t)."""
        xs = list(xs)
        if not 0 <= secret < self.q:
            raise ConfigError("secret must be an int in [0, q)")
        if len(set(xs)) != len(xs) or any(not 0 < x < self.q for x in xs):
            raise ConfigError("share points must be distinct and in [1, q)")
        if len(xs) < self.t:
            raise ConfigError(f"need at least t={self.t} share points, got {len(xs)}")
        src = as_source(rng)
        nbytes = (self.q.bit_length() + 7) // 8 + 16  # bias < 2^-128
        coeffs = [secret] + [
            int.from_bytes(src.bytes(nbytes), "big") % self.q for _ in range(self.t - 1)
        ]
        return self.shares_from_coefficients(coeffs, xs)

    def shares_from_coefficients(self, coeffs: Sequence[int], xs: Iterable[int]) -> list[Share]:
        """Evaluate ``sum coeffs[i] x^i`` at each x (coeffs[0] is the secret).

        :meth:`split` draws the coefficients; exact games enumerate them.
        """
        if len(coeffs) != self.t:
            raise ConfigError(f"a degree t-1 polynomial has t={self.t} coefficients")
        q = self.q
        out = []
        for x in xs:
            acc = 0
            for c in reversed(coeffs):  # Horner
                acc = (acc * x + c) % q
            out.append(Share(x, acc))
        return out

    def _validate(self, shares: Sequence[Share]) -> list[Share]:
        shares = list(shares)
        seen: set[int] = set()
        for s in shares:
            _check_share(s, self.q)
            if s.x in seen:
                raise InvalidShare(f"duplicate share index x={s.x}")
            seen.add(s.x)
        if len(shares) < self.t:
            raise BelowThreshold(f"need t={self.t} shares, got {len(shares)}")
        return shares

    def reconstruct(self, shares: Sequence[Share], check: bool = True) -> int:
        """Secret from at least t shares.

        The first t shares interpolate; with ``check`` every further share must lie
        on the same polynomial, else :class:`InvalidShare` (a lying share holder).
        """
        shares = self._validate(shares)
        base, extra = shares[: self.t], shares[self.t :]
        q = self.q
        if not extra or not check:
            # Cached coefficients: the PS recovers many secrets from the same responders.
            lam = _lagrange_at_zero(tuple(s.x for s in base), q)
            return sum(l * s.y for l, s in zip(lam, base)) % q
        xs = [s.x for s in base]
        # Barycentric weights w_i = 1 / prod_{j != i} (x_i - x_j).
        weights = []
        for i, xi in enumerate(xs):
            d = 1
            for j, xj in enumerate(xs):
                if i != j:
                    d = d * (xi - xj) % q
            weights.append(pow(d, -1, q))

        def eval_at(z: int) -> int:
            ell, acc = 1, 0
            for xi, wi, s in zip(xs, weights, base):
                diff = (z - xi) % q
                ell = ell * diff % q
                acc = (acc + wi * s.y * pow(diff, -1, q)) % q
            return ell * acc % q

        secret = eval_at(0)
        if check:
            for s in extra:
                if eval_at(s.x) != s.y:
                    raise InvalidShare(f"share x={s.x} is inconsistent with the others")
        return secret


@lru_cache(maxsize=64)
def _lagrange_at_zero(xs: tuple[int, ...], q: int) -> tuple[int, ...]:
    """``lambda_i = prod_{j != i} x_j / (x_j - x_i) mod q``, so that ``f(0) = sum lambda_i y_i``."""
    num = 1
    for x in xs:
        num = num * x % q
    out = []
    for i, xi in enumerate(xs):
        den = xi
        for j, xj in enumerate(xs):
            if i != j:
                den = den * (xj - xi) % q
        out.append(num * pow(den, -1, q) % q)
    return tuple(out)
