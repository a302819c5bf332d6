"""Pre-aggregators: nearest-neighbour mixing, bucketing, norm clipping (``--pre nnm|bucketing|clip``)."""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    check_f, check_positive, check_positive_int, check_round, check_seed, check_updates, clip_factors,
    pairwise_sq_distances, round_rng,
)
from reshuffle.server.rules.compose import Mixed, PreAggregator
from reshuffle.server.rules.registry import register_pre


def nearest_neighbours(U: np.ndarray, k: int) -> np.ndarray:
    """(n, k) indices of each row's k nearest rows, itself included, ties to the lower index."""
    D = pairwise_sq_distances(U)
    return np.argsort(D, axis=1, kind="stable")[:, :k]


@register_pre("nnm")
class NNM(PreAggregator):
    r"""Nearest-neighbour mixing (Allouah et al., AISTATS 2023).

    .. math:: y_i = \frac{1}{n - f} \sum_{j \in N_i} x_j,

    :math:`N_i` the n − f rows nearest to :math:`x_i` (itself included). Needs
    f < n. Mixture i owns row i (see :mod:`reshuffle.server.rules.compose`).

    >>> import numpy as np
    >>> NNM(f=1)(np.array([[0.0], [1.0], [10.0]])).rows.tolist()
    [[0.5], [0.5], [5.5]]
    """

    f_param = "f"

    def __init__(self, f: int) -> None:
        self.f = check_f(f)

    def min_rows(self) -> int:
        return self.f + 1

    def __call__(self, updates: np.ndarray, *, round: int = 0) -> Mixed:
        check_round(round)
        U = check_updates(updates)
        n = U.shape[0]
        if self.f >= n:
            raise ConfigError(f"NNM needs f < n; got f={self.f} with n={n}")
        idx = nearest_neighbours(U, n - self.f)
        return Mixed(U[idx].mean(axis=1), np.eye(n, dtype=bool), np.ones(n))


def bucket_means(U: np.ndarray, perm: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """Means of consecutive groups of s rows of ``U[perm]`` (the last may be smaller), and the (⌈n/s⌉, n) membership."""
    n = U.shape[0]
    k = -(-n // s)
    bucket_of = np.empty(n, dtype=np.int64)
    bucket_of[perm] = np.arange(n) // s
    owners = bucket_of[None, :] == np.arange(k)[:, None]
    return (owners @ U) / owners.sum(axis=1, keepdims=True), owners


@register_pre("bucketing")
class Bucketing(PreAggregator):
    r"""Bucketing (Karimireddy, He & Jaggi, ICLR 2022).

    With a uniform permutation π of the rows, drawn from (seed, round),

    .. math:: y_j = \operatorname{mean}\{x_{\pi(i)} : (j-1)s < i \le js\},
              \quad j = 1, \dots, \lceil n/s \rceil

    (the last bucket holds the n mod s leftover rows when s does not divide n).
    Bucket j owns its members.

    >>> import numpy as np
    >>> out = Bucketing(s=2, seed=0)(np.array([[0.0], [2.0], [4.0], [6.0]]), round=1)
    >>> sorted(out.rows.ravel().tolist()) in ([1.0, 5.0], [2.0, 4.0], [3.0, 3.0])
    True
    """

    randomized = True

    def __init__(self, s: int = 2, seed: int | None = None) -> None:
        self.s = check_positive_int(s, "bucket size s")
        self.seed = check_seed(seed)

    def rows_out(self, n: int) -> int:
        return -(-n // self.s)

    def __call__(self, updates: np.ndarray, *, round: int = 0) -> Mixed:
        U = check_updates(updates)
        perm = round_rng(self.seed, check_round(round), self.name).permutation(U.shape[0])
        rows, owners = bucket_means(U, perm, self.s)
        return Mixed(rows, owners, np.ones(rows.shape[0]))


@register_pre("clip")
class Clip(PreAggregator):
    r"""Norm clipping: :math:`y_i = x_i \min(1, c / \lVert x_i \rVert)`.

    ``bound`` is c; None takes c = median_i ‖x_i‖ (adaptive, as in FLAME and
    SignGuard). Row i owns row i and carries the factor min(1, c/‖x_i‖).
    Clipping is idempotent for a fixed c.

    >>> import numpy as np
    >>> Clip(bound=1.0)(np.array([[3.0, 4.0], [0.3, 0.4]])).rows.tolist()
    [[0.6000000000000001, 0.8], [0.3, 0.4]]
    """

    def __init__(self, bound: float | None = None) -> None:
        self.bound = None if bound is None else check_positive(bound, "clipping bound")

    def __call__(self, updates: np.ndarray, *, round: int = 0) -> Mixed:
        check_round(round)
        U = check_updates(updates)
        norms = np.linalg.norm(U, axis=1)
        c = float(np.median(norms)) if self.bound is None else self.bound
        if c == 0:
            return Mixed(U.copy(), np.eye(U.shape[0], dtype=bool), np.ones(U.shape[0]))
        k = clip_factors(norms, c)
        return Mixed(U * k[:, None], np.eye(U.shape[0], dtype=bool), k)
