"""Where a participant's model lands: uniform over the positions, across independent rounds.

A module of its own (160 real rounds, one of the slowest tests) so that pytest-xdist can
run it beside test_round.py: ``--dist loadscope`` keeps each module in one worker.
"""

import numpy as np
import pytest
from scipy.stats import chi2

import reshuffle
from tests.protocol_helpers import make_updates


@pytest.mark.slow
def test_position_of_participant_is_uniform():
    # Chi-square goodness of fit of participant 0's position over independent rounds.
    N, runs = 4, 160
    ups = make_updates(N, d=2, seed=0)
    counts = np.zeros(N)
    for s in range(runs):
        r = reshuffle.shuffle(ups, seed=1000 + s)
        counts[r.positions[0]] += 1
    stat = ((counts - runs / N) ** 2 / (runs / N)).sum()
    # p = 0.001 critical value: a correct implementation fails this 1 time in 1000.
    assert stat < chi2.ppf(0.999, N - 1), counts
