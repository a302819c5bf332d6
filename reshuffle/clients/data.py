"""Datasets: scikit-learn's bundled digits (embedded default), MNIST and Fashion-MNIST from idx files.

Images come out as float32 tensors of shape (n, 1, H, W), standardised with the
training set's mean and standard deviation; labels as int64. Without a data
folder, the idx datasets are read from ``data/<name>/`` in the repository, which
``reshuffle data fetch <name>`` fills (:mod:`reshuffle.clients.fetch`).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reshuffle.errors import ConfigError

from reshuffle.clients import DATASETS

# idx type codes (LeCun's format): only unsigned bytes are used by (F)MNIST.
_IDX_UBYTE = 0x08
_IDX_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


class DataError(ConfigError):
    """A dataset file is missing or is not a valid idx file."""


def default_data_root() -> Path:
    """The folder that holds ``<name>/`` for each idx dataset when no data folder is given.

    ``data/`` in the repository when the package runs from a checkout (the usual,
    editable install), else ``data/`` in the current directory.
    """
    repo = Path(__file__).resolve().parents[2]
    return repo / "data" if (repo / "pyproject.toml").is_file() else Path.cwd() / "data"


def how_to_get(name: str, folder: Path) -> str:
    """The two ways to get dataset ``name``, phrased for the folder that was looked in."""
    fetch = f"reshuffle data fetch {name}"
    if folder.name == name and folder.resolve() != (default_data_root() / name).resolve():
        fetch += f" --dir {folder.parent}"
    return f"get it with `{fetch}` or pass --data-dir pointing at a folder that holds its four idx files"


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def parse_idx(raw: bytes, what: str) -> np.ndarray:
    """Parse one idx file's bytes (magic 0x0000, type 0x08, ndim, big-endian dims, data)."""
    if len(raw) < 4:
        raise DataError(f"{what}: {len(raw)} bytes is too short for an idx header")
    if raw[0] != 0 or raw[1] != 0 or raw[2] != _IDX_UBYTE:
        raise DataError(f"{what}: not an unsigned-byte idx file (magic {raw[:4].hex()})")
    ndim = raw[3]
    if not 1 <= ndim <= 4:
        raise DataError(f"{what}: idx file declares {ndim} dimensions (expected 1 to 4)")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{what}: truncated idx header")
    dims = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    size = int(np.prod(dims, dtype=np.int64))
    if len(raw) - header != size:
        raise DataError(f"{what}: idx dims {dims} need {size} data bytes, file has {len(raw) - header}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def read_idx(folder: Path, stem: str) -> np.ndarray:
    """Read ``stem`` or ``stem.gz`` from ``folder``; the error names the file looked for."""
    plain, packed = folder / stem, folder / f"{stem}.gz"
    if packed.is_file():
        try:
            raw = gzip.decompress(packed.read_bytes())
        except (OSError, EOFError) as exc:
            raise DataError(f"{packed}: not a valid gzip file ({exc})") from None
        return parse_idx(raw, str(packed))
    if plain.is_file():
        return parse_idx(plain.read_bytes(), str(plain))
    raise DataError(f"missing data file {packed} (or {plain}); pass --data-dir pointing at the idx files")


def _standardise(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = float(x_train.mean()), float(x_train.std()) or 1.0
    return ((x_train - mean) / std).astype(np.float32), ((x_test - mean) / std).astype(np.float32)


def _standardise_pixels(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images → float32 (p/255 − mean)/std, as :func:`_standardise` on p/255, in one table lookup.

    The mean and std come exactly from the 256-bin histogram, so no float64 copy of
    the images is made (it took seconds for MNIST's 47 M pixels).
    """
    counts = np.bincount(train.ravel(), minlength=256).astype(np.float64)
    v = np.arange(256) / 255.0
    mean = float(counts @ v / counts.sum())
    std = float(np.sqrt(counts @ (v - mean) ** 2 / counts.sum())) or 1.0
    table = ((v - mean) / std).astype(np.float32)
    return table[train[:, None]], table[test[:, None]]


def _load_idx_dataset(name: str, folder: Path) -> Dataset:
    if not folder.is_dir():
        raise DataError(f"{name}: data folder {folder} does not exist; {how_to_get(name, folder)}")
    absent = [f"{stem}.gz" for stem in _IDX_FILES.values()
              if not (folder / f"{stem}.gz").is_file() and not (folder / stem).is_file()]
    if absent:
        raise DataError(f"{name}: {folder} lacks {', '.join(absent)}; {how_to_get(name, folder)}")
    arrays = {k: read_idx(folder, stem) for k, stem in _IDX_FILES.items()}
    for split in ("train", "test"):
        x, y = arrays[f"{split}_x"], arrays[f"{split}_y"]
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DataError(f"{folder}: {split} images {x.shape} and labels {y.shape} do not match")
        if y.max(initial=0) > 9:
            raise DataError(f"{folder}: {split} labels exceed 9")
    x_tr, x_te = _standardise_pixels(arrays["train_x"], arrays["test_x"])
    return Dataset(name, x_tr, arrays["train_y"].astype(np.int64), x_te, arrays["test_y"].astype(np.int64), 10)


def _load_digits(test_fraction: float = 0.2) -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = bunch.images[:, None].astype(np.float64) / 16.0
    y = bunch.target.astype(np.int64)
    # A fixed, seed-independent split so every run evaluates on the same test set.
    order = np.random.default_rng(0).permutation(len(y))
    cut = int(round(len(y) * (1 - test_fraction)))
    tr, te = order[:cut], order[cut:]
    x_tr, x_te = _standardise(x[tr], x[te])
    return Dataset("digits", x_tr, y[tr], x_te, y[te], 10)


def load_dataset(name: str, data_dir: str | Path | None = None) -> Dataset:
    """Load ``digits`` (no files needed), ``mnist`` or ``fashion-mnist``.

    The idx datasets come from ``data_dir`` (the folder holding the four files),
    by default ``default_data_root() / name``.
    """
    if name == "digits":
        return _load_digits()
    if name in ("mnist", "fashion-mnist"):
        folder = default_data_root() / name if data_dir is None else Path(data_dir)
        return _load_idx_dataset(name, folder)
    raise ConfigError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
