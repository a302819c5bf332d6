"""Rule-aware attacks: they pass rules that catch their non-adaptive versions, within a bounded number of rule calls."""

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reshuffle.attacks.adaptive as adaptive
from reshuffle.attacks import Mimic, RoundView, make_attack
from reshuffle.attacks.adaptive import MAX_CALLS, halving_search, match_signs, sign_targets
from reshuffle.errors import ConfigError
from reshuffle.server.rules import Decision, make_rule
from reshuffle.server.rules.signguard import sign_statistics

H_ROWS, M, D = 16, 4, 1000
ROOT = Path(__file__).resolve().parent.parent


def _round(seed: int = 0):
    """Honest rows around a common mean, the attackers' own (backdoored) rows, and the backdoor direction."""
    rng = np.random.default_rng(seed)
    mu = 0.3 * rng.normal(size=D)
    honest = mu + rng.normal(size=(H_ROWS, D))
    backdoor = np.zeros(D)
    backdoor[:100] = rng.choice([-1.0, 1.0], size=100)
    own = mu + backdoor + rng.normal(size=(M, D))
    control = mu + rng.normal(size=(M, D))  # m more honest clients instead of attackers
    return honest, own, backdoor, control


HONEST, OWN, BACKDOOR, CONTROL = _round()


class Counted:
    """A rule as RoundView.decide, counting its calls."""

    def __init__(self, rule, T: int = 1) -> None:
        self.rule, self.T, self.calls = rule, T, 0

    def __call__(self, U):
        self.calls += 1
        return self.rule.decide(U, round=self.T)


def craft(attack, rule, own=OWN, honest=HONEST, seed=7):
    decide = Counted(rule)
    out = attack.craft(RoundView(own=own, honest=honest, decide=decide, round=1), np.random.default_rng(seed))
    return out, decide.calls


def outcome(rule, bad):
    """(share of the malicious rows flagged, the aggregate's shift from the honest mean)."""
    d = rule.decide(np.vstack([HONEST, bad]), round=1)
    flagged = sum(i not in set(d.accepted) for i in range(H_ROWS, H_ROWS + bad.shape[0])) / bad.shape[0]
    return flagged, d.aggregate - HONEST.mean(axis=0)


def model_replacement():
    a = make_attack("model-replacement")
    a.prepare(H_ROWS + M, np.ones(3))
    return a(OWN, M, None)


def constrain_scale(**options):
    a = make_attack("constrain-scale", **options)
    a.prepare(H_ROWS + M, np.ones(3))
    return a


SIGN_RULES = [("signguard", ()), ("signstat", ()), ("geomed+signstat+cosine", ()), ("signguard:multi-krum", ())]


@pytest.mark.parametrize("name,pre", SIGN_RULES)
def test_sign_match_passes_sign_rules_that_catch_alie(name, pre):
    rule = make_rule(name, f=M, seed=3, pre=pre)
    weak_tpr, weak_shift = outcome(rule, make_attack("alie")(HONEST, M, None))
    bad, _ = craft(make_attack("sign-match"), rule)
    tpr, shift = outcome(rule, bad)
    _, control = outcome(rule, CONTROL)
    assert weak_tpr == 1.0 and tpr == 0.0
    assert np.linalg.norm(shift) > max(np.linalg.norm(weak_shift), np.linalg.norm(control))


@pytest.mark.parametrize("name,pre,direction", [
    ("multi-krum", (), "std"), ("multi-krum", ("nnm",), "std"), ("geomed+signstat+cosine", ("nnm",), "std"),
    ("geomed+signstat+cosine", (), "sign"), ("cosine", (), "std"), ("multi-krum", (), "unit-vec"), ("dnc", (), "std"),
])
def test_agr_tailored_passes_rules_that_catch_a_fixed_large_scale(name, pre, direction):
    rule = make_rule(name, f=M, seed=3, pre=pre)
    weak_tpr, weak_shift = outcome(rule, make_attack("alie", z=6.0)(HONEST, M, None))
    bad, _ = craft(make_attack("agr-tailored", direction=direction), rule)
    tpr, shift = outcome(rule, bad)
    _, control = outcome(rule, CONTROL)
    assert weak_tpr == 1.0 and tpr == 0.0
    assert np.linalg.norm(shift) > max(np.linalg.norm(weak_shift), np.linalg.norm(control))


