"""Property: any configuration is refused before round 1 by a ConfigError naming the option, or runs to the end.

Drawn over the embedded digits at tiny sizes: model, clients, malicious fraction, every
registered attack with extreme options (scales up to 1e38, sigmas up to 1e30, NaN, inf,
negatives), every registered rule and pre-aggregator, shuffle mode, dropout, learning rates
at which training diverges. A run that starts must write metrics.json with every round and
no NaN/Inf anywhere in it. ``RESHUFFLE_FUZZ_EXAMPLES=400`` draws more examples (the long run;
add ``--hypothesis-show-statistics`` for the counts of refused and completed configurations).
"""

from __future__ import annotations

import inspect
import json
import math
import os

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from reshuffle.attacks import attack_names
from reshuffle.attacks.base import ATTACKS
from reshuffle.errors import ConfigError
from reshuffle.server.rules.registry import pre_names, rule_names
from reshuffle.sim import SimConfig, simulate

EXTREME = [0.0, -1.0, 1e-30, 0.5, 1.0, 3.0, 1e10, 1e30, 1e38, float("nan"), float("inf")]

PROFILE = settings(max_examples=int(os.environ.get("RESHUFFLE_FUZZ_EXAMPLES", "14")), deadline=None,
                   suppress_health_check=list(HealthCheck))


def _numeric_options(name: str) -> list[str]:
    cls = ATTACKS.get(name)
    out = []
    for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if isinstance(p.default, (int, float)) and not isinstance(p.default, bool) or p.default is None:
            out.append(p.name)
    return out


@st.composite
def configs(draw):
    attack = draw(st.sampled_from(attack_names()))
    opts = {}
    for key in _numeric_options(attack):
        if draw(st.booleans()):
            opts[key] = draw(st.sampled_from(EXTREME))
    return dict(
        model=draw(st.sampled_from(["logreg", "mlp"])),
        clients=draw(st.integers(4, 8)),
        set_size=draw(st.integers(3, 4)),  # stable sets (the default) that 4 to 8 clients can form
        rounds=2,
        malicious=draw(st.sampled_from([0.0, 0.25, 0.4])),
        attack=attack,
        attack_options=opts,
        rule=draw(st.sampled_from(rule_names())),
        pre=draw(st.lists(st.sampled_from(pre_names()), max_size=1)),
        shuffle=draw(st.sampled_from(["ideal", "none", "ideal", "none", "real"])),
        dropout=draw(st.sampled_from([0.0, 0.0, 0.2])),
        lr=draw(st.sampled_from([0.1, 0.1, 1e4, 1e30])),
        batch_size=32,
        seed=draw(st.integers(0, 3)),
    )


def _no_nan(text: str) -> dict:
    def refuse(c):
        raise AssertionError(f"metrics.json holds {c}")

    return json.loads(text, parse_constant=refuse)


@PROFILE
@given(values=configs())
def test_a_configuration_is_refused_up_front_or_runs_every_round(values, tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz")
    try:
        cfg = SimConfig(**values).validated()
    except ConfigError as exc:
        named = [k for k in values if k.replace("_", " ") in str(exc) or k in str(exc)]
        named += [k for k in values["attack_options"] if k in str(exc)]
        assert named, f"refusal names no option: {exc}"
        event("refused by the configuration")
        return
    try:
        simulate(cfg, out_dir=out, plots=False)
    except ConfigError as exc:
        # Allowed only before round 1: nothing may have been written yet.
        assert not (out / "metrics.json").exists(), f"refused after a round had run: {exc}"
        text = str(exc)
        assert any(k in text for k in [*values["attack_options"], values["attack"], values["rule"], *values["pre"],
                                       "rule", "attack", "pre"]), f"refusal names no option: {exc}"
        event("refused when the federation was built")
        return
    data = _no_nan((out / "metrics.json").read_text())
    assert [r["round"] for r in data["rounds"]] == list(range(1, cfg.rounds + 1))
    for r in data["rounds"]:
        for key in ("accuracy", "attack_success", "tpr", "fpr"):
            assert r[key] is None or (isinstance(r[key], float) and math.isfinite(r[key]))
        assert r["skipped"] is None or r["models_accepted"] == 0
    assert data["rounds_run"] == cfg.rounds
    event("ran to the end" + (" (a round skipped)" if data["skipped_rounds"] else ""))
