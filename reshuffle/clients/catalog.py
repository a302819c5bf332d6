"""The models clients train, by name: the built-in ones and the plug-ins' (``register_model``).

Naming and checking a model imports nothing heavy: a built-in model's module
(torch) is imported when the model is first built, so a command's help and a
configuration's validation list and check names without it.
"""

from __future__ import annotations

from typing import Callable

from reshuffle.errors import ConfigError
from reshuffle.registry import Registry

#: name → builder ``(input_shape, num_classes) -> torch.nn.Module``.
MODELS: Registry = Registry("model")
for _name, _attr in (("logreg", "LogReg"), ("mlp", "MLP"), ("lenet5", "LeNet5"), ("cnn", "CNN"),
                     ("resnet18", "resnet18")):
    MODELS.add_lazy(_name, "reshuffle.clients.models", _attr)


def register_model(name: str) -> Callable[[Callable], Callable]:
    """Decorator: make ``builder(input_shape, num_classes) -> nn.Module`` selectable as ``--model name``.

    ``input_shape`` is one sample's shape, e.g. ``(3, 32, 32)``. The builder is
    called under a fixed torch seed, so a run's initial model depends on its seed only.
    """

    def deco(builder: Callable) -> Callable:
        if not callable(builder):
            raise ConfigError(f"register_model({name!r}) decorates a builder function, got {builder!r}")
        return MODELS.add(name, builder)

    return deco


def model_names() -> list[str]:
    """Every registered model, built-in and plug-in."""
    return MODELS.names()


def check_model_name(name: str) -> None:
    """Raise ConfigError unless ``name`` is a registered model (listing them)."""
    if name not in MODELS:
        MODELS.get(name)
