"""cone-clip and the default rule: what each step stops, and the bounds that hold for any input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reshuffle.errors import ConfigError
from reshuffle.server import make_rule
from reshuffle.server.rules import DEFAULT_RULE, ConeClip
from reshuffle.server.rules.base import decide_in_context


def honest(n=16, d=200, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(1.0, 1.0, size=(n, d))  # a shared direction plus spread, as honest updates have


def test_scaled_rows_weigh_no_more_than_a_median_row():
    # Prepare: model replacement's boost, 4 rows scaled 100x along the honest mean
    H = honest()
    U = np.vstack([H, 100.0 * H.mean(axis=0) + np.zeros((4, 1))])
    # Execute
    d = ConeClip().decide(U)
    # Assert: they point the honest way, so they are inside the cone, but clipped to the median norm
    # (and, being four copies of one row, they count once)
    S = np.median(np.linalg.norm(U, axis=1))
    assert set(range(16, 20)) <= set(d.accepted)
    assert np.linalg.norm(d.aggregate) <= S * (1 + 1e-9)
    assert np.allclose(ConeClip(dedup=0).decide(U).weights[16:] * np.linalg.norm(U[16:], axis=1), S)
    assert 0.85 * S <= (d.weights[16:] * np.linalg.norm(U[16:], axis=1)).sum() <= S * (1 + 1e-9)


def test_rows_pointing_away_from_the_majority_are_rejected():
    H = honest()
    U = np.vstack([H, -H[:4]])  # sign flipping
    d = ConeClip().decide(U)
    assert not set(range(16, 20)) & set(d.accepted)
    assert set(range(16)) <= set(d.accepted)


def test_the_cone_takes_back_honest_rows_the_cluster_leaves_out():
    # Prepare: spread-out honest rows (non-IID) where HDBSCAN's majority cluster leaves some out
    from reshuffle.server.rules.flame import cosine_distances, majority_cluster

    rng = np.random.default_rng(3)
    base = rng.normal(size=300)
    H = base + rng.normal(0, 1.6, size=(20, 300))
    cluster = set(majority_cluster(cosine_distances(H)).tolist())
    # Execute
    accepted = set(ConeClip().decide(H).accepted)
    # Assert: every clustered row is kept, and the cone keeps at least as many
    assert cluster <= accepted and len(accepted) >= len(cluster)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 12), st.integers(1, 6)),
              elements=st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)))
def test_the_aggregate_is_never_longer_than_the_median_norm(U):
    d = ConeClip().decide(U)
    S = np.median(np.linalg.norm(U, axis=1))
    assert np.linalg.norm(d.aggregate) <= S * (1 + 1e-9) + 1e-9
    assert len(d.accepted) >= 1 and all(d.weights[list(d.accepted)] > 0) or S == 0


def test_bad_options_are_refused():
    for bad in (0, -1.0, float("inf"), True, "1"):
        with pytest.raises(ConfigError, match="kappa"):
            ConeClip(kappa=bad)


def test_default_is_the_named_rule_with_the_runs_f_and_seed():
    U = honest(seed=5)
    d = make_rule("default", 4, seed=1)
    assert d.rule == DEFAULT_RULE
    ref = make_rule(DEFAULT_RULE, 4, seed=1)
    # What a run hands every rule; each takes the inputs it declares (a history rule needs the pseudonyms).
    ctx = dict(pseudonyms=[f"p{i}" for i in range(len(U))], global_model=np.zeros(U.shape[1]))
    a, b = decide_in_context(d, U, 3, **ctx), decide_in_context(ref, U, 3, **ctx)
    assert a.accepted == b.accepted and np.array_equal(a.aggregate, b.aggregate)


def test_a_group_outside_the_majority_cluster_keeps_only_its_trust():
    # Prepare: 16 honest rows around a shared direction and 4 colluders that agree with each other
    # (a shared backdoor component) more than with the honest rows, at an angle inside the cone
    rng = np.random.default_rng(7)
    base = rng.normal(size=400)
    H = base + rng.normal(0, 0.7, size=(16, 400))
    backdoor = rng.normal(size=400)
    M = base + 1.2 * backdoor + rng.normal(0, 0.2, size=(4, 400))
    U = np.vstack([H, M])
    # Execute
    d = ConeClip(trust=0.1).decide(U)
    # Assert: the colluders are outside the cluster, so each weighs at most 0.1 (times its clipping)
    assert (d.weights[16:] <= 0.1 + 1e-12).all()
    assert d.weights[:16].mean() > 0.5
    full = ConeClip(trust=1.0).decide(U)
    bd = backdoor / np.linalg.norm(backdoor)
    assert d.aggregate @ bd < full.aggregate @ bd  # less of the backdoor direction reaches W_g


def _mimic_round(seed=11, n_honest=16, m=4, d=300):
    # Non-IID honest rows: a shared direction, each client far from the others; the attackers all
    # upload a copy of the honest row furthest from the mean (`mimic` too copies a straggler)
    rng = np.random.default_rng(seed)
    H = rng.normal(size=d) + rng.normal(0, 1.5, size=(n_honest, d))
    target = int(np.argmax(np.linalg.norm(H - H.mean(axis=0), axis=1)))
    return H, np.vstack([H, np.tile(H[target], (m, 1))]), target


def test_mimic_copies_share_one_row_s_weight():
    # Prepare: mimic, four exact copies of one honest row
    H, U, target = _mimic_round()
    group = [target, 16, 17, 18, 19]
    # Execute
    d, plain = ConeClip().decide(U), ConeClip(dedup=0).decide(U)
    # Assert: the target and its copies together weigh what the target alone weighs without the step
    assert target in d.accepted
    assert 0.9 * plain.weights[target] <= d.weights[group].sum() <= plain.weights[target] * (1 + 1e-9)
    # and the aggregate leans towards the copied row far less than without the step
    u = H[target] / np.linalg.norm(H[target])
    lean, plain_lean = (x.aggregate @ u - ConeClip().decide(H).aggregate @ u for x in (d, plain))
    assert lean < 0.5 * plain_lean


def test_distinct_honest_rows_keep_their_relative_weight():
    # Rows no closer to each other than honest rows are to their nearest neighbours are barely touched
    H, _, _ = _mimic_round(seed=12)
    a, b = ConeClip().decide(H), ConeClip(dedup=0).decide(H)
    assert a.accepted == b.accepted
    assert np.allclose(a.weights / a.weights.sum(), b.weights / b.weights.sum(), rtol=0.1)
    assert np.linalg.norm(a.aggregate - b.aggregate) < 0.05 * np.linalg.norm(b.aggregate)


def test_exact_duplicates_collapse_even_when_most_nearest_neighbours_are_duplicates():
    # The median nearest-neighbour distance is zero here (bandwidth 0): exact copies still count once
    rng = np.random.default_rng(2)
    rows = rng.normal(1.0, 1.0, size=(3, 50))
    U = np.vstack([rows[0]] * 4 + [rows[1]] * 3 + [rows[2]])
    d, plain = ConeClip(trust=1.0).decide(U), ConeClip(trust=1.0, dedup=0).decide(U)
    assert np.isfinite(d.aggregate).all() and d.accepted == plain.accepted == tuple(range(8))
    assert np.allclose(d.weights, plain.weights / np.array([4] * 4 + [3] * 3 + [1]))


def test_bad_dedup_is_refused():
    for bad in (-0.1, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ConfigError, match="dedup"):
            ConeClip(dedup=bad)
