"""Datasets by name: CIFAR-10's binary files, LEAF's FEMNIST JSON, plug-in datasets, Hugging Face datasets.

Every file here is generated in the dataset's real format: nothing is downloaded.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_helpers import cifar10_records, leaf_file, write_cifar10, write_femnist
from reshuffle.clients import (
    DataError, Dataset, dataset_names, dataset_spec, load_dataset, parse_cifar10, parse_leaf,
    register_dataset,
)
from reshuffle.clients.data import CIFAR10_FOLDER, CIFAR10_RECORD
from reshuffle.errors import ConfigError


def test_builtin_names_are_the_registrys():
    assert {"digits", "mnist", "fashion-mnist", "cifar10", "femnist"} <= set(dataset_names())
    spec = dataset_spec("cifar10")
    assert (spec.num_classes, spec.input_shape, spec.download.files[0].name) == (10, (3, 32, 32),
                                                                                 "cifar-10-binary.tar.gz")


def test_cifar10_binary_records_are_read_channel_by_channel(tmp_path):
    # Prepare: the six files, 4 records in each training file, 6 test records
    written = write_cifar10(tmp_path, per_file=4, test=6)
    # Execute
    ds = load_dataset("cifar10", tmp_path)
    # Assert: shapes, labels in file order, and each channel standardised from its own pixels
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (6, 3, 32, 32)
    assert np.array_equal(ds.y_train, written["y_train"]) and np.array_equal(ds.y_test, written["y_test"])
    for c in range(3):
        raw = written["x_train"][:, c] / 255.0
        np.testing.assert_allclose(ds.x_train[:, c], (raw - raw.mean()) / raw.std(), rtol=1e-5, atol=1e-5)
    # The red plane comes first in a record: a record whose red bytes are all 255 reads as maximal red.
    rec = bytearray(CIFAR10_RECORD)
    rec[0], rec[1 : 1 + 1024] = 7, b"\xff" * 1024
    x, y = parse_cifar10(bytes(rec), "one")
    assert y.tolist() == [7] and x[0, 0].min() == 255 and x[0, 1:].max() == 0


@given(st.integers(1, 3 * CIFAR10_RECORD))
@settings(max_examples=25, deadline=None)
def test_cifar10_rejects_partial_records_and_bad_labels(n):
    rng = np.random.default_rng(n)
    raw, _ = cifar10_records(rng.integers(0, 10, 3).astype(np.uint8), rng)
    if n % CIFAR10_RECORD:
        with pytest.raises(DataError, match="not a whole number of 3073-byte CIFAR-10 records"):
            parse_cifar10(raw[:n], "f")
    else:
        bad = bytearray(raw[:n])
        bad[(n // CIFAR10_RECORD - 1) * CIFAR10_RECORD] = 10
        with pytest.raises(DataError, match="label 10 in record"):
            parse_cifar10(bytes(bad), "f")


def test_cifar10_missing_files_are_named(tmp_path):
    write_cifar10(tmp_path)
    (tmp_path / CIFAR10_FOLDER / "data_batch_3.bin").unlink()
    with pytest.raises(DataError, match=r"cifar10: .* lacks cifar-10-batches-bin/data_batch_3.bin; get it with "
                                        r"`reshuffle data fetch cifar10"):
        load_dataset("cifar10", tmp_path)


def test_femnist_from_leaf_json_with_writers(tmp_path):
    # Prepare: 6 writers, 5 training and 2 test samples each, in two files per split
    written = write_femnist(tmp_path, writers=6, per_writer=5)
    # Execute
    ds = load_dataset("femnist", tmp_path)
    # Assert
    assert ds.x_train.shape == (30, 1, 28, 28) and ds.x_test.shape == (12, 1, 28, 28) and ds.num_classes == 62
    writers = sorted(written["train"])
    expected_ids = np.concatenate([np.full(5, writers.index(w)) for w in written["train"]])
    assert np.array_equal(ds.natural_ids, expected_ids)  # writer ids numbered in sorted name order
    assert np.array_equal(ds.y_train, np.concatenate([y for _, y in written["train"].values()]))
    assert abs(float(ds.x_train.mean())) < 1e-5


def test_leaf_files_are_checked():
    good = leaf_file({"f1": (np.zeros((2, 784), np.float32), np.array([1, 2]))})
    assert parse_leaf(good.encode(), "g", 784)[0] == ["f1"]
    with pytest.raises(DataError, match="not valid JSON"):
        parse_leaf(b"{", "f", 784)
    with pytest.raises(DataError, match="not a LEAF file"):
        parse_leaf(b"[]", "f", 784)
    with pytest.raises(DataError, match=r"user 'f1': x \(2, 783\) and y \(2,\), expected \(n, 784\)"):
        parse_leaf(leaf_file({"f1": (np.zeros((2, 783)), np.array([1, 2]))}).encode(), "f", 784)
    lying = good.replace('"num_samples": [2]', '"num_samples": [3]')
    with pytest.raises(DataError, match="num_samples says 3, x holds 2"):
        parse_leaf(lying.encode(), "f", 784)


def test_femnist_without_its_files_says_how_to_get_them(tmp_path):
    with pytest.raises(DataError, match=r"femnist: .* lacks train/\*.json, test/\*.json; FEMNIST as LEAF"):
        load_dataset("femnist", tmp_path)


def test_plugin_dataset_from_numpy_arrays():
    rng = np.random.default_rng(0)
    name = "test-datasets-blobs"
    if name not in dataset_names():
        @register_dataset(name, classes=3, input_shape=(2, 4, 4), source="three Gaussian blobs")
        def blobs(folder):
            y = rng.integers(0, 3, 40)
            x = rng.normal(size=(40, 2, 4, 4)) + y[:, None, None, None]
            return Dataset.from_arrays(x[:30], y[:30], x[30:], y[30:], 3)

    ds = load_dataset(name)
    assert ds.name == name and ds.input_shape == (2, 4, 4) and ds.x_train.dtype == np.float32
    assert ds.y_train.dtype == np.int64 and ds.num_classes == 3


def test_plugin_datasets_are_checked_against_their_spec():
    if "test-datasets-liar" not in dataset_names():
        register_dataset("test-datasets-liar", classes=5, input_shape=(1, 2, 2), source="x")(
            lambda folder: Dataset.from_arrays(np.zeros((4, 1, 3, 3)), [0, 1, 0, 1], np.zeros((2, 1, 3, 3)), [0, 1]))
    with pytest.raises(DataError, match=r"loaded inputs of shape \(1, 3, 3\), its spec says \(1, 2, 2\)"):
        load_dataset("test-datasets-liar")
    with pytest.raises(ConfigError, match="Hugging Face"):
        register_dataset("hf:mine", classes=2, input_shape=(1,), source="x")
    with pytest.raises(ConfigError, match="classes must be an int >= 2"):
        register_dataset("test-datasets-one", classes=1, input_shape=(1,), source="x")
    with pytest.raises(DataError, match=r"labels must lie in \[0, 2\), got \[0, 2\]"):
        Dataset.from_arrays(np.zeros((3, 2)), [0, 1, 2], np.zeros((1, 2)), [0], 2)
    with pytest.raises(DataError, match="NaN or Inf"):
        Dataset.from_arrays(np.full((2, 2), np.nan), [0, 1], np.zeros((1, 2)), [0])
    with pytest.raises(ConfigError, match="unknown dataset 'cifar'; choose one of .*cifar10.* or hf:NAME"):
        load_dataset("cifar")


@pytest.fixture
def hf_folder(tmp_path, monkeypatch):
    """A Hugging Face dataset on disk (parquet with Image, ClassLabel and writer columns), loaded offline."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    rng = np.random.default_rng(0)
    feats = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=4),
                               "writer_id": datasets.Value("string")})
    (tmp_path / "repo" / "data").mkdir(parents=True)
    for split, n in (("train", 12), ("test", 4)):
        rows = {"image": [rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(n)],
                "label": (np.arange(n) % 4).tolist(), "writer_id": [f"w{i % 3}" for i in range(n)]}
        datasets.Dataset.from_dict(rows, features=feats).to_parquet(
            str(tmp_path / "repo" / "data" / f"{split}-00000-of-00001.parquet"))
    return tmp_path


def test_hf_dataset_through_flower_datasets(hf_folder):
    ds = load_dataset(f"hf:{hf_folder / 'repo'}", hf_folder / "cache")
    assert ds.x_train.shape == (12, 3, 8, 8) and ds.x_test.shape == (4, 3, 8, 8) and ds.num_classes == 4
    assert ds.y_train.tolist() == [0, 1, 2, 3] * 3
    assert ds.natural_ids.tolist() == [0, 1, 2] * 4
    with pytest.raises(ConfigError, match="write hf:NAME"):
        load_dataset("hf:")
    with pytest.raises(DataError, match="hf:.*nowhere: cannot load it"):
        load_dataset(f"hf:{hf_folder / 'nowhere'}", hf_folder / "cache")
