"""Stable anonymity sets in the simulator: one partition per run, whole sets sampled, all-or-none delivery."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from reshuffle.errors import ConfigError
from reshuffle.run import checkpoint
from reshuffle.run.config import SimConfig
from reshuffle.run.delivery import RealShuffle, UNMASK, IdealShuffle, Plaintext, Uploads
from reshuffle.run.federation import Federation
from reshuffle.run.sampling import SetSampler
from reshuffle.run.sets import MIN_SET, INCOMPLETE, StableSets, all_or_none, form_sets
from reshuffle.sim import Simulation

SMALL = dict(dataset="digits", model="logreg", batch_size=16, seed=3, shuffle="ideal", rounds=3)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(MIN_SET, 150), k=st.integers(MIN_SET, 12), seed=st.integers(0, 2**31))
def test_the_partition_covers_every_client_once_in_sets_of_at_least_k(n, k, seed):
    if n < k:
        with pytest.raises(ConfigError, match=f"set_size={k}"):
            form_sets(range(n), k, seed)
        return
    sets = form_sets(range(n), k, seed)
    flat = [i for s in sets for i in s]
    assert sorted(flat) == list(range(n))
    assert min(len(s) for s in sets) >= k
    assert max(len(s) for s in sets) - min(len(s) for s in sets) <= 1
    assert len(sets) <= max(1, n // k)
    if n % k == 0:
        assert len(sets) == n // k  # sets of exactly k where the clients allow it
    assert form_sets(range(n), k, seed) == sets  # one seed, one partition


def test_the_partition_depends_on_the_seed():
    assert form_sets(range(100), 5, 1) != form_sets(range(100), 5, 2)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(10, 120), k=st.integers(MIN_SET, 8), fraction=st.sampled_from([0.1, 0.25, 0.5, 1.0]),
       absent=st.sets(st.integers(0, 119), max_size=5), T=st.integers(1, 50))
def test_sampling_draws_whole_sets_present_in_full(n, k, fraction, absent, T):
    sets = form_sets(range(n), k, 7)
    sampler = SetSampler(7, sets, fraction)
    population = [i for i in range(n) if i not in absent]
    cohort = sampler.cohort(T, population)
    drawn = [s for s in sets if set(s) & set(cohort)]
    assert sorted(i for s in drawn for i in s) == cohort  # whole sets only
    assert all(not set(s) & absent for s in drawn)  # a set missing a member is not drawn
    whole = sum(1 for s in sets if not set(s) & absent)
    assert len(drawn) == min(whole, sampler.count(n))
    assert sampler.cohort(T, population) == cohort


def test_ten_percent_of_a_hundred_clients_is_two_sets_of_five():
    sets = form_sets(range(100), 5, 11)
    sampler = SetSampler(11, sets, 0.1)
    cohorts = [sampler.cohort(T, range(100)) for T in range(1, 31)]
    assert all(len(c) == 10 for c in cohorts)
    assert len({tuple(c) for c in cohorts}) > 20  # the draw changes with the round


def _uploads(dropouts, groups, withheld=None):
    W_g = np.zeros(8, np.float32)
    models = {i: np.full(8, i, np.float32) for i in range(10)}
    return Uploads(1, W_g, models, dropouts, withheld or {}, frozenset(), (), groups)


def _delivered(channel, up):
    """The channel's delivery as the FL round takes it: the federation's all-or-none rule applied."""
    sets = StableSets(tuple(tuple(s) for s in up.groups)) if up.groups else None
    return Federation(sets=sets).receive(channel.deliver(up))


@pytest.mark.parametrize("channel", [IdealShuffle(5), Plaintext(), RealShuffle()])
def test_a_set_with_a_member_that_dropped_before_upload_delivers_nothing(channel):
    groups = ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9))
    d = _delivered(channel, _uploads({"upload": [7]}, groups))
    assert sorted(d.senders) == [0, 1, 2, 3, 4]
    assert d.lost[7] == "dropout at upload"
    # (In the real round the set's members refuse to unmask a set that lacks one of them.)
    assert {i: d.lost[i] for i in (5, 6, 8, 9)} == {i: f"{INCOMPLETE}: client 7 dropout at upload" for i in (5, 6, 8, 9)}
    assert sorted(float(m[0]) for m in d.models) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("channel", [IdealShuffle(5), Plaintext(), RealShuffle()])
def test_a_member_recovered_at_unmask_keeps_its_set_whole(channel):
    groups = ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9))
    d = _delivered(channel, _uploads({UNMASK: [7]}, groups))
    assert sorted(d.senders) == list(range(10))
    assert d.failure is None


def test_every_set_incomplete_delivers_nothing_and_says_why():
    groups = ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9))
    d = _delivered(IdealShuffle(5), _uploads({"setup": [0]}, groups, withheld={9: "banned: blamed in round 1"}))
    assert d.models == [] and "every stable set" in d.failure
    assert d.lost[5] == f"{INCOMPLETE}: client 9 banned: blamed in round 1"


def test_without_sets_one_dropout_loses_one_model():
    d = IdealShuffle(5).deliver(_uploads({"upload": [7]}, ()))
    assert sorted(d.senders) == [0, 1, 2, 3, 4, 5, 6, 8, 9]


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(MIN_SET, 7), min_size=1, max_size=6), data=st.data())
def test_all_or_none_loses_exactly_the_incomplete_sets(sizes, data):
    ids = iter(range(sum(sizes)))
    sets = [tuple(next(ids) for _ in range(k)) for k in sizes]
    lost = {i: "dropout at ot" for i in data.draw(st.sets(st.integers(0, sum(sizes) - 1), max_size=4))}
    more = all_or_none(sets, lost)
    gone = set(lost) | set(more)
    for s in sets:
        assert set(s) <= gone or not set(s) & gone  # a set is lost whole or not at all
        assert (set(s) <= gone) == bool(set(s) & set(lost))
    assert not set(more) & set(lost)


def test_the_simulator_delivers_whole_sets_and_counts_what_dropouts_cost():
    sim = Simulation(SimConfig(**SMALL, clients=20, fraction=0.5, dropout=0.1))
    assert [len(s) for s in sim.sets.sets] == [5, 5, 5, 5]
    recs = sim.run()
    lost = 0
    for r in recs:
        assert r.sampled == 10
        lost_sets = {sim.sets.of(i) for i in r.lost}
        # one dropout per round takes its whole set down (unless it dropped at unmask)
        assert r.models_received + 5 * len(lost_sets) == 10
        lost += sum(1 for why in r.lost.values() if why.startswith(INCOMPLETE))
    out = sim.result(recs)["stable_sets"]
    assert out["models_lost"] == lost > 0
    assert out["sets"] == [list(s) for s in sim.sets.sets]


def test_the_delivery_maps_each_client_to_its_stable_set():
    sim = Simulation(SimConfig(**SMALL, clients=12, set_size=4))
    T = 1
    cohort = sim.rounds.cohort(T, range(12))
    up, _, _ = sim.uploads(T, cohort)
    d = sim.rounds.receive(sim.channel.deliver(up), cohort)
    assert d.groups == {i: sim.sets.of(i) for i in range(12)}
    assert len(set(d.groups.values())) == 3


def test_the_partition_survives_checkpoint_and_resume(tmp_path, monkeypatch):
    cfg = SimConfig(**{**SMALL, "rounds": 4}, clients=15, fraction=0.4, dropout=0.1)
    first = Simulation(cfg)
    recs = [first.step() for _ in range(2)]
    checkpoint.save(tmp_path, checkpoint.simulation_checkpoint(first, recs))
    # A fresh draw at resume would give another partition (form_groups may use OS randomness): the resumed
    # run must take the checkpoint's.
    other = StableSets.form(15, 5, 999)
    assert other != first.sets
    monkeypatch.setattr(StableSets, "form", classmethod(lambda cls, n, k, seed: other))
    cfg2, ck = checkpoint.load_simulation(tmp_path)
    second = Simulation(cfg2)
    assert second.sets == other
    done = checkpoint.restore_simulation(second, ck)
    assert second.sets == first.sets
    got = second.run(records=done)
    cohorts = [r for r in got[2:]]
    for T, r in zip((3, 4), cohorts):
        assert r.sampled == 5
        assert second.rounds.cohort(T, range(15)) == first.rounds.cohort(T, range(15))
        assert set(second.rounds.cohort(T, range(15))) in [set(s) for s in first.sets.sets]


def test_a_run_checkpointed_before_stable_sets_existed_resumes_as_it_ran(tmp_path):
    import dataclasses

    cfg = SimConfig(**{**SMALL, "rounds": 3}, clients=8, fraction=0.5, stable_sets=False)
    first = Simulation(cfg)
    recs = [first.step()]
    ck = checkpoint.simulation_checkpoint(first, recs)
    old = {k: v for k, v in ck.config.items() if k not in ("stable_sets", "set_size")}  # an older version's record
    checkpoint.save(tmp_path, dataclasses.replace(ck, config=old))
    cfg2, ck2 = checkpoint.load_simulation(tmp_path)
    assert cfg2.stable_sets is False  # per-client, as it ran, not today's default
    second = Simulation(cfg2)
    checkpoint.restore_simulation(second, ck2)
    assert second.step().sampled == 4 and second.sets is None


def test_a_checkpoint_without_sets_is_refused_by_a_run_with_them(tmp_path):
    cfg = SimConfig(**SMALL, clients=10)
    sim = Simulation(cfg)
    arrays, state = sim.state()
    state["federation"]["sets"] = None
    with pytest.raises(ConfigError, match="no stable anonymity sets"):
        Simulation(cfg).restore(arrays, state)


def test_a_checkpoint_of_the_earlier_layout_still_restores_its_sets():
    # Before the federation's state had a key of its own, the partition lay under "stable_sets".
    cfg = SimConfig(**SMALL, clients=10)
    sim = Simulation(cfg)
    arrays, state = sim.state()
    fed = state.pop("federation")
    other = StableSets(((0, 2, 4, 6, 8), (1, 3, 5, 7, 9)))
    legacy = {**state, "stable_sets": other.as_data(), "pseudonyms": fed["pseudonyms"]}
    again = Simulation(cfg)
    again.restore(arrays, legacy)
    assert again.sets == other and again.rounds.sampler.sets == other.sets
    with pytest.raises(ConfigError, match="no stable anonymity sets"):
        Simulation(cfg).restore(arrays, state)


@pytest.mark.parametrize("bad,match", [
    (dict(set_size=2), "set_size must be an int of at least 3"),
    (dict(set_size=True), "set_size must be an int"),
    (dict(stable_sets="yes"), "stable_sets must be true or false"),
])
def test_bad_set_settings_are_refused_in_one_line(bad, match):
    with pytest.raises(ConfigError, match=match) as err:
        SimConfig(**SMALL, clients=10, **bad).validated()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("bad,match", [
    (dict(clients=4), "4 clients cannot form one stable anonymity set of set_size=5"),
    (dict(clients=10, shuffle="real", group_size=5), "group_size draws new groups every round"),
])
def test_a_federation_its_sets_cannot_hold_is_refused(bad, match):
    with pytest.raises(ConfigError, match=match):
        Simulation(SimConfig(**{**SMALL, **bad}))


def test_the_command_line_refuses_a_set_below_the_minimum_in_one_line(tmp_path, capsys):
    from reshuffle.cli import main

    assert main(["simulate", "--dataset", "digits", "--clients", "6", "--set-size", "2", "--rounds", "1",
                 "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "set_size must be an int of at least 3" in err
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_per_client_sampling_remains_available():
    sim = Simulation(SimConfig(**SMALL, clients=4, stable_sets=False, dropout=0.25))
    assert sim.sets is None
    rec = sim.step()
    assert rec.models_received == 3 and not any(w.startswith(INCOMPLETE) for w in rec.lost.values())
