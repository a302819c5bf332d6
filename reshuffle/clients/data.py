"""Datasets by name: a registry of :class:`DatasetSpec`, the built-in loaders, and any Hugging Face dataset.

Built in: ``digits`` (scikit-learn's, embedded), ``mnist`` and
``fashion-mnist`` (idx files), ``cifar10`` (the binary version: 1 label byte and
3,072 pixel bytes per record; the python version is pickled and never read) and
``femnist`` (LEAF's JSON files, with each sample's writer for the natural
partition). ``hf:NAME`` loads Hugging Face dataset NAME through Flower Datasets.
``@register_dataset`` adds more, from a ``--plugin`` module too.

Images come out as float32 arrays of shape (n, channels, H, W), standardised
with the training set's statistics; labels as int64. A dataset that needs files
reads them from its folder: ``--data-dir``, or ``data/<name>/`` in the repository,
which ``reshuffle data fetch <name>`` fills where the dataset has a download.
"""

from __future__ import annotations

import contextlib
import contextvars
import gzip
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.registry import Registry

# idx type codes (LeCun's format): only unsigned bytes are used by (F)MNIST.
_IDX_UBYTE = 0x08
_IDX_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
#: ``--dataset hf:NAME`` names a Hugging Face dataset.
HF_PREFIX = "hf:"


class DataError(ConfigError):
    """A dataset file is missing or is not valid in its format."""