@pytest.mark.parametrize("name,pre", [
    ("cosine", ()), ("multi-krum", ()), ("multi-krum", ("nnm",)), ("geomed+signstat+cosine", ()),
])
def test_constrain_scale_passes_rules_that_catch_model_replacement(name, pre):
    rule = make_rule(name, f=M, seed=3, pre=pre)
    weak_tpr, weak_shift = outcome(rule, model_replacement())
    bad, _ = craft(constrain_scale(), rule)
    tpr, shift = outcome(rule, bad)
    _, plain = outcome(rule, OWN)
    assert weak_tpr == 1.0 and tpr == 0.0
    # Along the backdoor, the aggregate moves further than with the caught boost or the unboosted updates.
    assert shift @ BACKDOOR > max(weak_shift @ BACKDOOR, plain @ BACKDOOR)


def test_a_rule_that_accepts_everything_gets_the_cap_at_once():
    fedavg = make_rule("fedavg", f=M)
    agr = make_attack("agr-tailored", gamma_max=7.5)
    bad, calls = craft(agr, fedavg)
    assert calls == 1 and agr.last_gamma == 7.5
    cs = constrain_scale()
    bad, calls = craft(cs, fedavg)
    assert calls == 2 and np.allclose(bad, (H_ROWS + M) * OWN)  # the search's cap, then one joint check


def test_the_norm_constraint_keeps_rows_within_the_honest_norms():
    bad, _ = craft(constrain_scale(norm_quantile=0.5), make_rule("fedavg", f=M))
    assert np.linalg.norm(bad, axis=1).max() <= np.quantile(np.linalg.norm(HONEST, axis=1), 0.5) * (1 + 1e-12)


@pytest.mark.parametrize("name,options", [
    ("agr-tailored", {}), ("agr-tailored", {"max_calls": 3}), ("sign-match", {"max_calls": 5}),
    ("constrain-scale", {}), ("constrain-scale", {"max_calls": 2}), ("constrain-scale", {"max_calls": 7}),
])
@pytest.mark.parametrize("rule", ["multi-krum", "geomed+signstat+cosine"])
def test_the_call_bound_holds_and_rows_are_finite(name, options, rule):
    attack = constrain_scale(**options) if name == "constrain-scale" else make_attack(name, **options)
    bad, calls = craft(attack, make_rule(rule, f=M, seed=1))
    assert 1 <= calls <= attack.max_calls <= 20
    assert bad.shape == (M, D) and bad.dtype == np.float64 and np.isfinite(bad).all()


@pytest.mark.parametrize("name", ["agr-tailored", "sign-match", "constrain-scale", "mimic-spread"])
def test_deterministic_for_a_fixed_rng(name):
    rule = make_rule("geomed+signstat+cosine", f=M, seed=5)
    attack = constrain_scale() if name == "constrain-scale" else make_attack(name)
    first, _ = craft(attack, rule, seed=11)
    again, _ = craft(attack, rule, seed=11)
    assert np.array_equal(first, again)


@pytest.mark.parametrize("name,options,match", [
    ("agr-tailored", {"direction": "up"}, "direction"),
    ("agr-tailored", {"gamma_max": 0}, "gamma_max"),
    ("agr-tailored", {"gamma_max": float("inf")}, "gamma_max"),
    ("agr-tailored", {"max_calls": 0}, "max_calls"),
    ("agr-tailored", {"max_calls": MAX_CALLS + 1}, "max_calls"),
    ("agr-tailored", {"max_calls": True}, "max_calls"),
    ("agr-tailored", {"tol": 1.0}, "tol"),
    ("sign-match", {"z_max": -1.0}, "z_max"),
    ("sign-match", {"max_calls": 2.5}, "max_calls"),
    ("constrain-scale", {"max_calls": 1}, "max_calls"),
    ("constrain-scale", {"norm_quantile": 0.0}, "norm_quantile"),
    ("constrain-scale", {"scale_max": "big"}, "scale_max"),
    ("constrain-scale", {"eta": 0}, "eta"),
    ("constrain-scale", {"target": -1}, "target"),
    ("sign-match", {"gamma": 1.0}, "unexpected keyword"),
    ("mimic-spread", {"levels": ()}, "levels"),
    ("mimic-spread", {"levels": (0.0, -1.0)}, "levels"),
    ("mimic-spread", {"levels": (float("nan"),)}, "levels"),
    ("mimic-spread", {"levels": tuple(range(MAX_CALLS + 1))}, "levels"),
    ("mimic-spread", {"levels": "12"}, "levels"),
    ("mimic-spread", {"levels": (0.5, True)}, "levels"),
])
def test_bad_options_are_refused(name, options, match):
    with pytest.raises(ConfigError, match=match):
        make_attack(name, **options)


