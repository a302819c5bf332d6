"""Local SGD of many clients as one computation, for any model, through ``torch.func``.

Every state entry carries a leading client axis C; ``vmap(grad(loss))`` over
``functional_call`` gives each client's gradient in one call, and the SGD step
(with momentum) is one tensor operation per entry. Client c takes exactly the
steps :func:`~reshuffle.clients.train.local_train` takes with ``seeds[c]``
(same batches in the same order, same update), so the results agree with
sequential training up to float rounding.

Clients with fewer batches, and short last batches, are padded with
zero-weight samples, which add nothing to a gradient; a padded step leaves a
client's parameters, momentum and buffers untouched. A layer whose output
mixes the samples of a batch (BatchNorm in training mode) would see the
padding, so such models are batched only among clients whose batches have the
same sizes at every step (no padding at all); the others train one at a time.
Models with dropout draw their masks from torch's generator, which no batched
form reproduces: they train one at a time, as does Adam.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from reshuffle.clients.models import FlatLayout
from reshuffle.clients.train import TrainConfig, batch_schedule, local_train, model_device
from reshuffle.errors import ConfigError


def _mixes_samples(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _random(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules())


class BatchedTrainer:
    """Local SGD of many clients at once; see the module docstring.

    Parameters
    ----------
    model : the architecture, on its device; its state is only read for names and shapes.
    x_pool, y_pool : one array holding every client's samples; clients index into it.
    cfg : the local training settings (plain SGD, optionally with momentum).
    layout : which entries the flat vector carries (default: every floating-point one).
    engine : ``func`` (``torch.func``, any model), ``stacked`` (the hand-written
        forward and backward of :mod:`reshuffle.clients.stacked`, for logreg, mlp
        and lenet5 only) or ``auto``: ``stacked`` where it applies, being the
        faster of the two there (``reshuffle bench models`` measures both), else ``func``.
    """

    ENGINES = ("auto", "func", "stacked")

    def __init__(self, model: nn.Module, x_pool: np.ndarray, y_pool: np.ndarray, cfg: TrainConfig,
                 layout: FlatLayout | None = None, engine: str = "auto") -> None:
        from reshuffle.clients.stacked import StackedNet

        if engine not in self.ENGINES:
            raise ConfigError(f"unknown batched engine {engine!r}; choose one of {', '.join(self.ENGINES)}")
        if engine == "auto":
            engine = "stacked" if StackedNet.supports(model) else "func"
        if engine == "stacked":
            if not StackedNet.supports(model):
                raise ConfigError(f"the stacked engine knows logreg, mlp and lenet5, not {type(model).__name__}")
        if not self.supports(model, cfg):
            raise ConfigError(f"batched training needs plain SGD on a model without dropout (optimizer "
                              f"{cfg.optimizer!r}, model {type(model).__name__})")
        if len(x_pool) != len(y_pool):
            raise ConfigError(f"pool has {len(x_pool)} inputs but {len(y_pool)} labels")
        self.model, self.cfg = model, cfg
        self.layout = layout or FlatLayout.of(model)
        self.device = model_device(model)
        self.x_pool, self.y_pool = np.ascontiguousarray(x_pool), np.ascontiguousarray(y_pool)
        self.x = torch.from_numpy(self.x_pool).to(self.device)
        self.y = torch.from_numpy(self.y_pool).to(self.device)
        self.params = [n for n, _ in model.named_parameters()]
        self.buffers = [n for n, _ in model.named_buffers()]
        self.pad_free = _mixes_samples(model)
        self.engine = engine
        if engine == "func":
            self._grad = vmap(grad(self._loss, has_aux=True), in_dims=(0, 0, 0, 0, 0))
        else:
            stacked = StackedNet(model)
            self._grad = lambda params, buffers, x, y, w: (stacked.gradients(params, x, y, w), buffers)

    @staticmethod
    def supports(model: nn.Module, cfg: TrainConfig) -> bool:
        """True when this trainer reproduces ``local_train`` for ``model`` and ``cfg``."""
        return cfg.optimizer == "sgd" and not _random(model)

    @staticmethod
    def pays_off(model: nn.Module, device: torch.device | str = "cpu") -> bool:
        """True where batching is expected to beat one client at a time (``reshuffle bench models`` measures it).

        On a GPU, always: one kernel over every client's batch replaces C small
        ones. On the CPU only for models without convolutions, whose dense
        layers become batched matrix products: ``vmap`` turns a convolution over
        per-client weights into a grouped convolution, and ``torch.func`` lost to
        the per-client loop on every convolutional model (0.41–0.85×,
        docs/results.md); the hand-written LeNet-5 path measured 0.92–1.36×
        against the loop over several runs on the shared machine, not enough to
        pick it by default.
        """
        if torch.device(device).type != "cpu":
            return True
        return not any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())

    def _loss(self, params, buffers, x, y, w):
        out = functional_call(self.model, (params, buffers), (x,))
        loss = (F.cross_entropy(out, y, reduction="none") * w).sum() / w.sum().clamp_min(1.0)
        return loss, buffers  # buffers as updated in place by the forward pass (BatchNorm's statistics)

    def _start(self, W_g: np.ndarray, locals_: list[dict[str, torch.Tensor]] | None, C: int) -> dict[str, torch.Tensor]:
        """Every state entry stacked over the C clients: W_g's carried ones, each client's local ones."""
        shared = {}
        self.layout.set(self.model, W_g)
        state = self.model.state_dict()
        for name, t in state.items():
            if name in self.layout.local and locals_ is not None:
                shared[name] = torch.stack([loc[name].to(self.device) for loc in locals_])
            else:
                shared[name] = t.detach().expand(C, *t.shape).clone()
        return shared

    def _schedule(self, client_idx: list[np.ndarray], seeds: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(S, C, B) pool indices and 0/1 weights for every step of every client."""
        C = len(client_idx)
        plans = [batch_schedule(len(idx), self.cfg, s) for idx, s in zip(client_idx, seeds)]
        S = max(len(p) for p in plans)
        width = max(len(b) for p in plans for b in p)  # the batch size, or every client's size if smaller
        index = torch.zeros((S, C, width), dtype=torch.int64)
        weight = torch.zeros((S, C, width), dtype=torch.float32)
        for c, (idx, plan) in enumerate(zip(client_idx, plans)):
            pool_idx = torch.from_numpy(np.asarray(idx, dtype=np.int64))
            for s, batch in enumerate(plan):
                index[s, c, : len(batch)] = pool_idx[batch]
                weight[s, c, : len(batch)] = 1.0
        return index.to(self.device), weight.to(self.device)

    def _groups(self, client_idx: list[np.ndarray]) -> list[list[int]]:
        """Clients batched together: all, or (models that mix samples) those with the same batch sizes."""
        if not self.pad_free:
            return [list(range(len(client_idx)))]
        by_sizes: dict[int, list[int]] = {}
        for c, idx in enumerate(client_idx):
            # Clients with as many samples take batches of the same sizes at every step.
            by_sizes.setdefault(len(idx), []).append(c)
        return list(by_sizes.values())

    def train(self, W_g: np.ndarray, client_idx: list[np.ndarray], seeds: list[int],
              locals_: list[dict[str, torch.Tensor]] | None = None) -> list[np.ndarray]:
        """Local models W_c (float32) of the clients whose samples are ``x_pool[client_idx[c]]``.

        ``locals_[c]``, client c's own entries, is read and updated in place, as
        :func:`~reshuffle.clients.train.local_train` does.
        """
        if len(client_idx) != len(seeds) or not client_idx:
            raise ConfigError(f"{len(client_idx)} clients but {len(seeds)} seeds")
        if any(len(idx) == 0 for idx in client_idx):
            raise ConfigError("every client needs at least one sample")
        if locals_ is not None and len(locals_) != len(client_idx):
            raise ConfigError(f"{len(client_idx)} clients but {len(locals_)} local states")
        out: list[np.ndarray | None] = [None] * len(client_idx)
        for group in self._groups(client_idx):
            group_locals = None if locals_ is None else [locals_[c] for c in group]
            if len(group) == 1:
                c = group[0]
                idx = client_idx[c]
                out[c] = local_train(self.model, W_g, self.x_pool[idx], self.y_pool[idx], self.cfg, seeds[c],
                                     layout=self.layout, local=None if locals_ is None else locals_[c])
                continue
            for c, W in zip(group, self._train_group(W_g, [client_idx[c] for c in group], [seeds[c] for c in group],
                                                     group_locals)):
                out[c] = W
        return out  # type: ignore[return-value]

    def _train_group(self, W_g: np.ndarray, client_idx: list[np.ndarray], seeds: list[int],
                     locals_: list[dict[str, torch.Tensor]] | None) -> list[np.ndarray]:
        C, lr, mom = len(client_idx), self.cfg.lr, self.cfg.momentum
        state = self._start(W_g, locals_, C)
        bufs: dict[str, torch.Tensor] | None = None
        index, weight = self._schedule(client_idx, seeds)
        started = torch.zeros(C, dtype=torch.bool, device=self.device)
        self.model.train()
        for s in range(index.shape[0]):
            w, at = weight[s], index[s]
            if self.pad_free:
                # Every client of the group has this step's batch size: drop the padding of a short last batch.
                width = int(w[0].sum())
                w, at = w[:, :width], at[:, :width]
            active = w[:, 0] > 0
            params = {n: state[n] for n in self.params}
            buffers = {n: state[n].clone() for n in self.buffers}
            grads, new_buffers = self._grad(params, buffers, self.x[at], self.y[at], w)
            everyone = bool(active.all())
            with torch.no_grad():
                for name in self.buffers:
                    mask = active.view(C, *([1] * (state[name].dim() - 1)))
                    state[name] = new_buffers[name] if everyone else torch.where(mask, new_buffers[name], state[name])
                for name in self.params:
                    g = grads[name]
                    mask = active.view(C, *([1] * (g.dim() - 1)))
                    if mom:
                        if bufs is None:
                            bufs = {n: torch.zeros_like(state[n]) for n in self.params}
                        first = (~started).view_as(mask)
                        new_buf = torch.where(first, g, bufs[name] * mom + g)
                        bufs[name] = new_buf if everyone else torch.where(mask, new_buf, bufs[name])
                        g = bufs[name]
                    if everyone:
                        state[name].sub_(g, alpha=lr)  # a padded client's gradient is exactly zero, but not its momentum
                    else:
                        state[name] = torch.where(mask, state[name] - lr * g, state[name])
            started |= active
        carried = torch.cat([state[n].reshape(C, -1).to(torch.float32) for n in self.layout.names], dim=1)
        if locals_ is not None:
            for c, loc in enumerate(locals_):
                loc.update({n: state[n][c].clone() for n in self.layout.local})
        return list(carried.cpu().numpy().astype(np.float32))
