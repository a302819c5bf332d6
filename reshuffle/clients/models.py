"""The models clients train, by name, and the flat float32 vector the protocol carries.

A model is any ``torch.nn.Module``. ``@register_model("name")``
(:mod:`reshuffle.clients.catalog`) makes a builder ``(input_shape, num_classes) ->
nn.Module`` selectable as ``--model name`` (from a ``--plugin`` module too). Built in: ``logreg``, ``mlp``, ``lenet5`` (for
28×28 input), ``cnn`` (McMahan et al.'s FedAvg CNN, any input size) and
``resnet18`` (ResNet-18 in its CIFAR form).

The flat vector (:class:`FlatLayout`) holds every floating-point entry of the
model's ``state_dict``, in its order: the parameters *and* floating buffers such
as BatchNorm's running mean and variance, so a rule aggregates BatchNorm
statistics as it aggregates weights (FedAvg averages them). Integer buffers
(BatchNorm's ``num_batches_tracked``) are not carried: each client keeps its
own. With ``local_bn`` (FedBN, Li et al. 2021) every entry of the BatchNorm
layers stays with its client instead. For the three models without buffers the
vector is exactly the parameter vector: LeNet-5 on 28×28 input has δ = 61,706.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from reshuffle.errors import ConfigError
from reshuffle.clients.catalog import MODELS


class LogReg(nn.Module):
    """Multinomial logistic regression: one linear layer on the flattened image."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(int(np.prod(input_shape)), num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


