"""Backdoor attacks: a pixel trigger makes the global model predict a target label.

Malicious clients poison part of their own local data (the trigger stamped on
the inputs, the label set to ``target``), train on it and upload the result.
Success (reported per round as ``attack_success``) is the share of triggered
test inputs whose true class is not the target that the global model assigns
to the target.

Triggers set pixels to the brightest value of the training inputs (white after
standardisation); positions are given for (C, H, W) images and scale down to
the 8×8 digits.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from reshuffle.attacks.base import Attack, check_observed, register_attack
from reshuffle.errors import ConfigError

Pixels = tuple[np.ndarray, np.ndarray]  # (rows, cols)


def _fraction(name: str, v: float) -> float:
    if not (isinstance(v, (int, float)) and 0 < v <= 1):
        raise ConfigError(f"{name} must be a fraction in (0, 1], got {v!r}")
    return float(v)


def square_trigger(h: int, w: int, size: int = 3) -> Pixels:
    """A ``size``×``size`` square one pixel in from the bottom-right corner (BadNets' pattern)."""
    size = min(size, h - 2, w - 2)
    rows, cols = np.meshgrid(np.arange(h - 1 - size, h - 1), np.arange(w - 1 - size, w - 1), indexing="ij")
    return rows.ravel(), cols.ravel()


def dba_parts(h: int, w: int, parts: int = 4) -> list[Pixels]:
    """DBA's global trigger: ``parts`` horizontal strips near the top-left, in two columns.

    Strip p lies on row 1 + 2·⌊p/2⌋, from column 1 + (L + 1)·(p mod 2), length
    L = min(4, (w − 3) // 2); the strips are disjoint and their union is the
    global trigger.
    """
    length = max(1, min(4, (w - 3) // 2))
    out = []
    for p in range(parts):
        row = 1 + 2 * (p // 2)
        if row >= h:
            raise ConfigError(f"{parts} DBA trigger parts do not fit a {h}×{w} image")
        col = 1 + (length + 1) * (p % 2)
        out.append((np.full(length, row), np.arange(col, col + length)))
    return out


class Backdoor(Attack):
    """Shared machinery: stamp a trigger on a share of the local data, measure success.

    ``target`` is the backdoor label and ``poison_fraction`` the share of each
    malicious client's samples that get the trigger (the rest stay clean, so
    the model keeps its main-task accuracy).
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5) -> None:
        if not isinstance(target, int) or isinstance(target, bool) or target < 0:
            raise ConfigError(f"backdoor target must be a non-negative int, got {target!r}")
        self.target = target
        self.poison_fraction = _fraction("poison_fraction", poison_fraction)
        self._value: float | None = None

    def prepare(self, n_clients: int, x_train: np.ndarray) -> None:
        self._value = float(np.max(x_train))

    def pixels(self, shape: tuple[int, ...], rank: int, m: int) -> Pixels:
        """Trigger pixels that attacker ``rank`` of ``m`` stamps on its data."""
        return self.global_pixels(shape)

    def global_pixels(self, shape: tuple[int, ...]) -> Pixels:
        """The full trigger, stamped on the test inputs."""
        raise NotImplementedError

    def stamp(self, x: np.ndarray, pixels: Pixels) -> np.ndarray:
        """A copy of the (n, C, H, W) inputs ``x`` with ``pixels`` set to white in every channel."""
        if self._value is None:
            raise ConfigError(f"{self.name}: call prepare() before poisoning (it learns the pixel range)")
        if x.ndim != 4:
            raise ConfigError(f"{self.name} needs (n, C, H, W) images, got shape {x.shape}")
        out = x.copy()
        out[:, :, pixels[0], pixels[1]] = self._value
        return out

    def poison_data(self, x, y, rank, m, num_classes, rng):
        if self.target >= num_classes:
            raise ConfigError(f"backdoor target {self.target} but the data has {num_classes} classes")
        k = int(round(self.poison_fraction * len(y)))
        chosen = rng.choice(len(y), size=k, replace=False)
        x_out, y_out = x.copy(), y.copy()
        x_out[chosen] = self.stamp(x[chosen], self.pixels(x.shape[1:], rank, m))
        y_out[chosen] = self.target
        return x_out, y_out

    def success(self, predict: Callable[[np.ndarray], np.ndarray], x_test, y_test, num_classes) -> float:
        keep = y_test != self.target
        triggered = self.stamp(x_test[keep], self.global_pixels(x_test.shape[1:]))
        return float(np.mean(predict(triggered) == self.target))

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        return check_observed(observed, m, self)


@register_attack("badnets")
class BadNets(Backdoor):
    """BadNets (Gu, Dolan-Gavitt and Garg, 2017): a white 3×3 square in the bottom-right corner.

    Every attacker stamps the same square on ``poison_fraction`` of its samples,
    relabels them ``target`` and uploads the update it trained.
    """

    def global_pixels(self, shape):
        return square_trigger(shape[-2], shape[-1])


@register_attack("dba")
class DBA(Backdoor):
    """Distributed backdoor attack (Xie, Huang, Chen and Li, ICLR 2020).

    The global trigger (:func:`dba_parts`, ``parts`` strips) is split among the
    attackers: attacker ``rank`` stamps only strip ``rank mod parts``. No
    attacker ever trains on the full trigger; success is measured with it.
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, parts: int = 4) -> None:
        super().__init__(target, poison_fraction)
        if not isinstance(parts, int) or isinstance(parts, bool) or parts < 2:
            raise ConfigError(f"dba parts must be an int >= 2, got {parts!r}")
        self.parts = parts

    def pixels(self, shape, rank, m):
        return dba_parts(shape[-2], shape[-1], self.parts)[rank % self.parts]

    def global_pixels(self, shape):
        strips = dba_parts(shape[-2], shape[-1], self.parts)
        return np.concatenate([r for r, _ in strips]), np.concatenate([c for _, c in strips])


@register_attack("model-replacement")
class ModelReplacement(BadNets):
    r"""Model replacement (Bagdasaryan, Veit, Hua, Estrin and Shmatikov, AISTATS 2020).

    Each attacker trains on BadNets-poisoned data (model X) and uploads
    :math:`W_g + \gamma (X - W_g)` with :math:`\gamma = n / \eta`: n the number of
    clients, η the server learning rate (1 here: W_g ← W_g + mean of the
    updates), so one attacker's scaled update alone moves the mean to X. With m
    attackers every one scales by n/η, as in the paper's single-attacker form.
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, eta: float = 1.0) -> None:
        super().__init__(target, poison_fraction)
        if not (isinstance(eta, (int, float)) and eta > 0 and np.isfinite(eta)):
            raise ConfigError(f"model-replacement eta must be positive, got {eta!r}")
        self.eta = float(eta)
        self._n: int | None = None

    def prepare(self, n_clients: int, x_train: np.ndarray) -> None:
        super().prepare(n_clients, x_train)
        self._n = n_clients

    @property
    def gamma(self) -> float:
        if self._n is None:
            raise ConfigError("model-replacement: call prepare() first (it learns the number of clients n)")
        return self._n / self.eta

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        return self.gamma * check_observed(observed, m, self)
