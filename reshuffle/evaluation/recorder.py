"""A simulation's FL steps, round by round: what the rule was given and what it made of it, for probes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np


@dataclass(frozen=True)
class Delivered:
    """One call of the run's FL step: the global model, the models in the order the rule saw them, and the
    rule's aggregate."""

    round: int
    W_g: np.ndarray  #: float64, (d,)
    models: np.ndarray  #: float64, (n, d)
    malicious: np.ndarray  #: bool, (n,): the ground truth of each row (all False where the run has no labels)
    pseudonyms: tuple | None  #: each row's pseudonym (None: the driver gave none)
    aggregate: np.ndarray | None  #: the rule's aggregate of the rows (None: it refused them)

    @property
    def updates(self) -> np.ndarray:
        """U_i = W_i − W_g, the rows the rule decided on."""
        return self.models - self.W_g


class _Recorder:
    """The run's FL step, unchanged, with each call's inputs and the rule's aggregate kept for measuring."""

    def __init__(self, fl: Any) -> None:
        self._fl, self.calls = fl, []

    def __call__(self, W_g, models, round, malicious=None, pseudonyms=None):
        W = np.asarray(W_g, dtype=np.float64).copy()
        res = self._fl(W_g, models, round, malicious=malicious, pseudonyms=pseudonyms)
        order = list(res.order)
        rows = np.stack([models[j] for j in order]).astype(np.float64)
        mal = np.array([bool(malicious[j]) if malicious is not None else False for j in order])
        names = None if pseudonyms is None else tuple(pseudonyms[j] for j in order)
        agg = None if res.decision is None else np.asarray(res.decision.aggregate, dtype=np.float64).copy()
        self.calls.append(Delivered(int(round), W, rows, mal, names, agg))
        return res

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fl, name)


def delivered_rounds(cfg: Any) -> Iterator[tuple[Any, Delivered]]:
    """Simulate ``cfg`` (a SimConfig) and yield (the simulation, each FL step's call) as each round runs."""
    from reshuffle.sim.simulator import Simulation

    sim = Simulation(cfg)
    rec = _Recorder(sim.rounds.fl)
    sim.rounds.fl = rec
    while sim.rounds.round < sim.cfg.rounds:
        sim.step()
        yield from ((sim, d) for d in rec.calls)
        rec.calls.clear()
