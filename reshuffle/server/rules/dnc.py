"""Divide-and-Conquer (DnC, Shejwalkar & Houmansadr, NDSS 2021)."""

from __future__ import annotations

import math

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_f, check_positive, check_positive_int, check_round, check_seed, check_updates, round_rng,
)
from reshuffle.server.rules.registry import register_rule


def dnc_outlier_scores(X: np.ndarray) -> np.ndarray:
    r""":math:`s_i = \langle x_i - \mu, v \rangle^2`, v the top right singular vector of the centred rows."""
    C = X - X.mean(axis=0)
    _, _, vt = np.linalg.svd(C, full_matrices=False)
    return (C @ vt[0]) ** 2


@register_rule("dnc")
class DnC(Rule):
    r"""Divide-and-Conquer: drop the rows furthest along the top singular direction.

    For each of ``iterations`` draws, on a random set of b = ``dims``
    coordinates (drawn from the rule's (seed, round) stream):

    .. math:: \mu = \tfrac1n \textstyle\sum_i x_i, \quad
              v = \text{top right singular vector of } (x_i - \mu)_i, \quad
              s_i = \langle x_i - \mu, v \rangle^2,

    and the n − ⌊c·f⌋ rows with the lowest scores are kept (c = ``c``, f the
    assumed attackers). Accepted: the rows kept in every draw; the aggregate is
    their mean. Needs ⌊c·f⌋ < n.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> U = np.vstack([rng.normal(size=(6, 20)), 30 + rng.normal(size=(1, 20))])
    >>> DnC(f=1, seed=0).select(U, round=1)
    [0, 1, 2, 3, 4, 5]
    """

    randomized = True
    f_param = "f"

    def __init__(self, f: int, iterations: int = 5, dims: int = 10_000, c: float = 1.0, seed: int | None = None) -> None:
        self.f = check_f(f)
        self.iterations = check_positive_int(iterations, "DnC iterations")
        self.dims = check_positive_int(dims, "DnC dims")
        self.c = check_positive(c, "DnC filtering fraction c")
        self.seed = check_seed(seed)

    def min_rows(self) -> int:
        return math.floor(self.c * self.f) + 1

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        rng = round_rng(self.seed, check_round(round), self.name)
        U = check_updates(updates)
        n, d = U.shape
        drop = math.floor(self.c * self.f)
        if drop >= n:
            raise ConfigError(f"DnC drops floor(c·f)={drop} rows per draw; it needs more than that, got n={n}")
        good = np.ones(n, dtype=bool)
        b = min(self.dims, d)
        for _ in range(self.iterations):  # a few independent draws; each is vectorized
            cols = np.sort(rng.choice(d, size=b, replace=False))
            scores = dnc_outlier_scores(U[:, cols])
            keep = np.zeros(n, dtype=bool)
            keep[np.argsort(scores, kind="stable")[: n - drop]] = True
            good &= keep
        return Decision.mean_of(U, np.flatnonzero(good))
