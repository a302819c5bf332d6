"""The FL step (reshuffle/server/aggregate.py) and the server optimisers behind it.

The simulator and the Flower ServerApp run the same step: the same rows give
the same W_g in both, also with a rule and an optimiser that carry state from
round to round.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reshuffle.errors import ConfigError
from reshuffle.server import FedAvg, MultiKrum, Rule
from reshuffle.server.aggregate import FLStep, canonical_order
from reshuffle.server.optimizers import SERVER_OPTIMIZERS, make_server_optimizer
from reshuffle.server.rules.base import Decision, check_updates


class Remembering(Rule):
    """A rule with state: it accepts rows no longer than twice the median norm of the rounds it has seen."""

    name = "remembering"

    def __init__(self) -> None:
        self.norms: list[float] = []

    def decide(self, updates, *, round: int = 0) -> Decision:
        U = check_updates(updates)
        norms = np.linalg.norm(U, axis=1)
        self.norms += norms.tolist()
        bound = 2 * float(np.median(self.norms))
        d = Decision.mean_of(U, np.flatnonzero(norms <= bound))
        # The step shrinks with the rounds seen: a rule rebuilt every round would always take the first.
        return Decision(d.aggregate / len(self.norms) * len(U), d.accepted, d.weights)


def _rows(W_g: np.ndarray, T: int) -> list[np.ndarray]:
    """Five models around W_g, one far out, the same for the same (W_g, T)."""
    rng = np.random.default_rng(T)
    rows = [W_g + rng.normal(scale=0.05, size=W_g.size).astype(np.float32) for _ in range(5)]
    rows[T % 5] = rows[T % 5] + np.float32(3.0)
    return rows


# With CRFL's model step too: both drivers clip W_g and draw its noise from (seed, round).
@pytest.mark.parametrize("crfl", [{}, {"model_clip": 1.5, "model_noise": 0.01}])
def test_simulator_and_flower_steps_give_the_same_global_model(monkeypatch, tmp_path, crfl):
    import reshuffle.server
    from reshuffle.flower.app import server_app
    from reshuffle.flower.app.common import settings as flower_settings
    from reshuffle.flower.grid import RoundReport
    from reshuffle.run.config import SimConfig
    from reshuffle.run.delivery import Delivery
    from reshuffle.sim import simulator

    # Prepare: both drivers build their rule with make_rule; each call builds a fresh stateful rule
    built: list[Remembering] = []

    def fresh(*args, **kwargs):
        built.append(Remembering())
        return built[-1]
    monkeypatch.setattr(reshuffle.server, "make_rule", fresh)
    common = {"dataset": "digits", "model": "logreg", "rounds": 3, "seed": 4, "server_opt": "adam", **crfl}
    sim = simulator.Simulation(SimConfig(clients=5, shuffle="none", **common))
    # The simulator's round gets the rows from its channel, the ServerApp's from its grid.
    sim.channel = type("Rows", (), {"deliver": staticmethod(lambda up: Delivery(_rows(up.W_g, up.T)))})()
    run = server_app._Run(flower_settings({k.replace("_", "-"): v for k, v in common.items()}), tmp_path)

    class Grid:
        rounds: list = []
        group_size = None  # one group per round, as the simulator's 5 clients (no stable sets below 5)

        def get_node_ids(self):
            return range(5)

        def group_state(self):
            return None

    def grid_delivery(rgrid, s, T, W_g, cohort):
        return Delivery(_rows(W_g, T), [False] * 5), RoundReport(T, 5, roster=5, replies=5), 0
    monkeypatch.setattr(server_app, "grid_delivery", grid_delivery)
    grid = Grid()
    # Execute: three rounds in each
    for T in (1, 2, 3):
        sim.step()
        run.round(grid, T)
        # Assert: the same global model after every round, bit for bit
        assert sim.W_g.tobytes() == run.W_g.tobytes(), T
    # ... from one rule per driver, which saw every round's rows
    assert len(built) == 2 and all(len(r.norms) == 15 for r in built)
    assert [r.models_accepted for r in run.records] == [4, 4, 4]
    if crfl:
        assert abs(np.linalg.norm(run.W_g.astype(np.float64)) - 1.5) < 0.3  # clipped to 1.5, then σ√650 ≈ 0.25


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_sgd_with_step_one_is_the_plain_mean_step(n, d, seed):
    # The step before server optimisers: W_g + rule(U), rows in canonical order, cast to float32.
    rng = np.random.default_rng(seed)
    W_g = rng.normal(size=d).astype(np.float32)
    models = [(W_g + rng.normal(size=d)).astype(np.float32) for _ in range(n)]
    rule = FedAvg()
    order = canonical_order(models)
    want = (W_g + rule.decide(np.stack([models[j] for j in order]).astype(np.float64) - W_g).aggregate)
    got = FLStep(rule, make_server_optimizer("sgd"))(W_g, models, round=1)
    assert got.W_g.dtype == np.float32 and got.W_g.tobytes() == want.astype(np.float32).tobytes()


def test_the_step_counts_flagged_rows_by_label_and_keeps_w_g_when_the_rule_refuses():
    W_g = np.zeros(4, np.float32)
    models = [np.full(4, v, np.float32) for v in (0.1, 0.12, 0.11, 0.09, 9.0)]
    step = FLStep(MultiKrum(f=1), make_server_optimizer("sgd"), "multi-krum")
    res = step(W_g, models, 1, malicious=[False, False, False, False, True])
    assert res.counts["malicious_rows"] == res.counts["malicious_flagged"] == 1
    assert res.counts["honest_rows"] == 4 and res.counts["honest_flagged"] == 0
    refused = step(W_g, models[:3], 2)
    assert refused.W_g is W_g and refused.decision is None
    assert refused.skipped.startswith("rule 'multi-krum' refused 3 rows: Krum needs n > 2f + 2")


# --------------------------------------------------------------------------- the optimisers
@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["momentum", "adam", "yogi"]), st.integers(1, 5),
       arrays(np.float64, 6, elements=st.floats(-10, 10)))
def test_an_optimiser_restored_from_its_state_continues_identically(name, k, delta):
    W = np.zeros(6, np.float32)
    a, b = make_server_optimizer(name), make_server_optimizer(name)
    for _ in range(k):
        W = a.step(W, delta)
    b.restore(a.state())
    assert a.step(W, delta * 0.5).tobytes() == b.step(W, delta * 0.5).tobytes()


def test_momentum_sums_the_past_steps_geometrically():
    # FedAvgM with a constant Δ: the k-th step is η Δ (1 − β^k) / (1 − β).
    opt = make_server_optimizer("momentum", 0.5, momentum=0.8)
    W, delta = np.zeros(3, np.float32), np.array([1.0, -2.0, 0.25])
    for k in range(1, 6):
        new = opt.step(W, delta)
        np.testing.assert_allclose(new - W, 0.5 * delta * (1 - 0.8 ** k) / (1 - 0.8), rtol=1e-6)
        W = new


@pytest.mark.parametrize("name", ["adam", "yogi"])
def test_adaptive_steps_are_about_lr_per_coordinate_whatever_the_scale(name):
    # m/(√v + τ) normalises each coordinate: updates of very different scales move by about η.
    opt = make_server_optimizer(name, 0.01)
    W = np.zeros(3, np.float32)
    delta = np.array([1e-1, -1e2, 1e3])
    for _ in range(20):
        W = opt.step(W, delta)
    steps = np.abs(W) / 20
    assert np.all(np.sign(W) == np.sign(delta))
    assert np.all((steps > 0.002) & (steps < 0.02)), steps


def test_optimiser_options_are_checked_by_name():
    with pytest.raises(ConfigError, match="no option 'beta'; valid: beta1, beta2, tau"):
        make_server_optimizer("adam", beta=0.9)
    with pytest.raises(ConfigError, match="unknown server optimiser 'adagrad'; choose one of sgd, momentum"):
        make_server_optimizer("adagrad")
    with pytest.raises(ConfigError, match="lr must be a number in"):
        make_server_optimizer("sgd", 0.0)
    with pytest.raises(ConfigError, match="momentum must be a number in"):
        make_server_optimizer("momentum", momentum=1.0)
    assert sorted(SERVER_OPTIMIZERS) == ["adam", "momentum", "sgd", "yogi"]


def test_the_flower_apps_take_their_round_from_the_run_layer_not_the_simulator():
    import ast
    from pathlib import Path

    import reshuffle.flower
    import reshuffle.flower.app.server_app as server_app

    def imported(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | \
            {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    for path in Path(reshuffle.flower.__file__).parent.rglob("*.py"):
        assert not any(m == "reshuffle.sim" or m.startswith("reshuffle.sim.") for m in imported(path)), path
    assert "reshuffle.run.round" in imported(Path(server_app.__file__))
