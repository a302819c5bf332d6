"""Attackers who know the history: the payload averaged over rounds, the saturation rows, covers, sleepers,
and the rule copy they replay with every row's pseudonym."""

from __future__ import annotations

import numpy as np
import pytest

from reshuffle.attacks import RoundView, make_attack
from reshuffle.attacks.patient import median_bound, saturated_row
from reshuffle.errors import ConfigError
from reshuffle.server.rules import make_rule
from reshuffle.server.rules.base import decide_in_context


def view(H, own, decide, pseudonyms=None, round=1):
    return RoundView(own=own, honest=H, decide=decide, round=round, pseudonyms=pseudonyms)


def honest(h=12, d=40, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=d) + rng.normal(size=(h, d))


def test_saturated_rows_stay_within_the_predicted_bound_and_sit_at_the_honest_extreme():
    H = honest()
    b = np.random.default_rng(1).normal(size=40)
    S = median_bound(H, 3)
    row = saturated_row(H, b, 1.0, 1.05 * S)
    assert np.linalg.norm(row) <= 1.05 * S + 1e-9
    moved = row != np.median(H, axis=0)
    extreme = np.where(b > 0, H.max(axis=0), H.min(axis=0))
    assert moved.any() and np.allclose(row[moved], extreme[moved])
    # The bound is the median of the honest norms with the attackers longer than every honest row.
    norms = np.sort(np.linalg.norm(H, axis=1))
    assert S == pytest.approx(np.median(np.concatenate([norms, [np.inf] * 3])))


def test_saturate_uploads_alike_averages_its_payload_over_rounds_and_keeps_to_its_call_budget():
    H = honest()
    calls = []

    def decide(U):
        calls.append(1)
        return make_rule("clip-trim", 3, seed=0).decide(U)

    atk = make_attack("saturate", max_calls=4)
    rng = np.random.default_rng(0)
    own1, own2 = H[:3] + 1.0, H[:3] - 3.0
    rows = atk.craft(view(H, own1, decide), rng)
    assert (rows == rows[0]).all() and len(calls) == 4
    atk.craft(view(H, own2, decide), rng)
    # Without a lab, b_t = mean(own) − mean(H): the running mean is their average.
    want = ((own1.mean(0) - H.mean(0)) + (own2.mean(0) - H.mean(0))) / 2
    assert np.allclose(atk._sum / atk._rounds, want) and atk.choices()["rounds"] == 2


def test_the_attackers_copy_gets_every_rows_pseudonym_in_the_probes_order():
    H = honest(h=9)
    own = H[:3] * 2
    labels = ([f"bad{k}" for k in range(3)], [f"good{i}" for i in range(9)])
    seen = []

    def decide(U, pseudonyms=None):
        for i, p in enumerate(pseudonyms):
            if p.startswith("good"):
                assert np.array_equal(U[i], H[int(p[4:])])
        seen.append(list(pseudonyms))
        return make_rule("clip-trim", 3, seed=0).decide(U)

    make_attack("saturate", max_calls=2).craft(view(H, own, decide, labels), np.random.default_rng(3))
    assert len(seen) == 2 and seen[0] == seen[1] and sorted(seen[0]) == sorted(labels[0] + labels[1])


def test_a_wrong_number_of_pseudonyms_is_refused():
    H = honest(h=9)
    with pytest.raises(ConfigError, match="pseudonyms"):
        make_attack("saturate").craft(view(H, H[:3], lambda U, pseudonyms=None: None, (["a"], ["b"])),
                                      np.random.default_rng(0))


def test_the_cover_costs_the_payload_norm():
    """Colluders who diversify (a cover) keep no more of the payload's coordinates than those who do not."""
    H = honest()
    b = np.random.default_rng(2).normal(size=40)
    S = median_bound(H, 3)
    bare = saturated_row(H, b, 1.0, 1.1 * S)
    cover = np.median(H, axis=0) + 2.0 * np.random.default_rng(4).normal(size=40)
    covered = saturated_row(H, b, 1.0, 1.1 * S, base=cover)
    assert (covered != cover).sum() <= (bare != np.median(H, axis=0)).sum()


