"""Baselines that accept every row: FedAvg, coordinate-wise median and trimmed mean."""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import Rule, check_f, check_updates


class FedAvg(Rule):
    """Unweighted mean of all rows (McMahan et al., 2017), no detection.

    >>> import numpy as np
    >>> FedAvg()(np.array([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [2.0, 3.0]
    """

    name = "fedavg"
    detects = False

    def select(self, updates: np.ndarray) -> list[int]:
        return list(range(check_updates(updates).shape[0]))


class Median(FedAvg):
    """Coordinate-wise median (Yin et al., ICML 2018); every row is accepted.

    >>> import numpy as np
    >>> Median()(np.array([[1.0, 9.0], [2.0, 0.0], [100.0, 1.0]])).tolist()
    [2.0, 1.0]
    """

    name = "median"

    def __call__(self, updates: np.ndarray) -> np.ndarray:
        return np.median(check_updates(updates), axis=0)


class TrimmedMean(FedAvg):
    r"""Coordinate-wise β-trimmed mean (Yin et al., 2018) with β = ``trim`` rows per side.

    For each coordinate, the ``trim`` largest and ``trim`` smallest values are
    dropped and the rest averaged; needs n > 2·trim.

    >>> import numpy as np
    >>> TrimmedMean(trim=1)(np.array([[0.0], [1.0], [2.0], [100.0]])).tolist()
    [1.5]
    """

    name = "trimmed-mean"

    def __init__(self, trim: int) -> None:
        self.trim = check_f(trim, "trim")

    def __call__(self, updates: np.ndarray) -> np.ndarray:
        U = check_updates(updates)
        n = U.shape[0]
        if n <= 2 * self.trim:
            raise ConfigError(f"trimmed mean needs n > 2·trim updates; got n={n} with trim={self.trim}")
        return np.sort(U, axis=0)[self.trim : n - self.trim].mean(axis=0)
