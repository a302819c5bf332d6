"""Datasets, partitions, models and local training."""

import gzip

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.clients import (
    DataError, TrainConfig, build_model, dirichlet, dirichlet_legacy, get_flat, iid, load_dataset, local_train,
    parse_idx, predict, read_idx, set_flat,
)
from reshuffle.errors import ConfigError


def _idx(arr: np.ndarray) -> bytes:
    head = bytes([0, 0, 8, arr.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in arr.shape)
    return head + arr.astype(np.uint8).tobytes()


def test_parse_idx_roundtrip():
    a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    assert np.array_equal(parse_idx(_idx(a), "x"), a)


@given(st.binary(max_size=40))
def test_parse_idx_rejects_truncations_and_garbage(raw):
    a = np.arange(6, dtype=np.uint8).reshape(2, 3)
    good = _idx(a)
    if raw == good:
        return
    with pytest.raises(DataError):
        parse_idx(raw if not good.startswith(raw) else raw, "x")


def test_parse_idx_names_the_problem():
    a = np.zeros((2, 3), np.uint8)
    with pytest.raises(DataError, match="need 6 data bytes, file has 5"):
        parse_idx(_idx(a)[:-1], "x")
    with pytest.raises(DataError, match="not an unsigned-byte idx"):
        parse_idx(b"\x00\x00\x0d\x01" + bytes(8), "x")


def test_read_idx_gz_and_plain(tmp_path):
    a = np.arange(10, dtype=np.uint8)
    (tmp_path / "lab.gz").write_bytes(gzip.compress(_idx(a)))
    (tmp_path / "plain").write_bytes(_idx(a))
    assert np.array_equal(read_idx(tmp_path, "lab"), a)
    assert np.array_equal(read_idx(tmp_path, "plain"), a)
    (tmp_path / "bad.gz").write_bytes(b"not gzip")
    with pytest.raises(DataError, match="bad.gz: not a valid gzip"):
        read_idx(tmp_path, "bad")


def test_missing_file_error_names_the_file(tmp_path):
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz"):
        load_dataset("mnist", tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        load_dataset("fashion-mnist", tmp_path / "nowhere")
    with pytest.raises(DataError, match="reshuffle data fetch mnist.*--data-dir"):
        load_dataset("mnist", tmp_path / "mnist")
    with pytest.raises(ConfigError, match="unknown dataset 'cifar'"):
        load_dataset("cifar")


def test_digits_is_embedded_and_standardised(digits):
    assert digits.x_train.shape[1:] == (1, 8, 8) and digits.x_train.dtype == np.float32
    assert len(digits.y_train) + len(digits.y_test) == 1797
    assert abs(float(digits.x_train.mean())) < 1e-4 and abs(float(digits.x_train.std()) - 1) < 1e-3
    assert set(np.unique(digits.y_test)) == set(range(10))


@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_idx_datasets_from_default_folder(dataset_dir, name):
    dataset_dir(name)
    ds = load_dataset(name)  # no data_dir: the default data/<name>
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert np.bincount(ds.y_test).tolist() == [1000] * 10 if name == "fashion-mnist" else ds.y_test.max() == 9


@given(st.integers(0, 2**31), st.integers(1, 300), st.integers(1, 50))
@settings(max_examples=40, deadline=None)
def test_pixel_table_standardises_like_the_float64_formula(seed, n_train, n_test):
    # The table lookup replaces (p/255 − mean)/std computed on a float64 copy of the images.
    from reshuffle.clients.data import _standardise, _standardise_pixels

    rng = np.random.default_rng(seed)
    hi = int(rng.integers(1, 256))  # also images that use few grey levels, or only one
    train, test = (rng.integers(0, hi + 1, (m, 3, 4), dtype=np.uint8) for m in (n_train, n_test))
    got, want = _standardise_pixels(train, test), _standardise(train[:, None] / 255.0, test[:, None] / 255.0)
    for g, w in zip(got, want):
        assert g.dtype == np.float32 and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@given(st.integers(1, 40), st.integers(0, 2**31))
@settings(max_examples=30, deadline=None)
def test_iid_is_a_partition(n, seed):
    labels = np.arange(200) % 10
    parts = iid(labels, n, seed)
    allidx = np.concatenate(parts)
    assert len(parts) == n and np.array_equal(np.sort(allidx), np.arange(200))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


@given(st.integers(2, 20), st.sampled_from([0.05, 0.5, 5.0]), st.integers(0, 2**31))
@settings(max_examples=30, deadline=None)
def test_dirichlet_legacy_is_a_seeded_partition(n, alpha, seed):
    labels = np.arange(1000) % 10
    parts = dirichlet_legacy(labels, n, alpha, seed)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(1000))
    assert min(map(len, parts)) >= 2
    assert all(np.array_equal(a, b) for a, b in zip(parts, dirichlet_legacy(labels, n, alpha, seed)))


@given(st.integers(2, 12), st.sampled_from([0.1, 0.5, 5.0]), st.integers(0, 2**31))
@settings(max_examples=15, deadline=None)
def test_dirichlet_is_a_seeded_partition_or_a_clear_refusal(n, alpha, seed):
    # Flower's partitioner redraws (10 times) until every client holds 10 samples, then gives up.
    labels = np.arange(600) % 10
    try:
        parts = dirichlet(labels, n, alpha, seed)
    except ConfigError as exc:
        assert "DirichletPartitioner refused" in str(exc) and "attempts" in str(exc)
        return
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(600))
    assert min(map(len, parts)) >= 10
    assert all(np.array_equal(a, b) for a, b in zip(parts, dirichlet(labels, n, alpha, seed)))


