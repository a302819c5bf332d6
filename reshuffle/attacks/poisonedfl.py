r"""PoisonedFL (Xie, Fang, Jia, Gong et al., CVPR 2024): one sign vector for the whole run.

Untargeted poisoning whose rounds add up: the attackers draw a random sign
vector s once and every round upload :math:`\lambda\, s \odot v`, with v the
magnitude of the global model's last change, :math:`|W_g^t - W_g^{t-1}|`
normalised to unit length (ones before the second round). Per-round rules see a
row of ordinary magnitude; over rounds the model is dragged along s. Here the
scale λ (in median honest norms) is chosen each round among ``scales`` by the
deployed rule on the attackers' copy of the round (one call each, at most
``max_calls``): the one whose aggregate moves furthest along :math:`s \odot v`.

``poisonedfl-drift`` is written against a history of sign persistence
(``persistence``): each attacker flips a fresh random share ``flip`` of s's
signs every round, so its signs look as unsteady as an honest client's,
while the mean over the attackers and rounds still points along s.
"""

from __future__ import annotations

import numpy as np

from reshuffle.attacks.adaptive import Probe
from reshuffle.attacks.base import Attack, RoundView, check_view, register_attack
from reshuffle.attacks.mechanism import _levels
from reshuffle.errors import ConfigError


@register_attack("poisonedfl")
class PoisonedFL(Attack):
    """A fixed random sign vector times the last global change's magnitude (module docstring)."""

    rule_aware = True
    uses_own_training = False

    def __init__(self, scales=(0.5, 1.0, 2.0, 4.0, 8.0), max_calls: int = 20, flip: float = 0.0) -> None:
        self.scales = _levels(self.name, "scales", scales, 0.0, 1e3)
        if isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < len(self.scales):
            raise ConfigError(f"{self.name} max_calls must be an int >= {len(self.scales)}, got {max_calls!r}")
        self.max_calls = max_calls
        if isinstance(flip, bool) or not isinstance(flip, (int, float)) or not 0 <= flip < 0.5:
            raise ConfigError(f"{self.name} flip must be a number in [0, 0.5), got {flip!r}")
        self.flip = float(flip)
        self._s: np.ndarray | None = None
        self._last: np.ndarray | None = None
        self._choices: dict | None = None

    def direction(self, view: RoundView, d: int, rng: np.random.Generator) -> np.ndarray:
        if self._s is None or self._s.size != d:
            self._s = rng.choice([-1.0, 1.0], size=d)
        W = view.global_model
        v = np.ones(d)
        if W is not None:
            W = np.asarray(W, dtype=np.float64)
            if self._last is not None and self._last.shape == W.shape and np.any(W != self._last):
                v = np.abs(W - self._last)
            self._last = W.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            p = self._s * v / (np.linalg.norm(v) or 1.0)
        # A diverged global model (inf or nan steps) leaves no magnitude to follow: the signs alone, unit norm.
        return p if np.isfinite(p).all() else self._s / np.sqrt(d)

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        m, d = own.shape
        p = self.direction(view, d, rng)
        s = float(np.median(np.linalg.norm(H, axis=1)))
        if not (np.isfinite(s) and s > 0):
            s = 1.0  # honest rows of no finite size: scale the probes by the scales alone
        if self.flip:
            signs = np.where(rng.random((m, d)) < self.flip, -1.0, 1.0)
            base = p[None, :] * signs
        else:
            base = np.tile(p, (m, 1))
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        probe = Probe(view, H, m, rng, self.max_calls, self.name)
        best, best_score, best_at = None, -np.inf, None
        for lam in self.scales:
            rows = lam * s * base
            score = float(probe.decision(rows).aggregate @ p)
            if score > best_score:
                best, best_score, best_at = rows, score, lam
        self._choices = {"scale": best_at, "score": [best_score], "calls": probe.calls}
        return best

    def choices(self) -> dict | None:
        return self._choices


@register_attack("poisonedfl-drift")
class PoisonedFLDrift(PoisonedFL):
    """PoisonedFL whose attackers each flip a fresh random share ``flip`` (0.3) of the signs every round."""

    def __init__(self, scales=(0.5, 1.0, 2.0, 4.0, 8.0), max_calls: int = 20, flip: float = 0.3) -> None:
        super().__init__(scales, max_calls, flip)
