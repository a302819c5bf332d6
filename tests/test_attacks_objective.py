"""Objective-driven attacks: they move the aggregate further than the acceptance-seeking attack of their family."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.attacks import RoundView, make_attack
from reshuffle.attacks.adaptive import perturbation
from reshuffle.attacks.objective import Candidate, Family, mask_of, pattern_search, support_of
from reshuffle.errors import ConfigError
from reshuffle.server.rules import make_rule
from reshuffle.sim import Simulation, SimConfig

from test_attacks_adaptive import BACKDOOR, H_ROWS, HONEST, M, OWN, craft


def prepared(name, **options):
    a = make_attack(name, **options)
    a.prepare(H_ROWS + M, np.ones(3))
    return a


def aggregate(rule, bad):
    return rule.decide(np.vstack([HONEST, bad]), round=1).aggregate


# The acceptance-seeking attack of each family, and a rule where the objective-driven one moves the aggregate
# further along the attackers' objective (in the same round, with the same rule calls at most).
@pytest.mark.parametrize("name,baseline,rule", [
    ("maxproj-backdoor", "constrain-scale", "flame"),
    ("maxproj-backdoor", "constrain-scale", "multi-krum"),
    ("neurotoxin-maxproj", "constrain-scale", "signguard"),
    ("trim-edge", "constrain-scale", "clip-trim"),
    ("trim-edge", "constrain-scale", "median"),
    ("clip-sparse", "constrain-scale", "norm-bound"),
])
def test_backdoor_objective_beats_acceptance_seeking_scaling(name, baseline, rule):
    r = make_rule(rule, f=M, seed=3)
    b = BACKDOOR / np.linalg.norm(BACKDOOR)
    mine, calls = craft(prepared(name), r)
    theirs, _ = craft(prepared(baseline), r)
    assert calls <= 20
    assert aggregate(r, mine) @ b > 1.2 * (aggregate(r, theirs) @ b) > 0


@pytest.mark.parametrize("direction,rule", [("unit-vec", "cone-clip"), ("sign", "flame"), ("std", "signguard")])
def test_maxdev_beats_agr_tailored_on_the_deviation(direction, rule):
    r = make_rule(rule, f=M, seed=3)
    p = perturbation(HONEST, direction)
    p /= np.linalg.norm(p)
    mu = HONEST.mean(axis=0)
    mine, calls = craft(make_attack("maxdev", direction=direction), r)
    theirs, _ = craft(make_attack("agr-tailored", direction=direction), r)
    assert calls <= 20
    assert (aggregate(r, mine) - mu) @ p > 1.3 * ((aggregate(r, theirs) - mu) @ p) > 0


@pytest.mark.parametrize("name", ["maxproj-backdoor", "neurotoxin-maxproj", "maxdev", "trim-edge", "clip-sparse"])
@pytest.mark.parametrize("max_calls", [1, 7, 20])
def test_call_budget_choices_and_determinism(name, max_calls):
    grid = {"levels": [1.0], "supports": [0.1]} if name in ("trim-edge", "clip-sparse") and max_calls < 20 else {}
    a = prepared(name, max_calls=max_calls, **grid)
    rule = make_rule("cone-clip", f=M)
    first, calls = craft(a, rule, seed=11)
    again, _ = craft(a, rule, seed=11)
    assert 1 <= calls <= max_calls and np.array_equal(first, again)
    assert first.shape == (M, HONEST.shape[1]) and np.isfinite(first).all()
    ch = a.choices()
    keys = {"level", "support"} if grid or name in ("trim-edge", "clip-sparse") else {
        "scale", "placement", "roles", "norm", "mask", "support"}
    assert ch["calls"] == calls and set(ch) >= keys | {"score"}


def test_the_rows_follow_the_declared_family():
    a = prepared("maxproj-backdoor", placements=["mean"], roles=["same"], norms=[0.5], supports=[1.0], max_calls=5)
    bad, _ = craft(a, make_rule("fedavg", f=M))
    # every row at the median honest norm, all alike (the honest mean plus the same payload)
    assert np.allclose(np.linalg.norm(bad, axis=1), np.median(np.linalg.norm(HONEST, axis=1)))
    assert np.allclose(bad, bad[0])
    chain = prepared("maxproj-backdoor", roles=["chain"], placements=["lean"], norms=["none"], supports=[1.0],
                     max_calls=3)
    rows, _ = craft(chain, make_rule("fedavg", f=M))
    # a chain: every row on the same honest row, carrying 1/m, 2/m, ... of the payload
    steps = np.linalg.norm(np.diff(rows, axis=0), axis=1)
    assert np.allclose(steps, steps[0]) and steps[0] > 0


def test_a_sparse_payload_moves_only_its_support_and_coord_rows_shift_by_honest_deviations():
    a = prepared("maxproj-backdoor", placements=["coord"], roles=["same"], norms=["none"], supports=[0.1], max_calls=3)
    bad, _ = craft(a, make_rule("trimmed-mean", f=M))
    payload = OWN.mean(axis=0) - HONEST.mean(axis=0)
    on = support_of(payload, 0.1)
    shift = (bad[0] - HONEST.mean(axis=0)) / HONEST.std(axis=0)
    assert on.sum() == 0.1 * payload.size and np.allclose(shift[~on], 0)
    # every coordinate of the support moves by the same number of honest deviations, in the payload's sign
    assert np.allclose(shift[on], a.choices()["scale"] * np.sign(payload[on]))


def test_the_neurotoxin_payload_leaves_the_busiest_coordinates_alone():
    a = prepared("neurotoxin-maxproj", mask=0.2, placements=["mean"], roles=["same"], norms=["none"], supports=[1.0],
                 max_calls=4)
    bad, _ = craft(a, make_rule("fedavg", f=M))
    mu = HONEST.mean(axis=0)
    busy = ~mask_of(mu, 0.2)
    assert busy.sum() == 0.2 * mu.size
    assert np.allclose(bad[:, busy], mu[busy])  # the payload adds nothing where the honest mean moves most
    assert not np.allclose(bad[:, ~busy], mu[~busy])


@settings(max_examples=30, deadline=None)
@given(st.floats(0.05, 40.0), st.integers(1, 25))
def test_pattern_search_spends_at_most_its_calls_and_keeps_the_best_it_scored(target, calls):
    scored = []

    def score(c):
        s = (-abs(math.log(c.scale / target)) - (c.placement != "lean") - 0.5 * (c.norm is not None),)
        scored.append(s)
        return s

    best, best_score, used = pattern_search(score, Family(), calls)
    assert used == len(scored) <= calls and best_score == max(scored)
    assert Family().scale_min <= best.scale <= Family().scale_max


@pytest.mark.parametrize("options,match", [
    ({"max_calls": 0}, "max_calls"), ({"objective": "deviation"}, "objective"), ({"reference": "oracle"}, "reference"),
    ({"placements": ["inside"]}, "placements"), ({"norms": [1.5]}, "norms"), ({"roles": "same"}, "roles"),
    ({"scale_max": 0}, "scale_max"), ({"scale_max": 0.5}, "scale"), ({"norms": []}, "norms"),
    ({"supports": [0.0]}, "supports"),
])
def test_bad_options_are_refused(options, match):
    with pytest.raises(ConfigError, match=match):
        make_attack("maxproj-backdoor", **options)
    with pytest.raises(ConfigError, match="mask"):
        make_attack("neurotoxin-maxproj", mask=1.0)
    with pytest.raises(ConfigError, match="direction"):
        make_attack("maxdev", direction="up")
    with pytest.raises(ConfigError, match="start"):
        Family(norms=(0.5,))


def test_objectives_that_score_on_the_attackers_data_need_the_lab():
    with pytest.raises(ConfigError, match="lab"):
        craft(make_attack("maxdev", objective="loss"), make_rule("fedavg", f=M))


@pytest.mark.parametrize("attack,options", [("maxproj-backdoor", {"objective": "success"}),
                                            ("maxdev", {"objective": "loss", "max_calls": 6})])
def test_a_simulation_hands_the_lab_and_records_choices_and_shares(attack, options):
    cfg = SimConfig(dataset="digits", model="logreg", clients=6, rounds=2, malicious=0.34, attack=attack,
                    attack_options={"max_calls": 8} | options, rule="cone-clip", shuffle="none", seed=2)
    sim = Simulation(cfg)
    records = sim.run()
    for r in records:
        assert 1 <= r.attack_choices["calls"] <= cfg.attack_options["max_calls"]
        assert 0.0 <= r.malicious_share <= 1.0
    assert sim.result(records)["rounds"][0]["attack_choices"] == records[0].attack_choices


def test_the_lab_trains_and_scores_from_the_global_model():
    sim = Simulation(SimConfig(dataset="digits", model="logreg", clients=4, set_size=4, rounds=1, malicious=0.5,
                               attack="maxproj-backdoor", rule="fedavg", shuffle="none", seed=0))
    lab = sim.attackers.lab(sim.malicious, sim.W_g, sim.training)
    x, y = lab.data(1)
    assert len(y) == len(sim.training.parts[sim.malicious[1]]) and lab.attackers == 2
    u = lab.train(x, y, epochs=2, lr=0.5, seed=3)
    assert u.shape == sim.W_g.shape and np.abs(u).max() > 0
    assert np.array_equal(u, lab.train(x, y, epochs=2, lr=0.5, seed=3))  # the batch order is the seed's
    before, after = lab.score(np.zeros_like(u), x, y), lab.score(u, x, y)
    assert after.loss < before.loss and after.samples == len(y) and 0 <= after.accuracy <= 1
    with pytest.raises(ConfigError, match="shape"):
        lab.score(u[:-1])
    with pytest.raises(ConfigError, match="learning rate"):
        lab.train(x, y, lr=-1.0)
    with pytest.raises(ConfigError, match="rank"):
        lab.data(2)


def test_a_view_without_a_lab_falls_back_to_the_honest_mean_reference():
    a = prepared("maxproj-backdoor", placements=["mean"], roles=["same"], norms=["none"], supports=[1.0], max_calls=2)
    bad = a.craft(RoundView(OWN, HONEST, lambda U: make_rule("fedavg", f=M).decide(U)), np.random.default_rng(0))
    payload = OWN.mean(axis=0) - HONEST.mean(axis=0)
    shift = bad[0] - HONEST.mean(axis=0)
    assert shift @ payload / (np.linalg.norm(shift) * np.linalg.norm(payload)) == pytest.approx(1.0)


def test_candidates_record_as_plain_values():
    c = Candidate(2.0, "mean", "chain", 0.5, 0.1, 0.05)
    assert c.as_dict() == {"scale": 2.0, "placement": "mean", "roles": "chain", "norm": 0.5, "mask": 0.1,
                           "support": 0.05}


def test_trim_edge_rows_sit_at_the_honest_quantile_on_the_support_and_the_median_elsewhere():
    a = prepared("trim-edge", levels=[0.75], supports=[0.1], max_calls=1)
    bad, _ = craft(a, make_rule("clip-trim", f=M))
    payload = OWN.mean(axis=0) - HONEST.mean(axis=0)
    on = support_of(payload, 0.1)
    up = on & (payload > 0)
    down = on & (payload < 0)
    assert np.allclose(bad[0, up], np.quantile(HONEST, 0.75, axis=0)[up])
    assert np.allclose(bad[0, down], np.quantile(HONEST, 0.25, axis=0)[down])
    assert np.allclose(bad[0, ~on], np.median(HONEST, axis=0)[~on]) and np.allclose(bad, bad[0])


def test_clip_sparse_rows_are_short_and_zero_off_their_support():
    a = prepared("clip-sparse", levels=[2.0], supports=[0.01], max_calls=1)
    bad, _ = craft(a, make_rule("norm-bound", f=M))
    payload = OWN.mean(axis=0) - HONEST.mean(axis=0)
    on = support_of(payload, 0.01)
    assert np.allclose(bad[:, ~on], 0) and np.allclose(bad[0, on], 2 * HONEST.std(axis=0)[on] * np.sign(payload[on]))
    assert np.linalg.norm(bad[0]) < np.median(np.linalg.norm(HONEST, axis=1))


@pytest.mark.parametrize("name,options,match", [
    ("trim-edge", {"levels": [0.4]}, "levels"), ("trim-edge", {"supports": [0]}, "supports"),
    ("clip-sparse", {"levels": []}, "levels"), ("clip-sparse", {"max_calls": 5}, "exceed max_calls"),
])
def test_mechanism_attacks_refuse_bad_grids(name, options, match):
    with pytest.raises(ConfigError, match=match):
        make_attack(name, **options)


def test_the_views_decide_rounds_every_row_as_the_upload_does_whatever_it_saw_before():
    sim = Simulation(SimConfig(dataset="digits", model="logreg", clients=6, rounds=1, malicious=0.34,
                               attack="maxproj-backdoor", rule="clip-trim", shuffle="none", seed=1))
    rng = np.random.default_rng(0)
    d = sim.W_g.size
    honest, own = rng.normal(0, 0.01, (4, d)), rng.normal(0, 0.01, (2, d))
    honest_ids = [i for i in range(6) if i not in sim.malicious]
    view = sim.attackers.round_view(own, honest, 1, sim.malicious, sim.W_g, sim.rule, sim.codec, sim.training,
                                    honest_ids)
    rule = sim.rule

    def direct(U):
        W = (U + sim.W_g).astype(np.float32)
        return rule.decide(sim.codec.roundtrip(W.ravel()).reshape(W.shape).astype(np.float64) - sim.W_g, round=1)

    first = np.vstack([honest, own])
    second = first.copy()
    second[5] += 0.5  # one row changes between calls, the others are reused
    for U in (first, second, first, second[:5]):
        assert np.array_equal(view.decide(U).aggregate, direct(U).aggregate)
    assert view.global_model is not sim.W_g and np.array_equal(view.global_model, sim.W_g)
    assert view.lab.attackers == len(sim.malicious)