def test_the_sleeper_is_honest_until_it_wakes_then_saturates():
    H = honest()
    own = H[:3] + 5.0
    atk = make_attack("sleeper", wake=2, max_calls=15)

    def decide(U):
        return make_rule("clip-trim", 3, seed=0).decide(U)

    rng = np.random.default_rng(0)
    asleep = atk.craft(view(H, own, decide, round=1), rng)
    assert np.allclose(asleep, np.median(H, axis=0)) and atk.choices()["choice"] == "asleep"
    atk.craft(view(H, own, decide, round=3), rng)
    assert atk.choices()["choice"] != "asleep" and atk.choices()["rounds"] == 2


@pytest.mark.parametrize("attack", ["saturate", "saturate-cover", "slow-drift", "budget-edge", "sleeper", "kin-spread"])
def test_each_runs_against_a_pseudonymous_rule_on_its_copy_without_touching_the_deployed_history(attack):
    H = honest(h=9)
    own = H[:3] + 0.5
    rule = make_rule("hammer-anvil", 3, seed=0)
    names = ([f"bad{k}" for k in range(3)], [f"good{i}" for i in range(9)])
    decide_in_context(rule, np.vstack([H, own]), 1, pseudonyms=names[1] + names[0])
    rule.commit()
    before = rule.state()

    def decide(U, pseudonyms=None):
        return decide_in_context(rule, U, 2, pseudonyms=pseudonyms)

    rows = make_attack(attack, wake=0).craft(view(H, own, decide, names, round=2), np.random.default_rng(0)) \
        if attack == "sleeper" else make_attack(attack).craft(view(H, own, decide, names, round=2),
                                                              np.random.default_rng(0))
    assert rows.shape == own.shape and np.isfinite(rows).all()
    after = rule.state()
    assert all(np.array_equal(before[0][k], after[0][k]) for k in before[0]) and before[1] == after[1]


def test_options_out_of_range_are_refused():
    with pytest.raises(ConfigError):
        make_attack("saturate", levels=(1.5,))
    with pytest.raises(ConfigError):
        make_attack("saturate-cover", covers=(-1,))
    with pytest.raises(ConfigError):
        make_attack("sleeper", wake=-1)
    with pytest.raises(ConfigError, match="max_calls"):
        make_attack("slow-drift", scales=tuple(range(1, 12)), supports=(1.0, 0.5))
    with pytest.raises(ConfigError, match="spreads"):
        make_attack("kin-spread", spreads=(-0.5,))


def test_kin_spread_gives_each_attacker_a_direction_of_its_own_every_round_orthogonal_to_the_payload():
    H = honest(h=12, d=400)
    own = H[:4] + 0.5

    def decide(U, pseudonyms=None):
        return make_rule("clip-trim", 4, seed=0).decide(U)

    atk = make_attack("kin-spread", scales=(0.5,), spreads=(0.0, 2.0))
    rng = np.random.default_rng(0)
    atk.craft(view(H, own, decide), rng)
    first = atk._own.copy()
    atk.craft(view(H, own * 1.1, decide), rng)
    assert np.array_equal(atk._own, first)  # the same directions in every round: histories keep them
    cands = dict((label["spread"], rows) for label, rows in atk.candidates(None, H, own, atk._sum / atk._rounds))
    p = atk._sum / np.linalg.norm(atk._sum)
    extra = cands[2.0] - cands[0.0]
    assert np.allclose(extra @ p, 0.0, atol=1e-9)  # orthogonal to the payload: the push along it is unchanged

    def mean_cos(R):
        X = R - np.median(H, axis=0)
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        C = X @ X.T
        return C[np.triu_indices(len(R), 1)].mean()

    assert mean_cos(cands[2.0]) < mean_cos(cands[0.0]) - 0.2  # the colluders' rows agree less