def test_rule_aware_attacks_refuse_a_plain_call_and_a_bad_view():
    attack = make_attack("agr-tailored")
    with pytest.raises(ConfigError, match="rule-aware"):
        attack(HONEST, M, np.random.default_rng(0))
    rule = make_rule("fedavg", f=M)
    with pytest.raises(ConfigError, match="at least 2 honest"):
        craft(attack, rule, honest=HONEST[:1])
    with pytest.raises(ConfigError, match="honest updates must be"):
        craft(attack, rule, honest=HONEST[:, :10])
    with pytest.raises(ConfigError, match="finite"):
        craft(attack, rule, own=np.full((M, D), np.nan))
    with pytest.raises(ConfigError, match="RoundView"):
        attack.craft((OWN, HONEST), np.random.default_rng(0))
    with pytest.raises(ConfigError, match="Decision"):
        attack.craft(RoundView(OWN, HONEST, lambda U: list(range(len(U)))), np.random.default_rng(0))


def test_sign_match_rows_carry_an_honest_rows_sign_shares():
    bad, _ = craft(make_attack("sign-match"), make_rule("signstat", f=M, seed=3))
    targets = sign_targets(HONEST, M)
    assert np.allclose(sign_statistics(bad) * D, targets[:, [0, 1, 2]])
    honest_shares = {tuple(row) for row in (sign_statistics(HONEST) * D).round().astype(int).tolist()}
    assert all(tuple(t) in honest_shares for t in targets.tolist())


def test_constrain_scale_is_a_badnets_backdoor():
    attack = constrain_scale()
    x = np.zeros((10, 1, 8, 8))
    y = np.arange(10) % 3
    xp, yp = attack.poison_data(x, y, 0, M, 3, np.random.default_rng(0))
    assert (yp == 0).sum() >= 5 and xp[yp != y].max() == 1.0  # triggered samples carry white pixels and the target
    assert attack.success(lambda inputs: np.zeros(len(inputs), dtype=int), x, y, 3) == 1.0
    assert attack.success(lambda inputs: np.ones(len(inputs), dtype=int), x, y, 3) == 0.0


@settings(max_examples=60, deadline=None)
@given(t=st.floats(0.0, 50.0), hi=st.floats(0.5, 30.0), calls=st.integers(1, 14))
def test_halving_search_returns_the_largest_accepted_value_within_its_resolution(t, hi, calls):
    tol = 1e-3
    best, smallest = halving_search(lambda x: x <= t, np.array([hi]), calls, tol)
    b = best[0]
    assert smallest[0] <= hi
    if np.isnan(b):
        assert t < smallest[0]
        return
    assert b <= min(t, hi)
    if t >= hi:
        assert b == hi
    else:
        assert t - b <= max(2 * tol * hi, hi / 2 ** (calls - 1))


