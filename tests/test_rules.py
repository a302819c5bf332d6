"""Detection and aggregation rules: hand-computed cases and invariants."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.errors import ConfigError
from reshuffle.server import CosineFilter, FedAvg, FLTrust, Krum, Median, MultiKrum, TrimmedMean, make_rule
from reshuffle.server.rules import krum_scores


def test_krum_scores_hand_computed():
    # Prepare: four points on a line, f = 0 → n − f − 2 = 2 nearest neighbours.
    U = np.array([[0.0], [1.0], [3.0], [7.0]])
    # Execute
    scores = krum_scores(U, 0)
    # Assert: 0 → {1, 3}: 1 + 9; 1 → {0, 3}: 1 + 4; 3 → {1, 0}: 4 + 9; 7 → {3, 1}: 16 + 36.
    assert scores.tolist() == [10.0, 5.0, 13.0, 52.0]
    assert Krum(0).select(U) == [1]
    assert MultiKrum(0, m=2).select(U) == [0, 1]
    assert MultiKrum(0, m=2)(U).tolist() == [0.5]


def test_krum_uses_n_minus_f_minus_2_neighbours():
    U = np.array([[0.0], [1.0], [3.0], [7.0], [8.0]])
    # f = 1: n − f − 2 = 2 neighbours, same as above plus a fifth point.
    assert krum_scores(U, 1).tolist() == [10.0, 5.0, 13.0, 1.0 + 16.0, 1.0 + 25.0]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.0, 0.45))
def test_idle_attackers_win_krums_selection_when_honest_rows_share_less_than_half_their_direction(seed, shared):
    # Sixteen unit honest rows whose pairwise cosine c is about `shared` < 1/2 (non-IID), four zero rows (attackers
    # who upload W_g unchanged); Krum sums over the 14 nearest: a zero row scores 11 (three zeros at 0, eleven
    # honest rows at 1), an honest one 4 + 20(1 − c) (the four zeros at 1, ten honest rows at 2(1 − c)).
    rng = np.random.default_rng(seed)
    common, own = rng.normal(size=2000), rng.normal(size=(16, 2000))
    H = np.sqrt(shared) * common / np.linalg.norm(common) + np.sqrt(1 - shared) * own / np.linalg.norm(
        own, axis=1, keepdims=True)
    U = np.vstack([H, np.zeros((4, 2000))])
    assert Krum(4).select(U)[0] >= 16
    assert not Krum(4)(U).any()  # the round's step is zero
    # The control: rows that share 80 % of their direction are nearer to each other than to zero.
    close = np.sqrt(0.8) * common / np.linalg.norm(common) + np.sqrt(0.2) * own / np.linalg.norm(
        own, axis=1, keepdims=True)
    assert Krum(4).select(np.vstack([close, np.zeros((4, 2000))]))[0] < 16


def test_krum_rejects_f_too_large():
    with pytest.raises(ConfigError, match=r"n > 2f \+ 2 updates; got n=4 with f=1"):
        Krum(1).select(np.zeros((4, 3)))
    with pytest.raises(ConfigError, match="non-negative int"):
        Krum(-1)
    with pytest.raises(ConfigError, match="m=9 exceeds"):
        MultiKrum(0, m=9).select(np.zeros((4, 3)))


@st.composite
def cluster_with_outliers(draw):
    h = draw(st.integers(5, 12))
    f = draw(st.integers(0, (h - 3) // 2))
    d = draw(st.integers(2, 30))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    honest = rng.normal(0, 1, size=(h, d))
    far = rng.normal(0, 1, size=(f, d)) + draw(st.sampled_from([50.0, -80.0, 200.0]))
    return np.vstack([honest, far]), h, f


@given(cluster_with_outliers())
@settings(max_examples=60, deadline=None)
def test_krum_family_never_selects_far_outliers(case):
    U, h, f = case
    if U.shape[0] <= 2 * f + 2:
        return
    assert Krum(f).select(U)[0] < h
    assert all(i < h for i in MultiKrum(f, m=h).select(U))
    assert all(i < h for i in CosineFilter(threshold=-1.0, norm_bound=3.0).select(U))


@given(st.integers(5, 10), st.integers(2, 8), st.integers(0, 2**31))
@settings(max_examples=40, deadline=None)
def test_rules_are_permutation_invariant(n, d, seed):
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n, d))
    perm = rng.permutation(n)
    for rule in [FedAvg(), Median(), TrimmedMean(1), MultiKrum(1), Krum(0), CosineFilter(threshold=-0.5)]:
        assert np.allclose(rule(U), rule(U[perm]))
        assert sorted(perm[rule.select(U[perm])].tolist()) == rule.select(U)


def test_median_and_trimmed_mean_bound_an_outlier():
    U = np.array([[1.0, 1.0], [1.2, 0.8], [0.8, 1.2], [1e6, -1e6]])
    assert np.allclose(Median()(U), [1.1, 0.9])
    assert np.allclose(TrimmedMean(1)(U), [1.1, 0.9])
    assert FedAvg().select(U) == [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="n > 2·trim"):
        TrimmedMean(2)(U)


def test_cosine_filter_rejects_flipped_and_scaled():
    rng = np.random.default_rng(0)
    base = rng.normal(size=50)
    honest = base + 0.3 * rng.normal(size=(8, 50))
    U = np.vstack([honest, -base, 20 * base])
    assert CosineFilter().select(U) == list(range(8))
    with pytest.raises(ConfigError):
        CosineFilter(threshold=1.5)


def test_fltrust_weights_by_direction_and_normalises():
    g0 = np.array([1.0, 0.0])
    U = np.array([[3.0, 0.0], [1.0, 1.0], [-5.0, 0.0]])
    rule = FLTrust(lambda: g0)
    assert rule.select(U) == [0, 1]
    # TS = 1 and 1/√2; both rescaled to ‖g0‖ = 1: [1, 0] and [1/√2, 1/√2].
    ts = np.array([1.0, 2**-0.5])
    expect = (ts[0] * np.array([1.0, 0.0]) + ts[1] * np.array([2**-0.5, 2**-0.5])) / ts.sum()
    assert np.allclose(rule(U), expect)
    assert np.array_equal(FLTrust(lambda: g0)(np.array([[-1.0, 0.0]])), [0.0, 0.0])
    with pytest.raises(ConfigError, match="reference has shape"):
        FLTrust(lambda: np.zeros(3))(U)


def test_inputs_are_validated():
    with pytest.raises(ConfigError, match=r"\(n, d\) array"):
        FedAvg()(np.zeros(3))
    with pytest.raises(ConfigError, match=r"rows \[1\] are not finite"):
        Median()(np.array([[0.0], [np.nan]]))
    with pytest.raises(ConfigError, match="unknown rule"):
        make_rule("no-such-rule", 1)
    with pytest.raises(ConfigError, match="reference"):
        make_rule("fltrust", 1)
    assert isinstance(make_rule("multi-krum", 2), MultiKrum) and make_rule("multi-krum", 2).f == 2
