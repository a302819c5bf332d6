"""Local model poisoning attacks of Fang et al. (USENIX Security 2020), full-knowledge variants.

Fang, Cao, Jia and Gong, "Local Model Poisoning Attacks to Byzantine-Robust
Federated Learning". Both attacks are omniscient: ``observed`` holds the h honest
updates of the round. Variant notes (the paper crafts local *models*; ours are
updates U = W − W_g, which only moves the origin to the pre-attack global model):

* the "changing direction" s of the global model without attack is estimated
  as the sign of the honest updates' mean, s = sign(μ);
* Krum attack: the c − 1 supporting models are exact copies of the crafted one
  (the paper's ε-ball with ε = 0).
"""

from __future__ import annotations

import numpy as np

from reshuffle.attacks.base import Attack, check_observed, register_attack
from reshuffle.errors import ConfigError
from reshuffle.server.rules import krum_scores, pairwise_sq_distances


@register_attack("fang-krum")
class FangKrum(Attack):
    r"""Fang et al.'s attack on Krum: every attacker uploads :math:`-\lambda s`, with λ as large as Krum accepts.

    s = sign(μ) (μ the honest mean update). λ starts at the paper's upper bound

    .. math:: \lambda_0 = \frac{1}{(n - 2c - 1)\sqrt d}\,\min_{i}\sum_{l \in \Gamma_i} \lVert u_l - u_i \rVert
              + \frac{1}{\sqrt d}\,\max_i \lVert u_i \rVert,

    (i over honest rows, Γ_i the n − c − 2 honest rows nearest to u_i, n = h + c
    clients, c = m attackers, d coordinates) and is halved until Krum with
    f = c selects a malicious row, or until it falls below ``threshold``
    (then λ = that last value, as in the paper).
    """

    omniscient = True
    uses_own_training = False

    def __init__(self, threshold: float = 1e-5) -> None:
        if not (isinstance(threshold, (int, float)) and threshold > 0):
            raise ConfigError(f"fang-krum threshold must be positive, got {threshold!r}")
        self.threshold = float(threshold)

    def lambda_bound(self, H: np.ndarray, m: int) -> float:
        h, d = H.shape
        n = h + m
        k = n - m - 2  # neighbours counted in the bound
        if n - 2 * m - 1 <= 0 or not 1 <= k <= h - 1:
            raise ConfigError(f"fang-krum needs n > 2c + 2 (n={n}, c={m})")
        D = np.sqrt(pairwise_sq_distances(H))
        np.fill_diagonal(D, np.inf)
        nearest = np.partition(D, k - 1, axis=1)[:, :k].sum(axis=1)
        return float(nearest.min() / ((n - 2 * m - 1) * np.sqrt(d)) + np.linalg.norm(H, axis=1).max() / np.sqrt(d))

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        H = check_observed(observed, m, self)
        s = np.sign(H.mean(axis=0))
        lam = self.lambda_bound(H, m)
        while True:
            bad = -lam * s
            scores = krum_scores(np.vstack([H, np.tile(bad, (m, 1))]), m)
            if int(np.argmin(scores)) >= H.shape[0] or lam / 2 < self.threshold:
                break
            lam /= 2
        self.last_lambda = lam
        return np.tile(bad, (m, 1))


@register_attack("fang-trmean")
class FangTrimmedMean(Attack):
    r"""Fang et al.'s attack on trimmed mean (and median), full knowledge.

    Per coordinate j, with s_j = sign(μ_j) and the honest extremes
    :math:`w_{\max,j}, w_{\min,j}`, each attacker draws independently

    * if s_j ≤ 0: uniformly from :math:`[w_{\max,j}, b\,w_{\max,j}]` when
      :math:`w_{\max,j} > 0`, else from :math:`[w_{\max,j}, w_{\max,j}/b]`;
    * if s_j > 0: uniformly from :math:`[w_{\min,j}/b, w_{\min,j}]` when
      :math:`w_{\min,j} > 0`, else from :math:`[b\,w_{\min,j}, w_{\min,j}]`;

    so every malicious value lies beyond the honest extreme opposite to the
    direction the model would move, by at most a factor b (``b`` = 2 in the paper).
    """

    omniscient = True
    uses_own_training = False

    def __init__(self, b: float = 2.0) -> None:
        if not (isinstance(b, (int, float)) and b > 1 and np.isfinite(b)):
            raise ConfigError(f"fang-trmean b must be a number > 1, got {b!r}")
        self.b = float(b)

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        H = check_observed(observed, m, self)
        up = np.sign(H.mean(axis=0)) <= 0  # push above the honest maximum
        w_max, w_min = H.max(axis=0), H.min(axis=0)
        hi_side = (w_max, np.where(w_max > 0, self.b * w_max, w_max / self.b))
        lo_side = (np.where(w_min > 0, w_min / self.b, self.b * w_min), w_min)
        lo = np.where(up, hi_side[0], lo_side[0])
        hi = np.where(up, hi_side[1], lo_side[1])
        return rng.uniform(lo, hi, size=(m, H.shape[1]))
