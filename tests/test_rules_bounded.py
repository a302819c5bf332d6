"""norm-bound and robust-lr: what each bounds, and the attacks each is known to stop or not."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reshuffle.errors import ConfigError
from reshuffle.server.rules import make_rule
from reshuffle.server.rules.coordinate import coordinate_ranks, trim_columns

ROWS = arrays(np.float64, st.tuples(st.integers(3, 12), st.integers(1, 6)),
              elements=st.floats(-1e3, 1e3, allow_nan=False, width=64))


@settings(max_examples=60, deadline=None)
@given(ROWS)
def test_norm_bound_keeps_the_aggregate_within_the_median_norm(U):
    d = make_rule("norm-bound", f=1, seed=0).decide(U)
    S = np.median(np.linalg.norm(U, axis=1))
    assert np.linalg.norm(d.aggregate) <= S * (1 + 1e-9) + 1e-9
    assert d.accepted == tuple(range(len(U))) and ((d.weights >= 0) & (d.weights <= 1)).all()


def test_norm_bound_noise_is_the_rounds_and_scales_with_the_bound():
    U = np.random.default_rng(0).normal(size=(9, 5000))
    rule = make_rule("norm-bound", f=2, seed=4, noise=0.01)
    a, again, other = rule.decide(U, round=3), rule.decide(U, round=3), rule.decide(U, round=4)
    assert np.array_equal(a.aggregate, again.aggregate) and not np.array_equal(a.aggregate, other.aggregate)
    quiet = make_rule("norm-bound", f=2, seed=4).decide(U, round=3).aggregate
    S = np.median(np.linalg.norm(U, axis=1))
    assert np.std(a.aggregate - quiet) == pytest.approx(0.01 * S, rel=0.05)


def test_a_boosted_row_weighs_no_more_than_a_median_row():
    honest = np.tile([1.0, 0.0], (8, 1)) + np.random.default_rng(1).normal(0, 0.01, (8, 2))
    boosted = np.vstack([honest, [[0.0, 1000.0]]])
    d = make_rule("norm-bound", f=1).decide(boosted)
    S = np.median(np.linalg.norm(boosted, axis=1))
    assert d.weights[-1] * 1000.0 == pytest.approx(S) and d.aggregate[0] > 0.85


def test_robust_lr_reverses_what_only_the_attackers_agree_on():
    rng = np.random.default_rng(2)
    honest = np.column_stack([1 + 0.1 * rng.random(16), rng.normal(0, 1, 16)])   # coordinate 0 agreed, 1 noise
    attackers = np.tile([1.0, 3.0], (4, 1))                                       # they push coordinate 1 up
    U = np.vstack([honest, attackers])
    votes = abs(np.sign(U[:, 1]).sum())
    agg = make_rule("robust-lr", f=4, theta=9, clip=False).decide(U).aggregate
    mean = U.mean(axis=0)
    assert agg[0] == pytest.approx(mean[0])
    assert votes < 9 and agg[1] == pytest.approx(-mean[1])   # no agreement: the server steps against the mean
    dropped = make_rule("robust-lr", f=4, theta=9, flip=0, clip=False).decide(U).aggregate
    assert dropped[1] == 0 and dropped[0] == pytest.approx(mean[0])


def test_robust_lr_theta_defaults_to_f_plus_one():
    assert make_rule("robust-lr", f=4).theta == 5


@pytest.mark.parametrize("name,options,match", [
    ("norm-bound", {"noise": -1.0}, "noise"), ("norm-bound", {"bound": 0}, "bound"),
    ("robust-lr", {"theta": 0}, "theta"), ("robust-lr", {"flip": 0.5}, "flip"), ("robust-lr", {"clip": "yes"}, "clip"),
])
def test_bad_options_are_refused(name, options, match):
    with pytest.raises(ConfigError, match=match):
        make_rule(name, f=2, **options)


def test_robust_lr_refuses_a_threshold_the_rows_cannot_reach():
    with pytest.raises(ConfigError, match="theta=7"):
        make_rule("robust-lr", f=2, theta=7).decide(np.ones((5, 3)))


@settings(max_examples=80, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 30), st.integers(1, 5)), elements=st.sampled_from([-1.0, 0.0, 2.5])
              | st.floats(-10, 10, allow_nan=False, width=64)), st.data())
def test_trimming_by_selection_matches_trimming_by_stable_ranks(U, data):
    n = len(U)
    trim = data.draw(st.integers(0, (n - 1) // 2))
    agg, kept = trim_columns(U, trim)
    ranks = coordinate_ranks(U)
    assert np.array_equal(kept, (ranks >= trim) & (ranks < n - trim))
    assert np.allclose(agg, np.sort(U, axis=0)[trim: n - trim].mean(axis=0))
