"""The rules' column kernels agree with their definitions bit for bit: medians, identical rows, trimming, merging."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reshuffle.bench.rules import add_at_merge
from reshuffle.server.rules.base import (
    NETWORK_ROWS, column_median, column_median_of, identical_rows, selection_network, sorting_network,
)
from reshuffle.server.rules.coordinate import kept_by_rank, trim_columns
from reshuffle.server.rules.hammer import merge_groups

# Few distinct values, so ties (and −0.0 beside 0.0) are common.
_VALUES = st.sampled_from([-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0])
_ROWS = st.tuples(st.integers(1, 9), st.integers(1, 6)).flatmap(
    lambda shape: arrays(np.float64, shape, elements=_VALUES))


@settings(max_examples=200, deadline=None)
@given(U=_ROWS)
def test_column_median_is_numpy_median(U):
    assert np.array_equal(column_median(U), np.median(U, axis=0))


@settings(max_examples=200, deadline=None)
@given(U=_ROWS)
def test_identical_rows_groups_exactly_the_equal_rows(U):
    labels = identical_rows(U)
    n = len(U)
    same = np.array([[np.array_equal(U[i], U[j]) for j in range(n)] for i in range(n)])
    assert np.array_equal(labels[:, None] == labels[None, :], same)
    first = [int(labels[i]) for i in range(n) if labels[i] not in labels[:i]]
    assert first == list(range(len(first)))  # labels in first-row order


def _trim_reference(U: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
    n, d = U.shape
    kept = np.zeros((n, d), dtype=bool)
    for k in range(d):
        order = sorted(range(n), key=lambda i: (U[i, k], i))  # ties: the lower row ranks lower
        kept[order[t:n - t], k] = True
    return np.where(kept, U, 0.0).sum(axis=0) / (n - 2 * t), kept


@settings(max_examples=200, deadline=None)
@given(U=_ROWS, data=st.data())
def test_trim_columns_drops_t_extremes_per_column(U, data):
    t = data.draw(st.integers(0, (len(U) - 1) // 2))
    agg, kept = trim_columns(U, t)
    ref_agg, ref_kept = _trim_reference(U, t)
    assert np.array_equal(kept, ref_kept)
    assert np.array_equal(agg, ref_agg)
    assert (kept.sum(axis=0) == len(U) - 2 * t).all()


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values and equal signs of zero."""
    return a.shape == b.shape and np.array_equal(a, b) and np.array_equal(np.signbit(a), np.signbit(b))


def _sort_median(U: np.ndarray) -> np.ndarray:
    s = np.sort(U, axis=0)
    m = len(s) // 2
    return s[m].copy() if len(s) % 2 else (s[m - 1] + s[m]) / 2


@pytest.mark.parametrize("n", range(1, 13))
def test_sorting_network_sorts_every_zero_one_input(n):
    # The 0-1 principle: a comparator network that sorts all 2^n inputs of 0s and 1s sorts every input.
    X = ((np.arange(2 ** n)[None, :] >> np.arange(n)[:, None]) & 1).astype(np.float64)
    rows = list(X)
    for i, j in sorting_network(n):
        rows[i], rows[j] = np.minimum(rows[i], rows[j]), np.maximum(rows[i], rows[j])
    assert np.array_equal(np.array(rows), np.sort(X, axis=0))


