"""Small datasets written in the real distribution formats (this machine reaches no dataset host)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from reshuffle.clients.data import CIFAR10_FOLDER, CIFAR10_RECORD, CIFAR10_TEST, CIFAR10_TRAIN


def cifar10_records(labels: np.ndarray, rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
    """CIFAR-10 binary records (label byte, then the R, G and B 32x32 planes) and their images (n, 3, 32, 32)."""
    images = rng.integers(0, 256, size=(len(labels), 3, 32, 32), dtype=np.uint8)
    # Class c brightens channel c % 3, so a model can learn something from a few images.
    for c in range(3):
        images[labels % 3 == c, c] //= 4
    rec = np.empty((len(labels), CIFAR10_RECORD), np.uint8)
    rec[:, 0] = labels
    rec[:, 1:] = images.reshape(len(labels), -1)
    return rec.tobytes(), images


def write_cifar10(folder: Path, per_file: int = 4, test: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    """The six files of the binary version, as the archive unpacks them (``folder/cifar-10-batches-bin/``)."""
    rng = np.random.default_rng(seed)
    out = folder / CIFAR10_FOLDER
    out.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for name in CIFAR10_TRAIN:
        labels = rng.integers(0, 10, per_file).astype(np.uint8)
        raw, images = cifar10_records(labels, rng)
        (out / name).write_bytes(raw)
        xs.append(images)
        ys.append(labels)
    labels = rng.integers(0, 10, test).astype(np.uint8)
    raw, images = cifar10_records(labels, rng)
    (out / CIFAR10_TEST[0]).write_bytes(raw)
    return {"x_train": np.concatenate(xs), "y_train": np.concatenate(ys), "x_test": images, "y_test": labels}


def leaf_file(users: dict[str, tuple[np.ndarray, np.ndarray]]) -> str:
    """One LEAF JSON file: users, num_samples, user_data {user: {x: 784-float rows, y: labels}}."""
    return json.dumps({
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {u: {"x": x.reshape(len(x), -1).tolist(), "y": y.tolist()} for u, (x, y) in users.items()},
    })


def write_femnist(folder: Path, writers: int = 6, per_writer: int = 5, seed: int = 0) -> dict:
    """FEMNIST as LEAF's preprocess.sh leaves it: train/ and test/ JSON files, a writer per user (f0000_14 style)."""
    rng = np.random.default_rng(seed)
    names = [f"f{1000 - 7 * i:04d}_{i % 50:02d}" for i in range(writers)]  # not in sorted order on purpose
    data = {}
    for split, n in (("train", per_writer), ("test", 2)):
        users = {}
        for w in names:
            y = rng.integers(0, 62, n)
            x = rng.random((n, 28 * 28)).astype(np.float32)
            x[:, : 28 * 3] = (y[:, None] % 7) / 7.0  # a label-dependent band, learnable
            users[w] = (x, y)
        (folder / split).mkdir(parents=True, exist_ok=True)
        half = len(names) // 2  # two files per split, as LEAF writes several
        for part, chunk in enumerate((names[:half], names[half:])):
            (folder / split / f"all_data_{part}_niid_1_keep_0_{split}_9.json").write_text(
                leaf_file({w: users[w] for w in chunk}))
        data[split] = users
    return data
