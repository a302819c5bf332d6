"""Local training and evaluation.

``local_train`` starts from the global model W_g and returns the local model
W_i = W_g − α·Σ G (several SGD or Adam steps), as docs/protocol.md §5 step 0 has the
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
from reshuffle.clients.stacked import StackedNet
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


#: The label :func:`predict` gives an input whose model output is not finite (never a class).
NO_LABEL = -1


@torch.no_grad()
def predict(model: nn.Module, W: np.ndarray, x: np.ndarray, batch: int = 2048) -> np.ndarray:
    """Predicted labels of ``x`` under parameters W; :data:`NO_LABEL` where the output is not finite.

    A diverged model (NaN/Inf parameters or logits) predicts nothing: its
    argmax would otherwise name an arbitrary class (torch's argmax picks a NaN's
    index), which would count as accurate for that class and as a backdoor hit
    when it is the target.
    """
    set_flat(model, W)
    model.eval()
    xt = torch.from_numpy(x)
    out = []
    for i in range(0, len(xt), batch):
        logits = model(xt[i : i + batch])
        labels = logits.argmax(1)
        labels[~torch.isfinite(logits).all(1)] = NO_LABEL
        out.append(labels)
    return torch.cat(out).numpy()


def batch_schedule(n: int, cfg: TrainConfig, seed: int) -> list[torch.Tensor]:
    """The mini-batches (index tensors into the client's data) ``local_train`` visits, in order."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=gen)
        out.extend(order[start : start + cfg.batch_size] for start in range(0, n, cfg.batch_size))
    return out


class BatchedTrainer:
    """Local SGD of many clients as one computation over stacked parameters.

    Client c starts from W_g and takes exactly the steps :func:`local_train` takes
    with ``seeds[c]`` (same batches in the same order, same SGD update), so the
    results agree with sequential training up to float rounding. Clients with
    fewer batches, and the short last batch, are padded with zero-weight samples;
    a padded step leaves the client's parameters and momentum untouched.

    Gradients come from :class:`~reshuffle.clients.stacked.StackedNet`, which
    knows our three models. Only plain SGD (with optional momentum) on those is
    batched: Adam and other models fall back to :func:`local_train` (see
    :meth:`supports`).

    Parameters
    ----------
    model : the architecture; its parameters are only read for names and shapes.
    x_pool, y_pool : one array holding every client's samples; clients index into it.
    cfg : the local training settings.
    """

    def __init__(self, model: nn.Module, x_pool: np.ndarray, y_pool: np.ndarray, cfg: TrainConfig) -> None:
        if not self.supports(model, cfg):
            raise ConfigError(f"batched training needs plain SGD on logreg, mlp or lenet5 (optimizer {cfg.optimizer!r}, "
                              f"model {type(model).__name__})")
        if len(x_pool) != len(y_pool):
            raise ConfigError(f"pool has {len(x_pool)} inputs but {len(y_pool)} labels")
        self.model, self.cfg = model, cfg
        self.x = torch.from_numpy(np.ascontiguousarray(x_pool))
        self.y = torch.from_numpy(np.ascontiguousarray(y_pool))
        self.names = [name for name, _ in model.named_parameters()]
        self.shapes = [p.shape for _, p in model.named_parameters()]
        self._grads = StackedNet(model).gradients

    @staticmethod
    def supports(model: nn.Module, cfg: TrainConfig) -> bool:
        """True when this trainer reproduces ``local_train`` for ``model`` and ``cfg``."""
        return cfg.optimizer == "sgd" and StackedNet.supports(model)

    @staticmethod
    def pays_off(model: nn.Module) -> bool:
        """True when batching is faster on CPU: models without convolutions.

        Dense layers become batched matrix products (MLP: 1.6–2.7× measured). The
        convolutions still run one client at a time (see :mod:`reshuffle.clients.stacked`),
        so LeNet-5 gains only the pooling and bookkeeping: 0.9–1.2× measured on this
        2-core machine, not enough to pick it by default. See ``reshuffle bench simulate``.
        """
        return not any(isinstance(mod, nn.modules.conv._ConvNd) for mod in model.modules())

    def _stack(self, W_g: np.ndarray, C: int) -> dict[str, torch.Tensor]:
        flat = torch.tensor(W_g, dtype=torch.float32)
        out, at = {}, 0
        for name, shape in zip(self.names, self.shapes):
            k = shape.numel()
            out[name] = flat[at : at + k].view(shape).expand(C, *shape).clone()
            at += k
        if at != flat.numel():
            raise ConfigError(f"flat model has {flat.numel()} values; this model needs {at}")
        return out

    def _schedule(self, client_idx: list[np.ndarray], seeds: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(S, C, B) pool indices and 0/1 weights for every step of every client."""
        B, C = self.cfg.batch_size, len(client_idx)
        plans = [batch_schedule(len(idx), self.cfg, s) for idx, s in zip(client_idx, seeds)]
        S = max(len(p) for p in plans)
        index = torch.zeros((S, C, B), dtype=torch.int64)
        weight = torch.zeros((S, C, B), dtype=torch.float32)
        for c, (idx, plan) in enumerate(zip(client_idx, plans)):
            pool_idx = torch.from_numpy(np.asarray(idx, dtype=np.int64))
            for s, batch in enumerate(plan):
                index[s, c, : len(batch)] = pool_idx[batch]
                weight[s, c, : len(batch)] = 1.0
        return index, weight

    def train(self, W_g: np.ndarray, client_idx: list[np.ndarray], seeds: list[int]) -> list[np.ndarray]:
        """Local models W_c (float32) of the clients whose samples are ``x_pool[client_idx[c]]``."""
        if len(client_idx) != len(seeds) or not client_idx:
            raise ConfigError(f"{len(client_idx)} clients but {len(seeds)} seeds")
        if any(len(idx) == 0 for idx in client_idx):
            raise ConfigError("every client needs at least one sample")
        C, lr, mom = len(client_idx), self.cfg.lr, self.cfg.momentum
        params = self._stack(W_g, C)
        bufs: dict[str, torch.Tensor] | None = None
        index, weight = self._schedule(client_idx, seeds)
        started = torch.zeros(C, dtype=torch.bool)
        for s in range(index.shape[0]):
            w = weight[s]
            active = w[:, 0] > 0
            grads = self._grads(params, self.x[index[s]], self.y[index[s]], w)
            with torch.no_grad():
                for name in self.names:
                    g = grads[name]
                    mask = active.view(C, *([1] * (g.dim() - 1)))
                    if mom:
                        if bufs is None:
                            bufs = {n: torch.zeros_like(p) for n, p in params.items()}
                        first = (~started).view_as(mask)
                        new_buf = torch.where(first, g, bufs[name] * mom + g)
                        bufs[name] = torch.where(mask, new_buf, bufs[name])
                        g = bufs[name]
                    params[name] = torch.where(mask, params[name] - lr * g, params[name])
            started |= active
        flat = torch.cat([params[n].reshape(C, -1) for n in self.names], dim=1)
        return list(flat.numpy().astype(np.float32))
