"""Split a training set among clients, as Flower Datasets' partitioners split it.

``partition(labels, n, kind, seed)`` returns each client's sorted indices into
the training set. The partition is the one a Flower user gets from
``FederatedDataset(..., shuffle=True, seed=seed)`` with the partitioner below
built with ``seed=seed``, on a dataset whose rows are in the same order: the rows
are permuted by ``np.random.default_rng(seed)`` (what ``Dataset.shuffle(seed)``
does), the partitioner runs on the permuted rows, and its indices are mapped back.

- ``iid``: ``IidPartitioner`` (contiguous shards of the permuted rows);
  computed here without Hugging Face ``datasets`` (tests check the indices agree).
- ``dirichlet``: ``DirichletPartitioner(alpha, min_partition_size=10)``,
  label skew of Hsu et al.; small α gives each client few classes.
- ``pathological``: ``PathologicalPartitioner``, ``classes_per_client`` classes
  per client, chosen at random.
- ``shard``: ``ShardPartitioner`` (McMahan et al.): the rows sorted by label,
  cut into equal shards, ``shards_per_client`` to each client.
- ``natural``: ``NaturalIdPartitioner`` on the dataset's natural ids (FEMNIST's
  writers): client i holds writer ``ids[i]``'s samples, ``ids`` being
  ``clients`` writers drawn without replacement by the seed (all of them, in
  order, when there are as many clients as writers).
- ``dirichlet-legacy``: this project's earlier Dirichlet split (each class's
  samples permuted, then cut by Dir(α) proportions; at least 2 samples per
  client), kept so that results published with it can be reproduced.

These draws are not secrets, so seeded numpy generators are the right tool: the
same seed gives the same federation.
"""

from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

from reshuffle.errors import ConfigError

PARTITIONS = ("iid", "dirichlet", "pathological", "shard", "natural", "dirichlet-legacy")
#: Flower's DirichletPartitioner default: a draw that leaves a client fewer samples is redrawn (10 tries).
DIRICHLET_MIN_SIZE = 10


def iid(labels: np.ndarray, n_clients: int, seed: int) -> list[np.ndarray]:
    """A random permutation cut into ``n_clients`` near-equal contiguous parts (Flower's IidPartitioner)."""
    _check(labels, n_clients)
    order = np.random.default_rng(seed).permutation(len(labels))
    return [np.sort(part) for part in np.array_split(order, n_clients)]


def dirichlet_legacy(labels: np.ndarray, n_clients: int, alpha: float, seed: int,
                     min_size: int = 2) -> list[np.ndarray]:
    """Label skew: for each class c, proportions p_c ~ Dir(α·1_n) split that class's (permuted) samples.

    Draws are repeated (up to 100 times) until every client holds at least
    ``min_size`` samples. This project's split before it adopted Flower's.
    """
    _check(labels, n_clients)
    _check_alpha(alpha)
    if len(labels) < n_clients * min_size:
        raise ConfigError(f"{len(labels)} samples cannot give {n_clients} clients {min_size} each")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    for _ in range(100):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(n_clients, float(alpha)))
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return out
    raise ConfigError(f"alpha={alpha} leaves some of {n_clients} clients with < {min_size} samples after 100 draws")


def _flower(labels: np.ndarray, n_clients: int, seed: int, make: Callable[[], object]) -> list[np.ndarray]:
    """Run a Flower partitioner on the rows permuted as ``FederatedDataset(shuffle=True, seed=seed)`` permutes them."""
    import datasets

    perm = np.random.default_rng(seed).permutation(len(labels))
    # Arrow format: the partitioner's column reads (labels, then each partition's rows) come back as Arrow
    # arrays, not row by row as Python objects (seconds per run at 60,000 rows)
    rows = datasets.Dataset.from_dict({"label": np.asarray(labels)[perm], "row": perm}).with_format("arrow")
    partitioner = make()
    partitioner.dataset = rows
    try:
        with warnings.catch_warnings():
            # The Dirichlet partitioner warns before each redraw; its final failure is the error reported.
            warnings.simplefilter("ignore", UserWarning)
            parts = [np.sort(np.asarray(partitioner.load_partition(i)["row"], dtype=np.int64))
                     for i in range(n_clients)]
    except ValueError as exc:
        raise ConfigError(f"{type(partitioner).__name__} refused {n_clients} clients on {len(labels)} samples: "
                          f"{exc}") from None
    if min(len(p) for p in parts) == 0:
        raise ConfigError(f"{type(partitioner).__name__} left a client of {n_clients} with no sample; "
                          f"use fewer clients")
    return parts


