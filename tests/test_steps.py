"""The step probe: how long a rule's aggregate is, and where it points, with the attackers' rows and without."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.errors import ConfigError
from reshuffle.evaluation.steps import probe, step_round
from reshuffle.server.rules import make_rule


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 12), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_fedavg_is_shortened_by_exactly_the_share_of_zero_rows_and_never_turned(h, f, seed):
    rng = np.random.default_rng(seed)
    U = np.vstack([rng.normal(0.5, 1.0, (h, 40)), np.zeros((f, 40))])
    mal = np.arange(h + f) >= h
    s = step_round(lambda: make_rule("fedavg", f), U, mal, 1)
    assert s.length == pytest.approx(h / (h + f)) and s.fedavg_length == pytest.approx(h / (h + f))
    assert s.cosine == pytest.approx(1.0) and s.honest_length == pytest.approx(1.0)


def test_zero_rows_shorten_clip_trims_step_more_than_fedavgs_without_turning_it():
    # Sixteen honest rows around a common direction, four zero rows (idle attackers), trim = 4: the zeros sit
    # inside every coordinate's window, so four honest values are trimmed at each end in their place.
    rng = np.random.default_rng(7)
    U = np.vstack([rng.normal(1.0, 1.0, (16, 200)), np.zeros((4, 200))])
    mal = np.arange(20) >= 16
    s = step_round(lambda: make_rule("clip-trim", 4, seed=1), U, mal, 1)
    assert s.length < s.fedavg_length < s.honest_length
    assert s.cosine > 0.9 and s.honest_cosine > 0.9


def test_a_step_needs_honest_rows_and_a_label_for_each():
    U = np.ones((3, 4))
    with pytest.raises(ConfigError, match="one label per row"):
        step_round(lambda: make_rule("fedavg", 1), U, np.array([True, True, True]), 1)
    with pytest.raises(ConfigError, match="one label per row"):
        step_round(lambda: make_rule("fedavg", 1), U, np.array([False, True]), 1)
    with pytest.raises(ConfigError, match="honest rows' mean is zero"):
        step_round(lambda: make_rule("fedavg", 1), np.zeros((3, 4)), np.array([False, False, True]), 2)


SETTINGS = dict(dataset="digits", model="mlp", clients=10, rounds=2, shuffle="none", lr=0.1, seed=3, malicious=0.2,
                attack="idle")


def test_the_probe_measures_each_round_of_a_run_and_the_run_is_the_one_the_rule_saw():
    ct, fa = probe({**SETTINGS, "rule": "clip-trim"}), probe({**SETTINGS, "rule": "fedavg"})
    assert [r.round for r in ct] == [1, 2] == [r.round for r in fa]
    # Two zero rows of ten: FedAvg's step is 0.8 of the honest mean's (float32 models); clip-trim's is shorter
    # than it is on the honest rows alone.
    assert all(r.length == pytest.approx(0.8, abs=1e-6) and r.cosine == pytest.approx(1.0) for r in fa)
    assert all(r.length < r.honest_length for r in ct)


def test_the_probe_refuses_a_rule_with_a_history_per_pseudonym():
    with pytest.raises(ConfigError, match="history per pseudonym"):
        probe({**SETTINGS, "rule": "hammer-anvil"})
