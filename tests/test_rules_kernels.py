"""The rules' column kernels agree with their definitions: median, identical rows, the trimmed mean."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reshuffle.server.rules.base import column_median, identical_rows
from reshuffle.server.rules.coordinate import trim_columns

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
