"""Decoys: virtual participants of the reservation (docs/protocol.md §8, §9).

The PS commits, before the OT phase, to a 32-byte seed; decoy j draws k
candidates and every later pick from ``SeededRandom(seed, label(T, j))`` and
follows the honest reservation rule on the published counts. Their one-hot
vectors are added to the real counts before publishing, so they settle into
positions no participant owns, where every honest upload holds zeros, and they
look exactly like participants. Opening the seed lets anyone recompute every
decoy pick from the public counts, hence audit the counts and find the decoy
rows of the model list.
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np

from reshuffle.crypto.domain import label
from reshuffle.crypto.ot import sample_distinct
from reshuffle.crypto.rand import SeededRandom
from reshuffle.errors import Refused
from reshuffle.protocol.reservation import Reservation, settled_slots

SEED_BYTES = 32


def commitment(T: int, seed: bytes) -> bytes:
    """``H(T, seed)``: binds the PS to its decoys before any participant picks."""
    return hashlib.sha256(label("decoy/commit", T) + bytes(seed)).digest()


def check_opening(T: int, seed: bytes, commit: bytes) -> None:
    if len(seed) != SEED_BYTES or not hmac.compare_digest(commitment(T, seed), commit):
        raise Refused("the opened decoy seed does not match the PS's commitment")


class Decoys:
    """d virtual participants driven by one seed; deterministic given the published counts."""

    def __init__(self, seed: bytes, T: int, n: int, k: int, d: int) -> None:
        self.seed, self.T, self.d = seed, T, d
        self._rngs = [SeededRandom(seed, label("decoy/participant", T, j)) for j in range(d)]
        self._res = [Reservation.start(sample_distinct(n, k, rng)) for rng in self._rngs]
        self.n = n

    def picks(self) -> np.ndarray:
        """This iteration's decoy count vector (each decoy one-hot or zero)."""
        v = np.zeros(self.n, dtype=np.uint32)
        self._res = [r.choose(rng) for r, rng in zip(self._res, self._rngs)]
        for r in self._res:
            if r.pick is not None:
                v[r.pick] += 1
        return v

    def observe(self, counts) -> None:
        self._res = [r.observe(counts) for r in self._res]

    @property
    def slots(self) -> set[int]:
        return {r.slot for r in self._res if r.slot is not None}


def replay(seed: bytes, T: int, n: int, k: int, d: int, history) -> tuple[list[np.ndarray], set[int]]:
    """Every iteration's decoy picks and the decoys' settled slots, recomputed from the public counts."""
    dec = Decoys(seed, T, n, k, d)
    picks = []
    for counts in history:
        picks.append(dec.picks())
        dec.observe(counts)
    return picks, dec.slots


def decoy_positions(history, slots: set[int]) -> list[int]:
    """Positions of the model list that decoys settled into."""
    S = settled_slots(history)
    return [pos for pos, slot in enumerate(S) if slot in slots]
