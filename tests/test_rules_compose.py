"""Pre-aggregators, Pipeline and AllOf detection on the original rows, the registry and --plugin."""

import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.errors import ConfigError
from reshuffle.server import (
    NNM, AllOf, Bucketing, Chain, Clip, CosineFilter, FedAvg, Median, MultiKrum, Pipeline, Rule, TrimmedMean,
    make_pre, make_rule, pre_names, register_rule, rule_names,
)
from reshuffle.server.rules import with_f
from reshuffle.server.rules import registry
from reshuffle.server.rules.pre import bucket_means
from reshuffle.run.config import SimConfig, from_mapping


class AcceptRows(Rule):
    """Test double: accepts a fixed set of rows of whatever it is given."""

    def __init__(self, rows):
        self.rows = rows

    def select(self, updates):
        return list(self.rows)


def test_nnm_hand_computed():
    # Prepare: n = 4, f = 2 → each row mixes its 2 nearest rows (itself included).
    U = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [10.0, 0.0]])
    # Execute
    out = NNM(f=2)(U)
    # Assert: 0 → {0, 1}; 1 → {1, 0}; 3 → {3, 1}; 10 → {10, 3}.
    assert out.rows[:, 0].tolist() == [0.5, 0.5, 2.0, 6.5]
    assert np.array_equal(out.owners, np.eye(4, dtype=bool))
    with pytest.raises(ConfigError, match="NNM needs f < n; got f=4 with n=4"):
        NNM(f=4)(U)


def test_bucket_means_hand_computed():
    # Prepare: permutation (2, 0, 4, 1, 3), buckets of 2 → {2, 0}, {4, 1}, {3}.
    U = np.array([[0.0], [10.0], [20.0], [30.0], [40.0]])
    # Execute
    rows, owners = bucket_means(U, np.array([2, 0, 4, 1, 3]), 2)
    # Assert
    assert rows.ravel().tolist() == [10.0, 25.0, 30.0]
    assert owners.astype(int).tolist() == [[1, 0, 1, 0, 0], [0, 1, 0, 0, 1], [0, 0, 0, 1, 0]]


@given(st.integers(1, 20), st.integers(1, 6), st.integers(0, 2**31), st.integers(0, 50))
@settings(max_examples=60, deadline=None)
def test_bucketing_partitions_the_rows(n, s, seed, round):
    U = np.random.default_rng(seed).normal(size=(n, 3))
    out = Bucketing(s=s, seed=seed)(U, round=round)
    assert out.rows.shape == (-(-n // s), 3)
    assert (out.owners.sum(axis=0) == 1).all()  # every row in exactly one bucket
    assert np.allclose(out.rows, (out.owners @ U) / out.owners.sum(axis=1, keepdims=True))
    assert np.array_equal(out.rows, Bucketing(s=s, seed=seed)(U, round=round).rows)


@given(st.integers(1, 10), st.integers(1, 5), st.integers(0, 2**31), st.floats(0.01, 10.0))
@settings(max_examples=60, deadline=None)
def test_clipping_is_idempotent_and_bounded(n, d, seed, bound):
    U = np.random.default_rng(seed).normal(size=(n, d)) * 5
    once = Clip(bound=bound)(U)
    twice = Clip(bound=bound)(once.rows)
    assert np.allclose(once.rows, twice.rows)
    assert (np.linalg.norm(once.rows, axis=1) <= bound * (1 + 1e-12)).all()
    assert np.allclose(once.rows, U * once.scale[:, None])


def test_pipeline_reports_detection_on_original_rows_through_buckets():
    # Prepare: 6 rows, buckets of 2; the inner rule accepts bucket 0 only.
    U = np.arange(12.0).reshape(6, 2)
    pre = Bucketing(s=2, seed=3)
    owners = pre(U, round=4).owners
    # Execute
    d = Pipeline([pre], AcceptRows([0])).decide(U, round=4)
    # Assert: exactly the two rows of bucket 0 are accepted; the others, whose only
    # bucket was not accepted, are rejected (weight 0).
    assert list(d.accepted) == np.flatnonzero(owners[0]).tolist()
    assert d.rejected == np.flatnonzero(~owners[0]).tolist()


def test_pipeline_nnm_then_multikrum_catches_the_outlier_on_its_own_index():
    rng = np.random.default_rng(0)
    U = rng.normal(size=(9, 20))
    U[4] += 40.0
    d = make_rule("multi-krum", 1, pre=["nnm"]).decide(U)
    assert d.flagged == [4]
    assert d.aggregate.shape == (20,)


def test_pipeline_carries_clipping_factors_into_weights():
    U = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 1.0]])
    d = Pipeline([Clip(bound=1.0)], FedAvg()).decide(U)
    assert np.allclose(d.weights, [0.2, 1.0, 1.0])
    assert np.allclose(d.aggregate, (np.array([0.6, 0.8]) + [0.3, 0.4] + [0.0, 1.0]) / 3)


