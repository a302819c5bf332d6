"""Rules that keep a history per pseudonym: the API (context, commit, checkpoint), and what the history buys."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.errors import ConfigError
from reshuffle.server.aggregate import FLStep
from reshuffle.server.optimizers import make_server_optimizer
from reshuffle.run.pseudonyms import ideal_pseudonym, run_key
from reshuffle.server.rules import (
    AlignIns, FLDetector, FoolsGold, FreqFed, HammerAnvil, InfluenceBudget, Kinship, make_rule, rule_names,
)
from reshuffle.server.rules.base import decide_in_context

PSEUDONYMOUS = ["foolsgold", "kinship", "influence-budget", "fldetector", "hammer-anvil"]


def honest_rounds(rounds: int, n: int, d: int, seed: int, lonely: int | None = None) -> list[np.ndarray]:
    """Non-IID honest rows: a shared direction plus each client's own steady drift, plus noise.

    ``lonely`` (a row index) drifts along coordinates nobody else writes: a client that alone holds a class.
    """
    rng = np.random.default_rng(seed)
    common = rng.normal(size=d)
    drift = rng.normal(size=(n, d)) * 0.8
    if lonely is not None:
        drift[lonely] = 0.0
        drift[lonely, : d // 10] = 3.0
    return [common + drift + rng.normal(size=(n, d)) * 0.5 for _ in range(rounds)]


def names(n: int) -> list[str]:
    return [f"p{i}" for i in range(n)]


def step(rule_name: str, f: int = 2, **options) -> FLStep:
    return FLStep(make_rule(rule_name, f, seed=3, **options), make_server_optimizer("sgd", None))


@pytest.mark.parametrize("name", PSEUDONYMOUS)
def test_a_pseudonymous_rule_refuses_rows_without_pseudonyms_and_the_round_keeps_W_g(name):
    fl = step(name)
    W = np.zeros(6)
    models = [W + r for r in honest_rounds(1, 7, 6, 0)[0]]
    res = fl(W, models, 1)
    assert res.skipped is not None and "pseudonym" in res.skipped and (res.W_g == W).all()
    with pytest.raises(ConfigError, match="pseudonym"):
        make_rule(name, 2, seed=3).decide(np.ones((7, 6)), round=1)


def test_every_existing_step_call_works_unchanged_and_a_per_round_rule_ignores_pseudonyms():
    W = np.zeros(5)
    models = [W + r for r in honest_rounds(1, 7, 5, 1)[0]]
    a = step("clip-trim")(W, models, 1)
    b = step("clip-trim")(W, models, 1, pseudonyms=names(7))
    assert a.skipped is None and np.array_equal(a.W_g, b.W_g)
    with pytest.raises(ConfigError, match="6 pseudonyms for 7 models"):
        step("clip-trim")(W, models, 1, pseudonyms=names(6))


@pytest.mark.parametrize("name", PSEUDONYMOUS)
def test_decide_leaves_the_history_alone_until_commit(name):
    """The attackers' copy may be probed any number of times; only the deployed step commits."""
    rule = make_rule(name, 2, seed=3)
    rows = honest_rounds(3, 7, 6, 2)
    W = np.zeros(6)
    for t, U in enumerate(rows[:2], start=1):
        decide_in_context(rule, U, t, pseudonyms=names(7), global_model=W)
        rule.commit()
        W = W + U.mean(axis=0)
    before = copy.deepcopy(rule.state())
    first = decide_in_context(rule, rows[2], 3, pseudonyms=names(7), global_model=W)
    for _ in range(3):
        decide_in_context(rule, rows[2] * 5, 3, pseudonyms=names(7)[::-1], global_model=W)
    again = decide_in_context(rule, rows[2], 3, pseudonyms=names(7), global_model=W)
    after = rule.state()
    assert np.array_equal(first.aggregate, again.aggregate)
    assert before[1] == after[1] and before[0].keys() == after[0].keys()
    assert all(np.array_equal(before[0][k], after[0][k]) for k in before[0])


@pytest.mark.parametrize("name", PSEUDONYMOUS + ["default", "clip-trim"])
def test_a_checkpointed_step_resumes_exactly(name):
    rows = honest_rounds(6, 8, 6, 4)
    W0 = np.zeros(6, dtype=np.float32)

    def run(fl, W, ts):
        for t in ts:
            perm = np.random.default_rng(t).permutation(8)[:7]  # one pseudonym sits out each round
            res = fl(W, [(W + rows[t - 1][i]).astype(np.float32) for i in perm], t, pseudonyms=[f"p{i}" for i in perm])
            W = res.W_g
        return W

    whole = run(step(name), W0, range(1, 7))
    first = step(name)
    W = run(first, W0, range(1, 4))
    saved = {k: v.copy() for k, v in first.state().items()}
    resumed = step(name)
    resumed.restore(saved)
    assert np.array_equal(run(resumed, W, range(4, 7)), whole)


