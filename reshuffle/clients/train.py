"""Local training and evaluation.

``local_train`` starts from the global model W_g and returns the local model
W_i = W_g − α·Σ G (several SGD or Adam steps), as PROTOCOL.md §5 step 0 has the
participant upload. The PS, which knows W_g, forms the update U_i = W_i − W_g
itself before running a detection rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from reshuffle.clients.models import get_flat, set_flat
from reshuffle.errors import ConfigError

from reshuffle.clients import OPTIMIZERS


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.05
    optimizer: str = "sgd"
    momentum: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise ConfigError(f"local epochs must be a positive int, got {self.epochs!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"batch size must be a positive int, got {self.batch_size!r}")
        if not (self.lr > 0 and np.isfinite(self.lr)):
            raise ConfigError(f"learning rate must be positive, got {self.lr!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")


def local_train(
    model: nn.Module, W_g: np.ndarray, x: np.ndarray, y: np.ndarray, cfg: TrainConfig, seed: int
) -> np.ndarray:
    """Train ``model`` from W_g on (x, y); return the local model W_i as float32.

    ``seed`` fixes the batch order, so a client's result depends only on W_g and
    its data: the same run with any shuffle mode trains identically.
    """
    set_flat(model, W_g)
    model.train()
    if cfg.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(cfg.epochs):
        order = torch.randperm(len(yt), generator=gen)
        for start in range(0, len(yt), cfg.batch_size):
            idx = order[start : start + cfg.batch_size]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    return get_flat(model)


@torch.no_grad()
def predict(model: nn.Module, W: np.ndarray, x: np.ndarray, batch: int = 2048) -> np.ndarray:
    """Predicted labels of ``x`` under parameters W."""
    set_flat(model, W)
    model.eval()
    xt = torch.from_numpy(x)
    return torch.cat([model(xt[i : i + batch]).argmax(1) for i in range(0, len(xt), batch)]).numpy()
