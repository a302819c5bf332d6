"""The federation's cross-round state: one owner (the FL round) of stable sets, epochs and pseudonyms, for both
drivers, saved in the checkpoint; the all-or-none rule applied by the round to every channel's delivery."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from reshuffle.errors import ConfigError
from reshuffle.run import checkpoint
from reshuffle.run.config import SimConfig
from reshuffle.run.delivery import PSEUDONYM, SET, Delivery, IdealShuffle, RealShuffle, Uploads
from reshuffle.run.federation import NO_WHOLE_SET, Federation
from reshuffle.run.pseudonyms import EpochBook, EpochSchedule
from reshuffle.run.sets import INCOMPLETE, MIN_SET, StableSets
from reshuffle.sim import Simulation

SMALL = dict(dataset="digits", model="logreg", batch_size=16, seed=3, shuffle="ideal")
TWO = ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9))


# --------------------------------------------------------------------------- the epoch schedule
@settings(max_examples=200, deadline=None)
@given(rounds=st.integers(0, 20), first=st.integers(1, 50), T=st.integers(1, 500))
def test_every_round_lies_in_the_epoch_its_start_opens(rounds, first, T):
    s = EpochSchedule(rounds, first)
    start = s.start(T)
    assert s.epoch_of(start) == s.epoch_of(T) and start <= max(T, first)
    if rounds and T >= first:
        assert start <= T < start + rounds and s.epoch_of(start + rounds) == s.epoch_of(T) + 1
    if rounds == 0:
        assert s.epoch_of(T) == 0 and start == first
    assert s.epoch_of(T + 1) >= s.epoch_of(T)


@pytest.mark.parametrize("rounds,first", [(-1, 1), (True, 1), (2, 0), (1.5, 1)])
def test_a_bad_schedule_is_refused_in_one_line(rounds, first):
    with pytest.raises(ConfigError) as err:
        EpochSchedule(rounds, first)
    assert "\n" not in str(err.value)


def test_the_book_numbers_its_epochs_by_the_schedule():
    book = EpochBook(rounds=3, base=100)
    keys = [book.issuer(T) for T in range(1, 8)]
    assert [k.epoch for k in keys] == [101, 101, 101, 104, 104, 104, 107]
    assert book.schedule == EpochSchedule(3, 1) and book.epoch(5) == 104


# --------------------------------------------------------------------------- checkpoint round trip
def _partition(draw_sizes):
    ids, out = iter(range(sum(draw_sizes))), []
    for k in draw_sizes:
        out.append(tuple(next(ids) for _ in range(k)))
    return StableSets(tuple(out))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(MIN_SET, 7), min_size=1, max_size=6), rounds=st.integers(0, 5),
       first=st.integers(1, 40), base=st.integers(0, 2**40), served=st.lists(st.integers(1, 60), max_size=4))
def test_the_federation_state_survives_a_json_round_trip(sizes, rounds, first, base, served):
    fed = Federation(sets=_partition(sizes), book=EpochBook(rounds=rounds, base=base), seed=5)
    for T in sorted(served):
        fed.book.issuer(first + T)
    data = json.loads(json.dumps({"federation": fed.state()}))
    again = Federation(sets=_partition(sizes), book=EpochBook(rounds=rounds), seed=5)
    again.restore(data)
    assert again.state() == fed.state() and again.members() == fed.members()
    assert all(again.book.epoch(T) == fed.book.epoch(T) for T in range(1, 80))


def test_pseudonyms_and_groups_survive_the_round_trip():
    from reshuffle.protocol.groups import Assignment  # noqa: F401 (the groups' encoding)

    ch = RealShuffle()
    fed = Federation(book=ch.epochs, group_size=5)
    models = {i: np.full(4, i, np.float32) for i in range(6)}
    ch.deliver(Uploads(1, np.zeros(4, np.float32), models))
    data = json.loads(json.dumps({"federation": fed.state()}))
    again = Federation(group_size=5)
    again.restore(data)
    assert {i: n.encode() for i, n in again.book.held.items()} == {i: n.encode() for i, n in fed.book.held.items()}
    assert again.book.issuer(2).key == fed.book.issuer(2).key and len(again.book.held) == 6
    assert all(again.pseudonym_of(i, 2) == fed.pseudonym_of(i, 2) == fed.book.held[i].name for i in range(6))


def test_a_state_of_another_version_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="version 9; this version of Re-Shuffle reads version 1") as err:
        Federation().restore({"federation": {"version": 9}})
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- the all-or-none rule
@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(MIN_SET, 6), min_size=1, max_size=5), data=st.data())
def test_the_round_keeps_a_set_whole_or_not_at_all(sizes, data):
    sets = _partition(sizes)
    clients = sets.members()
    missing = data.draw(st.sets(st.sampled_from(clients), max_size=4))
    senders = [i for i in clients if i not in missing]
    d = Delivery([np.full(2, i, np.float32) for i in senders], senders=senders,
                 lost={i: "dropout at upload" for i in missing},
                 meta={SET: [sets.sets[sets.of(i)] for i in senders]})
    got = Federation(sets=sets, seed=1).receive(d, clients)
    kept = set(got.senders)
    for s in sets.sets:
        assert set(s) <= kept or not set(s) & kept
        assert (set(s) <= kept) == (not set(s) & missing)
        if set(s) & missing:
            assert all(got.lost[i].startswith(INCOMPLETE) for i in s if i not in missing)
    assert [int(m[0]) for m in got.models] == list(got.senders)  # rows keep their columns
    assert len(got.meta[PSEUDONYM]) == len(got.models) and got.groups == {i: sets.of(i) for i in clients}
    assert Federation(sets=sets, seed=1).receive(got, clients) == got  # idempotent
    if not kept and senders:
        assert got.failure == NO_WHOLE_SET


def test_a_row_naming_a_set_the_run_does_not_have_is_refused():
    d = Delivery([np.zeros(2, np.float32)], meta={SET: [(0, 1, 99)]})
    with pytest.raises(ConfigError, match="not a stable set of this run"):
        Federation(sets=StableSets(TWO)).receive(d)


# --------------------------------------------------------------------------- resume equals a run that never stopped
@pytest.mark.parametrize("shuffle", ["ideal", "real"])
def test_a_resumed_simulation_has_the_sets_epochs_and_pseudonyms_of_one_that_never_stopped(tmp_path, shuffle):
    cfg = SimConfig(**{**SMALL, "shuffle": shuffle}, clients=12 if shuffle == "ideal" else 6, set_size=3,
                    rounds=3, fraction=0.5 if shuffle == "ideal" else 1.0, dropout=0.2 if shuffle == "ideal" else 0.0)

    def watch(sim, seen):
        orig = sim.rounds.receive
        sim.rounds.receive = lambda d, cohort=None: seen.append(orig(d, cohort)) or seen[-1]

    whole, seen_whole = Simulation(cfg), []
    watch(whole, seen_whole)
    recs_whole = whole.run()
    part, seen_part = Simulation(cfg), []
    watch(part, seen_part)
    first = [part.step()]
    held_after_1 = {i: (n.epoch, n.name) for i, n in part.rounds.federation.book.held.items()}
    checkpoint.save(tmp_path, checkpoint.simulation_checkpoint(part, first))
    cfg2, ck = checkpoint.load_simulation(tmp_path)
    resumed = Simulation(cfg2)
    checkpoint.restore_simulation(resumed, ck)
    watch(resumed, seen_part)
    recs = resumed.run(records=checkpoint.restore_simulation(Simulation(cfg2), ck))
    fed_w, fed_r = whole.rounds.federation, resumed.rounds.federation
    assert fed_r.members() == fed_w.members()
    assert fed_r.book.schedule == fed_w.book.schedule and fed_r.book.epoch(3) == fed_w.book.epoch(3)
    assert [(r.sampled, sorted(r.lost.items())) for r in recs] == [(r.sampled, sorted(r.lost.items()))
                                                                  for r in recs_whole]
    if shuffle == "ideal":
        # Every row's name, round by round, as the uninterrupted run's (ideal pseudonyms are the run's own).
        assert [sorted(d.meta[PSEUDONYM]) for d in seen_part] == [sorted(d.meta[PSEUDONYM]) for d in seen_whole]
        assert fed_r.state() == fed_w.state()
    else:
        # No client asks again after the resume: each keeps the pseudonym round 1 issued it, as it would have
        # (its record also keeps its group mates' signed requests, which later rounds add to).
        assert {i: (n.epoch, n.name) for i, n in fed_r.book.held.items()} == held_after_1
        assert fed_r.book.issuer(3).issued == fed_w.book.issuer(3).issued == set(range(6))
        names = {n.name for n in part.rounds.federation.book.held.values()}
        assert all(set(d.meta[PSEUDONYM]) == names for d in seen_part)


def test_rule_aware_attackers_name_each_client_as_the_deployed_rule_sees_its_row():
    # Real shuffle: the names the attackers replay a history rule under are the rows' recovered pseudonyms.
    cfg = SimConfig(**{**SMALL, "shuffle": "real"}, clients=6, set_size=3, rounds=2)
    sim = Simulation(cfg)
    seen = []
    orig = sim.rounds.receive
    sim.rounds.receive = lambda d, cohort=None: seen.append(orig(d, cohort)) or seen[-1]
    sim.step()
    before = {i: sim.pseudonym_of(i) for i in range(6)}  # what the attackers would use in round 2
    sim.step()
    assert dict(zip(seen[-1].senders, seen[-1].meta[PSEUDONYM])) == before


# --------------------------------------------------------------------------- both drivers, one rule
def _toy_reply(msg, ctx):
    """W_g plus the node's id; partition 3's reply of round 1 is not finite (the ServerApp rejects it)."""
    from flwr.app import ArrayRecord, MetricRecord, RecordDict

    k = ctx.node_config["partition-id"]
    T = msg.content["config"]["server-round"]
    arrs = [a + np.float32(np.nan if (k == 3 and T == 1) else k + 1)
            for a in msg.content["arrays"].to_numpy_ndarrays()]
    return RecordDict({"arrays": ArrayRecord(arrs), "metrics": MetricRecord({"num-examples": 10})})


def test_both_drivers_deliver_the_same_whole_sets_under_the_same_incomplete_set_pattern():
    from flower_helpers import LoopbackGrid, toy_client_app
    from reshuffle.flower.app.server_app import grid_delivery
    from reshuffle.flower.grid import ReshuffleGrid

    # The pattern: two sets of five; round 1, one member's model cannot be used; round 2, one member is silent.
    W_g = np.zeros(4, np.float32)
    silent = {"node": None}

    def drop(node, m):
        stage = m.content["reshuffle"]["stage"] if "reshuffle" in m.content else None
        return node == silent["node"] and stage not in (None, "claim")

    lg = LoopbackGrid(toy_client_app(_toy_reply), 10, drop=drop)
    fed = Federation(group_size=5)
    grid = ReshuffleGrid(lg, phase_timeout=0.5, group_size=5, federation=fed)
    flower = []
    for T in (1, 2):
        if T == 2:
            bad = next(n for n in lg.node_ids if lg.contexts[n].node_config["partition-id"] == 3)
            silent["node"] = next(n for n in lg.node_ids if n != bad)
        d, _, _ = grid_delivery(grid, SimpleNamespace(round_timeout=60), T, W_g, sorted(lg.node_ids))
        flower.append(fed.receive(d, sorted(lg.node_ids)))
    sim_fed = Federation(sets=StableSets(TWO), seed=1)
    models = {i: np.full(4, i, np.float32) for i in range(10)}
    sim = [sim_fed.receive(IdealShuffle(1).deliver(Uploads(1, W_g, models, {}, {3: "local training diverged"},
                                                           groups=TWO)), range(10)),
           sim_fed.receive(IdealShuffle(1).deliver(Uploads(2, W_g, models, {"upload": [7]}, groups=TWO)), range(10))]
    for f, s in zip(flower, sim):
        # Five rows, all of the one whole set; every member of the other lost, each with a cause.
        assert len(f.models) == len(s.models) == 5
        assert len(set(f.meta[SET])) == len(set(s.meta[SET])) == 1
        assert len(f.lost) == len(s.lost) == 5
        assert not set(f.meta[SET][0]) & set(f.lost) and not set(s.meta[SET][0]) & set(s.lost)
    assert all(why.startswith(INCOMPLETE) for why in flower[0].lost.values())


def test_a_flower_checkpoint_of_the_earlier_layout_restores_its_groups_and_the_round_draws_them_whole():
    from reshuffle.protocol.groups import Assignment
    from reshuffle.run.sampling import UniformSampler

    a = Assignment.draw(1, 0, 5, list(range(10)), bytes(32))
    old = Federation(group_size=5)
    assert old.adopt(a, {pid: 1000 + pid for pid in range(10)}) and not old.adopt(a, {})
    legacy = {"round": 1, "banned": {}, "groups": old.group_state()}  # what a ServerApp saved before
    fed = Federation(group_size=5)
    fed.restore(legacy)
    assert fed.members() == old.members() and len(fed.members()) == 2
    nodes = [1000 + i for i in range(10)]
    for T in range(2, 6):
        assert tuple(fed.cohort(UniformSampler(1, fraction=0.5), T, nodes)) in fed.members()
    # A node in no group (it joined later) is sent every round, to form a group with other newcomers.
    assert 2000 in fed.cohort(UniformSampler(1, fraction=0.5), 2, nodes + [2000])
    with pytest.raises(ConfigError, match="stable groups saved as list"):
        Federation().restore({"groups": ["00"]})


def test_a_set_left_with_one_live_model_delivers_nothing_and_names_every_loss():
    # Three of a set's four members diverge (lr 1e4): the one live model never completes its set, so the round
    # delivers nothing and every member's loss has a cause (before: the ideal shuffle refused one update).
    cfg = SimConfig(dataset="digits", model="mlp", clients=4, set_size=3, rounds=2, malicious=0.25, attack="gaussian",
                    rule="alignins", lr=1e4, batch_size=32, seed=0)
    recs = Simulation(cfg).run()
    assert [r.round for r in recs] == [1, 2]
    for r in recs:
        assert r.models_received == 0
        assert set(r.lost) == {0, 1, 2, 3}