def test_a_restore_refuses_a_history_of_other_arrays():
    fl = step("foolsgold")
    with pytest.raises(ConfigError):
        fl.restore({"rule.H": np.zeros((2, 3)), "rule.json": np.frombuffer(b'{"labels": ["a"]}', np.uint8)})


def test_pseudonyms_that_vanish_keep_their_history_and_new_ones_start_empty():
    rule = FoolsGold(center="none")
    U = np.eye(4)
    rule.decide(U, round=1, pseudonyms=["a", "b", "c", "d"])
    rule.commit()
    rule.decide(np.eye(4)[:2], round=2, pseudonyms=["a", "e"])  # b, c, d sit out; e is new
    rule.commit()
    h = rule.history()
    H = dict(zip(h.labels, h.arrays["H"]))  # str labels are kept as "s:<label>", bytes as "h:<hex>"
    assert np.array_equal(H["s:a"], [2.0, 0, 0, 0]) and np.array_equal(H["s:b"], [0, 1.0, 0, 0])
    assert np.array_equal(H["s:e"], [0, 1.0, 0, 0]) and dict(zip(h.labels, h.seen))["s:b"] == 1


def test_decay_ages_a_history_by_the_rounds_its_pseudonym_missed():
    rule = FoolsGold(center="none", decay=0.5)
    rule.decide(np.eye(3), round=1, pseudonyms=["a", "b", "c"])
    rule.commit()
    rule.decide(np.eye(3), round=4, pseudonyms=["a", "b", "c"])  # three rounds later: aged by 0.5²
    rule.commit()
    assert np.allclose(rule.history().arrays["H"][0], [1.25, 0, 0])


def test_an_epoch_forgets_every_history():
    rule = FoolsGold(center="none", epoch=2)
    for t in (1, 2, 3):
        rule.decide(np.eye(3), round=t, pseudonyms=["a", "b", "c"])
        rule.commit()
    assert np.allclose(rule.history().arrays["H"][0], [1.0, 0, 0])  # round 3 opened epoch 1


def test_two_rows_under_one_pseudonym_are_both_rejected_and_the_round_goes_on():
    d = FoolsGold(center="none").decide(np.eye(4), round=1, pseudonyms=["a", "a", "b", "c"])
    assert d.weights[:2].tolist() == [0.0, 0.0] and 0 not in d.accepted and 1 not in d.accepted


def test_a_pseudonym_flagged_in_consecutive_rounds_is_banned_for_its_epoch():
    rule = FoolsGold(center="none", ban_after=2, epoch=3)
    U = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [0, 0, 1.0]])
    for t in (1, 2):
        rule.decide(U, round=t, pseudonyms=["a", "b", "c", "d"])
        rule.commit()
    d = rule.decide(np.eye(4)[:, :3], round=3, pseudonyms=["a", "b", "c", "d"])  # c and d now differ
    assert d.weights[2] == 0 and d.weights[3] == 0 and set(rule.history().data["banned"]) == {"s:c", "s:d"}
    rule.commit()
    d = rule.decide(np.eye(4)[:, :3], round=4, pseudonyms=["a", "b", "c", "d"])  # a new epoch lifts the ban
    assert d.weights[2] > 0


def test_labels_may_be_bytes_or_str_but_nothing_else():
    FoolsGold().decide(np.eye(2), round=1, pseudonyms=[b"\x00\x01", "x"])
    with pytest.raises(ConfigError, match="non-empty bytes or str"):
        FoolsGold().decide(np.eye(2), round=1, pseudonyms=[1, 2])


