"""Configurations are strict: every key of a TOML file is read or refused with its name, in any layout,
and the options of rules, pre-aggregators, attacks and adversaries are checked against their constructors."""

from __future__ import annotations

import json
import textwrap

import pytest

from reshuffle.cli import main
from reshuffle.errors import ConfigError
from reshuffle.server.rules import DEFAULT_RULE
from reshuffle.run.config import SimConfig, from_mapping, load_toml


def _toml(tmp_path, text: str):
    p = tmp_path / "run.toml"
    p.write_text(textwrap.dedent(text))
    return p


def test_a_simulate_table_does_not_hide_the_other_keys(tmp_path, capsys):
    # The layout docs/usage.md shows: settings under [simulate], option tables beside it.
    cfg = _toml(tmp_path, '''
        [simulate]
        dataset = "digits"
        model = "logreg"
        clients = 4
        rounds = 1
        shuffle = "none"
        rule = "multi-krum"
        [rule_options.multi-krum]
        m = 2
        ''')
    # The table beside [simulate] is read: its rule is not joined, so a table per component is refused
    with pytest.raises(ConfigError, match="multi-krum' has no option 'multi-krum'; valid: m"):
        from_mapping(load_toml(cfg))
    cfg.write_text(cfg.read_text().replace("[rule_options.multi-krum]", "[rule_options]"))
    assert from_mapping(load_toml(cfg)).rule_options == {"m": 2}
    # A top-level typo beside [simulate] is refused by name (it used to be dropped, and the run exit 0)
    cfg.write_text("roundz = 3\n" + cfg.read_text())
    assert main(["simulate", "--config", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "unknown setting 'roundz'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_setting_in_both_layouts_is_refused(tmp_path):
    cfg = _toml(tmp_path, '''
        rounds = 2
        [simulate]
        rounds = 3
        ''')
    with pytest.raises(ConfigError, match="rounds set both at top level and in \\[simulate\\]"):
        load_toml(cfg)


@pytest.mark.parametrize("values,message", [
    ({"rule": "multi-krum", "rule_options": {"ff": 1}}, "rule_options: rule 'multi-krum' has no option 'ff'; valid: m"),
    # The rule's f and seed are the run's settings: named as such, never listed among the options
    ({"rule": "krum", "rule_options": {"ff": 1}}, "rule_options: rule 'krum' has no option 'ff'; valid: none"),
    ({"rule": "krum", "rule_options": {"f": 2}},
     "rule_options: f is a setting of the run (the attackers it assumes per round), not an option of rule 'krum': "
     "set f = 2 at the top level (--f 2)"),
    ({"rule": "signguard+flame", "rule_options": {"flame": {"seed": 3}}}, "set seed = 3 at the top level"),
    ({"pre": ["nnm"], "pre_options": {"nnm": {"f": 1}}}, "pre_options.nnm: f is a setting of the run"),
    ({"rule": "signguard+flame", "rule_options": {"flame": {"nois": 0.1}}},
     "rule_options.flame: rule 'flame' has no option 'nois'; valid: noise"),
    ({"rule": "signguard+flame", "rule_options": {"flam": {}}}, "'flam' is none of them"),
    ({"rule": "default", "rule_options": {"kapa": 2.0}}, f"rule 'default' ({DEFAULT_RULE}) has no option 'kapa'"),
    ({"pre": ["clip"], "pre_options": {"clip": {"bnd": 1.0}}},
     "pre_options.clip: pre-aggregator 'clip' has no option 'bnd'; valid: bound"),
    ({"pre": ["clip"], "pre_options": {"nnm": {"f": 1}}}, "one table per pre-aggregator in use (clip)"),
    ({"attack": "alie", "malicious": 0.2, "attack_options": {"zz": 1.0}},
     "attack_options: attack 'alie' has no option 'zz'; valid: z"),
    ({"adversary": "bad-share", "adversary_options": {"pid": [1]}}, "adversary 'bad-share' has no option 'pid'"),
    ({"server_opt": "adam", "server_options": {"beta": 0.9}}, "no option 'beta'; valid: beta1, beta2, tau"),
])
def test_plugin_options_are_refused_by_name_with_the_valid_ones(values, message):
    with pytest.raises(ConfigError) as err:
        SimConfig(**values).validated()
    assert message in str(err.value)


def test_every_option_table_of_a_file_reaches_the_run(tmp_path):
    cfg = _toml(tmp_path, '''
        dataset = "digits"
        model = "logreg"
        clients = 6
        rounds = 1
        shuffle = "none"
        attack = "sign-flip"
        malicious = 0.34
        rule = "trimmed-mean"
        pre = ["clip"]
        server_opt = "momentum"
        [attack_options]
        scale = 3.0
        [rule_options]
        trim = 1
        [pre_options.clip]
        bound = 2.0
        [server_options]
        momentum = 0.5
        ''')
    out = tmp_path / "out"
    assert main(["simulate", "--config", str(cfg), "--out", str(out), "--quiet"]) == 0
    got = json.loads((out / "metrics.json").read_text())["config"]
    assert (got["attack_options"], got["rule_options"], got["pre_options"], got["server_options"]) == \
        ({"scale": 3.0}, {"trim": 1}, {"clip": {"bound": 2.0}}, {"momentum": 0.5})
