"""DDH, Shamir privacy and OT receiver privacy: the base problem and the two exact games."""

from __future__ import annotations

import itertools
from fractions import Fraction

from reshuffle.crypto.ot import OTReceiver, h1
from reshuffle.crypto.shamir import Shamir
from reshuffle.games.framework import Estimate, coin, distribution, estimate, statistical_distance
from reshuffle.games.toy import ToyGroup


# --------------------------------------------------------------------------- DDH
def ddh_trial(group, adversary) -> bool:
    """One DDH round: (g^a, g^b, g^ab) if the coin is 1, else (g^a, g^b, g^c)."""
    b = coin()
    a, c, r = group.random_scalar(), group.random_scalar(), group.random_scalar()
    g = group.generator()
    C = g ** (a * c) if b else g**r
    return adversary(group, g**a, g**c, C) == b


def legendre_adversary(group: ToyGroup, A, B, C) -> int:
    """Says 'real' when C's quadratic character matches that of g^(ab).

    With g a non-residue, g^(ab) is a residue iff a or b is even, i.e. iff A or B
    is a residue. In the prime-order subgroup every element is a residue, so the
    test always says 'real' and the advantage is 0.
    """
    qr = [group.legendre(int.from_bytes(X.to_bytes(), "big")) == 1 for X in (A, B, C)]
    return int(qr[2] == (qr[0] or qr[1]))


def ddh_game(group: ToyGroup, trials: int) -> Estimate:
    return estimate(lambda: ddh_trial(group, legendre_adversary), trials, 0.5)


# ------------------------------------------------------------------- Shamir
def shamir_view_distance(q: int, t: int, n: int, shares_seen: int) -> Fraction:
    """Max over secret pairs and index sets of the exact distance between share views.

    Every polynomial (all q^(t−1) coefficient vectors) is enumerated with the real
    :meth:`Shamir.shares_from_coefficients`.
    """
    sh = Shamir(q, t)
    worst = Fraction(0)
    for xs in itertools.combinations(range(1, n + 1), shares_seen):
        views = {}
        for s in range(q):
            views[s] = distribution(
                tuple(x.y for x in sh.shares_from_coefficients((s, *rest), xs))
                for rest in itertools.product(range(q), repeat=t - 1)
            )
        for s0, s1 in itertools.combinations(range(q), 2):
            worst = max(worst, statistical_distance(views[s0], views[s1]))
    return worst


# --------------------------------------------------------------- OT receiver
class _Scalars:
    """A RandomSource that makes ``random_scalar`` return the given values in turn."""

    def __init__(self, values, size: int) -> None:
        self._values, self._size = list(values), size

    def bytes(self, n: int) -> bytes:
        return self._values.pop(0).to_bytes(n, "big")


def ot_request_distance(group: ToyGroup, n: int, k: int, blinded: bool = True) -> Fraction:
    """Max exact distance between the OT requests of two choice sets of size k.

    The blinds range over all non-zero scalars (what ``random_scalar`` draws) and
    the request is built by the real :class:`OTReceiver`. ``blinded=False`` is
    the broken receiver that sends H1(T, σ) itself.
    """
    T = 1
    dists = {}
    for choice in itertools.combinations(range(n), k):
        if blinded:
            outs = []
            for blinds in itertools.product(range(1, group.order), repeat=k):
                rx = OTReceiver(group, T, n, list(choice), rng=_Scalars(blinds, 64))
                outs.append(tuple(a.to_bytes() for a in rx.request().blinded))
        else:
            outs = [tuple(h1(group, T, s).to_bytes() for s in choice)]
        dists[choice] = distribution(outs)
    return max(statistical_distance(dists[a], dists[b]) for a, b in itertools.combinations(dists, 2))
