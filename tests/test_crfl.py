"""CRFL's training step on the global model (reshuffle/server/model_step.py): clipping, noise, and its runs."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reshuffle.errors import ConfigError
from reshuffle.server import FedAvg, Krum
from reshuffle.server.aggregate import FLStep
from reshuffle.server.model_step import CRFL
from reshuffle.server.optimizers import make_server_optimizer
from reshuffle.run import checkpoint
from reshuffle.run.config import SimConfig
from reshuffle.sim.simulator import Simulation

TINY = dict(dataset="digits", model="logreg", clients=4, set_size=4, rounds=2, shuffle="none", lr=0.1, seed=5)

vectors = arrays(np.float32, st.integers(1, 64), elements=st.floats(-1e4, 1e4, width=32))


@settings(max_examples=200, deadline=None)
@given(W=vectors, rho=st.floats(1e-3, 1e4))
def test_clipping_bounds_the_norm_and_keeps_the_direction(W, rho):
    out = CRFL(clip=rho, seed=0)(W, round=1)
    assert out.dtype == np.float32 and out.shape == W.shape
    norm = np.linalg.norm(W.astype(np.float64))
    assert np.linalg.norm(out.astype(np.float64)) <= rho
    if norm <= rho:
        assert out.tobytes() == W.tobytes()  # inside the ball: untouched
    else:
        scale = rho / norm
        np.testing.assert_allclose(out, W * scale, rtol=1e-5, atol=1e-6 * rho)


def test_a_boosted_row_cannot_take_the_global_model_past_rho():
    # Model replacement: one row scaled by 10^4 dominates FedAvg's mean; the clipped W_g stays within ρ.
    rng = np.random.default_rng(0)
    W_g = rng.normal(size=500).astype(np.float32)
    honest = [W_g + 0.01 * rng.normal(size=500).astype(np.float32) for _ in range(5)]
    boosted = W_g + np.float32(1e4) * rng.normal(size=500).astype(np.float32)
    plain = FLStep(FedAvg(), make_server_optimizer("sgd"))
    step = FLStep(FedAvg(), make_server_optimizer("sgd"), model_step=CRFL(clip=25.0, seed=0))
    assert np.linalg.norm(plain(W_g, [*honest, boosted], 1).W_g) > 1e4
    assert np.linalg.norm(step(W_g, [*honest, boosted], 1).W_g.astype(np.float64)) <= 25.0


def test_noise_has_the_configured_scale_and_follows_seed_and_round():
    d, sigma = 200_000, 0.05
    step = CRFL(noise=sigma, seed=3)
    zero = np.zeros(d, np.float32)
    n1 = step(zero, round=1).astype(np.float64)
    # The sample std of 200,000 draws is within 1 % of σ with overwhelming probability (its sd is σ/√(2d)).
    assert abs(n1.std() / sigma - 1) < 0.01
    assert abs(n1.mean()) < 5 * sigma / math.sqrt(d)
    assert step(zero, round=1).tobytes() == n1.astype(np.float32).tobytes()  # (seed, round) fixes the draw
    assert CRFL(noise=sigma, seed=3)(zero, round=1).tobytes() == n1.astype(np.float32).tobytes()
    n2 = step(zero, round=2).astype(np.float64)
    other = CRFL(noise=sigma, seed=4)(zero, round=1).astype(np.float64)
    for m in (n2, other):  # independent draws: correlation about 0 (sd 1/√d ≈ 0.002)
        assert abs(np.corrcoef(n1, m)[0, 1]) < 0.02


def test_noise_follows_the_clipping():
    W = np.full(10_000, 1.0, np.float32)  # norm 100
    out = CRFL(clip=10.0, noise=0.01, seed=1)(W, round=7).astype(np.float64)
    # Clipped to 0.1 per coordinate, then noise of sd 0.01 around it.
    assert abs(out.mean() - 0.1) < 0.001 and abs(out.std() - 0.01) < 0.001


@pytest.mark.parametrize("step", [CRFL(), CRFL(clip=None, noise=0.0), CRFL(clip=math.inf, noise=0)])
def test_no_clip_and_no_noise_is_the_identity(step):
    W = np.random.default_rng(1).normal(0, 100, size=1000).astype(np.float32)
    assert step.identity
    assert step(W, round=3).tobytes() == W.tobytes()


@pytest.mark.parametrize("kwargs, needle", [
    (dict(clip=0), "model_clip (CRFL's ρ) must be a positive number"),
    (dict(clip=-1.0), "got -1.0"),
    (dict(clip=math.nan), "got nan"),
    (dict(clip=True), "got True"),
    (dict(clip="1"), "got '1'"),
    (dict(noise=-0.1), "model_noise (CRFL's σ) must be a non-negative finite number, got -0.1"),
    (dict(noise=math.inf), "got inf"),
    (dict(noise=math.nan), "got nan"),
    (dict(noise=False), "got False"),
    (dict(seed=-1), "seed must be a non-negative int"),
])
def test_bad_parameters_are_refused_by_name(kwargs, needle):
    with pytest.raises(ConfigError) as exc:
        CRFL(**kwargs)
    assert needle in str(exc.value)


def test_bad_input_at_call_time_is_refused():
    step = CRFL(clip=1.0)
    with pytest.raises(ConfigError, match=r"shape \(2, 2\)"):
        step(np.ones((2, 2), np.float32), round=1)
    with pytest.raises(ConfigError, match="round must be a non-negative int"):
        step(np.ones(3, np.float32), round=-1)


def test_a_round_the_rule_refuses_keeps_w_g_without_noise():
    W_g = np.ones(20, np.float32)
    step = FLStep(Krum(f=2), make_server_optimizer("sgd"), model_step=CRFL(clip=1.0, noise=0.5, seed=0))
    res = step(W_g, [W_g + 1, W_g - 1, W_g], 1)  # Krum needs n > 2f + 2
    assert res.skipped and res.W_g is W_g


@pytest.mark.parametrize("values, needle", [
    (dict(model_clip=0.0), "model_clip (CRFL's ρ) must be a positive number"),
    (dict(model_clip=math.inf), "model_clip must be finite"),
    (dict(model_noise=-1.0), "model_noise (CRFL's σ) must be a non-negative finite number"),
])
def test_simconfig_refuses_bad_settings(values, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        SimConfig(**TINY, **values).validated()


@pytest.mark.parametrize("args, needle", [
    (["--model-clip", "0"], "must be positive"),
    (["--model-noise", "-0.5"], "must be >= 0"),
    (["--model-noise", "inf"], "must be >= 0 and finite"),
])
def test_cli_refuses_bad_values(args, needle, capsys):
    from reshuffle.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--quiet", *args])
    assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_a_run_with_crfl_is_reproducible_and_clipped(tmp_path):
    cfg = SimConfig(**TINY, model_clip=2.0, model_noise=0.001)
    a, b = Simulation(cfg), Simulation(cfg)
    ra, rb = a.run(), b.run()
    assert a.W_g.tobytes() == b.W_g.tobytes()
    assert [r.accuracy for r in ra] == [r.accuracy for r in rb]
    plain = Simulation(SimConfig(**TINY))
    plain.run()
    assert np.linalg.norm(plain.W_g) > 2.5  # the clipping binds in this run
    # Clipped to 2, then noise of norm about σ√d (d = 650 here: 0.025).
    assert abs(np.linalg.norm(a.W_g.astype(np.float64)) - 2.0) < 0.1
    other = Simulation(SimConfig(**{**TINY, "seed": 6}, model_clip=2.0, model_noise=0.001))
    other.run()
    assert other.W_g.tobytes() != a.W_g.tobytes()


def test_crfl_settings_are_recorded_and_a_resumed_run_draws_the_same_noise(tmp_path):
    cfg = SimConfig(**{**TINY, "rounds": 3}, model_clip=2.0, model_noise=0.01)
    whole = Simulation(cfg)
    whole.run()
    first = Simulation(cfg)
    recs = [first.step()]
    checkpoint.save(tmp_path, checkpoint.simulation_checkpoint(first, recs))
    cfg2, ck = checkpoint.load_simulation(tmp_path)
    assert (cfg2.model_clip, cfg2.model_noise) == (2.0, 0.01)
    second = Simulation(cfg2)
    second.run(records=checkpoint.restore_simulation(second, ck))
    assert second.W_g.tobytes() == whole.W_g.tobytes()
    m = json.loads(json.dumps(whole.result([])))
    assert (m["config"]["model_clip"], m["config"]["model_noise"]) == (2.0, 0.01)


def test_cli_options_reach_the_run(tmp_path):
    from reshuffle.cli import main

    out = tmp_path / "out"
    assert main(["simulate", "--quiet", "--dataset", "digits", "--model", "logreg", "--clients", "4", "--set-size",
                 "4", "--rounds", "1", "--shuffle", "none", "--model-clip", "1.5", "--model-noise", "0.002",
                 "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert (m["config"]["model_clip"], m["config"]["model_noise"]) == (1.5, 0.002)
