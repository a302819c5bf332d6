"""The colluders' own copy of the model: score a candidate aggregate on their data, train from W_g as they like.

A real attacker holds the global model W_g (every participant receives it)
and its own local data, so before it uploads it can compute anything a
participant can: the accuracy, loss and backdoor success of W_g + a candidate
aggregate on its own data, and updates trained from W_g with hyper-parameters
of its choosing (a clean reference update, more epochs, another learning
rate). :class:`Lab` is that capability, handed to rule-aware attacks in
:class:`~reshuffle.attacks.base.RoundView`. It holds only the colluders' own
(clean) data; nothing of the honest clients.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from reshuffle.errors import ConfigError


@dataclass(frozen=True)
class Score:
    """How the model W_g + update does on a set of inputs: accuracy, mean cross-entropy, samples."""

    accuracy: float
    loss: float
    samples: int


@dataclass(frozen=True)
class Lab:
    """The attackers' model copy and own data; every method starts from ``global_model`` (W_g).

    ``model`` is the federation's architecture (its parameters are overwritten
    on every call), ``x``/``y`` the colluders' own clean local data pooled,
    ``owner`` the attacker rank (0..m−1) of each sample, ``config`` the
    federation's local training settings (a ``TrainConfig``, the defaults of
    :meth:`train`), ``layout`` how the flat vector maps onto the model's
    entries (a ``FlatLayout``; None: every parameter, in order).
    """

    model: Any
    global_model: np.ndarray
    x: np.ndarray
    y: np.ndarray
    owner: np.ndarray
    num_classes: int
    config: Any
    layout: Any = None

    @property
    def attackers(self) -> int:
        return int(self.owner.max()) + 1 if self.owner.size else 0

    def data(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """Attacker ``rank``'s own clean data (x, y)."""
        if not 0 <= rank < self.attackers:
            raise ConfigError(f"attacker rank must lie in [0, {self.attackers}), got {rank!r}")
        keep = self.owner == rank
        return self.x[keep], self.y[keep]

    def _params(self, update: np.ndarray) -> np.ndarray:
        u = np.asarray(update, dtype=np.float64)
        if u.shape != self.global_model.shape:
            raise ConfigError(f"a candidate update must have shape {self.global_model.shape}, got {u.shape}")
        if not np.isfinite(u).all():
            raise ConfigError("a candidate update must be finite")
        return (self.global_model.astype(np.float64) + u).astype(np.float32)

    def logits(self, update: np.ndarray, x: np.ndarray, batch: int = 4096) -> np.ndarray:
        """(n, classes) float64 outputs of W_g + ``update`` on inputs ``x``."""
        import torch

        from reshuffle.clients import FlatLayout

        (self.layout or FlatLayout.of(self.model)).set(self.model, self._params(update))
        self.model.eval()
        out = []
        with torch.no_grad():
            xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
            for i in range(0, len(xt), batch):
                out.append(self.model(xt[i: i + batch]).double().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.num_classes))

    def score(self, update: np.ndarray, x: np.ndarray | None = None, y: np.ndarray | None = None) -> Score:
        """Accuracy and mean cross-entropy of W_g + ``update`` on (x, y), by default the attackers' own data."""
        x = self.x if x is None else x
        y = self.y if y is None else np.asarray(y)
        if len(x) != len(y) or len(y) == 0:
            raise ConfigError(f"score needs as many labels as inputs (at least one), got {len(x)} and {len(y)}")
        z = self.logits(update, x)
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = float(-logp[np.arange(len(y)), y].mean())
        return Score(float(np.mean(z.argmax(axis=1) == y)), loss if np.isfinite(loss) else float("inf"), len(y))

    def train(self, x: np.ndarray | None = None, y: np.ndarray | None = None, *, epochs: int | None = None,
              lr: float | None = None, batch_size: int | None = None, seed: int = 0) -> np.ndarray:
        """The update (float64) of SGD from W_g on (x, y), by default the attackers' own clean data.

        Hyper-parameters default to the federation's; ``seed`` fixes the batch order.
        """
        from reshuffle.clients import local_train

        x = self.x if x is None else x
        y = self.y if y is None else y
        if len(x) != len(y) or len(y) == 0:
            raise ConfigError(f"train needs as many labels as inputs (at least one), got {len(x)} and {len(y)}")
        over = {k: v for k, v in (("epochs", epochs), ("lr", lr), ("batch_size", batch_size)) if v is not None}
        cfg = replace(self.config, **over)  # TrainConfig validates the attacker's choices
        W = local_train(self.model, self.global_model, np.ascontiguousarray(x, dtype=np.float32),
                        np.asarray(y, dtype=np.int64), cfg, seed, layout=self.layout)
        return W.astype(np.float64) - self.global_model.astype(np.float64)
