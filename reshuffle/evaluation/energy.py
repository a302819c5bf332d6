r"""Backdoor energy (MARS, NeurIPS 2025) of the models a round delivers: does it tell the attackers apart?

MARS scores a model by the Lipschitz bound of each neuron: for a linear
layer's output neuron, the norm of its weight row; for a convolution's output
channel, the largest singular value of its kernel as an (in, k·k) matrix
(the channel Lipschitz bound of CLP). Per layer it keeps the top ``kappa``
share of those values (the *concentrated backdoor energy*, CBE) and clusters
the models by the Wasserstein distance between their CBEs, rejecting the
cluster of higher energy. Its premise is that a backdoor trained into a model
concentrates energy in a few neurons.

This module measures that premise on the rows a run really delivers, before
any rule is built on it: :func:`round_energy` gives each delivered model's
total CBE, and :func:`probe` runs a simulation and reports, per round, where
the attackers' models rank among the honest ones. A rule built on MARS is
worth its inputs only if the attackers rank above the honest rows; where they
sit inside the honest range, the high-energy cluster is honest clients, and
the rule's rejections are aimed at them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from reshuffle.errors import ConfigError


def neuron_energy(weight: np.ndarray) -> np.ndarray | None:
    """Per output neuron (first axis), the Lipschitz bound of one weight tensor; None for a vector (a bias).

    A 2-D (out, in) weight gives its rows' norms; a convolution's (out, in, k…) weight each channel's largest
    singular value as an (in, k…) matrix.

    >>> import numpy as np
    >>> neuron_energy(np.array([[3.0, 4.0], [0.0, 1.0]])).tolist()
    [5.0, 1.0]
    >>> neuron_energy(np.ones(4)) is None
    True
    """
    w = np.asarray(weight, dtype=np.float64)
    if w.ndim < 2:
        return None
    if w.ndim == 2:
        return np.linalg.norm(w, axis=1)
    return np.linalg.svd(w.reshape(w.shape[0], w.shape[1], -1), compute_uv=False)[:, 0]


def concentrated_energy(flat: np.ndarray, names: Sequence[str], shapes: Sequence[Sequence[int]],
                        kappa: float = 0.05) -> list[np.ndarray]:
    """Per weight layer of the flat model (its entries ``names``/``shapes`` in order), the top ``kappa`` share
    (at least one) of its neurons' energies, largest first: the model's CBE."""
    if not 0 < kappa <= 1:
        raise ConfigError(f"energy kappa must be in (0, 1], got {kappa!r}")
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    if sum(sizes) != np.asarray(flat).size:
        raise ConfigError(f"a flat model of {np.asarray(flat).size} entries for a layout of {sum(sizes)}")
    out, at = [], 0
    for name, shape, size in zip(names, shapes, sizes):
        t = np.asarray(flat[at:at + size]).reshape(tuple(shape))
        at += size
        e = neuron_energy(t) if name.endswith("weight") else None
        if e is not None:
            k = max(1, int(round(kappa * len(e))))
            out.append(-np.sort(-e)[:k])
    return out


def round_energy(models: np.ndarray, names: Sequence[str], shapes: Sequence[Sequence[int]],
                 kappa: float = 0.05) -> np.ndarray:
    """Each model's total CBE (the sum of its layers' kept energies), one value per row of ``models``."""
    return np.array([sum(float(c.sum()) for c in concentrated_energy(m, names, shapes, kappa)) for m in models])


def above(pos: np.ndarray, neg: np.ndarray) -> float:
    """The chance that a value of ``pos`` exceeds one of ``neg`` (ties count half): the AUC of a test that
    flags high values.

    >>> above(np.array([3.0, 4.0]), np.array([1.0, 3.0]))
    0.875
    """
    pos, neg = np.asarray(pos, dtype=np.float64), np.asarray(neg, dtype=np.float64)
    if not len(pos) or not len(neg):
        raise ConfigError("an AUC needs values on both sides")
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())


@dataclass(frozen=True)
class EnergyRound:
    """One round's delivered models, by their total CBE."""

    round: int
    auc: float  #: chance an attacker's model has more energy than an honest one (MARS needs it near 1)
    attackers: tuple[float, ...]
    honest_min: float
    honest_median: float
    honest_max: float

    def as_dict(self) -> dict[str, Any]:
        return {"round": self.round, "auc": self.auc, "attackers": list(self.attackers),
                "honest_min": self.honest_min, "honest_median": self.honest_median, "honest_max": self.honest_max}


class _Recorder:
    """The run's FL step, unchanged, with each round's delivered models kept for measuring."""

    def __init__(self, fl: Any) -> None:
        self._fl, self.calls = fl, []

    def __call__(self, W_g, models, round, malicious=None, pseudonyms=None):
        self.calls.append((round, np.stack(models), malicious))
        return self._fl(W_g, models, round, malicious=malicious, pseudonyms=pseudonyms)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fl, name)


def probe(settings: dict[str, Any], kappa: float = 0.05) -> list[EnergyRound]:
    """Simulate ``settings`` (a SimConfig mapping) and measure each round's delivered models' energies."""
    from reshuffle.run.config import from_mapping
    from reshuffle.sim.simulator import Simulation

    sim = Simulation(from_mapping(settings, source="energy probe"))
    rec = _Recorder(sim.rounds.fl)
    sim.rounds.fl = rec
    layout = sim.training.layout
    out = []
    while sim.rounds.round < sim.cfg.rounds:
        sim.step()
        for T, models, labels in rec.calls:
            e = round_energy(models, layout.names, layout.shapes, kappa)
            mal = np.array([bool(x) for x in labels]) if labels is not None else np.zeros(len(e), bool)
            if mal.any() and (~mal).any():
                h = e[~mal]
                out.append(EnergyRound(int(T), above(e[mal], h), tuple(float(x) for x in e[mal]),
                                       float(h.min()), float(np.median(h)), float(h.max())))
        rec.calls.clear()
    return out