def test_all_of_flags_the_union_and_shrinks_by_the_smallest_weight():
    # Prepare: rule A accepts {0, 1, 2}, rule B accepts {1, 2, 3}; B's weights shrink row 2 to ½.
    class Half(Rule):
        def decide(self, updates, *, round=0):
            from reshuffle.server import Decision

            return Decision(np.zeros(updates.shape[1]), (1, 2, 3), np.array([0.0, 1.0, 0.5, 1.0]))

    U = np.array([[1.0], [2.0], [4.0], [8.0]])
    # Execute
    d = AllOf([AcceptRows([0, 1, 2]), Half()]).decide(U)
    # Assert: accepted = {1, 2}; aggregate = (1·2 + ½·4) / 2.
    assert d.accepted == (1, 2) and d.flagged == [0, 3]
    assert d.aggregate.tolist() == [2.0]
    assert d.weights.tolist() == [0.0, 1.0, 0.5, 0.0]


def test_joined_rule_names_and_options():
    rule = make_rule("multi-krum+cosine", 1, cosine={"threshold": 0.5})
    assert isinstance(rule, AllOf)
    assert isinstance(rule.rules[0], MultiKrum) and rule.rules[0].f == 1
    assert isinstance(rule.rules[1], CosineFilter) and rule.rules[1].threshold == 0.5
    with pytest.raises(ConfigError, match="one table per component"):
        make_rule("multi-krum+cosine", 1, threshold=0.5)
    with pytest.raises(ConfigError, match="names a component twice"):
        make_rule("krum+krum", 0)
    with pytest.raises(ConfigError, match="unknown rule 'nope'"):
        make_rule("krum+nope", 0)


def test_make_rule_routes_f_seed_and_options():
    assert TrimmedMean is type(make_rule("trimmed-mean", 3)) and make_rule("trimmed-mean", 3).trim == 3
    assert make_rule("trimmed-mean", 3, trim=1).trim == 1
    assert make_rule("dnc", 2, seed=9).seed == 9 and make_rule("dnc", 2, seed=9).f == 2
    assert isinstance(make_rule("median", 2), Median)
    with pytest.raises(ConfigError, match="cclip: .*unexpected keyword argument 'bogus'"):
        make_rule("cclip", 1, bogus=1)
    p = make_rule("geomed", 1, pre=["clip", "bucketing"], pre_options={"bucketing": {"s": 3}}, seed=2)
    assert isinstance(p, Pipeline) and [type(x) for x in p.pres] == [Clip, Bucketing] and p.pres[1].s == 3
    with pytest.raises(ConfigError, match="pre_options must be one table per pre-aggregator in use"):
        make_rule("geomed", 1, pre=["clip"], pre_options={"nnm": {}})
    with pytest.raises(ConfigError, match="unknown pre-aggregator 'mix'"):
        make_pre("mix", 1)
    assert {"nnm", "bucketing", "clip"} <= set(pre_names())