@settings(max_examples=40, deadline=None)
@given(t1=st.floats(0.0, 40.0), t2=st.floats(0.0, 40.0), calls=st.integers(1, 12))
def test_agr_tailored_gamma_grows_with_the_rules_tolerance_and_never_exceeds_the_cap(t1, t2, calls):
    # A rule accepting rows within radius t·‖σ‖ of the honest mean: the largest γ is t.
    mu, spread = HONEST.mean(axis=0), np.linalg.norm(HONEST.std(axis=0))

    def radius_rule(t):
        def decide(U):
            ok = np.linalg.norm(U - mu, axis=1) <= t * spread * (1 + 1e-9)
            return Decision.mean_of(U, np.flatnonzero(ok))
        return decide

    gammas = []
    for t in sorted((t1, t2)):
        attack = make_attack("agr-tailored", gamma_max=20.0, max_calls=calls)
        attack.craft(RoundView(OWN, HONEST, radius_rule(t)), np.random.default_rng(0))
        gammas.append(attack.last_gamma)
    assert gammas[0] <= gammas[1] <= 20.0


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(1, 60), data=st.data())
def test_match_signs_hits_the_target_counts_and_keeps_magnitudes(seed, d, data):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=d) * (rng.random(d) < 0.8)  # some exact zeros
    zero_t = data.draw(st.integers(0, d))
    pos_t = data.draw(st.integers(0, d - zero_t))
    out = match_signs(r, (pos_t, zero_t, d - zero_t - pos_t))
    assert np.isfinite(out).all()
    assert ((out > 0).sum(), (out == 0).sum(), (out < 0).sum()) == (pos_t, zero_t, d - zero_t - pos_t)
    both = (out != 0) & (r != 0)
    assert np.array_equal(np.abs(out[both]), np.abs(r[both]))  # signs change, magnitudes do not


def _python_block(text: str) -> str:
    """The rule-aware plug-in example: the code block that registers ``reverse-mean``."""
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return next(b for b in blocks if '"reverse-mean"' in b)


def test_the_documented_plug_in_example_runs():
    doc = _python_block((ROOT / "docs" / "attacks.md").read_text())
    module_example = textwrap.dedent(adaptive.__doc__.split("instead of ``__call__``::\n")[1]).replace("'''", '"""')
    assert doc.strip() == module_example.strip()
    assert len(doc.strip().splitlines()) <= 20
    scope: dict = {}
    exec(compile(doc, "docs/attacks.md", "exec"), scope)
    attack = make_attack("reverse-mean")
    assert attack.rule_aware
    out, calls = craft(attack, make_rule("cosine", f=M))
    assert calls >= 1 and out.shape == (M, D)
    out, calls = craft(attack, make_rule("fedavg", f=M))
    assert calls == 1 and np.allclose(out, -4.0 * HONEST.mean(axis=0))


def _skewed_round(seed=11, h=16, d=400):
    """Non-IID honest rows: a shared direction, each client far from the others."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=d) + rng.normal(0, 1.5, size=(h, d))


def _lean(rule, honest, bad, target):
    u = honest[target] / np.linalg.norm(honest[target])
    return (rule.decide(np.vstack([honest, bad]), round=1).aggregate - rule.decide(honest, round=1).aggregate) @ u


def test_mimic_spread_gets_back_the_weight_cone_clip_takes_from_mimic():
    # Prepare: cone-clip counts mimic's exact copies once
    H = _skewed_round()
    own = np.zeros((M, H.shape[1]))
    target = Mimic().choose(H)
    rule = make_rule("cone-clip", f=M)
    copies = make_attack("mimic")(H, M, np.random.default_rng(0))
    # Execute
    attack = make_attack("mimic-spread")
    spread, calls = craft(attack, rule, own=own, honest=H)
    # Assert: it chose noisy copies, and they lean the aggregate further towards the copied row
    assert attack.last_rho > 0 and calls == len(attack.levels)
    assert _lean(rule, H, spread, target) > 1.5 * _lean(rule, H, copies, target)
    # against a rule that does not count copies once, the exact copies (rho = 0) lean furthest
    plain = make_rule("cone-clip", f=M, dedup=0)
    craft(attack, plain, own=own, honest=H)
    assert attack.last_rho == 0.0


@pytest.mark.parametrize("name,key", [("agr-tailored", "gamma"), ("sign-match", "z"), ("constrain-scale", "scales"),
                                      ("mimic-spread", "rho")])
def test_each_rule_aware_attack_reports_what_it_chose(name, key):
    attack = constrain_scale() if name == "constrain-scale" else make_attack(name)
    assert attack.choices() is None  # nothing crafted yet
    _, calls = craft(attack, make_rule("multi-krum", f=M, seed=1))
    chosen = attack.choices()
    assert chosen["calls"] == calls and key in chosen
