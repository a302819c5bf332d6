"""The trust parameters are the participant's (docs/protocol.md §11, "Who chooses").

The PS writes c, t, the decoys and R_max into ROUND_START. Each attack below is a PS that
chooses them, played with the shipped participant code and legal messages only; the linker
(:mod:`reshuffle.adversaries.linker`) then unmasks and links what it can. Before each
participant held its own floors, a PS that announced c = 0 with one colluder linked every
honest model (8 of 8 at N = 9, 9 of 9 at N = 10, 3 of 3 at N = 4 with the default c, 4 of 4
in a group of 5).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import reshuffle
from reshuffle.adversaries import make_adversary
from reshuffle.errors import ConfigError
from reshuffle.protocol.params import BelowFloor, RoundParams, TrustFloors, colluders, smallest_round


def _updates(N: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)  # model values only
    return [rng.normal(size=16).astype(np.float32) for _ in range(N)]


def _play(N: int, seed: int, c: int | None, **kw):
    b = make_adversary("announce-c", c=c)
    r = reshuffle.shuffle(_updates(N, seed), seed=seed, adversaries=[b], raise_on_failure=False, **kw)
    return b, r, [i for i in range(N) if i not in b.colluders]


@pytest.mark.parametrize("N", [9, 10])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_announced_c_of_0_with_one_colluder_is_refused_and_links_nothing(N, seed):
    # The PS announces c = 0 and the least t, then has every honest dealer publish its shares to t − 1
    # complainers; with the colluder's share that was t of every secret (before: every model linked).
    b, r, honest = _play(N, seed, 0)
    assert b.links(r, honest) == []
    floor = colluders(N)
    for i in honest:
        err = r.views[i].errors[0]
        assert isinstance(err, BelowFloor) and (err.param, err.announced, err.bound) == ("c", 0, floor)
        assert "c=0" in str(err) and f"floor c={floor}" in str(err)
        assert not r.views[i].uploaded and not r.views[i].revealed  # it took no part at all
    assert r.failure is not None and not set(r.blamed) & set(honest)


@pytest.mark.parametrize("N", [9, 10])
def test_with_the_default_c_the_same_complaints_get_no_secret(N):
    # The control: the same PS and colluder under the default parameters; the dealers answer at most
    # t − 1 − c complainers, which with the colluder's share stays below t.
    b, r, honest = _play(N, 1, None)
    assert r.failure is None and b.links(r, honest) == []
    assert b.server.params.c == colluders(N) >= 1


def test_n_4_runs_with_one_colluder_tolerated_and_refuses_the_old_default():
    # The default c was ⌊4/5⌋ = 0: one colluder linked 3 of 3 at default parameters.
    assert RoundParams.default(4, 16).c == 1 and RoundParams.default(4, 16).t == 3
    b, r, honest = _play(4, 1, None)
    assert r.failure is None and b.links(r, honest) == [] and sorted(r.positions) == [0, 1, 2, 3]
    # A PS that still announces the old default (c = 0) is refused by everyone.
    b, r, honest = _play(4, 1, 0)
    assert b.links(r, honest) == [] and all(isinstance(r.views[i].errors[0], BelowFloor) for i in honest)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_group_announced_with_c_j_0_is_refused_by_its_members(seed):
    # Groups of 5: the PS announces c_j = 0 in every group (before: group_collusion=0 did it, and one
    # colluder linked the 4 other members of its group).
    b, r, honest = _play(10, seed, 0, group_size=5)
    assert b.links(r, honest) == []
    for i in honest:
        err = r.views[i].errors[0]
        assert isinstance(err, BelowFloor) and err.param == "c" and err.announced == 0
    assert r.failure is not None


def test_group_collusion_0_gives_each_group_the_floor():
    # The shipped PS computes c_j = max(1, ⌊f·N_j⌋): one colluder per group is always tolerated.
    b, r, honest = _play(10, 1, None, group_size=5, group_collusion=0.0)
    assert r.failure is None and b.links(r, honest) == []
    assert [s.params.c for s in b.servers] == [1, 1]


def test_small_federations():
    # c >= 1 and two honest members: N = 3 is the smallest round (t = 3: nobody may drop); N = 2 leaves
    # one honest member besides the colluder, so it is refused up front.
    assert smallest_round() == 3
    p = RoundParams.default(3, 4)
    assert (p.c, p.t) == (1, 3)
    with pytest.raises(ConfigError, match="N=2 with c=1 leaves 1 honest member"):
        RoundParams.default(2, 4)
    with pytest.raises(ConfigError, match="N=2"):
        reshuffle.shuffle(_updates(2, 1))
    r = reshuffle.shuffle(_updates(3, 1), seed=1)
    assert sorted(r.positions) == [0, 1, 2]
    # A participant with a higher anonymity floor refuses rounds its default-floor peers accept.
    assert smallest_round(TrustFloors(anonymity=4)) == 5


@pytest.mark.parametrize("field,value,param", [
    ("t", 6, "t"), ("decoys", 0, "decoys"), ("R_max", 17, "R_max"), ("c", 1, "c")])
def test_every_floor_refuses_with_the_parameter_the_value_and_the_bound(field, value, param):
    p = RoundParams.default(10, 4)
    # Validation alone already ties t to c (t > (N + c)/2); the floor on t is checked on its own all the same.
    bad = dataclasses.replace(p, **{field: value, **({"t": 7} if field == "c" else {})})
    with pytest.raises(BelowFloor) as exc:
        TrustFloors().check(bad)
    assert (exc.value.param, exc.value.announced) == (param, value)
    assert str(value) in str(exc.value) and str(exc.value.bound) in str(exc.value)
    TrustFloors().check(p)  # the defaults meet the default floors


def test_floors_are_validated():
    for bad in ({"collusion": 1.0}, {"collusion": -0.1}, {"anonymity": 1}, {"decoys": -1}, {"R_max": 0},
                {"R_max": 65}):
        with pytest.raises(ConfigError):
            TrustFloors(**bad)
    with pytest.raises(ConfigError, match="TrustFloors"):
        reshuffle.protocol.Participant(0, 1, None, None, None, None, b"", floors={"collusion": 0.3})


def test_caps_use_the_stricter_of_the_announced_c_and_the_floor():
    # c_bound never falls below the floor, whatever the PS announced.
    f = TrustFloors(collusion=0.3)
    p = RoundParams.default(10, 4)  # c = 2
    assert f.c(10) == 3 and f.c_bound(p) == 3
    assert f.c_bound(p.with_(c=4, t=8)) == 4


def test_a_flower_node_takes_its_floors_from_its_own_config():
    # Each node assumes 40 % colluders: c >= ⌊0.4·6⌋ = 2; the server announces its default c = 1. Every
    # node refuses the ROUND_START, nothing is sent, the round delivers nothing.
    from flower_helpers import LoopbackGrid, toy_client_app
    from test_flower_grid import noisy_reply, train_messages

    from reshuffle.flower.grid import ReshuffleGrid

    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 6, node_config=lambda i: {
        "partition-id": i, "num-partitions": 6, "reshuffle-collusion": 0.4}, ungrouped=True)
    grid = ReshuffleGrid(lg, phase_timeout=0.3, group_size=None)
    assert list(grid.send_and_receive(train_messages(grid), timeout=60)) == []
    assert "advertisements" in grid.rounds[-1].failed
    # The same server with c = 2 announced meets the nodes' floor.
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 6, node_config=lambda i: {
        "partition-id": i, "num-partitions": 6, "reshuffle-collusion": 0.4}, ungrouped=True)
    grid = ReshuffleGrid(lg, phase_timeout=10, c=2, group_size=None)
    assert len(list(grid.send_and_receive(train_messages(grid), timeout=60))) == 6


def test_a_flower_node_refuses_a_bad_setting_by_its_key():
    from reshuffle.flower.mod import node_trust

    assert node_trust({}) == (None, TrustFloors())
    assert node_trust({"reshuffle-collusion": 0, "reshuffle-max-iterations": 8}) == (
        None, TrustFloors(collusion=0.0, R_max=8))
    for key, bad in (("reshuffle-collusion", 1.5), ("reshuffle-min-anonymity", 1), ("reshuffle-min-decoys", -1),
                     ("reshuffle-max-iterations", 0), ("reshuffle-min-group", 1)):
        with pytest.raises(ConfigError, match=key):
            node_trust({key: bad})
