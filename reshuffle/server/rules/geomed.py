"""Geometric median by the smoothed Weiszfeld algorithm (RFA, Pillutla, Kakade & Harchaoui, IEEE TSP 2022)."""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_positive, check_positive_int, check_round, check_updates, clip_factors,
    column_median,
)
from reshuffle.server.rules.registry import register_rule

STARTS = ("zero", "mean", "median")


def smoothed_weiszfeld(U: np.ndarray, z: np.ndarray, nu: float, iterations: int, tol: float) -> np.ndarray:
    r"""Iterate :math:`z \leftarrow \sum_i \beta_i u_i / \sum_i \beta_i`, :math:`\beta_i = 1/\max(\nu, \lVert z - u_i \rVert)`.

    Stops after ``iterations`` steps, or earlier once a step moves z by at most
    ``tol``·(1 + ‖z‖) (``tol = 0``: always the full count).
    """
    for _ in range(iterations):  # Weiszfeld steps; each is vectorized
        beta = 1.0 / np.maximum(nu, np.linalg.norm(U - z, axis=1))
        z_new = beta @ U / beta.sum()
        moved = np.linalg.norm(z_new - z)
        z = z_new
        if moved <= tol * (1.0 + np.linalg.norm(z)):
            break
    return z


@register_rule("geomed")
class GeometricMedian(Rule):
    r"""Approximate geometric median (RFA) of the rows:

    .. math:: z^\star \approx \operatorname{arg\,min}_{z \in \mathbb{R}^d} \sum_{i=1}^n \lVert z - u_i \rVert_2,

    by smoothed Weiszfeld steps with smoothing ν (each row's weight is
    :math:`1/\max(\nu, \lVert z - u_i \rVert)`) from ``start`` (``zero`` as in
    ByzFL, ``mean`` or the coordinate ``median``).

    Detection: the geometric median weighs row i by the inverse of its distance
    :math:`r_i = \lVert z^\star - u_i \rVert`. Row i's weight is
    :math:`\min(1, \rho \cdot \mathrm{median}_j r_j / r_i)` (ρ = ``flag_ratio``):
    rows further than ρ times the median distance are down-weighted, hence
    flagged; ``accepted`` holds the others.

    >>> import numpy as np
    >>> U = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [50.0, 50.0]])
    >>> d = GeometricMedian().decide(U)
    >>> d.accepted, d.aggregate.round(6).tolist()   # the unit vectors to the four rows cancel at (½, ½)
    ((0, 1, 2), [0.5, 0.5])
    """

    def __init__(self, nu: float = 1e-6, iterations: int = 200, tol: float = 1e-10, start: str = "median",
                 flag_ratio: float = 2.0) -> None:
        self.nu = check_positive(nu, "smoothing nu")
        self.iterations = check_positive_int(iterations, "Weiszfeld iterations")
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
            raise ConfigError(f"tol must be a number in [0, 1), got {tol!r}")
        self.tol = float(tol)
        if start not in STARTS:
            raise ConfigError(f"start must be one of {', '.join(STARTS)}, got {start!r}")
        self.start = start
        self.flag_ratio = check_positive(flag_ratio, "flag_ratio")

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        check_round(round)
        U = check_updates(updates)
        z0 = {"zero": lambda: np.zeros(U.shape[1]), "mean": lambda: U.mean(axis=0),
              "median": lambda: column_median(U)}[self.start]()
        z = smoothed_weiszfeld(U, z0, self.nu, self.iterations, self.tol)
        r = np.linalg.norm(U - z, axis=1)
        bound = self.flag_ratio * float(np.median(r))
        w = clip_factors(r, bound) if bound > 0 else np.ones_like(r)
        return Decision(z, tuple(np.flatnonzero(w == 1.0).tolist()), w)