def default_data_root() -> Path:
    """The folder that holds ``<name>/`` for each dataset when no data folder is given.

    ``data/`` in the repository when the package runs from a checkout (the usual,
    editable install), else ``data/`` in the current directory.
    """
    repo = Path(__file__).resolve().parents[2]
    return repo / "data" if (repo / "pyproject.toml").is_file() else Path.cwd() / "data"


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file: its name, size in bytes and SHA-256 (hex)."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Source:
    """Where a dataset's files come from by default, and what they must be.

    ``members``: for a dataset shipped as one ``.tar.gz`` archive, the regular
    files unpacked from it after its checksum matched (nothing else is extracted).
    """

    dataset: str
    base_url: str
    files: tuple[RemoteFile, ...]
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dataset:
    """A dataset in memory: standardised float32 images, int64 labels.

    ``natural_ids``: for each training sample, the id of the party that produced
    it (FEMNIST's writer), which the ``natural`` partition splits by; None when
    the dataset has none.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    natural_ids: np.ndarray | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @classmethod
    def from_arrays(cls, x_train, y_train, x_test, y_test, num_classes: int | None = None,
                    natural_ids=None, name: str = "") -> "Dataset":
        """A dataset from numpy arrays, checked and converted (float32 inputs, int64 labels), not rescaled.

        ``num_classes`` defaults to the largest label + 1.
        """
        name = name or _LOADING.get()  # a plug-in's loader need not repeat its dataset's name
        xs = [np.ascontiguousarray(x, dtype=np.float32) for x in (x_train, x_test)]
        ys = [np.asarray(y) for y in (y_train, y_test)]
        for split, x, y in (("train", xs[0], ys[0]), ("test", xs[1], ys[1])):
            if x.ndim < 2 or y.ndim != 1 or len(x) != len(y) or len(y) == 0:
                raise DataError(f"dataset {name!r}: {split} inputs {x.shape} and labels {y.shape} must be (n, ...) "
                                f"and (n,) with n >= 1")
            if not np.issubdtype(y.dtype, np.integer):
                raise DataError(f"dataset {name!r}: {split} labels must be integers, got {y.dtype}")
            if not np.isfinite(x).all():
                raise DataError(f"dataset {name!r}: {split} inputs hold NaN or Inf")
        if xs[0].shape[1:] != xs[1].shape[1:]:
            raise DataError(f"dataset {name!r}: train inputs are {xs[0].shape[1:]} per sample, test {xs[1].shape[1:]}")
        top = int(max(ys[0].max(), ys[1].max())) + 1
        classes = top if num_classes is None else int(num_classes)
        if min(ys[0].min(), ys[1].min()) < 0 or top > classes:
            raise DataError(f"dataset {name!r}: labels must lie in [0, {classes}), got [{min(ys[0].min(), ys[1].min())}, "
                            f"{top - 1}]")
        ids = None
        if natural_ids is not None:
            ids = np.asarray(natural_ids)
            if ids.shape != ys[0].shape:
                raise DataError(f"dataset {name!r}: {ids.shape} natural ids for {len(ys[0])} training samples")
        return cls(name, xs[0], ys[0].astype(np.int64), xs[1], ys[1].astype(np.int64), classes, ids)


Needs = Callable[[Path], list[str]]

#: The dataset whose loader runs (:meth:`DatasetSpec.load`), named by ``Dataset.from_arrays``'s errors.
_LOADING: contextvars.ContextVar[str] = contextvars.ContextVar("reshuffle_dataset_loading", default="")


def _no_files(folder: Path) -> list[str]:
    return []


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset by name: how to load it, what it holds, where it comes from.

    ``loader(folder) -> Dataset`` reads the dataset's folder (ignored by
    datasets that need no files); ``needs(folder)`` lists what the folder lacks
    (empty: the data is there). ``num_classes`` and ``input_shape`` are None
    only for ``hf:`` datasets, which say so once loaded. ``natural``: the dataset
    has natural ids (the ``natural`` partition works on it). ``download``: its
    default source for ``reshuffle data fetch``, if any.
    """

    name: str
    loader: Callable[[Path], Dataset]
    num_classes: int | None
    input_shape: tuple[int, ...] | None
    source: str
    needs: Needs = field(default=_no_files)
    natural: bool = False
    download: Source | None = None

    def folder(self, data_dir: str | Path | None = None) -> Path:
        """``data_dir``, or the default ``data/<name>``."""
        return self.folder_in(default_data_root()) if data_dir is None else Path(data_dir)

    def folder_in(self, root: Path) -> Path:
        """The dataset's folder in data root ``root``: ``root/<name>`` (``root/hf/<NAME>`` for ``hf:NAME``)."""
        return Path(root) / self.name.replace(HF_PREFIX, "hf/", 1)

    @property
    def reads_files(self) -> bool:
        """True for a dataset loaded from files (or, ``hf:NAME``, cached in its folder)."""
        return self.needs is not _no_files or self.num_classes is None

    def missing(self, data_dir: str | Path | None = None) -> list[str]:
        """What the dataset's folder lacks (empty when it can be loaded)."""
        return self.needs(self.folder(data_dir))

    def how_to_get(self, folder: Path) -> str:
        """How a user gets this dataset's files into ``folder``."""
        where = "pass --data-dir pointing at a folder that holds them"
        if self.download is None:
            return f"{self.source}; {where}"
        fetch = f"reshuffle data fetch {self.name}"
        if folder.name == self.name and folder.resolve() != (default_data_root() / self.name).resolve():
            fetch += f" --dir {folder.parent}"
        return f"get it with `{fetch}` or {where}"

    def load(self, data_dir: str | Path | None = None) -> Dataset:
        """Load the dataset and check it against the spec."""
        folder = self.folder(data_dir)
        absent = self.needs(folder)
        if absent:
            where = f"data folder {folder} does not exist" if not folder.exists() else f"{folder} lacks {', '.join(absent)}"
            raise DataError(f"{self.name}: {where}; {self.how_to_get(folder)}")
        token = _LOADING.set(self.name)
        try:
            ds = self.loader(folder)
        finally:
            _LOADING.reset(token)
        if not isinstance(ds, Dataset):
            raise ConfigError(f"dataset {self.name!r}: its loader returned {type(ds).__name__}, not a Dataset")
        if self.input_shape is not None and ds.input_shape != tuple(self.input_shape):
            raise DataError(f"dataset {self.name!r}: loaded inputs of shape {ds.input_shape}, its spec says "
                            f"{tuple(self.input_shape)}")
        if self.num_classes is not None and ds.num_classes != self.num_classes:
            raise DataError(f"dataset {self.name!r}: loaded {ds.num_classes} classes, its spec says {self.num_classes}")
        if self.natural and ds.natural_ids is None:
            raise DataError(f"dataset {self.name!r}: its spec promises natural ids, the loader gave none")
        return replace(ds, name=self.name)


