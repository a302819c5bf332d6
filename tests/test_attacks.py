"""Attacks: each one's defining property, and the registry."""

from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.attacks import Attack, attack_names, make_attack, register_attack
from reshuffle.errors import ConfigError
from reshuffle.server.rules import pairwise_sq_distances

RNG = np.random.default_rng


def test_registry_has_the_cli_names():
    assert set(attack_names()) >= {
        "label-flip", "sign-flip", "gaussian", "scaling", "alie", "ipm", "min-max", "min-sum", "none"
    }
    with pytest.raises(ConfigError, match="unknown attack 'lie'"):
        make_attack("lie")
    with pytest.raises(ConfigError, match="unexpected keyword"):
        make_attack("ipm", eps=1)


def test_user_attack_in_a_few_lines():
    @register_attack("test-zero")
    class Zero(Attack):
        def __call__(self, observed, m, rng):
            return np.zeros((m, observed.shape[1]))

    assert make_attack("test-zero")(np.ones((2, 3)), 2, RNG(0)).tolist() == [[0.0] * 3] * 2
    with pytest.raises(ConfigError, match="already registered"):
        register_attack("test-zero")(Zero)


def test_own_update_attacks():
    own = np.array([[1.0, -2.0], [0.5, 0.5]])
    assert np.array_equal(make_attack("sign-flip")(own, 2, RNG(0)), -own)
    assert np.array_equal(make_attack("scaling", factor=4)(own, 2, RNG(0)), 4 * own)
    assert np.array_equal(make_attack("none")(own, 2, RNG(0)), own)
    with pytest.raises(ConfigError, match="expected the 3 attackers' own updates"):
        make_attack("sign-flip")(own, 3, RNG(0))
    with pytest.raises(ConfigError, match="positive"):
        make_attack("scaling", factor=0)


def test_gaussian_has_the_stated_scale():
    out = make_attack("gaussian", sigma=2.0)(np.zeros((3, 20000)), 3, RNG(1))
    assert out.shape == (3, 20000) and abs(out.std() - 2.0) < 0.02 and abs(out.mean()) < 0.02


def test_label_flip_and_its_success_metric():
    a = make_attack("label-flip")
    y = np.arange(10)
    assert a.poison_labels(y, 10).tolist() == list(range(9, -1, -1))
    assert a.success(lambda x: 9 - y, None, y, 10) == 1.0 and a.success(lambda x: y, None, y, 10) == 0.0


@given(st.integers(3, 12), st.integers(1, 4), st.integers(0, 2**31))
@settings(max_examples=30, deadline=None)
def test_alie_is_mean_minus_z_std(h, m, seed):
    H = RNG(seed).normal(size=(h, 7))
    n = h + m
    z = NormalDist().inv_cdf(min((n - (n // 2 + 1 - m)) / n, 1 - 1e-6))  # clamped when s <= 0
    out = make_attack("alie")(H, m, RNG(0))
    assert out.shape == (m, 7)
    assert np.allclose(out, H.mean(0) - z * H.std(0))


def test_ipm_points_against_the_mean():
    H = RNG(2).normal(1.0, 0.1, size=(6, 30))
    out = make_attack("ipm", epsilon=0.5)(H, 2, RNG(0))
    assert np.allclose(out[0], -0.5 * H.mean(0)) and out[0] @ H.mean(0) < 0


@given(st.integers(3, 10), st.integers(0, 2**31), st.sampled_from(["std", "unit-vec", "sign"]))
@settings(max_examples=40, deadline=None)
def test_min_max_is_the_largest_allowed_step(h, seed, pert):
    H = RNG(seed).normal(size=(h, 16))
    a = make_attack("min-max", perturbation=pert)
    mal = a(H, 2, RNG(0))[0]
    bound = pairwise_sq_distances(H).max()
    worst = ((H - mal) ** 2).sum(1).max()
    assert worst <= bound * (1 + 1e-9)
    # maximal: a 1% longer step breaks the constraint
    mu = H.mean(0)
    longer = mu + 1.01 * (mal - mu)
    assert ((H - longer) ** 2).sum(1).max() > bound


@given(st.integers(3, 10), st.integers(0, 2**31))
@settings(max_examples=40, deadline=None)
def test_min_sum_is_the_largest_allowed_step(h, seed):
    H = RNG(seed).normal(size=(h, 16))
    mal = make_attack("min-sum")(H, 1, RNG(0))[0]
    bound = pairwise_sq_distances(H).sum(1).max()
    assert ((H - mal) ** 2).sum() == pytest.approx(bound, rel=1e-9)


def test_omniscient_attacks_need_honest_updates():
    with pytest.raises(ConfigError, match="at least 2 honest"):
        make_attack("alie")(np.zeros((1, 3)), 2, RNG(0))


def test_idle_attackers_train_nothing_and_upload_the_global_model():
    from reshuffle.sim.attackers import Attackers

    a = Attackers(make_attack("idle"), "idle", [1, 2], seed=3)
    assert a.attacked and a.trained([0, 1, 2, 3]) == [0, 3]  # their data never enters a round
    W_g = RNG(0).normal(size=6).astype(np.float32).astype(np.float64)
    models = {i: W_g + RNG(i).normal(size=6) for i in range(4)}
    honest = {i: models[i].copy() for i in (0, 3)}
    assert a.apply(models, 1, W_g, {}, rule=None, codec=None, training=None) == {}
    assert all(np.array_equal(models[i], W_g) for i in (1, 2))
    assert all(np.array_equal(models[i], honest[i]) for i in (0, 3))
