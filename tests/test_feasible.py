"""Impossible runs are refused before round 1, with the reason and the smallest change; a majority warns once.

A rule declares the fewest rows it accepts (``Rule.min_rows``); the declaration is
checked against what ``decide`` actually accepts, for every built-in rule and
pre-aggregator.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from reshuffle.cli import main
from reshuffle.errors import ConfigError
from reshuffle.server import make_rule, pre_names, rule_names
from reshuffle.server.rules.base import decide_in_context
from reshuffle.sim import SimConfig, Simulation


@pytest.mark.parametrize("name", rule_names())
def test_a_rule_accepts_its_declared_fewest_rows_and_refuses_fewer(name):
    rng = np.random.default_rng(0)
    for pre in ([], *([p] for p in pre_names())):
        for f in range(4):
            rule = make_rule(name, f, reference=lambda: rng.normal(size=5), seed=1, pre=pre)
            k = rule.min_rows()

            def decide(rows: int):
                # Every rule gets what it takes besides the rows: pseudonyms, W_g, the layout.
                return decide_in_context(rule, rng.normal(size=(rows, 5)), 1, pseudonyms=[f"p{i}" for i in range(rows)],
                                         global_model=np.zeros(5), layout=(("fc.weight", (1, 5)),))

            try:
                decide(k)  # accepted
            except ConfigError as exc:
                # A history per pseudonym cannot be kept behind a pre-aggregator that mixes rows (refused by design).
                assert "mix rows" in str(exc) and "pseudonyms" in rule.context
                continue
            if k > 1:
                with pytest.raises(ConfigError):
                    decide(k - 1)


def test_krum_with_a_majority_of_attackers_is_refused_with_the_smallest_changes(tmp_path, capsys):
    out = tmp_path / "run"
    # Execute: n = 10 rows with f = 6: Krum needs n > 2f + 2 in every round
    code = main(["simulate", "--rule", "krum", "--attack", "sign-flip", "--malicious", "0.6", "--shuffle", "ideal",
                 "--rounds", "2", "--out", str(out), "--quiet"])
    # Assert: refused before round 1 (no output), with the rule's reason and what makes it possible
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "Krum needs n > 2f + 2 updates; got n=10 with f=6" in err
    assert "--malicious 0.3 (3 attackers per round) or --f 3 (the rule assumes 3 attackers)" in err


def test_the_condition_holds_for_the_cohort_size_with_sampling():
    # 20 clients, 6 per round, f = 2 per round: Krum needs 7 rows
    cfg = SimConfig(clients=20, clients_per_round=6, attack="sign-flip", malicious=0.3, rule="krum", shuffle="none")
    with pytest.raises(ConfigError, match="refuses 6 rows .* the 6 sampled clients' rows.*--clients-per-round 7"):
        Simulation(cfg)
    # Without sampling the same rule fits the 20 rows
    assert Simulation(SimConfig(clients=20, attack="sign-flip", malicious=0.3, rule="krum", shuffle="none",
                                model="logreg", rounds=1)).rule.min_rows() == 15


def test_bulyan_suggests_more_clients_too():
    with pytest.raises(ConfigError, match=r"--f 1 \(the rule assumes 1 attacker\) or --clients 11"):
        Simulation(SimConfig(rule="bulyan", attack="alie", malicious=0.2, shuffle="none"))


def test_a_majority_of_attackers_warns_once(recwarn):
    sim = Simulation(SimConfig(clients=5, rounds=2, attack="sign-flip", malicious=0.6, rule="median",
                               model="logreg", shuffle="none"))
    sim.run()
    majority = [w for w in recwarn if "a majority" in str(w.message)]
    assert len(majority) == 1 and "3 of 5 clients are attackers" in str(majority[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Simulation(SimConfig(clients=5, rounds=1, attack="sign-flip", malicious=0.4, rule="median",
                             model="logreg", shuffle="none"))
