"""Reservation on a short count vector (docs/protocol.md §5 step 3) and slot ranks.

Each unsettled participant submits a one-hot vector at one of its candidate
slots (the k slots whose tokens it holds); the MaskedSum reveals only the
counts. Count 1 at a participant's pick settles it; count >= 2 puts the slot on
the collision list L and its pickers retry. The model list has one position per
settled slot, in slot order: ``position = rank of slot among settled slots``.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from reshuffle.crypto.ot import uniform_below
from reshuffle.crypto.rand import RandomSource


def settled_slots(count_history: Iterable[Sequence[int]]) -> list[int]:
    """Slots that had count exactly 1 in some iteration, in slot order."""
    out: set[int] = set()
    for counts in count_history:
        out.update(np.flatnonzero(np.asarray(counts) == 1).tolist())
    return sorted(out)


class Reservation:
    """One participant's reservation state across iterations."""

    def __init__(self, candidates: Iterable[int], rng: RandomSource) -> None:
        self.candidates = sorted(candidates)
        self._rng = rng
        self.pick: int | None = None
        self.slot: int | None = None  # settled reservation slot
        self.collided: set[int] = set()  # L, as seen by this participant
        self.occupied: set[int] = set()  # settled by someone else
        self.tried: set[int] = set()

    def observe(self, counts: Sequence[int]) -> None:
        """Counts published for the last iteration."""
        counts = np.asarray(counts)
        ones = set(np.flatnonzero(counts == 1).tolist())
        if self.pick is not None and self.slot is None:
            if counts[self.pick] == 1:
                self.slot = self.pick
            else:
                self.collided.add(self.pick)
        self.occupied |= ones - {self.slot}
        self.collided |= set(np.flatnonzero(counts >= 2).tolist())
        self.pick = None

    def withdraw(self) -> None:
        """Forget this iteration's pick: its iteration was abandoned before anything was unmasked."""
        if self.pick is not None:
            self.tried.discard(self.pick)
            self.pick = None

    def choose(self) -> int | None:
        """The slot to submit this iteration, or None for an all-zero vector."""
        if self.slot is not None:
            return None
        free = [c for c in self.candidates if c not in self.occupied]
        fresh = [c for c in free if c not in self.tried]
        pool = fresh or free
        if not pool:
            return None
        self.pick = pool[uniform_below(len(pool), self._rng)]
        self.tried.add(self.pick)
        return self.pick