def test_dirichlet_alpha_controls_skew():
    labels = np.arange(5000) % 10

    def classes_per_client(alpha):
        parts = dirichlet(labels, 20, alpha, seed=3)
        # classes holding at least 5% of the client's samples
        return np.mean([(np.bincount(labels[p], minlength=10) >= 0.05 * len(p)).sum() for p in parts])

    assert classes_per_client(0.1) < 4 < 9 < classes_per_client(100.0)


def test_partition_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="alpha"):
        dirichlet(np.zeros(10, int), 2, 0.0, 1)
    with pytest.raises(ConfigError, match="only 10 training samples"):
        iid(np.zeros(10, int), 11, 0)


def test_lenet5_has_61706_parameters():
    for shape in [(1, 28, 28), (1, 8, 8)]:
        m = build_model("lenet5", shape, 10)
        assert get_flat(m).size == 61_706
        assert m(torch.zeros(2, *shape)).shape == (2, 10)
    assert get_flat(build_model("logreg", (1, 8, 8), 10)).size == 64 * 10 + 10


def test_flat_roundtrip_and_shape_check():
    m = build_model("mlp", (1, 8, 8), 10, seed=1)
    w = get_flat(m)
    set_flat(m, w * 2)
    assert np.array_equal(get_flat(m), w * 2)
    assert np.array_equal(get_flat(build_model("mlp", (1, 8, 8), 10, seed=1)), w)
    with pytest.raises(ConfigError, match="needs"):
        set_flat(m, w[:-1])
    with pytest.raises(ConfigError, match="unknown model"):
        build_model("resnet", (1, 8, 8), 10)


def test_local_training_learns_and_is_deterministic(digits):
    m = build_model("logreg", digits.input_shape, 10)
    W0 = get_flat(m)
    cfg = TrainConfig(epochs=2, lr=0.1)
    W1 = local_train(m, W0, digits.x_train, digits.y_train, cfg, seed=7)
    acc0 = np.mean(predict(m, W0, digits.x_test) == digits.y_test)
    acc1 = np.mean(predict(m, W1, digits.x_test) == digits.y_test)
    assert acc0 < 0.3 and acc1 > 0.9
    assert np.array_equal(W1, local_train(m, W0, digits.x_train, digits.y_train, cfg, seed=7))
    assert not np.array_equal(W1, local_train(m, W0, digits.x_train, digits.y_train, cfg, seed=8))
    Wa = local_train(m, W0, digits.x_train, digits.y_train, TrainConfig(optimizer="adam", lr=0.01), seed=7)
    assert np.mean(predict(m, Wa, digits.x_test) == digits.y_test) > 0.9


def test_train_config_validation():
    with pytest.raises(ConfigError, match="optimizer"):
        TrainConfig(optimizer="rmsprop")
    with pytest.raises(ConfigError, match="learning rate"):
        TrainConfig(lr=0)


def test_training_never_writes_into_the_global_model(digits):
    m = build_model("mlp", digits.input_shape, 10)
    W_g = get_flat(m)
    before = W_g.copy()
    local_train(m, W_g, digits.x_train[:64], digits.y_train[:64], TrainConfig(), seed=1)
    assert np.array_equal(W_g, before)
