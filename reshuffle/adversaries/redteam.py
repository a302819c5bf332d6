"""The red team: every registered behaviour against the real round, one row each.

A row holds when, in every round it played, the behaviour's own verdict held
(:meth:`reshuffle.adversaries.Behaviour.holds`): honest models delivered as
required, expected culprits named, no honest participant named, and for a
deviating PS no honest upload exposed. ``extra_s`` is the attacked round's
in-process time minus a clean round's with the same seed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from reshuffle.adversaries.base import adversary_names, make_adversary
from reshuffle.errors import ConfigError
from reshuffle.harness.api import shuffle


@dataclass
class RedTeamRow:
    behaviour: str
    role: str
    rounds: int
    delivered: int
    expected: int
    culprit_right: int  # rounds in which every expected culprit was named
    wrong: int  # honest participants named, over all rounds (must be 0)
    detected_by: str
    extra_s: float
    holds: bool
    detail: str

    def as_dict(self) -> dict:
        return asdict(self)


def _updates(N: int, d: int, seed: int) -> list[np.ndarray]:
    # Model values only: nothing secret is drawn from numpy.
    rng = np.random.default_rng(seed)
    return [rng.normal(size=d).astype(np.float32) for _ in range(N)]


def run_redteam(rounds: int = 2, N: int = 8, d: int = 16, names: list[str] | None = None) -> list[RedTeamRow]:
    """Play each behaviour ``rounds`` times (seeds 1..rounds) among N participants."""
    if rounds < 1 or N < 4:
        raise ConfigError(f"the red team needs rounds >= 1 and N >= 4, got rounds={rounds}, N={N}")
    names = names or adversary_names()
    rows = []
    for name in names:
        b0 = make_adversary(name)
        controlled = set(getattr(b0, "pids", ())) | set(getattr(b0, "colluders", ()))
        honest = [i for i in range(N) if i not in controlled]
        got = want = right = wrong = 0
        extra, ok, details = 0.0, True, []
        for seed in range(1, rounds + 1):
            ups = _updates(N, d, seed)
            t0 = time.perf_counter()
            shuffle(ups, seed=seed)
            clean = time.perf_counter() - t0
            b = make_adversary(name)
            t0 = time.perf_counter()
            r = shuffle(ups, seed=seed, adversaries=[b], raise_on_failure=False)
            extra += time.perf_counter() - t0 - clean
            v = b.holds(r, honest)
            got, want = got + v.delivered, want + v.expected
            right += v.culprits_right
            wrong += len(v.wrong)
            ok = ok and v.holds
            if v.detail:
                details.append(v.detail)
        rows.append(RedTeamRow(name, b0.role, rounds, got, want, right, wrong, b0.stopped_by,
                               extra / rounds, ok, "; ".join(dict.fromkeys(details))))
    return rows
