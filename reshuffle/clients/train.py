"""Local training and evaluation, on the model's device.

``local_train`` starts from the global model W_g and returns the local model
W_i = W_g − α·Σ G (several SGD or Adam steps), as docs/protocol.md §5 step 0 has the
participant upload. The PS, which knows W_g, forms the update U_i = W_i − W_g
itself before running a detection rule. The flat vectors are float32 numpy
arrays on the CPU; training runs wherever the model is (``model.to(device)``).

What a client keeps for itself between rounds (integer buffers such as
BatchNorm's ``num_batches_tracked``; BatchNorm's weights and statistics under
FedBN's local BatchNorm) travels in a ``local`` dict (:meth:`FlatLayout.get_local`),
which training reads and updates in place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from reshuffle.clients.models import FlatLayout
from reshuffle.errors import ConfigError

OPTIMIZERS = ("sgd", "adam")


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


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (the CPU for a model with neither)."""
    for t in model.state_dict(keep_vars=True).values():
        return t.device
    return torch.device("cpu")


def local_train(model: nn.Module, W_g: np.ndarray, x: np.ndarray, y: np.ndarray, cfg: TrainConfig, seed: int, *,
                layout: FlatLayout | None = None, local: dict[str, torch.Tensor] | None = None) -> np.ndarray:
    """Train ``model`` from W_g on (x, y); return the local model W_i as float32.

    ``seed`` fixes the batch order, so a client's result depends only on W_g, its
    own ``local`` state and its data: the same run with any shuffle mode trains
    identically. ``local`` (the client's own entries) is loaded first and updated in place.
    """
    layout = layout or FlatLayout.of(model)
    layout.set(model, W_g)
    if local is not None:
        layout.set_local(model, local)
    model.train()
    if cfg.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    device = model_device(model)
    xt, yt = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    for idx in batch_schedule(len(yt), cfg, seed):
        idx = idx.to(device)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(xt[idx]), yt[idx]).backward()
        opt.step()
    if local is not None:
        local.update(layout.get_local(model))
    return layout.get(model)


#: The label :func:`predict` gives an input whose model output is not finite (never a class).
NO_LABEL = -1


@torch.no_grad()
def predict(model: nn.Module, W: np.ndarray, x: np.ndarray, batch: int = 2048, *, layout: FlatLayout | None = None,
            local: dict[str, torch.Tensor] | None = None) -> np.ndarray:
    """Predicted labels of ``x`` under the flat model W (and a client's ``local`` entries); :data:`NO_LABEL` where the output is not finite.

    A diverged model (NaN/Inf parameters or logits) predicts nothing: its
    argmax would otherwise name an arbitrary class (torch's argmax picks a NaN's
    index), which would count as accurate for that class and as a backdoor hit
    when it is the target.
    """
    layout = layout or FlatLayout.of(model)
    layout.set(model, W)
    if local is not None:
        layout.set_local(model, local)
    model.eval()
    device = model_device(model)
    xt = torch.from_numpy(x)
    out = []
    for i in range(0, len(xt), batch):
        logits = model(xt[i : i + batch].to(device))
        labels = logits.argmax(1)
        labels[~torch.isfinite(logits).all(1)] = NO_LABEL
        out.append(labels.cpu())
    return torch.cat(out).numpy() if out else np.zeros(0, np.int64)


def batch_schedule(n: int, cfg: TrainConfig, seed: int) -> list[torch.Tensor]:
    """The mini-batches (index tensors into the client's data) ``local_train`` visits, in order."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=gen)
        out.extend(order[start : start + cfg.batch_size] for start in range(0, n, cfg.batch_size))
    return out
