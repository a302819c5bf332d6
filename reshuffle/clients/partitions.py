"""Split a training set among clients: IID, or label skew drawn from Dirichlet(α).

These draws are not secrets, so a seeded numpy generator is the right tool: the
same seed gives the same federation.
"""

from __future__ import annotations

import numpy as np

from reshuffle.errors import ConfigError

from reshuffle.clients import PARTITIONS


def iid(labels: np.ndarray, n_clients: int, seed: int) -> list[np.ndarray]:
    """A random permutation cut into ``n_clients`` near-equal parts."""
    _check(labels, n_clients)
    order = np.random.default_rng(seed).permutation(len(labels))
    return [np.sort(part) for part in np.array_split(order, n_clients)]


def dirichlet(labels: np.ndarray, n_clients: int, alpha: float, seed: int, min_size: int = 2) -> list[np.ndarray]:
    """Label skew: for each class c, proportions p_c ~ Dir(α·1_n) split that class's samples.

    Small α gives each client few classes; large α approaches IID. Draws are
    repeated (up to 100 times) until every client holds at least ``min_size``
    samples, so no client is empty.
    """
    _check(labels, n_clients)
    if not (isinstance(alpha, (int, float)) and alpha > 0 and np.isfinite(alpha)):
        raise ConfigError(f"Dirichlet alpha must be a positive number, got {alpha!r}")
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


def partition(labels: np.ndarray, n_clients: int, kind: str, seed: int, alpha: float = 0.5) -> list[np.ndarray]:
    if kind == "iid":
        return iid(labels, n_clients, seed)
    if kind == "dirichlet":
        return dirichlet(labels, n_clients, alpha, seed)
    raise ConfigError(f"unknown partition {kind!r}; choose one of {', '.join(PARTITIONS)}")


def _check(labels: np.ndarray, n_clients: int) -> None:
    if not isinstance(n_clients, int) or n_clients < 1:
        raise ConfigError(f"number of clients must be a positive int, got {n_clients!r}")
    if n_clients > len(labels):
        raise ConfigError(f"{n_clients} clients but only {len(labels)} training samples")