def dirichlet(labels: np.ndarray, n_clients: int, alpha: float, seed: int) -> list[np.ndarray]:
    """Flower's DirichletPartitioner (``min_partition_size=10``, no self-balancing)."""
    from flwr_datasets.partitioner import DirichletPartitioner

    _check(labels, n_clients)
    _check_alpha(alpha)
    return _flower(labels, n_clients, seed, lambda: DirichletPartitioner(
        num_partitions=n_clients, partition_by="label", alpha=float(alpha), min_partition_size=DIRICHLET_MIN_SIZE,
        self_balancing=False, shuffle=True, seed=seed))


def pathological(labels: np.ndarray, n_clients: int, classes_per_client: int, seed: int) -> list[np.ndarray]:
    """Flower's PathologicalPartitioner: ``classes_per_client`` classes per client, assigned at random."""
    from flwr_datasets.partitioner import PathologicalPartitioner

    _check(labels, n_clients)
    k = _positive("classes_per_client", classes_per_client)
    if k > len(np.unique(labels)):
        raise ConfigError(f"classes_per_client={k} exceeds the {len(np.unique(labels))} classes of the dataset")
    return _flower(labels, n_clients, seed, lambda: PathologicalPartitioner(
        num_partitions=n_clients, partition_by="label", num_classes_per_partition=k, class_assignment_mode="random",
        shuffle=True, seed=seed))


def shard(labels: np.ndarray, n_clients: int, shards_per_client: int, seed: int) -> list[np.ndarray]:
    """Flower's ShardPartitioner: label-sorted rows cut into equal shards, ``shards_per_client`` per client."""
    from flwr_datasets.partitioner import ShardPartitioner

    _check(labels, n_clients)
    k = _positive("shards_per_client", shards_per_client)
    if len(labels) < n_clients * k:
        raise ConfigError(f"{len(labels)} samples cannot make {n_clients} × {k} shards of at least one sample")
    return _flower(labels, n_clients, seed, lambda: ShardPartitioner(
        num_partitions=n_clients, partition_by="label", num_shards_per_partition=k, shuffle=True, seed=seed))


def natural(natural_ids: np.ndarray | None, n_clients: int, seed: int) -> list[np.ndarray]:
    """One natural id (writer) per client: Flower's NaturalIdPartitioner partitions, ``n_clients`` of them.

    Flower's partition j holds the samples of the j-th natural id in sorted
    order; client i gets partition ``ids[i]``, ``ids`` drawn without replacement
    by the seed (every partition, in order, when there are as many clients as ids).
    """
    if natural_ids is None:
        raise ConfigError("partition 'natural' needs a dataset with natural ids (e.g. femnist's writers)")
    _check(natural_ids, n_clients)
    values, inverse = np.unique(np.asarray(natural_ids), return_inverse=True)
    if n_clients > len(values):
        raise ConfigError(f"partition 'natural': {n_clients} clients but the dataset has {len(values)} natural ids "
                          f"(writers)")
    if n_clients == len(values):
        ids = np.arange(len(values))
    else:
        ids = np.sort(np.random.default_rng(seed).choice(len(values), size=n_clients, replace=False))
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(values) + 1))
    return [order[bounds[j] : bounds[j + 1]].astype(np.int64) for j in ids]


def partition(labels: np.ndarray, n_clients: int, kind: str, seed: int, alpha: float = 0.5, *,
              classes_per_client: int = 2, shards_per_client: int = 2,
              natural_ids: np.ndarray | None = None) -> list[np.ndarray]:
    """Each client's sorted training indices under partition ``kind`` (one of :data:`PARTITIONS`)."""
    if kind == "iid":
        return iid(labels, n_clients, seed)
    if kind == "dirichlet":
        return dirichlet(labels, n_clients, alpha, seed)
    if kind == "pathological":
        return pathological(labels, n_clients, classes_per_client, seed)
    if kind == "shard":
        return shard(labels, n_clients, shards_per_client, seed)
    if kind == "natural":
        return natural(natural_ids, n_clients, seed)
    if kind == "dirichlet-legacy":
        return dirichlet_legacy(labels, n_clients, alpha, seed)
    raise ConfigError(f"unknown partition {kind!r}; choose one of {', '.join(PARTITIONS)}")


def _check(labels: np.ndarray, n_clients: int) -> None:
    if not isinstance(n_clients, int) or isinstance(n_clients, bool) or n_clients < 1:
        raise ConfigError(f"number of clients must be a positive int, got {n_clients!r}")
    if n_clients > len(labels):
        raise ConfigError(f"{n_clients} clients but only {len(labels)} training samples")


def _check_alpha(alpha: float) -> None:
    if isinstance(alpha, bool) or not (isinstance(alpha, (int, float)) and alpha > 0 and np.isfinite(alpha)):
        raise ConfigError(f"Dirichlet alpha must be a positive number, got {alpha!r}")


def _positive(name: str, v: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ConfigError(f"{name} must be a positive int, got {v!r}")
    return v
