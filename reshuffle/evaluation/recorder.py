"""A simulation's delivered rows, round by round, for probes that measure what a rule is given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np


@dataclass(frozen=True)
class Delivered:
    """One call of the run's FL step: the global model it started from and the models it was given."""

    round: int
    W_g: np.ndarray  #: float64, (d,)
    models: np.ndarray  #: float64, (n, d)
    malicious: np.ndarray  #: bool, (n,): the ground truth of each row (all False where the run has no labels)

    @property
    def updates(self) -> np.ndarray:
        """U_i = W_i − W_g, the rows a rule decides on."""
        return self.models - self.W_g


class _Recorder:
    """The run's FL step, unchanged, with each call's inputs kept for measuring."""

    def __init__(self, fl: Any) -> None:
        self._fl, self.calls = fl, []

    def __call__(self, W_g, models, round, malicious=None, pseudonyms=None):
        rows = np.stack(models).astype(np.float64)
        mal = np.array([bool(x) for x in malicious]) if malicious is not None else np.zeros(len(rows), bool)
        self.calls.append(Delivered(int(round), np.asarray(W_g, dtype=np.float64).copy(), rows, mal))
        return self._fl(W_g, models, round, malicious=malicious, pseudonyms=pseudonyms)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fl, name)


def delivered_rounds(settings: dict[str, Any], source: str) -> Iterator[tuple[Any, Delivered]]:
    """Simulate ``settings`` (a SimConfig mapping) and yield (the simulation, each FL step's inputs) as each
    round runs; ``source`` names the caller in a settings error."""
    from reshuffle.run.config import from_mapping
    from reshuffle.sim.simulator import Simulation

    sim = Simulation(from_mapping(settings, source=source))
    rec = _Recorder(sim.rounds.fl)
    sim.rounds.fl = rec
    while sim.rounds.round < sim.cfg.rounds:
        sim.step()
        yield from ((sim, d) for d in rec.calls)
        rec.calls.clear()
