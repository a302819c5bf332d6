"""Who takes part in a round, and the seeds of a run: the same in every driver.

A run's randomness outside the protocol comes from ``seed_of(seed, ...)`` with one
of the stream tags below, so that a simulation and a Flower run of the same
settings draw the same cohorts and train from the same seeds. The protocol's own
secrets never come from here (OS randomness, or a cryptographic PRG in tests).

A :class:`Sampler` draws each round's cohort from the population that can take
part: the simulated clients, or the Flower nodes connected. :class:`UniformSampler`
draws m of them without replacement; :class:`SetSampler` draws whole stable
anonymity sets (members delivered together or not at all, :mod:`reshuffle.run.sets`)
and returns the union of their members, so nothing else changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

#: Seed streams: ``seed_of(seed, 1)`` picks the attackers and FLTrust's root dataset;
#: ``(seed, T, REFERENCE)`` FLTrust's reference training in round T; ``(seed, T, TRAIN, i)`` client i's
#: local training; ``(seed, T, ATTACK)`` the attack; ``(seed, T, DROPOUT)`` the dropouts;
#: ``(seed, T, IDEAL)`` the ideal shuffle's order; ``(seed, POISON, i)`` client i's poisoned data
#: (once per run); ``(seed, EVAL)`` the evaluation subset; ``(seed, T, COHORT)`` round T's cohort;
#: ``(seed, STABLE_SETS)`` the partition into stable anonymity sets (once per run).
SETUP, REFERENCE, TRAIN, ATTACK, DROPOUT, IDEAL, POISON, EVAL, COHORT, STABLE_SETS = range(1, 11)


def seed_of(*parts: int) -> int:
    """A 32-bit seed derived from ``parts`` (numpy's SeedSequence): distinct parts give independent streams."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def cohort_size(n: int, fraction: float = 1.0, per_round: int | None = None) -> int:
    """Clients sampled per round out of ``n``: ``per_round`` (at most n), else ``fraction`` of n rounded half up."""
    if per_round is not None:
        return min(per_round, n)
    return n if fraction == 1 else min(n, math.floor(fraction * n + 0.5))


class Sampler(Protocol):
    """Draws round T's cohort from ``population`` (the ids that can take part); returns it sorted.

    The draw may depend on the round, the population and the run's seed only, so
    that every driver (and a resumed run) draws the same cohort.
    """

    def cohort(self, T: int, population: Sequence[int]) -> list[int]: ...


@dataclass(frozen=True)
class UniformSampler:
    """``cohort_size`` of the population, uniformly without replacement, seeded by ``(seed, T)``.

    The ids are sorted first, so the draw depends on how many there are, not on
    how they arrive; every id when the cohort is the whole population.
    """

    seed: int
    fraction: float = 1.0
    per_round: int | None = None

    def size(self, n: int) -> int:
        return cohort_size(n, self.fraction, self.per_round)

    def cohort(self, T: int, population: Sequence[int]) -> list[int]:
        ids = sorted(population)
        m = self.size(len(ids))
        if m >= len(ids):
            return ids
        picked = np.random.default_rng(seed_of(self.seed, T, COHORT)).choice(len(ids), size=m, replace=False)
        return sorted(ids[j] for j in picked.tolist())


@dataclass(frozen=True)
class SetSampler:
    """Whole stable anonymity sets: the same fraction of the sets as ``cohort_size`` takes of the clients.

    ``sets`` is the run's partition (index → members). A set takes part only when
    every member is in the population (a set missing a member could deliver
    nothing); ``(seed, T)`` seeds the draw of set indices, uniformly without
    replacement. The cohort is the union of the sets drawn, sorted.
    """

    seed: int
    sets: tuple[tuple[int, ...], ...]
    fraction: float = 1.0
    per_round: int | None = None

    def count(self, n: int) -> int:
        """Sets drawn per round out of ``len(sets)``, for a population of ``n`` clients: at least one."""
        m = cohort_size(n, self.fraction, self.per_round)
        return min(len(self.sets), max(1, math.floor(m * len(self.sets) / n + 0.5)))

    def cohort(self, T: int, population: Sequence[int]) -> list[int]:
        present = set(population)
        whole = [j for j, s in enumerate(self.sets) if present.issuperset(s)]
        g = min(len(whole), self.count(sum(len(s) for s in self.sets)))
        if g >= len(whole):
            picked = whole
        else:
            rng = np.random.default_rng(seed_of(self.seed, T, COHORT))
            picked = [whole[j] for j in rng.choice(len(whole), size=g, replace=False).tolist()]
        return sorted(i for j in picked for i in self.sets[j])
