"""Attacks that craft one malicious update from the honest updates' statistics.

All m attackers upload the same vector. ``observed`` holds the h honest updates
(see :mod:`reshuffle.attacks.base` for how they are obtained).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from reshuffle.attacks.base import Attack, check_observed, register_attack
from reshuffle.errors import ConfigError
from reshuffle.server.rules import pairwise_sq_distances


@register_attack("alie")
class ALIE(Attack):
    r"""A Little Is Enough (Baruch et al., NeurIPS 2019): :math:`\mu - z\,\sigma` per coordinate.

    μ and σ are the honest updates' coordinate-wise mean and standard deviation.
    With n = h + m clients, :math:`s = \lfloor n/2 + 1 \rfloor - m` and
    :math:`z = \Phi^{-1}((n - s)/n)` unless ``z`` is given; the probability is
    clamped to [10⁻⁶, 1 − 10⁻⁶] (s ≤ 0 happens when m ≥ n/2 + 1).
    """

    omniscient = True
    uses_own_training = False

    def __init__(self, z: float | None = None) -> None:
        self.z = z

    def z_for(self, n: int, m: int) -> float:
        if self.z is not None:
            return float(self.z)
        s = (n // 2 + 1) - m
        return NormalDist().inv_cdf(min(max((n - s) / n, 1e-6), 1 - 1e-6))

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        H = check_observed(observed, m, self)
        z = self.z_for(H.shape[0] + m, m)
        return np.tile(H.mean(axis=0) - z * H.std(axis=0), (m, 1))


@register_attack("ipm")
class IPM(Attack):
    r"""Inner product manipulation (Xie et al., UAI 2020): :math:`-\varepsilon\,\mu`.

    >>> import numpy as np
    >>> IPM(epsilon=0.5)(np.array([[2.0, 0.0], [0.0, 2.0]]), 1, None).tolist()
    [[-0.5, -0.5]]
    """

    omniscient = True
    uses_own_training = False

    def __init__(self, epsilon: float = 0.1) -> None:
        if not (isinstance(epsilon, (int, float)) and epsilon > 0):
            raise ConfigError(f"ipm epsilon must be positive, got {epsilon!r}")
        self.epsilon = float(epsilon)

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        H = check_observed(observed, m, self)
        return np.tile(-self.epsilon * H.mean(axis=0), (m, 1))


_PERTURBATIONS = ("std", "unit-vec", "sign")


def _perturbation(H: np.ndarray, kind: str) -> np.ndarray:
    mu = H.mean(axis=0)
    if kind == "std":
        return -H.std(axis=0)
    if kind == "unit-vec":
        norm = np.linalg.norm(mu)
        return -mu / norm if norm > 0 else np.zeros_like(mu)
    return -np.sign(mu)


def _largest_gamma(a: np.ndarray, b: np.ndarray, c: float, bound: float) -> float:
    """Largest γ ≥ 0 with a_i + 2γ·b_i + γ²·c ≤ bound for every i (0 if γ = 0 already fails)."""
    if c <= 0 or np.any(a > bound):
        return 0.0
    roots = (-b + np.sqrt(np.maximum(b * b - c * (a - bound), 0.0))) / c
    return float(max(roots.min(), 0.0))


class _MinDistance(Attack):
    """Shejwalkar & Houmansadr (NDSS 2021): μ + γ·p with the largest γ the constraint allows.

    p is the perturbation (``std``: −σ, ``unit-vec``: −μ/‖μ‖, ``sign``: −sign μ).
    The paper finds γ by a search; here each distance is a quadratic in γ,
    ‖μ + γp − u_i‖² = ‖μ − u_i‖² + 2γ p·(μ − u_i) + γ²‖p‖², so the largest γ
    is computed exactly.
    """

    omniscient = True
    uses_own_training = False

    def __init__(self, perturbation: str = "std") -> None:
        if perturbation not in _PERTURBATIONS:
            raise ConfigError(f"perturbation must be one of {_PERTURBATIONS}, got {perturbation!r}")
        self.perturbation = perturbation

    def gamma(self, H: np.ndarray, p: np.ndarray) -> float:
        raise NotImplementedError

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        H = check_observed(observed, m, self)
        p = _perturbation(H, self.perturbation)
        return np.tile(H.mean(axis=0) + self.gamma(H, p) * p, (m, 1))


@register_attack("min-max")
class MinMax(_MinDistance):
    r"""Min-max: :math:`\max_i \lVert \tilde u - u_i \rVert \le \max_{i,j} \lVert u_i - u_j \rVert`."""

    def gamma(self, H: np.ndarray, p: np.ndarray) -> float:
        diff = H.mean(axis=0) - H
        bound = pairwise_sq_distances(H).max()
        return _largest_gamma(np.einsum("ij,ij->i", diff, diff), diff @ p, float(p @ p), bound)


@register_attack("min-sum")
class MinSum(_MinDistance):
    r"""Min-sum: :math:`\sum_i \lVert \tilde u - u_i \rVert^2 \le \max_i \sum_j \lVert u_i - u_j \rVert^2`."""

    def gamma(self, H: np.ndarray, p: np.ndarray) -> float:
        diff = H.mean(axis=0) - H
        bound = pairwise_sq_distances(H).sum(axis=1).max()
        a = np.einsum("ij,ij->", diff, diff)
        return _largest_gamma(np.array([a]), np.array([(diff @ p).sum()]), H.shape[0] * float(p @ p), bound)
