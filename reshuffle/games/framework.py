"""Game harness: challengers, adversaries, reductions, and advantage estimates.

A game's ``trial(adversary, rng) -> bool`` plays once and says whether the
adversary won. ``estimate`` plays many trials and reports the advantage over the
trivial strategy, ``Pr[win] − baseline``, with a Hoeffding half-width: with
probability ≥ 1 − δ the true advantage lies within ``bound`` of the estimate,
``bound = sqrt(ln(2/δ) / (2·trials))``. Information-theoretic statements are
checked exactly by enumeration instead (``bound = 0``).

A *reduction* is an adversary for a base game built from an adversary for the
scheme (``Reduction(A)`` plays the base game by running A on a simulated
scheme); the theorem relates the two advantages, and the harness checks that
relation on measured numbers.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Callable, Hashable, Iterable

DELTA = 1e-4  # confidence 1 − δ of every Hoeffding bound


def hoeffding(trials: int, delta: float = DELTA) -> float:
    """Half-width ε with Pr[|p̂ − p| ≥ ε] ≤ δ for the mean of ``trials`` Bernoulli draws."""
    return math.sqrt(math.log(2 / delta) / (2 * trials))


@dataclass(frozen=True)
class Estimate:
    advantage: float
    bound: float
    trials: int
    wins: int

    def at_most(self, x: float) -> bool:
        """The true advantage may be ≤ x (x lies above the interval's lower end)."""
        return self.advantage - self.bound <= x

    def above(self, x: float) -> bool:
        """The true advantage is > x with confidence 1 − δ."""
        return self.advantage - self.bound > x


def estimate(trial: Callable[[], bool], trials: int, baseline: float) -> Estimate:
    wins = sum(bool(trial()) for _ in range(trials))
    return Estimate(wins / trials - baseline, hoeffding(trials), trials, wins)


def statistical_distance(p: dict[Hashable, Fraction], q: dict[Hashable, Fraction]) -> Fraction:
    """½·Σ|p(x) − q(x)|, exactly."""
    keys = set(p) | set(q)
    return sum((abs(p.get(k, Fraction(0)) - q.get(k, Fraction(0))) for k in keys), Fraction(0)) / 2


def distribution(outcomes: Iterable[Hashable]) -> dict[Hashable, Fraction]:
    """Exact distribution of equally likely ``outcomes``."""
    counts: dict[Hashable, int] = {}
    total = 0
    for o in outcomes:
        counts[o] = counts.get(o, 0) + 1
        total += 1
    return {k: Fraction(v, total) for k, v in counts.items()}


def coin() -> int:
    return secrets.randbits(1)


@dataclass(frozen=True)
class Result:
    """One line of ``reshuffle games``."""

    game: str
    assumption: str
    advantage: float
    bound: float
    expected: str
    passed: bool

    def as_dict(self) -> dict:
        return asdict(self)