@pytest.mark.parametrize("n", range(1, 13))
def test_selection_network_keeps_what_the_wanted_outputs_need(n):
    X = ((np.arange(2 ** n)[None, :] >> np.arange(n)[:, None]) & 1).astype(np.float64)
    for wanted in {(n // 2,), (max(n // 2 - 1, 0), n // 2), (0, n - 1)}:
        rows = list(X)
        for i, j, lo, hi in selection_network(n, wanted):
            a, b = rows[i], rows[j]
            if lo:
                rows[i] = np.minimum(a, b)
            if hi:
                rows[j] = np.maximum(a, b)
        for p in wanted:
            assert np.array_equal(rows[p], np.sort(X, axis=0)[p])
        assert len(selection_network(n, wanted)) <= len(sorting_network(n))


@settings(max_examples=300, deadline=None)
@given(U=st.tuples(st.integers(1, 12), st.integers(1, 7)).flatmap(
    lambda shape: arrays(np.float64, shape, elements=_VALUES)), data=st.data())
def test_column_median_of_is_the_sorted_median_bit_for_bit(U, data):
    rows = data.draw(st.lists(st.integers(0, len(U) - 1), min_size=1, max_size=NETWORK_ROWS + 2))
    assert _bits_equal(column_median_of(U, rows), _sort_median(U[rows]))
    assert _bits_equal(column_median(U[rows]), _sort_median(U[rows]))


def test_column_median_of_across_blocks():
    rng = np.random.default_rng(5)
    U = rng.choice(np.array([-1.5, -0.0, 0.0, 0.25, 2.0]), size=(9, 20000)) + rng.normal(size=(9, 20000)) * (
        rng.random((9, 20000)) < 0.5)
    for rows in ([0], [1, 2], [3, 4, 5], [0, 2, 4, 6, 8], [8, 7, 6, 5, 4, 3], list(range(8)), list(range(9))):
        assert _bits_equal(column_median_of(U, rows), _sort_median(U[rows]))


def _ranks_reference(U: np.ndarray, t: int) -> np.ndarray:
    ranks = np.empty(U.shape, dtype=np.int64)
    np.put_along_axis(ranks, np.argsort(U, axis=0, kind="stable"), np.arange(len(U))[:, None], axis=0)
    return (ranks >= t) & (ranks < len(U) - t)


@settings(max_examples=300, deadline=None)
@given(U=_ROWS, data=st.data())
def test_kept_by_rank_is_the_stable_rank_mask(U, data):
    t = data.draw(st.integers(0, (len(U) - 1) // 2))
    kept = kept_by_rank(U, t)
    assert np.array_equal(kept, _ranks_reference(U, t))
    agg, _ = trim_columns(U, t)
    assert _bits_equal(agg, np.where(_ranks_reference(U, t), U, 0.0).sum(axis=0) / (len(U) - 2 * t))


def test_kept_by_rank_on_continuous_and_tied_columns():
    rng = np.random.default_rng(6)
    U = rng.normal(size=(20, 3000))
    U[:, :500] = np.round(U[:, :500])      # ties at the edges
    U[:6, 500:700] = 0.0
    U[6:9, 500:700] = -0.0
    for t in (1, 4, 9):
        assert np.array_equal(kept_by_rank(U, t), _ranks_reference(U, t))


@settings(max_examples=300, deadline=None)
@given(V=_ROWS, data=st.data())
def test_merge_groups_adds_as_add_at_does(V, data):
    n = len(V)
    labels = data.draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
    _, group = np.unique(labels, return_inverse=True)
    alpha = np.array(data.draw(st.lists(st.sampled_from([0.0, -0.0, 0.25, 0.5, 1.0]), min_size=n, max_size=n)))
    for got, want in zip(merge_groups(V, alpha, group.ravel()), add_at_merge(V, alpha, group.ravel())):
        assert _bits_equal(got, want)


def test_identical_rows_never_joins_rows_whose_fingerprints_agree():
    U = np.zeros((4, 1000))
    U[0, 1], U[0, 2] = 1.0, -1.0   # columns 1 and 2 are not among the sampled ones; the sums agree
    U[1, 1], U[1, 2] = -1.0, 1.0
    U[3] = -0.0
    assert identical_rows(U).tolist() == [0, 1, 2, 2]


def test_rules_bench_times_each_rule_and_checks_each_kernel(capsys):
    from reshuffle.bench.rules import main

    assert main(["--rows", "9", "--dim", "64", "--rounds", "1", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for line in ("clip-trim", "hammer-anvil", "hammer-signals", "median of", "trimming mask", "merging groups",
                 "identical rows"):
        assert line in out
    assert " NO" not in out