def test_registry_rejects_duplicates_and_bad_names():
    with pytest.raises(ConfigError, match="already registered"):
        register_rule("krum")(type("K2", (Rule,), {}))
    with pytest.raises(ConfigError, match="without '\\+'"):
        register_rule("a+b")
    with pytest.raises(ConfigError, match="decorates a Rule subclass"):
        register_rule("not-a-rule")(int)


def test_plugin_module_registers_a_rule(tmp_path, monkeypatch):
    # Prepare: a user module, as in docs/fl.md, importable from tmp_path.
    (tmp_path / "my_rules_plugin.py").write_text(textwrap.dedent('''
        import numpy as np
        from reshuffle.server.rules import Rule, register_rule

        @register_rule("shortest-half")
        class ShortestHalf(Rule):
            def select(self, U):
                norms = np.linalg.norm(U, axis=1)
                return sorted(np.argsort(norms)[: (len(U) + 1) // 2].tolist())
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        # Execute: the config loads the plugin before it checks the rule name.
        cfg = from_mapping({"plugins": ["my_rules_plugin"], "rule": "shortest-half+cosine"}, SimConfig())
        rule = make_rule("shortest-half", 0)
        # Assert
        assert cfg.rule == "shortest-half+cosine" and "shortest-half" in rule_names()
        U = np.array([[3.0], [1.0], [2.0], [9.0]])
        assert rule.select(U) == [1, 2]
        assert rule(U).tolist() == [1.5]
    finally:
        registry.RULES.remove("shortest-half")
        sys.modules.pop("my_rules_plugin", None)


def test_config_accepts_pre_lists_and_checks_names():
    cfg = from_mapping({"rule": "signguard+flame", "pre": "nnm,clip", "pre_options": {"clip": {"bound": 2.0}}})
    assert cfg.pre == ["nnm", "clip"] and cfg.pre_options == {"clip": {"bound": 2.0}}
    assert from_mapping({"pre": ["bucketing"]}).pre == ["bucketing"]
    with pytest.raises(ConfigError, match="unknown pre-aggregator 'nope'"):
        from_mapping({"pre": ["nope"]})
    with pytest.raises(ConfigError, match="pre must be a list"):
        from_mapping({"pre": [1]})
    with pytest.raises(ConfigError, match="unknown rule 'bogus'"):
        from_mapping({"rule": "flame+bogus"})


def test_chain_spends_the_attacker_budget_on_earlier_removals():
    # Prepare: five honest rows and one flipped row; f = 1.
    U = np.array([[1.0, 1.0], [1.0, 0.9], [0.9, 1.0], [1.1, 1.0], [1.0, 1.1], [-1.0, -1.0]])
    first = CosineFilter()
    # Execute
    chained = Chain([first, MultiKrum(f=1)], f=1).decide(U)
    # Assert: after the filter removes row 5, Multi-Krum runs with f = 0 and keeps all five,
    # where Multi-Krum with the full budget f = 1 would drop one more, honest, row.
    assert chained.accepted == (0, 1, 2, 3, 4) and chained.rejected == [5]
    assert np.allclose(chained.aggregate, U[:5].mean(axis=0))
    assert len(MultiKrum(f=1).select(U[:5])) == 4


def test_chain_with_nothing_left_returns_zero():
    d = Chain([AcceptRows([]), FedAvg()], f=1).decide(np.ones((3, 2)))
    assert d.accepted == () and d.aggregate.tolist() == [0.0, 0.0] and d.rejected == [0, 1, 2]


def test_with_f_copies_and_names_are_parsed():
    mk = MultiKrum(f=3)
    assert with_f(mk, 1).f == 1 and mk.f == 3
    assert with_f(CosineFilter(), 5).threshold == 0.1
    rule = make_rule("signstat+geomed:multi-krum", 2, seed=1)
    assert isinstance(rule, Chain) and rule.f == 2
    assert isinstance(rule.rules[0], AllOf) and isinstance(rule.rules[1], MultiKrum)
    with pytest.raises(ConfigError, match="names a component twice"):
        make_rule("krum:krum", 0)
