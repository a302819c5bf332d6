"""Attacks that use only the attackers' own data or updates."""

from __future__ import annotations

import numpy as np

from reshuffle.attacks.base import Attack, check_observed, register_attack
from reshuffle.errors import ConfigError


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and value > 0 and np.isfinite(value)):
        raise ConfigError(f"{name} must be a positive number, got {value!r}")
    return float(value)


@register_attack("none")
class NoAttack(Attack):
    """Malicious clients behave honestly (a control)."""

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        return check_observed(observed, m, self)


@register_attack("idle")
class Idle(Attack):
    """Upload the global model unchanged (a zero update) and train nothing.

    The reference for what an attack costs beyond the attackers' absence: with
    ``idle`` the honest clients get what they would if the attackers added
    nothing, so a class the attackers' own data carried loses its share here too.

    >>> import numpy as np
    >>> Idle()(np.ones((2, 3)), 2, None).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """

    uses_own_training = False

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        return np.zeros((m, np.asarray(observed).shape[1]))


@register_attack("label-flip")
class LabelFlip(NoAttack):
    """Train on flipped labels y → C − 1 − y, upload the resulting update (data poisoning).

    Its success metric is the fraction of test samples classified as the flipped label.
    """

    def poison_labels(self, y: np.ndarray, num_classes: int) -> np.ndarray:
        return (num_classes - 1 - y).astype(y.dtype)

    def success(self, predict, x_test: np.ndarray, y_test: np.ndarray, num_classes: int) -> float:
        return float(np.mean(predict(x_test) == num_classes - 1 - y_test))


@register_attack("sign-flip")
class SignFlip(Attack):
    r"""Upload :math:`-\lambda u` for one's own update u (λ = ``scale``, default 1).

    >>> import numpy as np
    >>> SignFlip()(np.array([[1.0, -2.0]]), 1, None).tolist()
    [[-1.0, 2.0]]
    """

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = _positive("sign-flip scale", scale)

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        return -self.scale * check_observed(observed, m, self)


@register_attack("gaussian")
class GaussianNoise(Attack):
    r"""Upload pure noise :math:`\mathcal N(0, \sigma^2 I)` instead of an update (σ = ``sigma``)."""

    uses_own_training = False

    def __init__(self, sigma: float = 1.0) -> None:
        self.sigma = _positive("gaussian sigma", sigma)

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        X = check_observed(observed, m, self)
        return rng.normal(0.0, self.sigma, size=X.shape)


@register_attack("scaling")
class Scaling(Attack):
    r"""Boost one's own honest update: upload :math:`\lambda u`, λ = ``factor``.

    The scaling step of model replacement without its backdoor; the full attack
    is ``model-replacement`` (:mod:`reshuffle.attacks.backdoor`).

    >>> import numpy as np
    >>> Scaling(factor=10)(np.array([[0.5, -1.0]]), 1, None).tolist()
    [[5.0, -10.0]]
    """

    def __init__(self, factor: float = 10.0) -> None:
        self.factor = _positive("scaling factor", factor)

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        return self.factor * check_observed(observed, m, self)
