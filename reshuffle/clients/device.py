"""Where local training and evaluation run: ``cpu``, ``cuda`` (``cuda:N``) or ``mps``.

``auto`` takes the best this machine has: a CUDA GPU, else Apple's MPS, else the
CPU. Asking for a device the machine lacks is a :class:`ConfigError` that says
why, never a silent fall back to the CPU. The protocol, the rules and the flat
vectors stay on the CPU whatever the device.
"""

from __future__ import annotations

import torch

from reshuffle.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda", "mps")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def best_device() -> str:
    """``cuda`` where a CUDA GPU is usable, else ``mps`` where Apple's GPU is, else ``cpu``."""
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if _mps_available() else "cpu"


def resolve_device(name: str | None = "auto") -> torch.device:
    """The torch device for ``name`` (``auto``/None, ``cpu``, ``cuda``, ``cuda:N``, ``mps``).

    Raises
    ------
    ConfigError
        An unknown name, or a device this machine (or this torch build) does not have.
    """
    if name is None or name == "auto":
        return torch.device(best_device())
    if not isinstance(name, str):
        raise ConfigError(f"device must be one of {', '.join(DEVICES)} (or cuda:N), got {name!r}")
    kind, _, index = name.partition(":")
    if kind not in DEVICES[1:] or (index and (kind != "cuda" or not index.isdigit())):
        raise ConfigError(f"unknown device {name!r}; choose one of {', '.join(DEVICES)} or cuda:N")
    if kind == "cuda":
        if not torch.cuda.is_available():
            why = ("this torch build has no CUDA support" if torch.version.cuda is None
                   else "torch finds no CUDA GPU or driver")
            raise ConfigError(f"device {name!r} requested, but CUDA is not available on this machine: {why} "
                              f"(torch {torch.__version__}); use --device cpu or auto")
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            raise ConfigError(f"device {name!r} requested, but this machine has {count} CUDA device(s)")
    if kind == "mps" and not _mps_available():
        raise ConfigError(f"device 'mps' requested, but Apple's MPS is not available on this machine "
                          f"(torch {torch.__version__}); use --device cpu or auto")
    return torch.device(name)