def colluding_rounds(rounds: int, n: int, m: int, d: int, seed: int, push: float) -> tuple[list[np.ndarray], np.ndarray]:
    """Honest rows, the last m replaced by rows that carry one payload b on top of an honest-looking row."""
    rng = np.random.default_rng(seed + 1)
    b = np.zeros(d)
    b[rng.choice(d, size=d // 10, replace=False)] = 1.0
    out = []
    for U in honest_rounds(rounds, n, d, seed):
        U = U.copy()
        U[n - m:] = np.median(U[: n - m], axis=0) + push * b
        out.append(U)
    return out, b / np.linalg.norm(b)


def pushed(rule_name: str, rounds, b, n: int, f: int = 3) -> float:
    """The summed aggregate's projection on the payload over the rounds."""
    rule = make_rule(rule_name, f, seed=5)
    total = 0.0
    for t, U in enumerate(rounds, start=1):
        d = decide_in_context(rule, U, t, pseudonyms=names(n), global_model=np.ones(U.shape[1]))
        rule.commit()
        total += float(d.aggregate @ b)
    return total


def test_colluders_who_repeat_one_push_weigh_as_one_row_under_the_history():
    """The accumulated push of colluders alike, each round inside clip-trim's bounds (per-round rules let it add
    up): their histories are kin, so their rows merge into one, and the push that gets through is one row's,
    well below what three get through clip-trim."""
    rounds, b = colluding_rounds(20, 16, 3, 60, 7, push=0.6)
    honest_only = pushed("clip-trim", [U[:13] for U in rounds], b, 13)
    clip_trim = pushed("clip-trim", rounds, b, 16) - honest_only
    assert clip_trim > 3.0
    assert pushed("hammer-anvil", rounds, b, 16) - honest_only < 0.45 * clip_trim


def test_an_honest_pseudonym_that_alone_holds_a_class_keeps_its_clip_trim_weight():
    rule = HammerAnvil(f=3)
    rows, _ = colluding_rounds(12, 16, 3, 60, 8, push=0.6)
    lonely = honest_rounds(12, 16, 60, 8, lonely=0)
    for t, (U, L) in enumerate(zip(rows, lonely), start=1):
        U = U.copy()
        U[0] = L[0]
        d = rule.decide(U, round=t, pseudonyms=names(16))
        rule.commit()
    # The three colluders merge into one row; the lonely row keeps at least what clip-trim gives it (the history
    # takes weight only from the rows it judges alike, and the trimmed count stays f).
    ct = make_rule("clip-trim", 3, seed=0).decide(U)
    assert set(range(13, 16)).isdisjoint(d.accepted) and d.weights[0] >= ct.weights[0] - 1e-9
    assert FoolsGold(center="median").decide(np.stack([L[0] for L in lonely[:1]] + list(lonely[0][1:])),
                                             round=1, pseudonyms=names(16)).weights[0] == 1.0


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 12), st.integers(0, 2**31 - 1))
def test_foolsgold_weights_lie_in_0_1_and_the_most_unique_row_keeps_full_weight(n, seed):
    U = np.random.default_rng(seed).normal(size=(n, 5))
    d = FoolsGold(center="median").decide(U, round=1, pseudonyms=names(n))
    assert ((d.weights >= 0) & (d.weights <= 1)).all() and d.weights.max() == 1.0


@settings(max_examples=25, deadline=None)
@given(st.integers(3, 12), st.integers(0, 2**31 - 1))
def test_the_influence_budget_never_lets_a_row_carry_an_account_past_its_bound(n, seed):
    rng = np.random.default_rng(seed)
    rule = InfluenceBudget(factor=1.0, decay=1.0)
    for t in range(1, 4):
        rule.decide(rng.normal(size=(n, 4)), round=t, pseudonyms=names(n))
        rule.commit()
    A = rule.history().arrays["A"]
    U = rng.normal(size=(n, 4))
    rule.decide(U, round=4, pseudonyms=names(n))
    norms = np.linalg.norm(U, axis=1)
    V = U * np.minimum(1, np.median(norms) / norms)[:, None]
    X = V - np.median(V, axis=0)
    bound = float(np.median(np.linalg.norm(A + X, axis=1)))
    rule.commit()
    # An account already over this round's bound (the bound moves with the others') takes nothing more.
    assert (np.linalg.norm(rule.history().arrays["A"], axis=1)
            <= np.maximum(bound, np.linalg.norm(A, axis=1)) + 1e-9).all()


def test_fldetector_removes_the_row_its_own_history_did_not_predict():
    rule = FLDetector(memory=2, window=2, seed=0)
    rng = np.random.default_rng(0)
    W = np.zeros(8)
    base = rng.normal(size=(9, 8))
    for t in range(1, 5):
        U = base * (0.9 ** t) + rng.normal(size=(9, 8)) * 0.01
        if t >= 3:
            U[8] = -3 * base[8]  # turns
        d = rule.decide(U, round=t, pseudonyms=names(9), global_model=W)
        rule.commit()
        W = W + d.aggregate
    assert 8 not in d.accepted and len(d.accepted) >= 7


