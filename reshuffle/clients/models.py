"""The models clients train, and the flat float32 vector the protocol carries.

δ (the model length) is the number of trainable parameters: LeNet-5 on a 28×28
input has δ = 61,706. None of these models has buffers (no batch norm), so the
flat parameter vector is the whole model state.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from reshuffle.errors import ConfigError

from reshuffle.clients import MODELS


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


class LeNet5(nn.Module):
    """LeCun et al. (1998) with padding 2 on the first convolution, for 28×28 input.

    Smaller inputs (the 8×8 digits) are resized to 28×28 bilinearly first, which
    adds no parameters, so δ = 61,706 for every dataset.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        if len(input_shape) != 3:
            raise ConfigError(f"lenet5 needs (channels, H, W) input, got {input_shape}")
        self.resize = tuple(input_shape[1:]) != (28, 28)
        self.conv1 = nn.Conv2d(input_shape[0], 6, 5, padding=2)
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


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, seed: int = 0) -> nn.Module:
    """A fresh model; ``seed`` fixes its initial weights (the round-0 global model)."""
    classes = {"logreg": LogReg, "mlp": MLP, "lenet5": LeNet5}
    if name not in classes:
        raise ConfigError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return classes[name](tuple(input_shape), num_classes)


def get_flat(model: nn.Module) -> np.ndarray:
    """The parameters as one float32 vector of length δ (a copy)."""
    return nn.utils.parameters_to_vector(model.parameters()).detach().numpy().astype(np.float32, copy=True)


def set_flat(model: nn.Module, flat: np.ndarray) -> None:
    """Copy a length-δ vector into the parameters (never aliasing ``flat``)."""
    n = sum(p.numel() for p in model.parameters())
    if flat.shape != (n,):
        raise ConfigError(f"flat model has shape {flat.shape}; this model needs ({n},)")
    # vector_to_parameters makes the parameters views of its input: hand it a copy,
    # or training would write into the caller's array (e.g. the global model).
    nn.utils.vector_to_parameters(torch.tensor(flat, dtype=torch.float32), model.parameters())