_DATASETS: Registry = Registry("dataset")


def register_dataset(name: str, *, classes: int, input_shape: tuple[int, ...], source: str,
                     needs: Needs | None = None, natural: bool = False, download: Source | None = None):
    """Decorator: make ``loader(folder) -> Dataset`` selectable as ``--dataset name``.

    ``classes`` and ``input_shape`` (one sample's, e.g. ``(3, 32, 32)``) are
    checked against what the loader returns; ``source`` says where the data
    comes from (shown in help and in the error when files are missing);
    ``needs(folder)`` lists the files a folder lacks (default: none needed).
    """
    if name.startswith(HF_PREFIX):
        raise ConfigError(f"dataset names starting with {HF_PREFIX!r} are Hugging Face datasets; choose another "
                          f"name than {name!r}")
    if not (isinstance(classes, int) and classes >= 2):
        raise ConfigError(f"dataset {name!r}: classes must be an int >= 2, got {classes!r}")
    if not (isinstance(input_shape, tuple) and input_shape and all(isinstance(v, int) and v >= 1 for v in input_shape)):
        raise ConfigError(f"dataset {name!r}: input_shape must be a tuple of positive ints, got {input_shape!r}")

    def deco(loader: Callable[[Path], Dataset]) -> Callable[[Path], Dataset]:
        _DATASETS.add(name, DatasetSpec(name, loader, classes, input_shape, source, needs or _no_files, natural,
                                        download))
        return loader

    return deco


def dataset_names() -> list[str]:
    """Every registered dataset (``hf:NAME`` is accepted besides)."""
    return _DATASETS.names()


def dataset_spec(name: str) -> DatasetSpec:
    """The spec of a registered dataset, or of Hugging Face dataset ``hf:NAME``."""
    if isinstance(name, str) and name.startswith(HF_PREFIX):
        return hf_spec(name)
    if name not in _DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; choose one of {', '.join(dataset_names())} or hf:NAME "
                          f"(a Hugging Face dataset)")
    return _DATASETS.get(name)


def load_dataset(name: str, data_dir: str | Path | None = None) -> Dataset:
    """Load dataset ``name`` from ``data_dir`` (default ``data/<name>``; ignored by those that need no files)."""
    return dataset_spec(name).load(data_dir)


# --- Pixels ----------------------------------------------------------------------------------------------------------


