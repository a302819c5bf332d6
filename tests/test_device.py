"""Devices: the best available by default, and a clear refusal of one the machine lacks."""

import pytest
import torch

from reshuffle.clients import best_device, resolve_device
from reshuffle.errors import ConfigError


def test_auto_is_the_best_device_here():
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert best_device() == expected and resolve_device("auto").type == expected == resolve_device(None).type
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_is_refused_without_cuda():
    with pytest.raises(ConfigError, match=r"device 'cuda' requested, but CUDA is not available on this machine: "
                                          r"this torch build has no CUDA support|torch finds no CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="'cuda:1' requested, but CUDA is not available"):
        resolve_device("cuda:1")


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "cpu:0", "", "tpu"])
def test_unknown_devices(name):
    with pytest.raises(ConfigError, match="unknown device"):
        resolve_device(name)
