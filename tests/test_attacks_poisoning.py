"""Fang, Mimic and backdoor attacks: each one's defining property."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.attacks import make_attack
from reshuffle.attacks.backdoor import dba_parts, square_trigger
from reshuffle.errors import ConfigError
from reshuffle.server.rules import Krum, TrimmedMean

RNG = np.random.default_rng


def honest(seed, h=16, d=40, drift=0.01, noise=0.05):
    # honest updates share a drift (the direction training moves) plus SGD noise
    rng = RNG(seed)
    return rng.normal(drift, 0.02, size=d) + rng.normal(0, noise, size=(h, d))


@given(st.integers(0, 2**31), st.integers(1, 4), st.sampled_from([(0.01, 0.05), (0.05, 0.01)]))
@settings(max_examples=30, deadline=None)
def test_fang_krum_is_selected_by_krum_and_points_against_the_drift(seed, m, shape):
    # Prepare
    H = honest(seed, 20 - m, drift=shape[0], noise=shape[1])
    a = make_attack("fang-krum")
    # Execute
    bad = a(H, m, RNG(0))
    chosen = Krum(f=m).select(np.vstack([H, bad]))[0]
    # Assert: all rows equal -λ·sign(μ), λ ≤ the paper's bound
    s = np.sign(H.mean(0))
    assert np.allclose(bad, -a.last_lambda * s)
    assert 0 < a.last_lambda <= a.lambda_bound(H, m)
    # Krum picks a malicious row, or the search ran down to the threshold (the paper's failure case)
    assert chosen >= len(H) or a.last_lambda / 2 < a.threshold
    if shape == (0.01, 0.05):  # noise-dominated updates, as in SGD: the attack wins
        assert chosen >= len(H)
    # maximal up to the halving: twice λ (when still under the bound) is rejected
    if 2 * a.last_lambda <= a.lambda_bound(H, m):
        assert Krum(f=m).select(np.vstack([H, np.tile(-2 * a.last_lambda * s, (m, 1))]))[0] < len(H)


def test_fang_krum_rejects_too_many_attackers():
    with pytest.raises(ConfigError, match="n > 2c"):
        make_attack("fang-krum")(honest(0, h=4), 3, RNG(0))


@given(st.integers(0, 2**31), st.integers(1, 4), st.floats(1.5, 4.0))
@settings(max_examples=30, deadline=None)
def test_fang_trmean_values_lie_beyond_the_honest_extremes(seed, m, b):
    # Prepare: mixed-sign coordinates so every branch of the sampling rule is used
    H = RNG(seed).normal(0, 1, size=(12, 30))
    # Execute
    bad = make_attack("fang-trmean", b=b)(H, m, RNG(seed + 1))
    # Assert
    up = np.sign(H.mean(0)) <= 0
    w_max, w_min = H.max(0), H.min(0)
    tol = 1e-12
    above = (bad >= w_max - tol) & (bad <= np.maximum(b * w_max, w_max / b) + tol)
    below = (bad <= w_min + tol) & (bad >= np.minimum(b * w_min, w_min / b) - tol)
    assert np.all(np.where(up, above, below))
    # so the trimmed mean moves against the honest direction on every coordinate
    shift = TrimmedMean(trim=m)(np.vstack([H, bad])) - TrimmedMean(trim=m)(H)
    assert np.all(np.where(up, shift >= -tol, shift <= tol))


def test_mimic_copies_the_honest_row_furthest_along_the_main_direction():
    # Prepare: honest rows spread along e_0; row 3 lies furthest out
    rng = RNG(5)
    H = rng.normal(0, 0.01, size=(8, 20))
    H[:, 0] += np.array([0.1, -0.2, 0.3, 2.0, -0.1, 0.0, 0.2, -0.3])
    # Execute
    out = make_attack("mimic")(H, 3, rng)
    # Assert
    assert out.shape == (3, 20) and all(np.array_equal(row, H[3]) for row in out)
    assert np.array_equal(make_attack("mimic", target=1)(H, 2, rng)[1], H[1])
    with pytest.raises(ConfigError, match="only 8 honest"):
        make_attack("mimic", target=8)(H, 1, rng)


def images(n=40, seed=0):
    rng = RNG(seed)
    return rng.normal(0, 0.3, size=(n, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, size=n)


def test_badnets_poisons_the_stated_share_with_trigger_and_target():
    # Prepare
    x, y = images()
    a = make_attack("badnets", target=7, poison_fraction=0.25)
    a.prepare(20, x)
    rows, cols = square_trigger(28, 28)
    # Execute
    xp, yp = a.poison_data(x, y, 0, 4, 10, RNG(1))
    # Assert
    changed = np.flatnonzero(np.any(xp != x, axis=(1, 2, 3)))
    assert len(changed) == 10 and np.all(yp[changed] == 7)
    assert np.all(xp[changed][:, :, rows, cols] == x.max())
    untouched = np.setdiff1d(np.arange(40), changed)
    assert np.array_equal(xp[untouched], x[untouched]) and np.array_equal(yp[untouched], y[untouched])
    assert np.array_equal(x, images()[0])  # the input is not modified in place


def test_backdoor_success_counts_non_target_triggered_inputs():
    # Prepare
    x, y = images(50)
    a = make_attack("badnets", target=3)
    a.prepare(20, x)
    rows, cols = square_trigger(28, 28)
    white = x.max()

    def obeys_trigger(inp):  # a fully backdoored model
        hit = np.all(inp[:, 0, rows, cols] == white, axis=1)
        return np.where(hit, 3, 9)

    def clean(inp):
        return np.full(len(inp), 9)

    # Execute / Assert: only non-target inputs count; a clean model scores 0
    assert a.success(obeys_trigger, x, y, 10) == 1.0
    assert a.success(clean, x, y, 10) == 0.0
    seen = []
    a.success(lambda inp: seen.append(len(inp)) or np.zeros(len(inp), int), x, y, 10)
    assert seen == [int(np.sum(y != 3))]


def test_dba_splits_the_global_trigger_among_attackers():
    # Prepare
    x, y = images(30)
    a = make_attack("dba", target=0, poison_fraction=1.0)
    a.prepare(20, x)
    parts = dba_parts(28, 28)
    cells = [set(zip(r.tolist(), c.tolist())) for r, c in parts]
    # Assert: disjoint strips whose union is the global trigger
    assert sum(len(c) for c in cells) == len(set().union(*cells))
    g = a.global_pixels((1, 28, 28))
    assert set(zip(g[0].tolist(), g[1].tolist())) == set().union(*cells)
    for rank in range(5):
        xp, _ = a.poison_data(x, y, rank, 5, 10, RNG(rank))
        diff = np.argwhere(np.any(xp != x, axis=(0, 1)))
        # attacker `rank` touches only its own strip
        assert {tuple(p) for p in diff.tolist()} <= cells[rank % 4]
        assert len(diff) > 0


def test_dba_fits_small_images():
    parts = dba_parts(8, 8)
    assert all(r.max() < 8 and c.max() < 8 for r, c in parts)


def test_model_replacement_scales_by_n_over_eta():
    own = RNG(3).normal(size=(2, 5))
    a = make_attack("model-replacement", eta=2.0)
    with pytest.raises(ConfigError, match="prepare"):
        a(own, 2, RNG(0))
    a.prepare(20, np.zeros((1, 1, 8, 8)))
    assert np.allclose(a(own, 2, RNG(0)), 10.0 * own)
    with pytest.raises(ConfigError, match="eta must be positive"):
        make_attack("model-replacement", eta=0)


def test_backdoor_options_are_checked():
    with pytest.raises(ConfigError, match="poison_fraction"):
        make_attack("badnets", poison_fraction=0)
    with pytest.raises(ConfigError, match="parts"):
        make_attack("dba", parts=1)
    a = make_attack("badnets", target=12)
    a.prepare(4, np.zeros((1, 1, 8, 8)))
    with pytest.raises(ConfigError, match="10 classes"):
        a.poison_data(*images(4), 0, 1, 10, RNG(0))