def _standardise(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean, std = float(x_train.mean()), float(x_train.std()) or 1.0
    return ((x_train - mean) / std).astype(np.float32), ((x_test - mean) / std).astype(np.float32)


def _pixel_table(pixels: np.ndarray) -> np.ndarray:
    """uint8 → float32 (p/255 − mean)/std, mean and std exactly from the 256-bin histogram of ``pixels``."""
    counts = np.bincount(pixels.ravel(), minlength=256).astype(np.float64)
    v = np.arange(256) / 255.0
    mean = float(counts @ v / counts.sum())
    std = float(np.sqrt(counts @ (v - mean) ** 2 / counts.sum())) or 1.0
    return ((v - mean) / std).astype(np.float32)


def _standardise_pixels(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (n, H, W) → float32 (n, 1, H, W), as :func:`_standardise` on p/255, in one table lookup.

    The mean and std come exactly from the 256-bin histogram, so no float64 copy of
    the images is made (it took seconds for MNIST's 47 M pixels).
    """
    table = _pixel_table(train)
    return table[train[:, None]], table[test[:, None]]


def _standardise_channels(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (n, C, H, W) → float32, each channel standardised with its own training mean and std."""
    out_tr, out_te = np.empty(train.shape, np.float32), np.empty(test.shape, np.float32)
    for c in range(train.shape[1]):
        table = _pixel_table(train[:, c])
        out_tr[:, c], out_te[:, c] = table[train[:, c]], table[test[:, c]]
    return out_tr, out_te


# --- idx (MNIST, Fashion-MNIST) ---------------------------------------------------------------------------------


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


def _gunzip(path: Path) -> bytes:
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: not a valid gzip file ({exc})") from None


def read_idx(folder: Path, stem: str) -> np.ndarray:
    """Read ``stem`` or ``stem.gz`` from ``folder``; the error names the file looked for."""
    plain, packed = folder / stem, folder / f"{stem}.gz"
    if packed.is_file():
        return parse_idx(_gunzip(packed), str(packed))
    if plain.is_file():
        return parse_idx(plain.read_bytes(), str(plain))
    raise DataError(f"missing data file {packed} (or {plain}); pass --data-dir pointing at the idx files")


def _idx_needs(folder: Path) -> list[str]:
    return [f"{stem}.gz" for stem in _IDX_FILES.values()
            if not (folder / f"{stem}.gz").is_file() and not (folder / stem).is_file()]


def _load_idx(folder: Path) -> Dataset:
    arrays = {k: read_idx(folder, stem) for k, stem in _IDX_FILES.items()}
    for split in ("train", "test"):
        x, y = arrays[f"{split}_x"], arrays[f"{split}_y"]
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise DataError(f"{folder}: {split} images {x.shape} and labels {y.shape} do not match")
        if y.max(initial=0) > 9:
            raise DataError(f"{folder}: {split} labels exceed 9")
    x_tr, x_te = _standardise_pixels(arrays["train_x"], arrays["test_x"])
    return Dataset("", x_tr, arrays["train_y"].astype(np.int64), x_te, arrays["test_y"].astype(np.int64), 10)


# --- CIFAR-10, binary version ------------------------------------------------------------------------------------

CIFAR10_RECORD = 1 + 3 * 32 * 32
CIFAR10_TRAIN = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR10_TEST = ("test_batch.bin",)
CIFAR10_FOLDER = "cifar-10-batches-bin"  # the archive's folder


def _cifar10_file(folder: Path, name: str) -> Path | None:
    for path in (folder / CIFAR10_FOLDER / name, folder / name):
        if path.is_file():
            return path
    return None


def _cifar10_needs(folder: Path) -> list[str]:
    return [f"{CIFAR10_FOLDER}/{n}" for n in CIFAR10_TRAIN + CIFAR10_TEST if _cifar10_file(folder, n) is None]


def parse_cifar10(raw: bytes, what: str) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 binary file → (uint8 images (n, 3, 32, 32), labels (n,)).

    Each record is a label byte (0–9) and 3,072 pixel bytes: the red, green and
    blue 32×32 planes, row by row.
    """
    if len(raw) == 0 or len(raw) % CIFAR10_RECORD:
        raise DataError(f"{what}: {len(raw)} bytes is not a whole number of {CIFAR10_RECORD}-byte CIFAR-10 records")
    rec = np.frombuffer(raw, dtype=np.uint8).reshape(-1, CIFAR10_RECORD)
    labels = rec[:, 0]
    if labels.max() > 9:
        raise DataError(f"{what}: label {int(labels.max())} in record {int(labels.argmax())} exceeds 9")
    return rec[:, 1:].reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _load_cifar10(folder: Path) -> Dataset:
    def read(names):
        parts = [parse_cifar10(p.read_bytes(), str(p)) for p in (_cifar10_file(folder, n) for n in names)]
        return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])

    (x_tr, y_tr), (x_te, y_te) = read(CIFAR10_TRAIN), read(CIFAR10_TEST)
    x_tr, x_te = _standardise_channels(x_tr, x_te)
    return Dataset("", x_tr, y_tr, x_te, y_te, 10)


# --- FEMNIST, LEAF's JSON files ---------------------------------------------------------------------------------


def _leaf_files(folder: Path, split: str) -> list[Path]:
    return sorted((folder / split).glob("*.json"))


def _femnist_needs(folder: Path) -> list[str]:
    return [f"{split}/*.json" for split in ("train", "test") if not _leaf_files(folder, split)]


def parse_leaf(raw: bytes, what: str, sample_size: int) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """One LEAF JSON file → (users, inputs per user (n_u, sample_size) float32, labels per user (n_u,) int64).

    The format: ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``.
    """
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{what}: not valid JSON ({exc})") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("users"), list) and isinstance(doc.get("user_data"), dict)):
        raise DataError(f"{what}: not a LEAF file (needs 'users' and 'user_data')")
    users, xs, ys = [], [], []
    counts = doc.get("num_samples", [None] * len(doc["users"]))
    for user, count in zip(doc["users"], counts):
        entry = doc["user_data"].get(user)
        if not isinstance(user, str) or not isinstance(entry, dict):
            raise DataError(f"{what}: user {user!r} has no data")
        try:
            x = np.asarray(entry["x"], dtype=np.float32)
            y = np.asarray(entry["y"], dtype=np.int64)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{what}: user {user!r}: x and y must be numeric arrays ({exc})") from None
        if x.ndim != 2 or x.shape[1] != sample_size or y.shape != (len(x),):
            raise DataError(f"{what}: user {user!r}: x {x.shape} and y {y.shape}, expected (n, {sample_size}) and (n,)")
        if count is not None and count != len(y):
            raise DataError(f"{what}: user {user!r}: num_samples says {count}, x holds {len(y)}")
        users.append(user)
        xs.append(x)
        ys.append(y)
    return users, xs, ys


def _load_femnist(folder: Path) -> Dataset:
    def read(split):
        users, xs, ys = [], [], []
        for path in _leaf_files(folder, split):
            u, x, y = parse_leaf(path.read_bytes(), str(path), 28 * 28)
            users += [name for name, part in zip(u, y) for _ in range(len(part))]
            xs += x
            ys += y
        if not ys:
            raise DataError(f"{folder / split}: the LEAF files hold no samples")
        return np.array(users), np.concatenate(xs).reshape(-1, 1, 28, 28), np.concatenate(ys)

    writers, x_tr, y_tr = read("train")
    _, x_te, y_te = read("test")
    if not np.isfinite(x_tr).all() or not np.isfinite(x_te).all():
        raise DataError(f"{folder}: FEMNIST pixels hold NaN or Inf")
    for split, y in (("train", y_tr), ("test", y_te)):
        if y.min() < 0 or y.max() > 61:
            raise DataError(f"{folder}: {split} labels must lie in [0, 61], got [{y.min()}, {y.max()}]")
    x_tr, x_te = _standardise(x_tr, x_te)
    # Writers numbered in sorted order of their LEAF names (Flower's NaturalIdPartitioner order).
    _, writer_ids = np.unique(writers, return_inverse=True)
    return Dataset("", x_tr, y_tr, x_te, y_te, 62, writer_ids.astype(np.int64))


# --- Hugging Face datasets, through Flower Datasets ----------------------------------------------------------------

#: Column names taken as the natural id (the ``natural`` partition) of an ``hf:`` dataset, first found.
HF_NATURAL_COLUMNS = ("writer_id", "user_id", "client_id", "character_id", "user")
#: Share of the training split held out as the test set when an ``hf:`` dataset has no ``test`` split.
HF_TEST_FRACTION = 0.2


def hf_spec(name: str) -> DatasetSpec:
    """The spec of ``hf:NAME``: loaded on first use, cached in ``--data-dir`` (default ``data/hf/NAME``)."""
    repo = name[len(HF_PREFIX):]
    if not repo or repo != repo.strip():
        raise ConfigError(f"dataset {name!r}: write hf:NAME with a Hugging Face dataset name, e.g. hf:ylecun/mnist")
    return DatasetSpec(name, lambda folder: _load_hf(repo, folder), None, None,
                       f"Hugging Face dataset {repo}, downloaded through Flower Datasets on first use")


def _hf_columns(split, repo: str) -> tuple[str, str, str | None]:
    """(input column, label column, natural id column or None) of a Hugging Face split."""
    import datasets

    feats = split.features
    image = next((c for c, f in feats.items() if isinstance(f, datasets.Image)), None)
    image = image or next((c for c in ("image", "img", "pixels", "x") if c in feats), None)
    label = next((c for c, f in feats.items() if isinstance(f, datasets.ClassLabel)), None)
    label = label or next((c for c in ("label", "labels", "y") if c in feats), None)
    if image is None or label is None:
        raise DataError(f"hf:{repo}: found no image column (an Image feature or image/img/pixels/x) or no label "
                        f"column (a ClassLabel feature or label/labels/y) among {', '.join(feats)}")
    natural = next((c for c in HF_NATURAL_COLUMNS if c in feats), None)
    return image, label, natural


def _hf_arrays(split, columns: list[str], repo: str) -> list[np.ndarray]:
    """The split's ``columns`` as numpy arrays; the first, images (n, H, W[, C]), as (n, C, H, W)."""
    rows = split.select_columns(columns).with_format("numpy")[:]
    x = np.asarray(rows[columns[0]])
    if x.dtype == object:
        raise DataError(f"hf:{repo}: the images of column {columns[0]!r} differ in size")
    x = x[:, None] if x.ndim == 3 else (x.transpose(0, 3, 1, 2) if x.ndim == 4 else x)
    return [np.ascontiguousarray(x), *(np.asarray(rows[c]) for c in columns[1:])]


#: The host an ``hf:`` dataset downloads from.
HF_HOST = "huggingface.co"


def _hub_reachable() -> bool:
    """True when the Hugging Face Hub's name resolves (a machine without a network fails at once)."""
    import socket

    try:
        socket.getaddrinfo(HF_HOST, 443)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _quiet_hub(offline: bool):
    """The Hub client's retry warnings silenced (the failure is said in one line); its offline mode on where
    the Hub cannot be reached, so a cached dataset loads and a missing one fails without five retries."""
    import logging
    import os

    log = logging.getLogger("huggingface_hub")
    level = log.level
    log.setLevel(logging.ERROR)
    saved = os.environ.get("HF_HUB_OFFLINE")
    patched = []
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"  # read when the Hub's modules are first imported
        import sys

        for mod in ("huggingface_hub.constants", "datasets.config"):
            m = sys.modules.get(mod)
            if m is not None and hasattr(m, "HF_HUB_OFFLINE"):
                patched.append((m, m.HF_HUB_OFFLINE))
                m.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        log.setLevel(level)
        for m, v in patched:
            m.HF_HUB_OFFLINE = v
        if offline:
            if saved is None:
                os.environ.pop("HF_HUB_OFFLINE", None)
            else:
                os.environ["HF_HUB_OFFLINE"] = saved


def _load_hf(repo: str, folder: Path) -> Dataset:
    offline = not _hub_reachable()
    with _quiet_hub(offline):
        try:
            from flwr_datasets import FederatedDataset
        except ImportError as exc:  # a dependency: only a broken install lacks it
            raise ConfigError(f"hf:{repo} needs Flower Datasets (pip install flwr-datasets): {exc}") from None
        fds = FederatedDataset(dataset=repo, partitioners={"train": 1}, shuffle=False, cache_dir=str(folder))
        try:
            train = fds.load_split("train")
            test = fds.load_split("test") if "test" in fds._dataset else None  # noqa: SLF001 - the splits it loaded
        except (FileNotFoundError, ConnectionError, ValueError, OSError) as exc:
            if offline:
                raise DataError(f"hf:{repo}: cannot load it: not cached in {folder}, and {HF_HOST} cannot be "
                                f"reached from this machine; it downloads on first use on a machine with internet "
                                f"access") from None
            raise DataError(f"hf:{repo}: cannot load it ({type(exc).__name__}: {exc}); it downloads on first use "
                            f"on a machine with internet access, into {folder}") from None
    image, label, natural = _hf_columns(train, repo)
    x_tr, y_tr, *rest = _hf_arrays(train, [image, label, *([natural] if natural else [])], repo)
    ids = np.unique(rest[0], return_inverse=True)[1] if natural else None
    if test is None:
        # A fixed, seed-independent split so every run evaluates on the same test set.
        order = np.random.default_rng(0).permutation(len(y_tr))
        cut = int(round(len(y_tr) * (1 - HF_TEST_FRACTION)))
        tr, te = np.sort(order[:cut]), np.sort(order[cut:])
        x_te, y_te, x_tr, y_tr = x_tr[te], y_tr[te], x_tr[tr], y_tr[tr]
        ids = None if ids is None else ids[tr]
    else:
        x_te, y_te = _hf_arrays(test, [image, label], repo)
    feat = train.features[label]
    classes = feat.num_classes if hasattr(feat, "num_classes") else int(max(y_tr.max(), y_te.max())) + 1
    if x_tr.dtype == np.uint8 and x_tr.ndim == 4:
        x_tr, x_te = _standardise_channels(x_tr, x_te)
    else:
        x_tr, x_te = _standardise(x_tr.astype(np.float64), x_te.astype(np.float64))
    return Dataset.from_arrays(x_tr, y_tr, x_te, y_te, classes, ids, name=f"hf:{repo}")


# --- The built-ins -------------------------------------------------------------------------------------------------


@register_dataset("digits", classes=10, input_shape=(1, 8, 8), source="scikit-learn's 8×8 digits, embedded")
def _load_digits(folder: Path, test_fraction: float = 0.2) -> Dataset:
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


def _idx_source(name: str, base_url: str, sizes_sha: tuple[tuple[str, int, str], ...]) -> Source:
    return Source(name, base_url, tuple(RemoteFile(*f) for f in sizes_sha))


# Smallest first, so a wrong base URL shows up before the large downloads.
MNIST_SOURCE = _idx_source(
    "mnist",
    # The mirror torchvision downloads MNIST from.
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    (
        ("t10k-labels-idx1-ubyte.gz", 4_542, "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
        ("train-labels-idx1-ubyte.gz", 28_881, "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
        ("t10k-images-idx3-ubyte.gz", 1_648_877, "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
        ("train-images-idx3-ubyte.gz", 9_912_422, "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
    ),
)
FASHION_MNIST_SOURCE = _idx_source(
    "fashion-mnist",
    # Zalando Research's repository, which hosts the dataset's canonical files.
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
    (
        ("t10k-labels-idx1-ubyte.gz", 5_148, "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"),
        ("train-labels-idx1-ubyte.gz", 29_515, "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845"),
        ("t10k-images-idx3-ubyte.gz", 4_422_102, "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073"),
        ("train-images-idx3-ubyte.gz", 26_421_880, "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84"),
    ),
)
CIFAR10_SOURCE = Source(
    "cifar10",
    # Krizhevsky's page, which publishes the archive's MD5 c32a1d4ab5d03f1284b67883e8d87530.
    "https://www.cs.toronto.edu/~kriz/",
    (RemoteFile("cifar-10-binary.tar.gz", 170_052_171,
                "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd"),),
    members=tuple(f"{CIFAR10_FOLDER}/{n}" for n in CIFAR10_TRAIN + CIFAR10_TEST),
)

register_dataset("mnist", classes=10, input_shape=(1, 28, 28), needs=_idx_needs, download=MNIST_SOURCE,
                 source="MNIST, LeCun et al.'s four idx files")(_load_idx)
register_dataset("fashion-mnist", classes=10, input_shape=(1, 28, 28), needs=_idx_needs, download=FASHION_MNIST_SOURCE,
                 source="Fashion-MNIST, Zalando Research's four idx files")(_load_idx)
register_dataset("cifar10", classes=10, input_shape=(3, 32, 32), needs=_cifar10_needs, download=CIFAR10_SOURCE,
                 source="CIFAR-10, binary version (six .bin files)")(_load_cifar10)
register_dataset("femnist", classes=62, input_shape=(1, 28, 28), needs=_femnist_needs, natural=True,
                 source="FEMNIST as LEAF's preprocess.sh writes it (train/ and test/ folders of JSON files, one "
                        "user per writer); no download: build it with LEAF")(_load_femnist)
