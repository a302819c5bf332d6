"""Bulyan, CClip, geometric median, DnC, FLAME, SignGuard: hand-computed cases, invariants, reproducibility."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.errors import ConfigError
from reshuffle.server import (
    Bulyan, CenteredClipping, Decision, DnC, FLAME, GeometricMedian, SignGuard, SignOutliers, make_rule,
)
from reshuffle.server.rules.dnc import dnc_outlier_scores
from reshuffle.server.rules.flame import cosine_distances
from reshuffle.server.rules.signguard import sign_statistics


def test_bulyan_hand_computed():
    # Prepare: seven points on a line, f = 1 → θ = 5 picks, β = 3 kept per coordinate.
    U = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [100.0]])
    # Execute
    d = Bulyan(f=1).decide(U)
    # Assert: Krum picks 3 (score 10, tied with 2, smaller total distance), then 2 (9 with 3
    # neighbours), 4 (10, tied with 1), 1 (1 with one neighbour, tied with 0), 5 (25, tied with 0).
    # The median of the picked values 1..5 is 3 and the three closest to it are 2, 3, 4.
    assert d.accepted == (1, 2, 3, 4, 5)
    assert d.aggregate.tolist() == [3.0]
    assert d.weights.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert d.flagged == [0, 6]


def test_bulyan_needs_4f_plus_3():
    with pytest.raises(ConfigError, match=r"n >= 4f \+ 3 updates; got n=10 with f=2"):
        Bulyan(f=2).decide(np.zeros((10, 3)))
    with pytest.raises(ConfigError, match="non-negative int"):
        Bulyan(f=-1)
    assert Bulyan(f=2).decide(np.random.default_rng(0).normal(size=(11, 3))).aggregate.shape == (3,)


def test_cclip_hand_computed():
    # Prepare: three rows near (1, 0) and one at (−9, 0); τ = 2, one step from v₀ = 0.
    U = np.array([[1.0, 0.0], [1.0, 0.2], [1.0, -0.2], [-9.0, 0.0]])
    # Execute
    d = CenteredClipping(tau=2.0, iterations=1).decide(U)
    # Assert: only the far row is clipped (factor 2/9): v₁ = ((1 + 1 + 1 − 2) / 4, 0).
    assert d.accepted == (0, 1, 2)
    assert np.allclose(d.weights, [1.0, 1.0, 1.0, 2.0 / 9.0])
    assert np.allclose(d.aggregate, [0.25, 0.0])
    assert d.down_weighted == [3] and d.rejected == []


def test_cclip_adaptive_radius_flags_sign_flipped_rows():
    rng = np.random.default_rng(3)
    base = rng.normal(size=100)
    U = np.vstack([base + 0.2 * rng.normal(size=(8, 100)), -base, -base])
    d = CenteredClipping().decide(U)
    assert d.flagged == [8, 9]
    assert np.linalg.norm(d.aggregate - base) < np.linalg.norm(U.mean(axis=0) - base)
    with pytest.raises(ConfigError, match="tau must be a positive number"):
        CenteredClipping(tau=0)


def test_geomed_hand_computed_and_flags():
    # Prepare: the unit vectors from (½, ½) to the four rows cancel, so (½, ½) is the geometric median.
    U = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [50.0, 50.0]])
    # Execute
    d = GeometricMedian().decide(U)
    # Assert
    assert np.allclose(d.aggregate, [0.5, 0.5], atol=1e-6)
    assert d.accepted == (0, 1, 2)
    assert d.weights[3] == pytest.approx(2 * np.sqrt(0.5) / np.linalg.norm([49.5, 49.5]))


@given(st.integers(3, 12), st.integers(1, 6), st.integers(0, 2**31))
@settings(max_examples=40, deadline=None)
def test_geomed_beats_every_input_row(n, d, seed):
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n, d)) * rng.uniform(0.1, 10)
    z = GeometricMedian(iterations=2000, tol=0.0).decide(U).aggregate
    cost = lambda p: np.linalg.norm(U - p, axis=1).sum()  # noqa: E731
    # Smoothed Weiszfeld converges slowly when the optimum is an input row: allow 1e-6 relative slack.
    assert cost(z) <= min(cost(u) for u in U) + 1e-6 * cost(U.mean(axis=0))


def test_dnc_scores_hand_computed():
    # Prepare: one coordinate, so v = ±1 and s_i = (x_i − μ)², μ = 2.5.
    X = np.array([[-1.0], [0.0], [1.0], [10.0]])
    # Execute / Assert
    assert np.allclose(dnc_outlier_scores(X), [12.25, 6.25, 2.25, 56.25])
    assert DnC(f=1, iterations=1, seed=0).select(X) == [0, 1, 2]
    assert DnC(f=1, iterations=1, c=2.0, seed=0).select(X) == [1, 2]
    with pytest.raises(ConfigError, match=r"floor\(c·f\)=4 rows per draw; it needs more than that, got n=4"):
        DnC(f=2, c=2.0, seed=0).decide(X)


def _one_coordinate_outliers(n=10, d=10):
    """Row i is far out in coordinate i only: which row is caught depends on the coordinates drawn."""
    U = np.ones((n, d)) + 0.01 * np.arange(n)[:, None]
    U[np.arange(n), np.arange(n)] = -50.0
    return U


def test_dnc_is_reproducible_per_round_and_varies_across_rounds():
    U = _one_coordinate_outliers()
    rule = DnC(f=1, iterations=1, dims=1, seed=7)
    # Same (seed, round): same decision, also from a fresh instance.
    fresh = DnC(f=1, iterations=1, dims=1, seed=7)
    assert rule.select(U, round=3) == rule.select(U, round=3) == fresh.select(U, round=3)
    # Different rounds draw different coordinates, hence catch different rows.
    caught = {tuple(rule.decide(U, round=t).flagged) for t in range(1, 21)}
    assert len(caught) > 1
    assert all(len(c) == 1 for c in caught)
    # and so do different seeds for the same round.
    by_seed = {tuple(DnC(f=1, iterations=1, dims=1, seed=s).decide(U, round=1).flagged) for s in range(20)}
    assert len(by_seed) > 1


def test_signguard_is_reproducible_per_round_and_varies_across_rounds():
    # Row i is negative in coordinate i only: with one coordinate sampled, its sign features
    # (share of +, 0, −) differ from the majority's exactly when coordinate i is drawn.
    U = np.abs(_one_coordinate_outliers()) * np.where(np.eye(10), -1.0, 1.0) / 50.0 + 1.0
    U[np.arange(10), np.arange(10)] = -1.0
    rule = SignGuard(fraction=0.1, seed=11)
    assert rule.select(U, round=5) == rule.select(U, round=5) == SignGuard(fraction=0.1, seed=11).select(U, round=5)
    flagged = {tuple(rule.decide(U, round=t).flagged) for t in range(1, 21)}
    assert len(flagged) > 1 and all(len(f) == 1 for f in flagged)


def test_signguard_norm_filter_and_clipping_hand_computed():
    # Prepare: all coordinates positive (identical sign features, one cluster); norms 1, 1, 2, 2, 20, 0.01·2.
    v = np.ones(4) / 2.0
    U = np.vstack([v, v, 2 * v, 2 * v, 20 * v, 0.02 * v])
    # Execute
    d = SignGuard(seed=0).decide(U)
    # Assert: median norm = 1.5; ratios 0.67, 0.67, 1.33, 1.33, 13.3, 0.013 → the last two rejected;
    # accepted rows clipped to 1.5: v, v, 1.5v, 1.5v → mean 1.25v.
    assert d.accepted == (0, 1, 2, 3)
    assert np.allclose(d.weights, [1.0, 1.0, 0.75, 0.75, 0.0, 0.0])
    assert np.allclose(d.aggregate, 1.25 * v)
    assert np.allclose(sign_statistics(np.array([[1.0, 0.0, -2.0, 3.0]])), [[0.5, 0.25, 0.25]])
    with pytest.raises(ConfigError, match="lower=3.0 and upper=2.0"):
        SignGuard(lower=3.0, upper=2.0)


def test_flame_hand_computed_and_noise():
    # Prepare: four rows along +x (cosine distance 0), one along −x.
    U = np.array([[1.0, 0.0], [2.0, 0.0], [4.0, 0.0], [3.0, 0.0], [-1.0, 0.0]])
    assert cosine_distances(U)[0].tolist() == [0.0, 0.0, 0.0, 0.0, 2.0]
    # Execute
    d = FLAME(noise=0.0, seed=0).decide(U)
    # Assert: the −x row is HDBSCAN noise; S = median norm = 2 → factors 1, 1, ½, ⅔; mean (1+2+2+2)/4.
    assert d.accepted == (0, 1, 2, 3) and d.rejected == [4]
    assert np.allclose(d.weights, [1.0, 1.0, 0.5, 2.0 / 3.0, 0.0])
    assert np.allclose(d.aggregate, [1.75, 0.0])
    # Noise N(0, (λS)²) per coordinate, reproducible for the same (seed, round).
    V = np.abs(np.random.default_rng(0).normal(size=(5, 20_000)))
    clean = FLAME(noise=0.0, seed=1).decide(V).aggregate
    noisy = FLAME(noise=0.01, seed=1).decide(V, round=2).aggregate
    S = np.median(np.linalg.norm(V, axis=1))
    assert np.std(noisy - clean) == pytest.approx(0.01 * S, rel=0.05)
    assert np.array_equal(noisy, FLAME(noise=0.01, seed=1).decide(V, round=2).aggregate)
    assert not np.array_equal(noisy, FLAME(noise=0.01, seed=1).decide(V, round=3).aggregate)


@given(st.integers(7, 12), st.integers(3, 10), st.integers(0, 2**31))
@settings(max_examples=25, deadline=None)
def test_new_rules_are_permutation_invariant(n, d, seed):
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n, d))
    U[-1] += 20.0
    perm = rng.permutation(n)
    rules = [Bulyan(f=1), CenteredClipping(), GeometricMedian(), DnC(f=1, seed=3), FLAME(noise=0.0, seed=0)]
    for rule in rules:
        a, b = rule.decide(U, round=1), rule.decide(U[perm], round=1)
        assert sorted(perm[list(b.accepted)].tolist()) == list(a.accepted), rule
        assert np.allclose(b.weights, a.weights[perm]), rule
        assert np.allclose(a.aggregate, b.aggregate), rule


def test_every_builtin_rule_returns_a_consistent_decision():
    rng = np.random.default_rng(5)
    U = np.vstack([rng.normal(size=(9, 30)) + 1.0, -5.0 * np.ones((2, 30))])
    for name in ["fedavg", "krum", "multi-krum", "bulyan", "cosine", "median", "trimmed-mean", "cclip", "geomed",
                 "dnc", "flame", "signguard"]:
        rule = make_rule(name, 2, seed=0)
        d = rule.decide(U, round=1)
        assert isinstance(d, Decision) and d.aggregate.shape == (30,) and d.weights.shape == (11,)
        assert rule.select(U, round=1) == list(d.accepted)
        assert np.array_equal(rule(U, round=1), d.aggregate)
        if rule.detects and name != "bulyan":  # a row Bulyan picks may still be kept in no coordinate
            assert all(d.weights[i] > 0 for i in d.accepted), name
    with pytest.raises(ConfigError, match="round must be a non-negative int"):
        make_rule("dnc", 1, seed=0).decide(U, round=-1)


def test_signguard_mean_shift_partitions_like_sklearn():
    from sklearn.cluster import MeanShift, estimate_bandwidth

    from reshuffle.server.rules.signguard import bandwidth, mean_shift_labels

    rng = np.random.default_rng(4)
    for F in [np.vstack([rng.random((7, 3)) * 0.1, rng.random((3, 3)) * 0.1 + 0.5]), rng.random((9, 3))]:
        h = bandwidth(F)
        assert h == pytest.approx(estimate_bandwidth(F, quantile=0.5), rel=1e-12)
        ours, theirs = mean_shift_labels(F, h), MeanShift(bandwidth=h).fit_predict(F)
        assert np.array_equal(ours[:, None] == ours[None, :], theirs[:, None] == theirs[None, :])


def test_signstat_hand_computed_and_reproducible():
    # Prepare: shares of + are ¾ for rows 0-3 and ¼ for row 4 (all coordinates drawn).
    U = np.array([[1.0, 1.0, -1.0, 1.0], [1.0, -1.0, 1.0, 1.0], [1.0, 1.0, 1.0, -1.0],
                  [-1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, 1.0]])
    # Execute / Assert: the feature median is (¾, 0, ¼), so r = 0 for rows 0-3 and row 4 is out.
    assert SignOutliers(fraction=1.0, seed=0).decide(U).flagged == [4]
    # With one coordinate drawn per round, which row is caught depends on (seed, round).
    V = np.ones((10, 10)) + 0.01 * np.arange(10)[:, None]
    V[np.arange(10), np.arange(10)] = -1.0
    rule = SignOutliers(fraction=0.1, seed=2)
    assert rule.select(V, round=4) == SignOutliers(fraction=0.1, seed=2).select(V, round=4)
    flagged = {tuple(rule.decide(V, round=t).flagged) for t in range(1, 21)}
    assert len(flagged) > 1 and all(len(f) == 1 for f in flagged)
    with pytest.raises(ConfigError, match="fraction must lie in"):
        SignOutliers(fraction=2.0)


def test_probe_rates_count_flagged_rows_per_round():
    from reshuffle.bench.probe import ProbeRound, rates

    # Prepare: round 1 has both attackers far out, round 2 has one far and one honest-looking.
    rng = np.random.default_rng(0)
    honest = rng.normal(size=(8, 5))
    r1 = ProbeRound(honest, {"x": np.full((2, 5), 50.0)})
    r2 = ProbeRound(honest, {"x": np.vstack([np.full(5, 50.0), honest.mean(axis=0)])})
    # Execute
    tpr, fpr = rates(make_rule("multi-krum", 2), [r1, r2], "x")
    # Assert: Multi-Krum (m = n − 2) drops both far rows in round 1; in round 2 the far row and
    # one honest row, since the honest-looking attacker scores best: TPR (1 + ½)/2, FPR (0 + ⅛)/2.
    assert tpr == pytest.approx(0.75) and fpr == pytest.approx(1 / 16)


def test_probe_synthetic_rounds_have_every_attack():
    from reshuffle.bench.probe import SYNTHETIC_ATTACKS, synthetic

    rounds = synthetic(rounds=2, clients=6, m=2, d=40, seed=3)
    assert len(rounds) == 2 and rounds[0].honest.shape == (4, 40)
    assert set(rounds[0].malicious) == set(SYNTHETIC_ATTACKS)
    assert all(v.shape == (2, 40) for v in rounds[1].malicious.values())
    assert np.array_equal(rounds[0].honest, synthetic(rounds=1, clients=6, m=2, d=40, seed=3)[0].honest)
    with pytest.raises(ConfigError, match="0 < m < clients/2"):
        synthetic(m=5, clients=10)
