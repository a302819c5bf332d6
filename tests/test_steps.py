"""The step probe: how long a rule's aggregate is, and where it points, with the attackers' rows and without."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.errors import ConfigError
from reshuffle.evaluation.steps import probe, step_round
from reshuffle.server.rules import make_rule


def _step(rule, f, U, mal, seed=1):
    """``rule``'s step on every row and, afresh, on the honest rows alone."""
    return step_round(1, U, mal, make_rule(rule, f, seed=seed).decide(U, round=1).aggregate,
                      make_rule(rule, f, seed=seed).decide(U[~mal], round=1).aggregate)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 12), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_fedavg_is_shortened_by_exactly_the_share_of_zero_rows_and_never_turned(h, f, seed):
    rng = np.random.default_rng(seed)
    U = np.vstack([rng.normal(0.5, 1.0, (h, 40)), np.zeros((f, 40))])
    s = _step("fedavg", f, U, np.arange(h + f) >= h)
    assert s.length == pytest.approx(h / (h + f)) and s.fedavg_length == pytest.approx(h / (h + f))
    assert s.cosine == pytest.approx(1.0) and s.honest_length == pytest.approx(1.0)


def test_zero_rows_shorten_clip_trims_step_more_than_fedavgs_without_turning_it():
    # Sixteen honest rows around a common direction, four zero rows (idle attackers), trim = 4: the zeros sit
    # inside every coordinate's window, so four honest values are trimmed at each end in their place.
    rng = np.random.default_rng(7)
    U = np.vstack([rng.normal(1.0, 1.0, (16, 200)), np.zeros((4, 200))])
    s = _step("clip-trim", 4, U, np.arange(20) >= 16)
    assert s.length < s.fedavg_length < s.honest_length
    assert s.cosine > 0.9 and s.honest_cosine > 0.9


def test_a_step_needs_honest_rows_and_a_label_for_each():
    U, a = np.ones((3, 4)), np.ones(4)
    with pytest.raises(ConfigError, match="one label per row"):
        step_round(1, U, np.array([True, True, True]), a, a)
    with pytest.raises(ConfigError, match="one label per row"):
        step_round(1, U, np.array([False, True]), a, a)
    with pytest.raises(ConfigError, match="honest rows' mean is zero"):
        step_round(2, np.zeros((3, 4)), np.array([False, False, True]), a, a)


SETTINGS = dict(dataset="digits", model="mlp", clients=10, rounds=2, shuffle="none", lr=0.1, seed=3, malicious=0.2,
                attack="idle")


def test_the_probe_measures_the_runs_own_step_each_round_history_rules_included():
    fa, ct, ha = (probe({**SETTINGS, "rule": r}) for r in ("fedavg", "clip-trim", "hammer-anvil"))
    assert [r.round for r in fa] == [r.round for r in ct] == [r.round for r in ha] == [1, 2]
    # Two zero rows of ten: FedAvg's step is 0.8 of the honest mean's (float32 models), unturned.
    assert all(r.length == pytest.approx(0.8, abs=1e-6) and r.cosine == pytest.approx(1.0) for r in fa)
    # clip-trim's step is shorter with the zero rows than on the honest rows alone.
    assert all(r.length < r.honest_length for r in ct)
    # hammer-anvil merges the identical zero rows into one before its clip-trim: one zero in each
    # coordinate's trimmed window instead of two, so a longer step than clip-trim's. On round 1's honest rows
    # alone (the same rows in both runs) the two rules agree: it is clip-trim when no two rows are alike.
    assert all(h.length > c.length for h, c in zip(ha, ct))
    assert ha[0].honest_length == pytest.approx(ct[0].honest_length, rel=1e-9)


def test_the_probe_names_the_round_where_the_rule_refuses_the_honest_rows_alone():
    # Four attackers of ten and trim = f = 3: the six honest rows alone are too few (clip-trim needs n > 2·trim).
    with pytest.raises(ConfigError, match=r"round 1: rule 'clip-trim' refused the 6 honest rows alone"):
        probe({**SETTINGS, "malicious": 0.4, "f": 3, "rule": "clip-trim"})
