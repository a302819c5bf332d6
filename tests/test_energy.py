"""Backdoor energy (MARS's per-neuron Lipschitz bounds) of delivered models, and the probe that measures it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reshuffle.errors import ConfigError
from reshuffle.evaluation.energy import above, concentrated_energy, neuron_energy, probe, round_energy

values = arrays(np.float64, st.integers(1, 12), elements=st.floats(-100, 100))


def test_a_convolution_channel_energy_is_its_kernel_matrix_largest_singular_value():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 2, 3, 3))
    want = [np.linalg.norm(w[c].reshape(2, 9), 2) for c in range(3)]
    assert np.allclose(neuron_energy(w), want)
    # A rank-one channel: u vᵀ has the one singular value |u|·|v|.
    u, v = np.array([3.0, 4.0]), np.array([1.0, 0, 0, 0, 0, 0, 0, 0, 0])
    assert neuron_energy(np.outer(u, v).reshape(1, 2, 3, 3))[0] == pytest.approx(5.0)


def test_the_cbe_keeps_the_top_share_of_each_weight_layer_and_skips_biases():
    names = ["fc1.weight", "fc1.bias", "fc2.weight"]
    shapes = [(20, 3), (20,), (2, 20)]
    W1 = np.zeros((20, 3))
    W1[:, 0] = np.arange(20)  # neuron i has energy i
    flat = np.concatenate([W1.ravel(), np.full(20, 99.0), np.ones(40)])
    c = concentrated_energy(flat, names, shapes, kappa=0.1)
    assert len(c) == 2  # the bias is not a layer of neurons
    assert c[0].tolist() == [19.0, 18.0]  # 10 % of 20 neurons, largest first
    assert c[1].tolist() == [pytest.approx(np.sqrt(20))]  # at least one neuron per layer


def test_one_boosted_neuron_raises_a_models_energy_and_nothing_else_does():
    names, shapes = ["a.weight", "b.weight"], [(10, 4), (3, 10)]
    rng = np.random.default_rng(1)
    base = rng.normal(size=70)
    boosted = base.copy()
    boosted[:4] *= 20.0  # neuron 0 of layer a
    e = round_energy(np.stack([base, boosted]), names, shapes)
    assert e[1] > e[0]
    assert round_energy(np.stack([base]), names, shapes)[0] == pytest.approx(e[0])


def test_bad_kappa_and_a_layout_of_another_size_are_refused():
    with pytest.raises(ConfigError, match="kappa"):
        concentrated_energy(np.zeros(4), ["w.weight"], [(2, 2)], kappa=0.0)
    with pytest.raises(ConfigError, match="5 entries for a layout of 4"):
        concentrated_energy(np.zeros(5), ["w.weight"], [(2, 2)])
    with pytest.raises(ConfigError, match="both sides"):
        above(np.array([1.0]), np.array([]))


@settings(max_examples=100, deadline=None)
@given(a=values, b=values)
def test_the_auc_of_a_against_b_and_of_b_against_a_add_to_one(a, b):
    assert above(a, b) + above(b, a) == pytest.approx(1.0)
    assert 0.0 <= above(a, b) <= 1.0


def test_the_probe_sees_boosted_attackers_above_every_honest_model():
    # Two of five clients upload 30 times their honest update: every round, their models have more energy.
    rounds = probe(dict(dataset="digits", model="mlp", clients=5, set_size=5, rounds=2, shuffle="none", lr=0.1,
                        seed=3, malicious=0.4, attack="scaling", attack_options={"factor": 30.0}))
    assert [r.round for r in rounds] == [1, 2]
    assert all(r.auc == 1.0 and len(r.attackers) == 2 and min(r.attackers) > r.honest_max for r in rounds)
