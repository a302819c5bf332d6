"""Models that cannot be encoded: a lost row with its cause, and a diverged global model reported as such."""

import numpy as np
import pytest

from reshuffle.clients import NO_LABEL, build_model, get_flat, load_dataset, predict
from reshuffle.sim import SimConfig, Simulation, simulate


def test_predict_names_no_class_where_the_output_is_not_finite():
    # Prepare: a model on the digits, once finite and once with one NaN parameter
    ds = load_dataset("digits")
    model = build_model("logreg", ds.input_shape, ds.num_classes, seed=0)
    W = get_flat(model)
    bad = W.copy()
    bad[0] = np.nan
    # Execute
    good_pred, bad_pred = predict(model, W, ds.x_test), predict(model, bad, ds.x_test)
    # Assert: torch's argmax would name class 0 for NaN logits; predict names none
    assert ((good_pred >= 0) & (good_pred < ds.num_classes)).all()
    assert (bad_pred == NO_LABEL).all()


@pytest.mark.parametrize("mode", ["none", "real"])
def test_an_attack_output_beyond_float32_is_a_lost_row_with_its_cause(mode):
    # Prepare: attackers scale their update by 1e40, beyond float32 (the old run stopped on EncodingError)
    # Clients delivered one by one: with stable sets an attacker's missing row takes its whole set down.
    cfg = SimConfig(rounds=2, clients=8, model="logreg", shuffle=mode, attack="scaling",
                    attack_options={"factor": 1e40}, malicious=0.25, rule="fedavg", stable_sets=False)
    # Execute
    d = simulate(cfg)
    # Assert: every round loses exactly the attackers, each with its cause; the honest rows still train the model
    for r in d["rounds"]:
        assert set(r["lost"]) == set(d["malicious_clients"])
        assert all(c.startswith("attack output: ") and c.endswith("not encodable") for c in r["lost"].values())
        assert r["models_received"] == 6
        assert r["tpr"] is None  # no malicious row reached the rule
        assert not r["diverged"]
    assert d["final_accuracy"] > 0.8


def test_diverged_local_training_loses_every_model_and_the_run_goes_on():
    # Prepare: a learning rate at which every client's SGD overflows to NaN/Inf
    sim = Simulation(SimConfig(rounds=2, clients=8, model="mlp", lr=1e30, shuffle="none"))
    start = float(np.mean(predict(sim.training.model, sim.W_g, sim.data.x_test) == sim.data.y_test))
    # Execute
    recs = sim.run()
    # Assert: no model reaches the PS, every loss is explained, W_g stays the initial model, and the
    # round is marked diverged (every client diverged) and skipped with the reason
    for rec in recs:
        assert rec.models_received == 0
        assert sorted(rec.lost) == list(range(8))
        assert all(c.startswith("local training diverged: ") for c in rec.lost.values())
        assert rec.accuracy == start and rec.diverged
        assert rec.skipped.startswith("no model delivered") and "8 local training diverged" in rec.skipped
    assert np.isfinite(sim.W_g).all()


def test_a_nan_global_model_is_reported_as_diverged_not_as_a_backdoor_hit():
    # Prepare: a BadNets run (target class 0) whose global model has become NaN
    sim = Simulation(SimConfig(rounds=1, clients=8, model="logreg", shuffle="none", attack="badnets",
                               malicious=0.25, rule="fedavg"))
    sim.W_g[:] = np.nan
    # Execute
    rec = sim.step()
    # Assert: NaN outputs count as wrong and never as the target (argmax of NaN logits says class 0)
    assert rec.diverged
    assert rec.accuracy == 0.0
    assert rec.attack_success == 0.0
    assert sorted(rec.lost) == list(range(8)) and rec.models_received == 0
