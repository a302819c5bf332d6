"""Centered clipping (Karimireddy, He & Jaggi, ICML 2021)."""

from __future__ import annotations

import numpy as np

from reshuffle.server.rules.base import (
    Decision, Rule, check_positive, check_positive_int, check_round, check_updates, clip_factors,
)
from reshuffle.server.rules.registry import register_rule


@register_rule("cclip")
class CenteredClipping(Rule):
    r"""Centered clipping (CClip): move a centre towards the rows, each step clipped.

    From :math:`v_0 = 0` (the current global model: updates are relative to W_g),

    .. math:: v_{l+1} = v_l + \frac{1}{n} \sum_{i=1}^{n} (u_i - v_l)
              \min\Big(1, \frac{\tau_l}{\lVert u_i - v_l \rVert}\Big),
              \qquad l = 0, \dots, L - 1,

    and the aggregate is :math:`v_L`. ``tau`` fixes :math:`\tau_l = \tau` (the
    paper's and ByzFL's form); with ``tau=None``, :math:`\tau_l =
    \kappa \cdot \mathrm{median}_i \lVert u_i - v_l \rVert` (``kappa``, ours),
    since update norms change by orders of magnitude over training.

    Detection: row i's weight is its clipping factor in the last step,
    :math:`\min(1, \tau_{L-1} / \lVert u_i - v_{L-1} \rVert)`; a clipped row
    (factor < 1) is down-weighted, hence flagged, and ``accepted`` holds the
    rows never shortened in that step.

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.0], [1.0, 0.2], [1.0, -0.2], [-9.0, 0.0]])
    >>> d = CenteredClipping(tau=2.0, iterations=1).decide(U)
    >>> d.accepted, d.weights.round(3).tolist(), d.aggregate.round(3).tolist()
    ((0, 1, 2), [1.0, 1.0, 1.0, 0.222], [0.25, 0.0])
    """

    def __init__(self, tau: float | None = None, iterations: int = 3, kappa: float = 2.0) -> None:
        self.tau = None if tau is None else check_positive(tau, "CClip tau")
        self.iterations = check_positive_int(iterations, "CClip iterations")
        self.kappa = check_positive(kappa, "CClip kappa")

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        check_round(round)
        U = check_updates(updates)
        v = np.zeros(U.shape[1])
        for _ in range(self.iterations):  # L steps, each vectorized over rows and coordinates
            diff = U - v
            dist = np.linalg.norm(diff, axis=1)
            tau = self.tau if self.tau is not None else self.kappa * float(np.median(dist))
            k = clip_factors(dist, tau) if tau > 0 else np.ones_like(dist)
            v = v + (diff * k[:, None]).mean(axis=0)
        return Decision(v, tuple(np.flatnonzero(k == 1.0).tolist()), k)
