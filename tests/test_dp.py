"""Client-side DP: the Gaussian sampler, the mechanism, the accountant and the simulator's options."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from reshuffle.crypto.rand import SeededRandom
from reshuffle.errors import ConfigError
from reshuffle.privacy import ClientDP, epsilon, gaussian, noise_for_epsilon
from reshuffle.sim import Simulation
from reshuffle.run.config import SimConfig


def test_gaussian_samples_are_standard_normal():
    x = gaussian(200_001, SeededRandom(1, b"test"))
    assert x.shape == (200_001,) and x.dtype == np.float64
    assert stats.kstest(x, "norm").pvalue > 1e-3
    assert abs(x.mean()) < 0.01 and abs(x.std() - 1) < 0.01


def test_gaussian_noise_comes_from_the_source_given():
    # The same cryptographic stream gives the same noise; another stream, other noise; numpy's
    # global generator plays no part.
    a = gaussian(1000, SeededRandom(7, b"a"))
    np.random.seed(0)
    b = gaussian(1000, SeededRandom(7, b"a"))
    np.random.seed(1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, gaussian(1000, SeededRandom(8, b"a")))
    assert not np.array_equal(gaussian(1000), gaussian(1000))  # OS randomness by default


@settings(max_examples=40, deadline=None)
@given(st.floats(0.01, 10), st.floats(0.0, 100), st.integers(0, 2**32 - 1))
def test_privatize_clips_the_update_to_the_norm(clip, scale, seed):
    rng = np.random.default_rng(seed)
    W_g = rng.normal(size=50).astype(np.float32)
    W = (W_g + scale * rng.normal(size=50)).astype(np.float32)
    out = ClientDP(clip, 0.0).privatize(W, W_g)
    U, V = W.astype(np.float64) - W_g, out.astype(np.float64) - W_g
    assert np.linalg.norm(V) <= clip * (1 + 1e-5) + 1e-5
    if np.linalg.norm(U) <= clip:
        assert np.allclose(V, U, atol=1e-5)
    elif np.linalg.norm(U) > 0:
        assert np.allclose(V / np.linalg.norm(V), U / np.linalg.norm(U), atol=1e-4)


def test_privatize_adds_noise_of_noise_times_clip():
    W_g = np.zeros(100_000, np.float32)
    out = ClientDP(clip=2.0, noise=0.5, rng=SeededRandom(3, b"dp")).privatize(W_g, W_g)
    assert out.dtype == np.float32
    assert out.std() == pytest.approx(1.0, rel=0.02)


def test_epsilon_matches_the_analytic_gaussian_mechanism():
    # One upload: the Gaussian mechanism with sensitivity 2C and std z·C, i.e. sigma = z/2 in units of the
    # sensitivity; its exact delta(eps) (Balle and Wang, ICML 2018) at the accountant's eps is delta.
    for z in (1.0, 2.0, 4.0):
        sigma, delta = z / 2, 1e-5
        eps = epsilon(z, 1, delta)
        exact = stats.norm.cdf(0.5 / sigma - eps * sigma) - math.exp(eps) * stats.norm.cdf(-0.5 / sigma - eps * sigma)
        assert exact <= delta * 1.001  # the accountant is never optimistic...
        assert exact >= delta * 0.8  # ...and close
    assert epsilon(1.0, 0) == 0.0 and epsilon(0.0, 3) == math.inf


def test_epsilon_grows_with_uploads_and_falls_with_noise():
    assert epsilon(2.0, 1) < epsilon(2.0, 5) < epsilon(2.0, 30)
    assert epsilon(1.0, 10) > epsilon(2.0, 10) > epsilon(8.0, 10)
    # Tiny noise: a huge but finite ε, within bounded memory (a fixed 1e-4 PLD grid needed over 20 GB here).
    assert 1e5 < epsilon(0.005, 30) < math.inf


def test_noise_for_epsilon_is_the_smallest_that_meets_the_target():
    z = noise_for_epsilon(4.0, 10)
    assert epsilon(z, 10) <= 4.0 < epsilon(z * 0.99, 10)


@pytest.mark.parametrize("bad, match", [
    (dict(dp_noise=1.0), "needs dp_clip"),
    (dict(dp_clip=-1.0), "must be"),
    (dict(dp_clip=1.0, dp_noise=-0.5), "must be"),
    (dict(dp_clip=1.0, dp_noise=1.0, dp_delta=1.5), "delta"),
])
def test_bad_dp_options_are_refused(bad, match):
    with pytest.raises(ConfigError, match=match):
        SimConfig(dataset="digits", **bad).validated()


def test_a_simulation_records_epsilon_and_strong_noise_stops_the_linker():
    base = dict(dataset="digits", model="mlp", clients=16, fraction=0.25, rounds=8, seed=11, shuffle="ideal",
                partition="dirichlet", alpha=0.3, batch_size=16, linker=True, dp_clip=1.0,
                stable_sets=False)  # per-client sampling: the setting in which the content link names senders
    clipped = Simulation(SimConfig(**base)).run()
    noisy = Simulation(SimConfig(**base, dp_noise=2.0)).run()
    assert all(r.dp_epsilon is None for r in clipped)  # clipping alone: no finite epsilon
    eps = [r.dp_epsilon for r in noisy]
    assert all(e is not None and e > 0 for e in eps) and eps == sorted(eps)
    f0, f1 = clipped[-1].linking, noisy[-1].linking
    assert f0["linker_correct"] >= 0.6 * f0["models"]
    assert f1["linker_correct"] <= 3 * f1["chance"] + 2
