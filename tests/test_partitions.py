"""Partitions are Flower Datasets': the same seed gives a Flower user and this project the same indices."""

import hashlib

import numpy as np
import pytest

from reshuffle.clients import partition
from reshuffle.errors import ConfigError

datasets = pytest.importorskip("datasets")
fd = pytest.importorskip("flwr_datasets")
from flwr_datasets.partitioner import (  # noqa: E402
    DirichletPartitioner, IidPartitioner, NaturalIdPartitioner, PathologicalPartitioner, ShardPartitioner,
)

N, CLIENTS = 600, 6


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """A dataset on disk as a Flower user loads one: a label, a row id and a writer per row."""
    folder = tmp_path_factory.mktemp("partitions")
    rng = np.random.default_rng(11)
    labels, writers = rng.integers(0, 10, N), rng.integers(0, 30, N)
    datasets.Dataset.from_dict({"label": labels, "uid": np.arange(N), "writer": writers}).to_parquet(
        str(folder / "train.parquet"))
    return folder, labels, writers


def _flower_indices(folder, partitioner, seed, n):
    """What a Flower user gets: FederatedDataset(shuffle=True, seed) with the partitioner, partitions 0..n-1."""
    fds = fd.FederatedDataset(dataset="parquet", data_files={"train": str(folder / "train.parquet")},
                              partitioners={"train": partitioner}, shuffle=True, seed=seed,
                              cache_dir=str(folder / "cache"))
    return [sorted(fds.load_partition(i)["uid"]) for i in range(n)]


@pytest.mark.parametrize("seed", [0, 5])
@pytest.mark.parametrize("kind, make", [
    ("iid", lambda s: IidPartitioner(CLIENTS)),
    ("dirichlet", lambda s: DirichletPartitioner(CLIENTS, "label", alpha=0.5, min_partition_size=10, seed=s)),
    ("pathological", lambda s: PathologicalPartitioner(CLIENTS, "label", num_classes_per_partition=3, seed=s)),
    ("shard", lambda s: ShardPartitioner(CLIENTS, "label", num_shards_per_partition=2, seed=s)),
])
def test_same_indices_as_flower_datasets(table, kind, make, seed):
    folder, labels, _ = table
    ours = partition(labels, CLIENTS, kind, seed, alpha=0.5, classes_per_client=3, shards_per_client=2)
    assert [p.tolist() for p in ours] == _flower_indices(folder, make(seed), seed, CLIENTS)


def test_natural_partition_is_flowers_by_writer(table):
    folder, labels, writers = table
    flower = _flower_indices(folder, NaturalIdPartitioner(partition_by="writer"), 0, 30)
    every = partition(labels, 30, "natural", seed=3, natural_ids=writers)
    assert [p.tolist() for p in every] == flower  # as many clients as writers: all of them, in order
    some = partition(labels, 7, "natural", seed=3, natural_ids=writers)
    picked = [flower.index(p.tolist()) for p in some]
    assert picked == sorted(picked) and len(set(picked)) == 7  # 7 distinct writers, whole
    assert picked != list(range(7)) and picked == [flower.index(p.tolist()) for p in
                                                   partition(labels, 7, "natural", seed=3, natural_ids=writers)]
    with pytest.raises(ConfigError, match="31 clients but the dataset has 30 natural ids"):
        partition(labels, 31, "natural", 0, natural_ids=writers)
    with pytest.raises(ConfigError, match="needs a dataset with natural ids"):
        partition(labels, 3, "natural", 0)


def test_legacy_dirichlet_is_the_published_split():
    # The split this project's published Dirichlet results used (digest computed with that code).
    parts = partition(np.arange(1000) % 10, 7, "dirichlet-legacy", 5, alpha=0.3)
    assert [len(p) for p in parts] == [216, 120, 270, 142, 19, 190, 43]
    digest = hashlib.sha256(b"".join(p.astype("<i8").tobytes() for p in parts)).hexdigest()
    assert digest == "a34a73de819a618e62726c7cd6936a009a10e54331f1b5e31801a299941a165d"


def test_partitioners_refusals_are_config_errors():
    labels = np.arange(100) % 10
    with pytest.raises(ConfigError, match="classes_per_client=11 exceeds the 10 classes"):
        partition(labels, 4, "pathological", 0, classes_per_client=11)
    with pytest.raises(ConfigError, match="100 samples cannot make 30 × 4 shards"):
        partition(labels, 30, "shard", 0, shards_per_client=4)
    with pytest.raises(ConfigError, match="DirichletPartitioner refused 9 clients"):
        partition(labels, 9, "dirichlet", 0, alpha=0.5)  # 100 samples cannot give 9 clients 10 each
    with pytest.raises(ConfigError, match="unknown partition 'zipf'"):
        partition(labels, 2, "zipf", 0)
