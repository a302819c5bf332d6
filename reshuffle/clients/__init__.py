"""Client side of federated learning: datasets, partitions, models, local training.

Names resolve lazily, so drivers that only need the option lists (or the
protocol) do not pay for importing torch.
"""

from __future__ import annotations

import importlib

DATASETS = ("digits", "mnist", "fashion-mnist")
MODELS = ("logreg", "mlp", "lenet5")
PARTITIONS = ("iid", "dirichlet")
OPTIMIZERS = ("sgd", "adam")

_WHERE = {
    "DataError": "data", "Dataset": "data", "load_dataset": "data", "parse_idx": "data", "read_idx": "data",
    "build_model": "models", "get_flat": "models", "set_flat": "models",
    "dirichlet": "partitions", "iid": "partitions", "partition": "partitions",
    "BatchedTrainer": "train", "TrainConfig": "train", "batch_schedule": "train", "local_train": "train",
    "NO_LABEL": "train", "predict": "train",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"reshuffle.clients.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'reshuffle.clients' has no attribute {name!r}")


__all__ = ["DATASETS", "MODELS", "OPTIMIZERS", "PARTITIONS", *_WHERE]
