"""Forward and backward passes of many clients' models at once, over stacked parameters.

Every parameter carries a leading client axis C. Linear layers are batched matrix
products over the clients; pooling, ReLU and the loss run once over every
client's batch; a convolution runs one oneDNN call per client in channels-last
memory, activations being laid out (C, B, H, W, channels). The backward pass is
written out by hand: no autograd graph, each activation saved once.

What was measured for LeNet-5 (20 clients, batches of 64, one thread): ``vmap``
turns a convolution over stacked weights into a grouped convolution, 4.6x slower
than per-client calls on the first layer; im2col with ``torch.bmm`` over the
clients spent more time copying patches than multiplying. What batching still
saves is ``F.max_pool2d``'s slow NCHW kernel (38 % of a sequential step), the
optimizer and autograd bookkeeping.

Each layer has the same function and gradient as the ``torch.nn`` layer it
mirrors (max-pooling routes the gradient to the first maximum of its window, as
``F.max_pool2d`` does; ReLU after pooling equals ReLU before it, gradient
included), so results differ from :func:`~reshuffle.clients.train.local_train`
only by float summation order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from reshuffle.errors import ConfigError

Grads = dict[str, torch.Tensor]


def _nchw(h: torch.Tensor) -> torch.Tensor:
    """(B, H, W, ch) memory as the channels-last (B, ch, H, W) tensor that oneDNN takes."""
    return h.permute(0, 3, 1, 2)


def _nhwc(h: torch.Tensor) -> torch.Tensor:
    """A (B, ch, H, W) result as (B, H, W, ch) memory (a view when it is channels-last already)."""
    return h.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1)


@dataclass(frozen=True)
class Conv:
    """A stride-1 convolution; activations (C, B, H, W, in) -> (C, B, H', W', out).

    One oneDNN convolution per client, in channels-last memory (see the module
    docstring for the alternatives measured).
    """

    name: str
    padding: int

    def forward(self, p: Grads, h: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        w, b = p[f"{self.name}.weight"], p[f"{self.name}.bias"]
        out = None
        for c in range(len(w)):
            y = F.conv2d(_nchw(h[c]), w[c], b[c], padding=self.padding).permute(0, 2, 3, 1)
            if out is None:
                out = torch.empty((len(w), *y.shape), dtype=y.dtype)
            out[c] = y  # one copy, whichever layout oneDNN chose for y
        return out, (h,)

    def backward(self, p: Grads, saved: tuple, g: torch.Tensor, grads: Grads, need_input: bool) -> torch.Tensor | None:
        (h,) = saved
        w = p[f"{self.name}.weight"]
        q = self.padding
        dh = torch.empty_like(h) if need_input else None
        dws, dbs = [], []
        for c in range(len(w)):
            dhc, dw, db = torch.ops.aten.convolution_backward(
                _nchw(g[c]), _nchw(h[c]), w[c], [w.shape[1]], [1, 1], [q, q], [1, 1], False, [0, 0], 1,
                [need_input, True, True])
            dws.append(dw)
            dbs.append(db)
            if need_input:
                dh[c] = dhc.permute(0, 2, 3, 1)
        grads[f"{self.name}.weight"] = torch.stack(dws)
        grads[f"{self.name}.bias"] = torch.stack(dbs)
        return dh


@dataclass(frozen=True)
class PoolReLU:
    """``relu(max_pool2d(h, 2))`` on activations (C, B, H, W, ch); equal to pooling after the ReLU, and cheaper."""

    def forward(self, p: Grads, h: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        C, B, H, W, ch = h.shape
        if H % 2 or W % 2:
            raise ConfigError(f"2×2 pooling needs even sides, got {H}×{W}")
        x = _nchw(h.view(C * B, H, W, ch))
        m, idx = F.max_pool2d(x, 2, return_indices=True)
        out = _nhwc(m).clamp_min_(0).view(C, B, H // 2, W // 2, ch)
        return out, (idx, out, x)

    def backward(self, p: Grads, saved: tuple, g: torch.Tensor, grads: Grads, need_input: bool) -> torch.Tensor:
        idx, out, x = saved
        g = torch.ops.aten.threshold_backward(g, out, 0)  # F.relu's own backward
        C, B, Hh, Wh, ch = g.shape
        dx = torch.ops.aten.max_pool2d_with_indices_backward(
            _nchw(g.view(C * B, Hh, Wh, ch)), x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx)
        return _nhwc(dx).view(C, B, 2 * Hh, 2 * Wh, ch)


@dataclass(frozen=True)
class ReLU:
    """Elementwise max(h, 0)."""

    def forward(self, p: Grads, h: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        out = h.clamp_min(0)
        return out, (out,)

    def backward(self, p: Grads, saved: tuple, g: torch.Tensor, grads: Grads, need_input: bool) -> torch.Tensor:
        return torch.ops.aten.threshold_backward(g, saved[0], 0)  # F.relu's own backward


@dataclass(frozen=True)
class Flatten:
    """(C, B, H, W, ch) conv layout, or input (C, B, ...), to (C, B, features) in ``torch.flatten`` order."""

    conv_layout: bool

    def forward(self, p: Grads, h: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        C, B = h.shape[:2]
        if self.conv_layout:
            return h.permute(0, 1, 4, 2, 3).reshape(C, B, -1), (h.shape,)
        return h.reshape(C, B, -1), (h.shape,)

    def backward(self, p: Grads, saved: tuple, g: torch.Tensor, grads: Grads, need_input: bool) -> torch.Tensor:
        (shape,) = saved
        if self.conv_layout:
            C, B, H, W, ch = shape
            return g.reshape(C, B, ch, H, W).permute(0, 1, 3, 4, 2).contiguous()
        return g.view(shape)


@dataclass(frozen=True)
class Linear:
    """(C, B, in) -> (C, B, out) with each client's own weight (C, out, in)."""

    name: str

    def forward(self, p: Grads, h: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        w, b = p[f"{self.name}.weight"], p[f"{self.name}.bias"]
        return torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2)), (h,)

    def backward(self, p: Grads, saved: tuple, g: torch.Tensor, grads: Grads, need_input: bool) -> torch.Tensor | None:
        (h,) = saved
        w = p[f"{self.name}.weight"]
        grads[f"{self.name}.weight"] = torch.bmm(g.transpose(1, 2), h)
        grads[f"{self.name}.bias"] = g.sum(1)
        return torch.bmm(g, w) if need_input else None


