"""Bring your own model and data: `reshuffle simulate --plugin byo_plugin --model bn-cnn --dataset blobs`."""
import numpy as np
from torch import nn

from reshuffle.clients import Dataset, register_dataset, register_model


@register_model("bn-cnn")
def bn_cnn(input_shape, num_classes):
    c, h, w = input_shape
    return nn.Sequential(nn.Conv2d(c, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8 * (h // 2) * (w // 2), num_classes))


@register_dataset("blobs", classes=4, input_shape=(1, 8, 8), source="four Gaussian blobs, made here")
def blobs(folder):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 1000)
    x = rng.normal(size=(1000, 1, 8, 8)) + np.linspace(-1.5, 1.5, 4)[y, None, None, None]
    return Dataset.from_arrays(x[:800], y[:800], x[800:], y[800:], num_classes=4)
