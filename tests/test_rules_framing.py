"""Framing: attackers who copy honest rows to aim a rule's similarity, bans and counts at honest clients.

A mechanism whose inputs the attackers shape may take weight from the rows it judges, but never
lowers the protection everyone else gets: the trimmed count stays the run's f, whatever the history says.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.server.rules import make_rule
from reshuffle.server.rules.base import decide_in_context

N, F, D = 20, 4, 40


def honest(rng: np.random.Generator, n: int, d: int, drift: np.ndarray) -> np.ndarray:
    """Non-IID honest rows of one round: a shared step (on the second half of the coordinates), each
    client's own drift, noise."""
    return (np.arange(d) >= d // 2) + drift[:n] + rng.normal(size=(n, d)) * 0.5


def ban_lever_rounds(rounds: int, seed: int, big: float = 64.0) -> tuple[list[np.ndarray], np.ndarray]:
    """Rows 0..15 honest; rows 16 and 17 copy honest rows 0 and 1 exactly; rows 18 and 19 push b at ``big``
    times the honest norm, each on its own half of b's coordinates (so their histories never look alike)."""
    rng = np.random.default_rng(seed)
    drift = rng.normal(size=(N, D)) * 0.8
    b = np.zeros(D)
    b[: D // 2] = 1.0
    halves = [np.arange(D) < D // 4, (np.arange(D) >= D // 4) & (np.arange(D) < D // 2)]
    out = []
    for _ in range(rounds):
        U = np.empty((N, D))
        U[:16] = honest(rng, 16, D, drift)
        U[16], U[17] = U[0], U[1]
        s = float(np.median(np.linalg.norm(U[:16], axis=1)))
        for k, half in enumerate(halves):
            p = np.where(half, 1.0, 0.0)
            U[18 + k] = big * s * p / np.linalg.norm(p)
        out.append(U)
    return out, b / np.linalg.norm(b)


def run(rule_name: str, rounds: list[np.ndarray], **options) -> list:
    rule = make_rule(rule_name, F, seed=0, **options)
    labels = [f"p{i}" for i in range(N)]
    out = []
    for t, U in enumerate(rounds, start=1):
        out.append(decide_in_context(rule, U, t, pseudonyms=labels, global_model=np.zeros(D)))
        rule.commit()
    return out


def test_copies_of_honest_rows_do_not_switch_off_the_trimming():
    """The ban lever: once two copiers and the two honest rows they copy are banned (4 = f), a rule that trims
    f minus the banned count is a clipped mean, and two pushers at 64 times the median norm move the aggregate
    along b by a full clipped row each. The push must get no more than it gets from clip-trim."""
    rounds, b = ban_lever_rounds(6, seed=3)
    ha = np.array([float(d.aggregate @ b) for d in run("hammer-anvil", rounds)])
    ct = np.array([float(d.aggregate @ b) for d in run("clip-trim", rounds)])
    # one pusher's clipped row, counted in a mean of the 16 rows left, moves the aggregate by about 0.4 along b
    assert (ha <= ct + 0.2).all(), (ha.round(3).tolist(), ct.round(3).tolist())


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 6))
def test_no_history_outcome_lowers_the_trimmed_count(seed, rounds):
    """Whatever the history did in earlier rounds, f rows at the top of a coordinate are trimmed there: rows
    that push coordinate 0 to +1e6 (each with its own second coordinate) never move the aggregate's coordinate 0 past the honest maximum."""
    rng = np.random.default_rng(seed)
    past, _ = ban_lever_rounds(rounds, seed)
    rule = make_rule("hammer-anvil", F, seed=0)
    labels = [f"p{i}" for i in range(N)]
    for t, U in enumerate(past, start=1):
        decide_in_context(rule, U, t, pseudonyms=labels, global_model=np.zeros(D))
        rule.commit()
    U = honest(rng, N, D, rng.normal(size=(N, D)) * 0.8)
    U[:, 0] = rng.normal(size=N) * 0.1
    bad = rng.choice(N, size=F, replace=False)
    U[bad, 0] = 1e6
    U[bad, 1 + np.arange(F)] = 1e6  # each its own second coordinate: their histories are not alike
    d = decide_in_context(rule, U, rounds + 1, pseudonyms=labels, global_model=np.zeros(D))
    good = np.setdiff1d(np.arange(N), bad)
    assert d.aggregate[0] <= np.abs(U[good, 0]).max() + 1e-9


def test_framed_holders_of_a_class_keep_their_contribution():
    """Class framing: each attacker copies one of the largest holders of one class (coordinates 0..4 here) for
    many rounds. The holders may share weight with their copies, but the aggregate's step along the class's
    coordinates stays what it is without the attackers."""
    rng = np.random.default_rng(11)
    drift = rng.normal(size=(N, D)) * 0.3
    drift[:4, :5] += 3.0  # rows 0..3 alone hold the class
    labels = [f"p{i}" for i in range(N)]
    rule = make_rule("hammer-anvil", F, seed=0)
    cls = np.zeros(D)
    cls[:5] = 1.0 / np.sqrt(5)
    framed, clean = [], []
    for t in range(1, 9):
        U = honest(rng, N, D, drift)
        U[16:] = U[:4]
        d = decide_in_context(rule, U, t, pseudonyms=labels, global_model=np.zeros(D))
        rule.commit()
        framed.append(float(d.aggregate @ cls))
        clean.append(float(make_rule("clip-trim", F, seed=0).decide(U[:16]).aggregate @ cls))
    # the last rounds, when any ban would have struck
    assert np.mean(framed[4:]) >= 0.9 * np.mean(clean[4:]), (framed, clean)


@pytest.mark.parametrize("rule_name", ["hammer-anvil", "kinship"])
def test_an_exact_copy_halves_its_original_weight_and_no_more(rule_name):
    """A copy and its original share one row's weight: what they carry reaches the aggregate once, in full."""
    rng = np.random.default_rng(5)
    drift = rng.normal(size=(N, D)) * 0.8
    labels = [f"p{i}" for i in range(N)]
    rule = make_rule(rule_name, F, seed=0)
    for t in range(1, 8):
        U = honest(rng, N, D, drift)
        U[19] = U[0]
        d = decide_in_context(rule, U, t, pseudonyms=labels, global_model=np.zeros(D))
        rule.commit()
    others = np.delete(d.weights, [0, 19])
    assert d.weights[0] + d.weights[19] >= 0.9 * np.median(others)


def view_of(H: np.ndarray, own: np.ndarray, rule, labels_h, labels_own, rnd: int = 1):
    from reshuffle.attacks import RoundView

    def decide(U, pseudonyms=None):
        return decide_in_context(rule, U, rnd, pseudonyms=pseudonyms, global_model=np.zeros(H.shape[1]))

    return RoundView(own=own, honest=H, decide=decide, round=rnd, pseudonyms=(tuple(labels_own), tuple(labels_h)))


def test_frame_ban_copies_the_same_honest_pseudonyms_each_round_and_pushers_never_share_a_coordinate():
    from reshuffle.attacks import make_attack

    atk = make_attack("frame-ban")
    rule = make_rule("hammer-anvil", F, seed=0)
    rng = np.random.default_rng(0)
    labels = [f"h{i:02d}" for i in range(16)]
    copied = []
    for t in (1, 2):
        H = rng.normal(size=(16, D))
        own = H[:4] + 1.0
        perm = rng.permutation(16)  # the round's order of honest rows changes; the pseudonyms follow them
        rows = atk.craft(view_of(H[perm], own, rule, [labels[i] for i in perm], ["a0", "a1", "a2", "a3"], t), rng)
        copied.append([labels[int(np.flatnonzero((H == r).all(axis=1))[0])] for r in rows[:2]])
        assert ((rows[2] != 0) & (rows[3] != 0)).sum() == 0
    assert copied[0] == copied[1] == ["h00", "h01"]


def test_frame_class_copies_the_rows_that_step_the_target_class_bias_most():
    from reshuffle.attacks import make_attack

    atk = make_attack("frame-class", target=3)
    rng = np.random.default_rng(1)
    H = rng.normal(size=(16, D)) * 0.1
    H[[5, 9, 11, 2], D - 10 + 3] += [4.0, 3.0, 2.0, 1.0]  # the class's largest holders, in order
    rows = atk.craft(view_of(H, H[:4], make_rule("clip-trim", F), [f"h{i}" for i in range(16)],
                             ["a0", "a1", "a2", "a3"]), rng)
    assert [int(np.flatnonzero((H == r).all(axis=1))[0]) for r in rows] == [5, 9, 11, 2]


def test_influence_counts_a_row_sent_far_above_the_clip_bound_as_the_full_clipped_row_it_contributes():
    from reshuffle.server.aggregate import row_counts

    rng = np.random.default_rng(2)
    U = 1.0 + rng.normal(size=(20, D)) * 0.3
    U[18:] = 64 * np.linalg.norm(U[0]) * np.eye(D)[:2]  # two rows at 64 times the median norm
    d = make_rule("clip-trim", 0).decide(U)  # clipping to the median norm, nothing trimmed
    c = row_counts(d, [False] * 18 + [True] * 2, U)
    assert c["malicious_share"] < 0.01
    assert c["malicious_influence"] == pytest.approx(2 / 20, rel=0.3)
    assert c["attack_projection"] > 0 and c["honest_zeroed"] == 0


def test_a_simulated_round_records_the_attackers_influence_and_the_csv_carries_it(tmp_path):
    import csv

    from reshuffle.run.report import write_metrics
    from reshuffle.sim import Simulation, from_mapping

    s = {"dataset": "digits", "clients": 10, "malicious": 0.2, "rounds": 2, "shuffle": "ideal", "rule": "hammer-anvil",
         "attack": "frame-ban", "seed": 2, "f": 2}
    sim = Simulation(from_mapping(s, source="test"))
    data = sim.result(sim.run())
    for r in data["rounds"]:
        assert 0 < r["malicious_influence"] < 1 and r["honest_zeroed"] == 0
    write_metrics(tmp_path, data)
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert [float(r["malicious_influence"]) for r in rows] == [r["malicious_influence"] for r in data["rounds"]]
    classes = sim.evaluator.per_class(sim.W_g)
    assert len(classes) == 10 and all(0 <= c <= 1 for c in classes if c is not None)


def test_colluders_who_upload_alike_take_one_place_in_the_trimming():
    """Saturation: four identical rows at the honest maximum on the payload's coordinates keep the honest
    extremes inside the trimmed window. Merged into one row, they push no more than one such row would."""
    rng = np.random.default_rng(9)
    drift = rng.normal(size=(N, D)) * 0.8
    labels = [f"p{i}" for i in range(N)]
    b = np.zeros(D)
    b[:8] = 1 / np.sqrt(8)
    rule = make_rule("hammer-anvil", F, seed=0)
    for t in range(1, 7):
        U = honest(rng, N, D, drift)
        U[16:] = np.where(b > 0, U[:16].max(axis=0), np.median(U[:16], axis=0))
        d = decide_in_context(rule, U, t, pseudonyms=labels, global_model=np.zeros(D))
        rule.commit()
    one = make_rule("clip-trim", F).decide(U[:17]).aggregate @ b
    four = make_rule("clip-trim", F).decide(U).aggregate @ b
    assert d.aggregate @ b <= one + 1e-9 < four


def test_a_copy_whose_target_changes_every_round_is_merged_with_it_all_the_same():
    """No kin history links the copier to anyone, but the copy is the very same row this round: one source."""
    rng = np.random.default_rng(6)
    drift = rng.normal(size=(N, D)) * 0.8
    labels = [f"p{i}" for i in range(N)]
    rule = make_rule("hammer-anvil", F, seed=0)
    for t in range(1, 6):
        U = honest(rng, N, D, drift)
        U[19] = U[t]
        d = decide_in_context(rule, U, t, pseudonyms=labels, global_model=np.zeros(D))
        rule.commit()
        ct = make_rule("clip-trim", F).decide(U[:19])
        assert np.allclose(d.aggregate, ct.aggregate, atol=0.02)  # kinship may still shade a few weights
