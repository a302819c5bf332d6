"""Signals that fit anonymity (energy concentration, label-profile peers, sign persistence) and their attacks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.server.rules import make_rule
from reshuffle.server.rules.base import decide_in_context

SIGNALS = ["concentration", "label-groups", "persistence", "energy", "hammer-signals"]


def layout(d: int) -> tuple:
    """A flat model of d coordinates as one linear layer's weights (d/10 neurons of 10 inputs) or a bias."""
    return (("fc.weight", (d // 10, 10)),) if d % 10 == 0 else (("fc.bias", (d,)),)


def noniid(rng: np.random.Generator, n: int, d: int, groups: int = 4, profile: float = 2.0
           ) -> tuple[np.ndarray, np.ndarray]:
    """Honest rows in label groups: each group its own output-bias profile (last 10 entries) and body drift."""
    g = np.arange(n) % groups
    body = rng.normal(size=(groups, d - 10)) * 0.8
    prof = rng.normal(size=(groups, 10)) * profile  # the label distribution sets the bias step
    U = np.hstack([0.5 + body[g], prof[g]]) + rng.normal(size=(n, d)) * 0.5
    return U, g


@pytest.mark.parametrize("name", SIGNALS)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16))
def test_no_signal_lowers_the_trimmed_count(name, seed):
    """f rows that push coordinate 0 to +1e6 (each with its own second coordinate) never move the aggregate's
    coordinate 0 past the honest maximum, whatever the signal made of the earlier rounds."""
    rng = np.random.default_rng(seed)
    n, d, f = 20, 60, 4
    rule = make_rule(name, f, seed=0)
    labels = [f"p{i}" for i in range(n)]
    for t in range(1, 4):
        U, _ = noniid(rng, n, d)
        U[:f] = U[f:2 * f]  # copies, to set any history against the honest
        decide_in_context(rule, U, t, pseudonyms=labels, global_model=np.zeros(d), layout=layout(d))
        rule.commit()
    U, _ = noniid(rng, n, d)
    U[:, 0] = rng.normal(size=n) * 0.1
    bad = rng.choice(n, size=f, replace=False)
    U[bad, 0] = 1e6
    U[bad, 1 + np.arange(f)] = 1e6
    agg = decide_in_context(rule, U, 4, pseudonyms=labels, global_model=np.zeros(d), layout=layout(d)).aggregate
    good = np.setdiff1d(np.arange(n), bad)
    assert agg[0] <= np.abs(U[good, 0]).max() + 1e-9


@pytest.mark.parametrize("seed", range(5))
def test_concentration_cuts_payloads_on_few_coordinates_and_keeps_honest_non_iid_rows(seed):
    rng = np.random.default_rng(seed)
    U, _ = noniid(rng, 20, 400, profile=0.5)
    U[16:, :4] += 6.0  # four rows push 1 % of the coordinates
    d = make_rule("concentration", 4).decide(U)
    assert set(d.accepted) == set(range(16))


@pytest.mark.parametrize("seed", range(5))
def test_label_groups_judge_a_row_against_its_label_peers(seed):
    """A row with one group's label profile and another group's body is far from its peers; honest rows, each
    like its own group, are not, though the groups differ more than the rows within one."""
    rng = np.random.default_rng(seed)
    U, g = noniid(rng, 24, 200)
    U[0, :-10] = U[1, :-10] + 0.5 * rng.normal(size=190)  # group 0's profile, group 1's body
    d = make_rule("label-groups", 4).decide(U)
    assert 0 not in d.accepted
    assert len(d.accepted) >= 21


def test_persistence_cuts_a_fixed_sign_vector_and_keeps_honest_drift():
    from reshuffle.attacks import make_attack  # noqa: F401  (registers the attacks)

    rng = np.random.default_rng(3)
    n, d = 20, 100
    s = np.sign(rng.normal(size=d))
    drift = rng.normal(size=(n, d)) * 0.8
    rule = make_rule("persistence", 4)
    # An honest client's deviation follows its data and the model, which moves: its drift changes over rounds.
    labels = [f"p{i}" for i in range(n)]
    flagged_honest = 0
    for t in range(1, 13):
        drift = 0.7 * drift + 0.7 * rng.normal(size=(n, d)) * 0.8
        U = 0.5 + drift + rng.normal(size=(n, d)) * 0.5
        U[16:] = 0.5 + s * np.abs(rng.normal(size=(4, d)))  # PoisonedFL: one sign vector, fresh magnitudes
        dec = rule.decide(U, round=t, pseudonyms=labels)
        rule.commit()
        flagged_honest += 16 - sum(i < 16 for i in dec.accepted)
    assert not set(range(16, 20)) & set(dec.accepted)
    assert flagged_honest / (16 * 12) <= 0.1


def test_poisonedfl_keeps_one_sign_vector_and_its_drift_form_flips_a_share_each_round():
    from reshuffle.attacks import RoundView, make_attack

    rng = np.random.default_rng(0)
    d = 50
    rule = make_rule("clip-trim", 4)
    signs, vec = {}, {}
    for name in ("poisonedfl", "poisonedfl-drift"):
        atk = make_attack(name)
        W = np.zeros(d)
        out = []
        for t in (1, 2, 3):
            H = rng.normal(size=(16, d))
            view = RoundView(own=H[:4], honest=H, decide=lambda U: rule.decide(U), round=t, global_model=W)
            rows = atk.craft(view, rng)
            out.append(np.sign(rows))
            W = W + rng.normal(size=d)
        signs[name], vec[name] = out, atk._s
    assert all((x == vec["poisonedfl"]).all() for r in signs["poisonedfl"] for x in r)
    drift = signs["poisonedfl-drift"]
    agree = np.mean([(x == vec["poisonedfl-drift"]).mean() for r in drift for x in r])
    assert 0.55 < agree < 0.85 and not (drift[1][0] == drift[2][0]).all()


def test_a_signal_that_judges_no_row_leaves_hammer_anvil_as_clip_trim():
    """The combination multiplies the signals' own weights, not their anvil's (which fold in clipping and
    trimming): where every signal weight is 1, hammer-anvil with signals is clip-trim."""
    rng = np.random.default_rng(4)
    U = rng.normal(size=(20, 300)) + 0.3
    rule = make_rule("hammer-anvil", 4, signals=["concentration"])
    d = decide_in_context(rule, U, 1, pseudonyms=[f"p{i}" for i in range(20)], global_model=np.zeros(300))
    assert (rule.signals[0].alpha == 1).all()
    ct = make_rule("clip-trim", 4).decide(U)
    assert np.allclose(d.aggregate, ct.aggregate) and np.allclose(d.weights, ct.weights)
