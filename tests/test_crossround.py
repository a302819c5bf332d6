"""The passive cross-round linker: content plus rosters name the sender, unless the roster never changes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.adversaries.crossround import (
    CountSketch, CrossRoundLinker, Delivered, anonymity_bound, centred, figures, synthetic_updates,
)
from reshuffle.errors import ConfigError


def federation(clients, rounds, d, seed, cohort, signal=0.8, groups=None):
    """Rounds as the PS sees them (rows in random order, roster as a set) and the true senders.

    ``cohort(T, rng)`` gives the clients delivered in round T; ``groups``: client → group label.
    """
    ups = synthetic_updates(clients, rounds, d, seed, signal=signal)
    rng = np.random.default_rng(seed + 1)
    seen, senders = [], []
    for T in range(rounds):
        who = np.array(sorted(cohort(T, rng)))
        who = who[rng.permutation(len(who))]
        roster = tuple(int(i) for i in sorted(who))
        if groups is None:
            seen.append(Delivered(ups[T, who], roster))
        else:
            seen.append(Delivered(ups[T, who], roster, tuple(groups[int(i)] for i in who),
                                  tuple(groups[i] for i in roster)))
        senders.append(who)
    return seen, senders


def sampled(n, k):
    return lambda T, rng: rng.choice(n, size=k, replace=False).tolist()


def one_dropout(n):
    return lambda T, rng: [i for i in range(n) if i != int(rng.integers(n))]


def test_cohort_sampling_names_most_senders():
    # 40 clients, 8 sampled per round, 20 rounds: the presence patterns are almost all unique.
    seen, senders = federation(40, 20, 256, seed=3, cohort=sampled(40, 8))
    f = figures(seen, senders)
    assert f.models == 160
    assert f.bound_named >= 0.8 * f.models  # a linker with the true chains names most
    assert f.linker_correct >= 0.7 * f.models  # and the linker, from content and rosters, nearly as many
    assert f.linker_correct <= f.bound_named
    assert f.chance < 0.15 * f.models


def test_one_dropout_per_round_names_most_senders():
    # Everyone sampled, one dropout per round: whoever dropped in a round of its own is named.
    seen, senders = federation(12, 20, 256, seed=5, cohort=one_dropout(12))
    f = figures(seen, senders)
    assert f.bound_named >= 0.6 * f.models
    assert f.linker_correct >= 0.9 * f.bound_named


def test_a_roster_that_never_changes_names_no_one():
    seen, senders = federation(10, 15, 256, seed=7, cohort=lambda T, rng: range(10))
    f = figures(seen, senders)
    assert f.nearest_same > 0.9  # the content links perfectly...
    assert (f.bound_named, f.linker_named, f.linker_correct) == (0, 0, 0)  # ...but names no one
    assert f.bound_mean_set == 10 and f.linker_mean_set == 10


def test_groups_delivered_whole_bound_every_set_by_the_group():
    # Stable groups of 4, sampled whole: every set is the group, nobody is named.
    groups = {i: i // 4 for i in range(16)}

    def cohort(T, rng):
        picked = rng.choice(4, size=2, replace=False)
        return [i for i in range(16) if groups[i] in picked]

    seen, senders = federation(16, 15, 256, seed=9, cohort=cohort, groups=groups)
    f = figures(seen, senders)
    assert set(anonymity_bound(seen).values()) == {4}
    assert (f.bound_named, f.linker_correct) == (0, 0)
    assert f.bound_expected == pytest.approx(f.models / 4)


def test_groups_that_lose_a_member_leak_like_a_roster():
    # The same groups, but one member of a delivered group drops: within the group the roster names it.
    groups = {i: i // 4 for i in range(16)}

    def cohort(T, rng):
        picked = rng.choice(4, size=2, replace=False)
        out = [i for i in range(16) if groups[i] in picked]
        out.remove(out[int(rng.integers(len(out)))])
        return out

    seen, senders = federation(16, 15, 256, seed=11, cohort=cohort, groups=groups)
    f = figures(seen, senders)
    assert f.bound_named > 0 and f.linker_correct > 0.8 * f.bound_named


def test_the_linker_assigns_each_round_one_to_one_within_groups():
    groups = {i: i % 3 for i in range(12)}
    seen, senders = federation(12, 6, 64, seed=13, cohort=sampled(12, 9), groups=groups)
    out = CrossRoundLinker().link(seen)
    for d, who in zip(seen, out.assigned):
        assert sorted(who.tolist()) == sorted(d.roster)
        assert [groups[int(i)] for i in who] == list(d.row_groups)


def test_row_order_carries_nothing():
    # Reordering a round's rows reorders the assignment and changes no figure.
    seen, senders = federation(20, 10, 128, seed=15, cohort=sampled(20, 6))
    base = figures(seen, senders)
    rng = np.random.default_rng(0)
    moved, moved_senders = [], []
    for d, s in zip(seen, senders):
        p = rng.permutation(len(s))
        moved.append(Delivered(d.rows[p], d.roster))
        moved_senders.append(s[p])
    assert figures(moved, moved_senders) == base


def test_colluders_rows_are_set_aside_and_leave_the_sets():
    seen, senders = federation(10, 8, 128, seed=17, cohort=lambda T, rng: range(10))
    colluder = 0
    with_known = [Delivered(d.rows, d.roster, known={int(np.flatnonzero(s == colluder)[0]): colluder})
                  for d, s in zip(seen, senders)]
    out = CrossRoundLinker().link(with_known)
    for d, s, who in zip(with_known, senders, out.assigned):
        (row,) = d.known
        assert who[row] == colluder
    assert set(anonymity_bound(seen, colluders=[colluder]).values()) == {9}
    f = figures(with_known, senders)
    assert f.models == 8 * 9 and f.bound_mean_set == 9


def test_strong_noise_brings_the_linker_to_chance():
    seen, senders = federation(40, 20, 256, seed=3, cohort=sampled(40, 8))
    rng = np.random.default_rng(1)
    noisy = [Delivered(d.rows + rng.normal(scale=3.0, size=d.rows.shape).astype(np.float32), d.roster) for d in seen]
    clean, f = figures(seen, senders), figures(noisy, senders)
    assert clean.linker_correct > 0.7 * clean.models
    assert f.linker_correct < 3 * f.chance + 5


def roster_runs():
    return st.lists(st.sets(st.integers(0, 7), min_size=1, max_size=8), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(roster_runs(), st.sets(st.integers(0, 7), max_size=2))
def test_bound_sets_are_the_members_of_equal_pattern_and_only_shrink(rosters, colluders):
    rounds = [Delivered(np.zeros((len(r), 2), np.float32), tuple(sorted(r))) for r in rosters]
    prev: dict[int, int] = {}
    for t in range(1, len(rounds) + 1):
        sets = anonymity_bound(rounds[:t], colluders)
        for i, size in sets.items():
            assert i not in colluders
            pattern = [i in r for r in rosters[:t]]
            same = [j for j in range(8) if j not in colluders and [j in r for r in rosters[:t]] == pattern]
            assert size == len(same) and i in same
            assert size <= prev.get(i, size)  # intersected over rounds: a set never grows
        prev = sets


def test_count_sketch_keeps_inner_products():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(6, 50_000)).astype(np.float32)
    X[1] = X[0] + 0.5 * X[1]
    Z = centred(CountSketch(X.shape[1], 8192, seed=3)(X))
    exact = centred(X)
    assert np.allclose(Z @ Z.T, exact @ exact.T, atol=0.05)


def test_bad_rounds_are_refused():
    with pytest.raises(ConfigError, match="one per roster member"):
        Delivered(np.zeros((3, 4)), (1, 2))
    with pytest.raises(ConfigError, match="at least one row"):
        Delivered(np.zeros((0, 4)), ())
    with pytest.raises(ConfigError, match="twice"):
        Delivered(np.zeros((2, 4)), (1, 1))
    with pytest.raises(ConfigError, match="as many rows"):
        Delivered(np.zeros((2, 4)), (1, 2), (0, 0), (0, 1))
    with pytest.raises(ConfigError, match="or neither"):
        Delivered(np.zeros((2, 4)), (1, 2), (0, 0), None)
    with pytest.raises(ConfigError, match="known row"):
        Delivered(np.zeros((2, 4)), (1, 2), known={0: 5})
    with pytest.raises(ConfigError, match="true sender"):
        figures([Delivered(np.zeros((2, 4)), (1, 2))], [np.array([1])])
