r"""Backdoor energy (MARS, NeurIPS 2025) of the models a round delivers: does it tell the attackers apart?

MARS scores a model by the Lipschitz bound of each neuron: for a linear
layer's output neuron, the norm of its weight row; for a convolution's output
channel, the largest singular value of its kernel as an (in, k·k) matrix
(the channel Lipschitz bound of CLP). Per layer it keeps the top 5 % of
those values (the *concentrated backdoor energy*, CBE) and clusters
the models by the Wasserstein distance between their CBEs, rejecting the
cluster of higher energy. Its premise is that a backdoor trained into a model
concentrates energy in a few neurons.

This module measures that premise on the rows a run really delivers
(the ``energy`` signal, :mod:`reshuffle.server.rules.signals`, computes the
same energies): :func:`probe` runs a simulation and reports, per round, where
the attackers' models rank among the honest ones. A rule built on MARS is
worth its inputs only if the attackers rank above the honest rows; where they
sit inside the honest range, the high-energy cluster is honest clients, and
the rule's rejections are aimed at them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.evaluation.recorder import delivered_rounds
from reshuffle.server.rules.signals import model_energy


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


def probe(settings: dict[str, Any], share: float = 0.05) -> list[EnergyRound]:
    """Simulate ``settings`` (a SimConfig mapping) and measure each round's delivered models' energies."""
    from reshuffle.run.config import from_mapping

    out = []
    for sim, d in delivered_rounds(from_mapping(settings, source="energy probe")):
        e = model_energy(d.models, sim.training.layout.entries, share)
        mal = d.malicious
        if mal.any() and (~mal).any():
            h = e[~mal]
            out.append(EnergyRound(d.round, above(e[mal], h), tuple(float(x) for x in e[mal]),
                                   float(h.min()), float(np.median(h)), float(h.max())))
    return out
