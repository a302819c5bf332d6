"""Direction-based filters: cosine similarity to a robust reference, and FLTrust."""

from __future__ import annotations

from typing import Callable

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_positive, check_round, check_updates, column_median, cosine_to,
)
from reshuffle.server.rules.registry import register_rule


@register_rule("cosine")
class CosineFilter(Rule):
    r"""Accept rows that point like the coordinate-wise median and are not too long.

    With :math:`r = \mathrm{median}_i(u_i)` (coordinate-wise), row i is accepted when

    .. math:: \cos(u_i, r) \ge \tau \quad\text{and}\quad
              \lVert u_i \rVert \le \kappa \cdot \mathrm{median}_j \lVert u_j \rVert.

    The norm test catches scaled updates, which keep their direction. The
    aggregate is the mean of the accepted rows; with none accepted it is the
    zero update (the global model stays).

    >>> import numpy as np
    >>> U = np.array([[1.0, 1.0], [1.0, 0.9], [0.9, 1.0], [-1.0, -1.0]])
    >>> CosineFilter().select(U)
    [0, 1, 2]
    """

    def __init__(self, threshold: float = 0.1, norm_bound: float = 3.0) -> None:
        if not -1.0 <= threshold < 1.0:
            raise ConfigError(f"cosine threshold must lie in [-1, 1), got {threshold!r}")
        self.threshold = float(threshold)
        self.norm_bound = check_positive(norm_bound, "norm_bound")

    def select(self, updates: np.ndarray, *, round: int = 0) -> list[int]:
        check_round(round)
        U = check_updates(updates)
        cos = cosine_to(U, column_median(U))
        norms = np.linalg.norm(U, axis=1)
        ok = (cos >= self.threshold) & (norms <= self.norm_bound * np.median(norms))
        return np.flatnonzero(ok).tolist()


@register_rule("fltrust")
class FLTrust(Rule):
    r"""FLTrust (Cao et al., NDSS 2021): trust scores against a server-side update g₀.

    ``reference()`` returns g₀, the update the PS obtains by training the current
    global model on its small root dataset. Then

    .. math:: TS_i = \max(0, \cos(u_i, g_0)), \qquad
              \bar u_i = u_i \cdot \lVert g_0 \rVert / \lVert u_i \rVert, \qquad
              \mathrm{agg} = \textstyle\sum_i TS_i \bar u_i \big/ \sum_i TS_i .

    ``select`` returns the rows with TS_i > 0 (those with any weight).

    >>> import numpy as np
    >>> U = np.array([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> rule = FLTrust(lambda: np.array([1.0, 0.0]))
    >>> rule.select(U), rule(U).tolist()
    ([0], [1.0, 0.0])
    """

    def __init__(self, reference: Callable[[], np.ndarray]) -> None:
        if not callable(reference):
            raise ConfigError("FLTrust needs a callable returning the server's reference update g0")
        self.reference = reference
        self._g0: np.ndarray | None = None

    def _scores(self, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        g0 = np.asarray(self.reference(), dtype=np.float64)
        if g0.shape != (U.shape[1],):
            raise ConfigError(f"FLTrust reference has shape {g0.shape}; updates have d={U.shape[1]}")
        return np.clip(cosine_to(U, g0), 0.0, 1.0), g0

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        check_round(round)
        U = check_updates(updates)
        ts, g0 = self._scores(U)
        accepted = tuple(np.flatnonzero(ts > 0).tolist())
        if ts.sum() == 0:
            return Decision(np.zeros(U.shape[1]), accepted, ts)
        norms = np.linalg.norm(U, axis=1)
        scale = np.divide(np.linalg.norm(g0), norms, out=np.zeros_like(norms), where=norms > 0)
        return Decision((ts * scale) @ U / ts.sum(), accepted, ts)