class StackedNet:
    """One of our models as a list of stacked layers, with the loss gradient of every client at once.

    Parameters
    ----------
    model : a :class:`~reshuffle.clients.models.LeNet5`, ``MLP`` or ``LogReg``
        (see :meth:`supports`); only its structure is read.
    """

    def __init__(self, model: nn.Module) -> None:
        layers = self._layers(model)
        if layers is None:
            raise ConfigError(f"no stacked form for {type(model).__name__}")
        self.layers: list = layers
        self.resize = bool(getattr(model, "resize", False))
        self.conv_input = isinstance(layers[0], Conv)
        # A layer passes a gradient back only when some layer before it has parameters.
        self.pass_back = [any(isinstance(m, (Conv, Linear)) for m in layers[:i]) for i in range(len(layers))]

    @classmethod
    def supports(cls, model: nn.Module) -> bool:
        """True for the models this module has a stacked form of."""
        return cls._layers(model) is not None

    @staticmethod
    def _layers(model: nn.Module) -> list | None:
        from reshuffle.clients.models import MLP, LeNet5, LogReg

        if type(model) is LeNet5:
            return [Conv("conv1", model.conv1.padding[0]), PoolReLU(), Conv("conv2", model.conv2.padding[0]), PoolReLU(),
                    Flatten(conv_layout=True), Linear("fc1"), ReLU(), Linear("fc2"), ReLU(), Linear("fc3")]
        if type(model) is LogReg:
            return [Flatten(conv_layout=False), Linear("fc")]
        if type(model) is MLP:
            kinds = {nn.Flatten: lambda n: Flatten(conv_layout=False), nn.ReLU: lambda n: ReLU(), nn.Linear: Linear}
            if not all(type(m) in kinds for m in model.net):
                return None
            return [kinds[type(m)](f"net.{i}") for i, m in enumerate(model.net)]
        return None

    def gradients(self, p: Grads, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> Grads:
        """Each client's gradient of its mean cross-entropy over the samples of weight 1.

        ``x`` is (C, B, *input), ``y`` (C, B) labels, ``w`` (C, B) 0/1 weights; a client
        whose weights are all 0 gets an exactly zero gradient.
        """
        C, B = y.shape
        if self.resize:
            x = F.interpolate(x.reshape(C * B, *x.shape[2:]), size=(28, 28), mode="bilinear", align_corners=False)
            x = x.view(C, B, *x.shape[1:])
        h = x.permute(0, 1, 3, 4, 2).contiguous() if self.conv_input else x  # (C, B, H, W, channels)
        saved = []
        for layer in self.layers:
            h, s = layer.forward(p, h)
            saved.append(s)
        # d(mean CE)/d logits = (softmax − one-hot) · w / n, n the client's real batch size
        g = torch.softmax(h, dim=-1)
        g.scatter_add_(-1, y.unsqueeze(-1), torch.full((C, B, 1), -1.0, dtype=g.dtype, device=g.device))
        g *= (w / w.sum(1, keepdim=True).clamp_min(1.0)).unsqueeze(-1)
        grads: Grads = {}
        for i in range(len(self.layers) - 1, -1, -1):
            g = self.layers[i].backward(p, saved[i], g, grads, need_input=self.pass_back[i])
            if g is None:
                break
        return grads
