r"""Steps on the global model itself, after the server optimiser: CRFL's clipping and noise.

A rule sees one round's rows; a model step sees the new global model W_g and
nothing else. :class:`CRFL` is the training side of Xie, Chen, Chen & Li,
"CRFL: Certifiably Robust Federated Learning against Backdoor Attacks"
(ICML 2021): after each aggregation the server clips the parameter vector to
norm ρ and perturbs it with Gaussian noise,

.. math:: W_g \leftarrow W_g \min\Big(1, \frac{\rho}{\lVert W_g\rVert}\Big) + N(0, \sigma^2 I).

The paper's certificate then predicts with many noisy copies of the final model
(randomized smoothing in parameter space); that prediction side is not part of
this step.
"""

from __future__ import annotations

import math

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import check_non_negative, check_round, check_seed, round_rng

__all__ = ["CRFL"]


def _clip(v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or not v > 0:
        raise ConfigError(f"model_clip (CRFL's ρ) must be a positive number (inf or absent: no clipping), got {v!r}")
    return None if v == math.inf else float(v)


class CRFL:
    r"""W ← W·min(1, ρ/‖W‖) + N(0, σ² I): CRFL's parameter clipping and perturbation, once per round.

    ``clip`` is ρ (None or inf: no clipping); ``noise`` is σ per coordinate, in the
    parameters' own units (the paper's σ_t; not relative to ρ). The noise of round
    T is drawn from the (``seed``, T) stream, so a run is reproducible and a
    resumed run draws what the uninterrupted one would have. With neither, the
    step returns its input unchanged (``identity``).

    >>> import numpy as np
    >>> W = CRFL(clip=1.0)(np.array([3.0, 4.0], np.float32), round=1)
    >>> W.astype(float).round(4).tolist(), bool(np.linalg.norm(W) <= 1.0)
    ([0.6, 0.8], True)
    """

    name = "crfl"

    def __init__(self, clip: float | None = None, noise: float = 0.0, seed: int | None = None) -> None:
        self.clip = _clip(clip)
        self.noise = check_non_negative(noise, "model_noise (CRFL's σ)")
        self.seed = check_seed(seed)

    @property
    def identity(self) -> bool:
        return self.clip is None and self.noise == 0

    def __call__(self, W: np.ndarray, round: int) -> np.ndarray:
        """The stepped model (float32) from W_g (a 1-D array) in round ``round``."""
        check_round(round)
        W = np.asarray(W)
        if W.ndim != 1 or W.size == 0:
            raise ConfigError(f"a model step needs a non-empty parameter vector, got shape {W.shape}")
        if self.identity:
            return W
        out = W.astype(np.float64)
        if self.clip is not None:
            norm = float(np.linalg.norm(out))
            if math.isfinite(norm) and norm > self.clip:  # a diverged model is a result: left as it is
                # Below ρ by a float32 rounding's margin: the stored model's norm must not exceed ρ.
                out *= self.clip / norm * (1 - 2.0 ** -20)
        if self.noise > 0:
            out += round_rng(self.seed, round, "model-step/" + self.name).normal(0.0, self.noise, size=out.size)
        return out.astype(np.float32)

    def __repr__(self) -> str:
        return f"CRFL(clip={self.clip!r}, noise={self.noise!r})"
