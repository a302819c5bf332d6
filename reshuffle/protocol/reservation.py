"""Reservation on a short count vector (docs/protocol.md §5 step 3) and slot ranks.

Each unsettled participant submits a one-hot vector at one of its candidate
slots (the k slots whose tokens it holds); the MaskedSum reveals only the
counts. Count 1 at a participant's pick settles it; count >= 2 puts the slot on
the collision list L and its pickers retry. The model list has one position per
settled slot, in slot order: ``position = rank of slot among settled slots``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
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


@dataclass(frozen=True)
class Reservation:
    """One party's reservation state across the iterations of a slot phase (a value: every step
    returns the next one). ``pick`` is this iteration's slot (None: an all-zero vector), ``slot``
    the settled one."""

    candidates: tuple[int, ...] = field(repr=False)
    pick: int | None = field(default=None, repr=False)
    slot: int | None = field(default=None, repr=False)
    collided: frozenset[int] = field(default=frozenset(), repr=False)  # L, as seen by this party
    occupied: frozenset[int] = frozenset()  # settled by someone else
    tried: frozenset[int] = field(default=frozenset(), repr=False)

    @classmethod
    def start(cls, candidates: Iterable[int]) -> "Reservation":
        return cls(tuple(sorted(candidates)))

    def observe(self, counts: Sequence[int]) -> "Reservation":
        """After the counts published for the last iteration."""
        counts = np.asarray(counts)
        slot, collided = self.slot, set(self.collided)
        if self.pick is not None and slot is None:
            if counts[self.pick] == 1:
                slot = self.pick
            else:
                collided.add(self.pick)
        ones = set(np.flatnonzero(counts == 1).tolist())
        collided |= set(np.flatnonzero(counts >= 2).tolist())
        return replace(self, pick=None, slot=slot, collided=frozenset(collided),
                       occupied=self.occupied | (ones - {slot}))

    def withdraw(self) -> "Reservation":
        """Forget this iteration's pick: its iteration was abandoned before anything was unmasked."""
        if self.pick is None:
            return self
        return replace(self, pick=None, tried=self.tried - {self.pick})

    def choose(self, rng: RandomSource) -> "Reservation":
        """This iteration's pick (``.pick``; None for an all-zero vector), drawn from ``rng``."""
        if self.slot is not None:
            return self
        free = [c for c in self.candidates if c not in self.occupied]
        fresh = [c for c in free if c not in self.tried]
        pool = fresh or free
        if not pool:
            return replace(self, pick=None)
        pick = pool[uniform_below(len(pool), rng)]
        return replace(self, pick=pick, tried=self.tried | {pick})