def test_alignins_and_freqfed_need_no_pseudonym():
    U = honest_rounds(1, 9, 40, 3)[0]
    U[8] = -U[8] * 4
    assert 8 not in AlignIns().decide(U, global_model=np.ones(40)).accepted
    assert 8 not in FreqFed().select(U)
    assert {"alignins", "freqfed", "hammer-anvil", "foolsgold", "fldetector", "influence-budget"} <= set(rule_names())


def test_hammer_anvil_refuses_a_hammer_without_history_and_a_filter_that_removes_nothing():
    with pytest.raises(ConfigError, match="history per pseudonym"):
        HammerAnvil(f=1, hammer="clip-trim")
    with pytest.raises(ConfigError, match="remove rows"):
        HammerAnvil(f=1, filter="clip-trim")


def test_a_pipeline_that_mixes_rows_refuses_a_history_behind_it():
    rule = make_rule("foolsgold", 2, pre=["bucketing"])
    with pytest.raises(ConfigError, match="mix rows"):
        decide_in_context(rule, np.eye(6), 1, pseudonyms=names(6))


def test_ideal_pseudonyms_are_one_per_client_per_epoch_and_hide_the_client():
    key = run_key(11)
    labels = {ideal_pseudonym(key, 0, i) for i in range(50)}
    assert len(labels) == 50 and all(len(x) == 16 for x in labels)
    assert ideal_pseudonym(key, 1, 3) != ideal_pseudonym(key, 0, 3) != ideal_pseudonym(run_key(12), 0, 3)


def test_kinship_keeps_every_honest_history_where_foolsgolds_relative_cut_drops_some():
    """Honest non-IID histories differ by degree; FoolsGold cuts those less unique than the most unique one."""
    rng = np.random.default_rng(9)
    classes = rng.normal(size=(10, 60))
    drift = 2.0 * rng.dirichlet(np.full(10, 0.3), size=20) @ classes  # Dirichlet(0.3) mixtures of class directions
    fg, kin = FoolsGold(center="median", decay=0.9), Kinship()
    for t in range(1, 11):
        U = classes.mean(axis=0) + drift + rng.normal(size=(20, 60)) * 0.5
        a = fg.decide(U, round=t, pseudonyms=names(20))
        b = kin.decide(U, round=t, pseudonyms=names(20))
        fg.commit()
        kin.commit()
    assert len(b.accepted) == 20 and len(a.accepted) < 20


def test_hammer_anvil_trims_as_clip_trim_until_it_has_banned_someone():
    U = honest_rounds(1, 9, 12, 5)[0]
    d = HammerAnvil(f=2).decide(U, round=1, pseudonyms=names(9))
    ct = make_rule("clip-trim", 2, seed=0).decide(U)
    assert np.allclose(d.aggregate, ct.aggregate)


def test_a_simulation_resumed_from_its_checkpoint_keeps_the_rules_history():
    from reshuffle.sim import Simulation, from_mapping

    s = {"dataset": "digits", "clients": 8, "malicious": 0.25, "rounds": 3, "shuffle": "ideal", "rule": "hammer-anvil",
         "attack": "badnets", "seed": 2, "f": 2}
    whole = Simulation(from_mapping(s, source="test"))
    whole.run()
    first = Simulation(from_mapping({**s, "rounds": 2}, source="test"))
    first.run()
    arrays, data = first.state()
    assert any(k.startswith("opt.rule.") for k in arrays)  # the history travels with the checkpoint
    resumed = Simulation(from_mapping(s, source="test"))
    resumed.restore(arrays, data)
    resumed.run()
    assert np.array_equal(resumed.W_g, whole.W_g)


def test_a_steeper_kin_strength_reaches_a_copy_sooner_and_leaves_the_unalike_alone():
    from reshuffle.server.rules.history import kin_strength

    # Closest kin: nine unalike histories (0.3) and a group of three alike at 0.64 (the outlier threshold: 0.5).
    cos = np.full((12, 12), 0.3)
    cos[9:, 9:] = 0.64
    np.fill_diagonal(cos, 1.0)
    soft, steep = kin_strength(cos), kin_strength(cos, steep=4.0)
    assert soft[9, 10] == pytest.approx(0.28) and steep[9, 10] == 1.0  # from 0.5 + 0.5/4 on: one source
    assert not soft[:9].any() and not steep[:9].any()
    r = make_rule("kinship", 0, steep=4.0)
    assert r.similarity_weights(cos).round(3).tolist() == [1.0] * 9 + [0.333] * 3
    with pytest.raises(ConfigError, match="steep"):
        make_rule("kinship", 0, steep=0.5)