class MLP(nn.Module):
    """Two hidden layers of ``hidden`` ReLU units."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 200) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(int(np.prod(input_shape)), hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _image_shape(name: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(input_shape) != 3 or min(input_shape) < 1:
        raise ConfigError(f"{name} needs (channels, H, W) input, got {input_shape}")
    return tuple(int(v) for v in input_shape)  # type: ignore[return-value]


class LeNet5(nn.Module):
    """LeCun et al. (1998) with padding 2 on the first convolution, for 28×28 input.

    Other sizes (the 8×8 digits) are resized to 28×28 bilinearly first, which
    adds no parameters, so δ = 61,706 for every one-channel dataset.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = _image_shape("lenet5", input_shape)
        self.resize = (h, w) != (28, 28)
        self.conv1 = nn.Conv2d(c, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.resize:
            x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class CNN(nn.Module):
    """The CNN of McMahan et al. (2017), "Communication-efficient learning of deep networks from decentralized data".

    Two 5×5 convolutions (32 and 64 channels, padding 2), each followed by ReLU
    and 2×2 max-pooling, a fully connected layer of 512 ReLU units and the
    output layer: 1,663,370 parameters on 28×28×1 input with 10 classes (the
    paper's figure), 2,156,490 on 32×32×3 (CIFAR-10). Any input of at least 4×4 works.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, h, w = _image_shape("cnn", input_shape)
        if h < 4 or w < 4:
            raise ConfigError(f"cnn pools twice by 2: input {input_shape} is smaller than 4×4")
        self.conv1 = nn.Conv2d(c, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * (h // 4) * (w // 4), 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


# --- ResNet-18 -----------------------------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """torchvision's ``BasicBlock``: two 3×3 convolutions with BatchNorm and the shortcut (same names)."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x if self.downsample is None else self.downsample(x)
        return self.relu(out)


class ResNet18(nn.Module):
    """ResNet-18 (He et al. 2016) in the CIFAR form, module for module as torchvision's ``resnet18``.

    The CIFAR form replaces the ImageNet stem (7×7 stride-2 convolution and
    max-pooling) by a 3×3 stride-1 convolution and no pooling; the rest is
    torchvision's ``resnet18``: four stages of two basic blocks (64, 128, 256,
    512 channels), global average pooling and a linear layer. Every module and
    ``state_dict`` key has torchvision's name, so weights load either way:
    11,173,962 parameters for 3-channel input and 10 classes. Used where
    torchvision does not import (see :func:`resnet18`).
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        c, _, _ = _image_shape("resnet18", input_shape)
        self.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity()
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def torchvision_resnet18(input_shape: tuple[int, ...], num_classes: int) -> nn.Module | None:
    """torchvision's ``resnet18`` with the CIFAR stem, or None where torchvision does not import.

    torchvision wheels are built for one torch release each; beside another, its
    C extension fails to load and the import raises (RuntimeError, not ImportError).
    """
    try:
        from torchvision.models import resnet18 as tv_resnet18
    except (ImportError, RuntimeError, OSError):
        return None
    c, _, _ = _image_shape("resnet18", input_shape)
    model = tv_resnet18(weights=None, num_classes=num_classes)
    model.conv1 = nn.Conv2d(c, 64, 3, 1, 1, bias=False)  # keeps its place in the module order
    model.maxpool = nn.Identity()
    return model


def _init_resnet(model: nn.Module) -> nn.Module:
    """torchvision's ResNet initialisation, drawn in module order (the same weights on either implementation)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            m.reset_parameters()
    return model


def resnet18(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-18, CIFAR form: torchvision's builder where torchvision imports, :class:`ResNet18` otherwise.

    Both are initialised by :func:`_init_resnet` after construction, so a seed
    gives the same initial weights on either (tests check it where torchvision imports).
    """
    model = torchvision_resnet18(input_shape, num_classes)
    return _init_resnet(ResNet18(input_shape, num_classes) if model is None else model)


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, seed: int = 0, *,
                dataset: str | None = None) -> nn.Module:
    """A fresh model; ``seed`` fixes its initial weights (the round-0 global model).

    One sample of ``input_shape`` goes through it first: a model that cannot take
    it, or that gives other than ``num_classes`` outputs, is a ConfigError naming
    the model (and ``dataset``, the data it is for), before any training.
    """
    builder = MODELS.get(name)
    shape = tuple(int(v) for v in input_shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = builder(shape, int(num_classes))
        if not isinstance(model, nn.Module):
            raise ConfigError(f"model {name!r}: its builder returned {type(model).__name__}, not a torch.nn.Module")
        if FlatLayout.of(model).size == 0:
            raise ConfigError(f"model {name!r} has no floating-point parameters or buffers to federate")
        _check_outputs(model, name, shape, int(num_classes), dataset)
    return model


def _check_outputs(model: nn.Module, name: str, shape: tuple[int, ...], num_classes: int, dataset: str | None) -> None:
    """One zero sample through ``model`` (evaluation mode, no gradient): it must give ``num_classes`` outputs."""
    data = f"dataset {dataset!r}" if dataset else "the dataset"
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros((1, *shape)))
    except Exception as exc:  # a plug-in's forward can raise anything for the wrong input
        raise ConfigError(f"model {name!r} cannot take one sample of {data}'s shape {shape}: "
                          f"{type(exc).__name__}: {exc}") from None
    finally:
        model.train(training)
    got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    if got == (1, num_classes):
        return
    if isinstance(got, tuple) and len(got) == 2 and got[0] == 1:
        raise ConfigError(f"model {name!r} outputs {got[1]} values per sample, {data} has {num_classes} classes: "
                          f"its last layer must give one output per class")
    raise ConfigError(f"model {name!r} outputs {got} for one sample, {data} has {num_classes} classes: "
                      f"it must output one row of {num_classes} values per sample")


# --- The flat vector -----------------------------------------------------------------------------------------------


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    """``state_dict`` entries by name, tied tensors once (under their first name)."""
    out, seen = {}, set()
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) not in seen:
            seen.add(id(t))
            out[name] = t
    return out


def _batchnorm_names(model: nn.Module) -> set[str]:
    names = set()
    for prefix, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            names |= {f"{prefix}.{k}" if prefix else k for k in m.state_dict(keep_vars=True)}
    return names


@dataclass(frozen=True)
class FlatLayout:
    """Which ``state_dict`` entries the flat vector holds, in order, and which stay with each client.

    ``names``/``shapes``: the carried entries (every floating-point one but the
    local ones); ``local``: integer buffers, and the BatchNorm layers' entries
    under ``local_bn``.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    local: tuple[str, ...]
    local_bn: bool = False

    @classmethod
    def of(cls, model: nn.Module, local_bn: bool = False) -> "FlatLayout":
        state = _state(model)
        bn = _batchnorm_names(model) if local_bn else set()
        carried = [n for n, t in state.items() if t.is_floating_point() and n not in bn]
        return cls(tuple(carried), tuple(tuple(state[n].shape) for n in carried),
                   tuple(n for n in state if n not in set(carried)), local_bn)

    @property
    def entries(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The carried entries as (name, shape) pairs, in order: what a rule that reads layers takes."""
        return tuple(zip(self.names, self.shapes))

    @property
    def size(self) -> int:
        """δ, the length of the flat vector."""
        return int(sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes))

    def statistics(self, model: nn.Module) -> np.ndarray | None:
        """A boolean mask over the flat vector: the carried running statistics (floating buffers, such as
        BatchNorm's running mean and variance), which are estimates rather than trained parameters; None
        when the vector carries none."""
        buffers = {n for n, _ in model.named_buffers()}
        if not buffers & set(self.names):
            return None
        return np.concatenate([np.full(int(np.prod(s, dtype=np.int64)), n in buffers)
                               for n, s in zip(self.names, self.shapes)])

    def get(self, model: nn.Module) -> np.ndarray:
        """The carried entries as one float32 vector of length δ (a copy, on the CPU)."""
        state = _state(model)
        with torch.no_grad():
            flat = torch.cat([state[n].detach().reshape(-1).to(torch.float32) for n in self.names])
        return flat.cpu().numpy().astype(np.float32, copy=True)

    def set(self, model: nn.Module, flat: np.ndarray) -> None:
        """Copy a length-δ vector into the carried entries, in place (never aliasing ``flat``)."""
        if not isinstance(flat, np.ndarray) or flat.shape != (self.size,):
            raise ConfigError(f"flat model has shape {getattr(flat, 'shape', None)}; this model needs ({self.size},)")
        state = _state(model)
        first = state[self.names[0]]
        src = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32)).to(first.device)
        at = 0
        with torch.no_grad():
            for name, shape in zip(self.names, self.shapes):
                t = state[name]
                k = t.numel()
                t.copy_(src[at : at + k].view(shape))
                at += k

    def get_local(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """A copy of the entries that stay with a client."""
        state = _state(model)
        return {n: state[n].detach().clone() for n in self.local}

    def set_local(self, model: nn.Module, local: dict[str, torch.Tensor]) -> None:
        """Load a client's own entries (from :meth:`get_local`) into ``model``."""
        if set(local) != set(self.local):
            raise ConfigError(f"local state holds {sorted(local)}; this model keeps {sorted(self.local)}")
        state = _state(model)
        with torch.no_grad():
            for n in self.local:
                state[n].copy_(local[n])


def get_flat(model: nn.Module, local_bn: bool = False) -> np.ndarray:
    """The model's flat vector (every floating-point state entry; see :class:`FlatLayout`)."""
    return FlatLayout.of(model, local_bn).get(model)


def set_flat(model: nn.Module, flat: np.ndarray, local_bn: bool = False) -> None:
    """Copy a flat vector into the model (see :class:`FlatLayout`)."""
    FlatLayout.of(model, local_bn).set(model, flat)
