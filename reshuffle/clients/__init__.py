"""Client side of federated learning: datasets, partitions, models, devices, local training.

Models and datasets are registries (``register_model``, ``register_dataset``)
that ``--plugin`` modules extend: ``model_names()`` and ``dataset_names()`` list
the built-in ones with the plug-ins'. Names resolve lazily, so drivers that only
need the option lists (or the protocol) do not pay for importing torch.
"""

from __future__ import annotations

import importlib

PARTITIONS = ("iid", "dirichlet", "pathological", "shard", "natural", "dirichlet-legacy")
OPTIMIZERS = ("sgd", "adam")
DEVICES = ("auto", "cpu", "cuda", "mps")

_WHERE = {
    "DataError": "data", "Dataset": "data", "DatasetSpec": "data", "HF_PREFIX": "data", "dataset_names": "data",
    "dataset_spec": "data", "load_dataset": "data", "parse_cifar10": "data", "parse_idx": "data",
    "parse_leaf": "data", "read_idx": "data", "register_dataset": "data",
    "FlatLayout": "models", "build_model": "models", "check_model_name": "catalog", "get_flat": "models",
    "model_names": "catalog", "register_model": "catalog", "set_flat": "models",
    "dirichlet": "partitions", "dirichlet_legacy": "partitions", "iid": "partitions", "natural": "partitions",
    "partition": "partitions", "pathological": "partitions", "shard": "partitions",
    "TrainConfig": "train", "batch_schedule": "train", "local_train": "train", "NO_LABEL": "train", "predict": "train",
    "BatchedTrainer": "batched",
    "best_device": "device", "resolve_device": "device",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"reshuffle.clients.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'reshuffle.clients' has no attribute {name!r}")


__all__ = ["DEVICES", "OPTIMIZERS", "PARTITIONS", *_WHERE]
