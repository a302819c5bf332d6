"""Client side of federated learning: datasets, partitions, models, local training."""

from reshuffle.clients.data import DATASETS, DataError, Dataset, load_dataset, parse_idx, read_idx
from reshuffle.clients.models import MODELS, build_model, get_flat, set_flat
from reshuffle.clients.partition import PARTITIONS, dirichlet, iid, partition
from reshuffle.clients.train import OPTIMIZERS, TrainConfig, local_train, predict

__all__ = [
    "DATASETS", "DataError", "Dataset", "MODELS", "OPTIMIZERS", "PARTITIONS", "TrainConfig",
    "build_model", "dirichlet", "get_flat", "iid", "load_dataset", "local_train", "parse_idx",
    "partition", "predict", "read_idx", "set_flat",
]
