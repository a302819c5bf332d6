"""Our rules against ByzFL's (LPD-EPFL/byzfl, a test-only dependency) on random inputs.

ByzFL's package ``__init__`` imports its benchmark, which needs torchvision; the
aggregators themselves need only numpy, torch and scipy. So the package is
registered here without running its ``__init__`` and only ``byzfl.aggregators``
is imported. Install with ``pip install byzfl --no-deps`` (its declared
dependencies would replace the CPU build of torch).

Conventions that differ, by design:

* ByzFL's Krum and Multi-Krum score each row by its n − f − 1 nearest others,
  ours by n − f − 2 (Blanchard et al.): ByzFL's f is our f + 1.
* ByzFL's Multi-Krum always averages n − f rows; ours takes m explicitly.
* ByzFL's CenteredClipping keeps its last output as the next call's centre, so
  each comparison uses a fresh instance (our rule is stateless, from v₀ = 0).
* ByzFL's GeometricMedian starts from 0 and runs exactly T steps: ours with
  ``start="zero"`` and ``tol=0``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.server import NNM, CenteredClipping, Clip, GeometricMedian, Krum, Median, MultiKrum, TrimmedMean
from reshuffle.server.rules.pre import bucket_means


@pytest.fixture(scope="module")
def byzfl():
    spec = importlib.util.find_spec("byzfl")
    if spec is None or spec.submodule_search_locations is None:
        pytest.skip("byzfl is not installed (pip install byzfl --no-deps)")
    pytest.importorskip("scipy")
    if "byzfl" not in sys.modules:
        pkg = types.ModuleType("byzfl")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["byzfl"] = pkg
    return importlib.import_module("byzfl.aggregators")


cases = st.tuples(st.integers(5, 14), st.integers(1, 12), st.integers(0, 2**31))


def _data(n, d, seed):
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n, d)) * rng.uniform(0.01, 10)
    k = int(rng.integers(0, n // 2))
    U[:k] += rng.normal(size=(k, d)) * 50  # some far rows
    return U, rng


@given(cases)
@settings(max_examples=50, deadline=None)
def test_krum_and_multikrum_match_byzfl_with_f_shifted_by_one(byzfl, case):
    U, rng = _data(*case)
    n = U.shape[0]
    f = int(rng.integers(1, (n - 1) // 2 + 1))  # ByzFL needs 2f < n
    # ByzFL's f (n − f − 1 neighbours) is our f − 1 (n − (f − 1) − 2 neighbours).
    assert np.array_equal(byzfl.Krum(f=f)(U.copy()), U[Krum(f - 1).select(U)[0]])
    ours = MultiKrum(f - 1, m=n - f)(U)
    assert np.allclose(byzfl.MultiKrum(f=f)(U.copy()), ours, rtol=0, atol=1e-9 * (1 + np.abs(U).max()))


@given(cases)
@settings(max_examples=50, deadline=None)
def test_median_and_trimmed_mean_match_byzfl(byzfl, case):
    U, rng = _data(*case)
    n = U.shape[0]
    f = int(rng.integers(0, (n - 1) // 2 + 1))
    assert np.array_equal(byzfl.Median()(U.copy()), Median()(U))
    assert np.allclose(byzfl.TrMean(f=f)(U.copy()), TrimmedMean(f)(U), rtol=1e-12, atol=1e-12)


@given(cases, st.sampled_from([0.1, 1e-3, 1e-6]), st.integers(1, 8))
@settings(max_examples=50, deadline=None)
def test_geometric_median_matches_byzfl(byzfl, case, nu, T):
    U, _ = _data(*case)
    theirs = byzfl.GeometricMedian(nu=nu, T=T)(U.copy())
    ours = GeometricMedian(nu=nu, iterations=T, tol=0.0, start="zero")(U)
    assert np.allclose(theirs, ours, rtol=1e-9, atol=1e-9)


@given(cases, st.floats(0.01, 100.0), st.integers(1, 5))
@settings(max_examples=50, deadline=None)
def test_centered_clipping_matches_byzfl(byzfl, case, tau, L):
    U, _ = _data(*case)
    theirs = byzfl.CenteredClipping(L=L, tau=float(tau))(U.copy())  # fresh instance: ByzFL keeps state
    ours = CenteredClipping(tau=tau, iterations=L)(U)
    assert np.allclose(theirs, ours, rtol=1e-9, atol=1e-9)


@given(cases)
@settings(max_examples=50, deadline=None)
def test_nnm_and_clipping_match_byzfl(byzfl, case):
    U, rng = _data(*case)
    f = int(rng.integers(0, U.shape[0]))
    assert np.allclose(byzfl.NNM(f=f)(U.copy()), NNM(f=f)(U).rows, rtol=1e-12, atol=1e-12)
    c = float(np.median(np.linalg.norm(U, axis=1)))
    assert np.allclose(byzfl.Clipping(c=c)(U.copy()), Clip(bound=c)(U).rows, rtol=1e-12, atol=1e-12)


@given(cases, st.integers(1, 6), st.integers(0, 2**31))
@settings(max_examples=50, deadline=None)
def test_bucketing_matches_byzfl_for_the_same_permutation(byzfl, case, s, seed):
    U, _ = _data(*case)
    # ByzFL permutes with numpy's global generator; draw the same permutation from a
    # RandomState with the same seed and give it to our bucketing.
    saved = np.random.get_state()
    try:
        np.random.seed(seed % 2**32)
        theirs = byzfl.Bucketing(s=s)(U.copy())
    finally:
        np.random.set_state(saved)
    perm = np.random.RandomState(seed % 2**32).permutation(U.shape[0])
    ours, _ = bucket_means(U, perm, s)
    assert np.allclose(theirs, ours, rtol=1e-12, atol=1e-12)
