"""Backdoor energy (MARS's per-neuron Lipschitz bounds): the ``energy`` signal, and the probe that measures it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reshuffle.errors import ConfigError
from reshuffle.evaluation.energy import above, probe
from reshuffle.server.rules import make_rule
from reshuffle.server.rules.base import decide_in_context
from reshuffle.server.rules.signals import concentrated_energy, model_energy, neuron_energy
from reshuffle.sim import SimConfig, Simulation

values = arrays(np.float64, st.integers(1, 12), elements=st.floats(-100, 100))

#: A two-layer MLP's flat layout: 30 hidden neurons of 20 inputs, their biases, 10 outputs.
LAYOUT = (("fc1.weight", (30, 20)), ("fc1.bias", (30,)), ("fc2.weight", (10, 30)), ("fc2.bias", (10,)))
D = 600 + 30 + 300 + 10


def test_a_convolution_channel_energy_is_its_kernel_matrix_largest_singular_value():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 2, 3, 3))
    want = [np.linalg.norm(w[c].reshape(2, 9), 2) for c in range(3)]
    assert np.allclose(neuron_energy(w), want)
    # A rank-one channel: u vᵀ has the one singular value |u|·|v|.
    u, v = np.array([3.0, 4.0]), np.array([1.0, 0, 0, 0, 0, 0, 0, 0, 0])
    assert neuron_energy(np.outer(u, v).reshape(1, 2, 3, 3))[0] == pytest.approx(5.0)


def test_the_concentrated_energy_keeps_the_top_share_of_each_weight_layer_and_skips_biases():
    layout = [("fc1.weight", (20, 3)), ("fc1.bias", (20,)), ("fc2.weight", (2, 20))]
    W1 = np.zeros((20, 3))
    W1[:, 0] = np.arange(20)  # neuron i has energy i
    flat = np.concatenate([W1.ravel(), np.full(20, 99.0), np.ones(40)])
    c = concentrated_energy(flat, layout, share=0.1)
    assert len(c) == 2  # the bias is not a layer of neurons
    assert c[0].tolist() == [19.0, 18.0]  # 10 % of 20 neurons, largest first
    assert c[1].tolist() == [pytest.approx(np.sqrt(20))]  # at least one neuron per layer


def test_one_boosted_neuron_raises_a_models_energy():
    rng = np.random.default_rng(1)
    base = rng.normal(size=D)
    boosted = base.copy()
    boosted[:20] *= 20.0  # hidden neuron 0
    e = model_energy(np.stack([base, boosted]), LAYOUT)
    assert e[1] > e[0]
    assert model_energy(base[None], LAYOUT)[0] == pytest.approx(e[0])


def test_bad_shares_layouts_and_missing_context_are_refused_with_their_reason():
    with pytest.raises(ConfigError, match="energy share"):
        concentrated_energy(np.zeros(4), [("w.weight", (2, 2))], share=0.0)
    with pytest.raises(ConfigError, match="covers 4 coordinates, the rows have 5"):
        concentrated_energy(np.zeros(5), [("w.weight", (2, 2))])
    with pytest.raises(ConfigError, match="positive sizes"):
        concentrated_energy(np.zeros(4), [("w.weight", (0, 4))])
    rule = make_rule("energy", 1)
    U = np.zeros((5, D))
    with pytest.raises(ConfigError, match="needs the model's layout"):
        rule.decide(U, global_model=np.zeros(D))
    with pytest.raises(ConfigError, match="needs W_g"):
        rule.decide(U, layout=LAYOUT)
    with pytest.raises(ConfigError, match="W_g must be"):
        rule.decide(U, layout=LAYOUT, global_model=np.full(D, np.nan))
    with pytest.raises(ConfigError, match="both sides"):
        above(np.array([1.0]), np.array([]))


def honest_round(rng: np.random.Generator, n: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """W_g and n non-IID honest updates: four groups, each its own drift, small against W_g."""
    W = rng.normal(scale=0.3, size=D)
    drift = rng.normal(scale=0.02, size=(4, D))
    return W, drift[np.arange(n) % 4] + rng.normal(scale=0.01, size=(n, D))


@pytest.mark.parametrize("seed", range(4))
def test_energy_zeroes_models_whose_neurons_a_backdoor_boosted_and_keeps_every_honest_row(seed):
    """The attack it stops: four colluders train a trigger into two hidden neurons (their rows scaled up on
    those neurons' inputs); the clean round flags no honest row."""
    rng = np.random.default_rng(seed)
    W, U = honest_round(rng)
    rule = make_rule("energy", 4)
    clean = decide_in_context(rule, U, 1, global_model=W, layout=LAYOUT)
    assert clean.accepted == tuple(range(20)) and (rule.alpha == 1).all()
    bad = U.copy()
    bad[:4, :40] += 0.6 * np.sign(W[:40])  # neurons 0 and 1 of fc1 grow in every attacker's model
    d = decide_in_context(rule, bad, 1, global_model=W, layout=LAYOUT)
    assert (rule.alpha[:4] == 0).all() and (rule.alpha[4:] == 1).all()
    assert d.accepted == tuple(range(4, 20))


def test_energy_under_hammer_anvil_takes_the_layout_through_the_composite():
    rng = np.random.default_rng(7)
    W, U = honest_round(rng)
    U[:4, :40] += 0.6 * np.sign(W[:40])
    rule = make_rule("hammer-anvil", 4, signals=["energy"])
    assert {"layout", "global_model", "pseudonyms"} <= rule.context
    d = decide_in_context(rule, U, 1, pseudonyms=[f"p{i}" for i in range(20)], global_model=W, layout=LAYOUT)
    assert (rule.signals[0].alpha[:4] == 0).all() and (d.weights[:4] == 0).all()


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


def test_the_simulator_and_the_attackers_copy_give_the_energy_rule_the_models_layout():
    """Deployed and replayed, the rule reads the same layers: the attackers' view decides as the server does."""
    sim = Simulation(SimConfig(dataset="digits", model="mlp", clients=6, rounds=1, malicious=0.34,
                               attack="scaling", rule="energy", shuffle="none", seed=1))
    assert sim.rounds.fl.layout == sim.training.layout.entries
    rng = np.random.default_rng(0)
    d = sim.W_g.size
    honest, own = rng.normal(0, 0.01, (4, d)), rng.normal(0, 0.01, (2, d))
    own[:, :64] += 1.0  # hidden neuron 0's inputs, in the attackers' rows
    view = sim.attackers.round_view(own, honest, 1, sim.malicious, sim.W_g, sim.rule, sim.codec, sim.training,
                                    [i for i in range(6) if i not in sim.malicious])
    U = np.vstack([honest, own])
    W = (U + sim.W_g).astype(np.float32)
    rows = sim.codec.roundtrip(W.ravel()).reshape(W.shape).astype(np.float64) - sim.W_g
    direct = decide_in_context(sim.rule, rows, 1, global_model=sim.W_g, layout=sim.training.layout.entries)
    seen = view.decide(U)
    assert seen.accepted == direct.accepted == (0, 1, 2, 3)
    assert np.array_equal(seen.aggregate, direct.aggregate)
    assert sim.run()[-1].models_accepted >= 1  # the deployed step runs with the layout too
