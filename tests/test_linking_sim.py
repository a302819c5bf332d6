"""The linker as a simulation metric: real training, the simulator's cohort sampling and dropouts."""

import pytest

from reshuffle.sim import Simulation
from reshuffle.run.config import SimConfig
from tests.test_checkpoint import _comparable, _resumed

# Per-client sampling and delivery (what the linker exploits); the stable sets' tests turn the default back on.
BASE = dict(dataset="digits", partition="dirichlet", alpha=0.3, seed=11, shuffle="ideal", batch_size=16,
            linker=True, stable_sets=False)


def last(cfg: SimConfig) -> dict:
    return Simulation(cfg).run()[-1].linking


def test_cohort_sampling_lets_the_linker_name_most_senders():
    # The mechanism at test scale: 16 clients, 4 sampled per round, MLP, 8 rounds.
    f = last(SimConfig(**BASE, model="mlp", clients=16, fraction=0.25, rounds=8))
    assert f["models"] == 32
    assert f["linker_correct"] >= 0.6 * f["models"]
    assert f["linker_correct"] >= 3 * f["chance"]
    assert f["linker_correct"] <= f["bound_named"]


@pytest.mark.parametrize("extra", [dict(model="mlp", clients=16, fraction=0.25),  # the test above
                                   dict(model="logreg", clients=8, dropout=0.125)])  # the test below
def test_stable_sets_hold_the_linker_to_guessing_within_the_set(extra):
    # The federations that name most senders, with the default: stable sets (of 4 here), sampled whole,
    # delivered all or none (a set with the round's dropout delivers nothing).
    f = last(SimConfig(**{**BASE, "stable_sets": True}, rounds=8, set_size=4, **extra))
    assert f["models"] >= 16
    assert f["nearest_same"] > 0.5  # the models still link...
    assert f["bound_mean_set"] == 4  # ...but every sender stays among its set
    assert f["bound_named"] == 0 and f["linker_named"] == 0
    assert f["linker_correct"] <= f["bound_expected"] + 0.10 * f["models"]
    assert f["bound_expected"] == f["models"] / 4


def test_one_dropout_per_round_lets_the_linker_name_senders():
    f = last(SimConfig(**BASE, model="logreg", clients=8, dropout=0.125, rounds=8))
    assert f["bound_named"] > 0
    assert f["linker_correct"] >= 0.8 * f["bound_named"]


def test_a_roster_that_never_changes_names_no_one(tmp_path):
    cfg = SimConfig(**BASE, model="logreg", clients=6, rounds=4)
    whole = Simulation(cfg)
    want = whole.run()
    f = want[-1].linking
    assert f["nearest_same"] > 0.8  # the models link...
    assert (f["bound_named"], f["linker_named"], f["linker_correct"]) == (0, 0, 0)  # ...the roster names no one
    assert f["bound_mean_set"] == 6
    # The metric's history is in the checkpoint: a resumed run scores the same figures.
    sim, got = _resumed(cfg, 2, tmp_path)
    assert _comparable(sim.result(got), False) == _comparable(whole.result(want), False)


def test_without_the_option_no_figures_are_recorded():
    rec = Simulation(SimConfig(**{**BASE, "linker": False}, model="logreg", clients=4, rounds=1)).run()[-1]
    assert rec.linking is None and rec.dp_epsilon is None
    assert "linking" not in rec.seconds


@pytest.mark.parametrize("bad", [dict(linker=1)])
def test_bad_linker_option_is_refused(bad):
    from reshuffle.errors import ConfigError

    with pytest.raises(ConfigError, match="linker"):
        SimConfig(**{**BASE, **bad}).validated()
