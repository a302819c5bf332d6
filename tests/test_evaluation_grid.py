"""The grid as data: the default and full grids, a cell's settings, grid files."""

import dataclasses

import pytest

from reshuffle.attacks import attack_names
from reshuffle.errors import ConfigError
from reshuffle.evaluation import grid as grid_mod
from reshuffle.evaluation.grid import (
    DEFAULT_RULES, Cell, Partition, Selection, default_grid, is_backdoor, load_grid_toml, validate,
)
from reshuffle.server import rule_names
from reshuffle.sim import from_mapping


def test_default_grid_covers_every_attack_and_the_registered_decision_rules():
    g = default_grid()
    # every registered attack, the clean run first; the decision rules the registry knows, the others reported
    assert g.all_attacks[0] == "none" and set(g.all_attacks) == set(attack_names())
    assert list(g.rules) == [r for r in DEFAULT_RULES if r in rule_names()]
    assert list(g.skipped_rules) == [r for r in DEFAULT_RULES if r not in rule_names()]
    assert [p.label for p in g.partitions] == ["iid", "dir0.3"] and g.seeds == (1, 2, 3)
    # the backdoors and the clean run again over the long horizon, under the long horizon's rules
    assert g.long_rounds == 30 and set(g.long_attacks) == {"none"} | {a for a in attack_names() if is_backdoor(a)}
    assert {"badnets", "dba", "maxproj-backdoor"} <= set(g.long_attacks) and "alie" not in g.long_attacks
    # there: clean FedAvg and `default` under the clean run, `default` alone under each backdoor
    assert g.all_long_rules == ("fedavg", "default") and g.long_rules_of("badnets") == ("default",)
    long = 2 * 2 * (2 + len(g.long_attacks) - 1) * 3
    assert len(g.cells()) == 2 * 2 * len(g.all_attacks) * len(g.all_rules) * 3 + long
    assert len(set(c.relpath for c in g.cells())) == len(g.cells())
    # every cell's settings pass the simulator's validation
    s = g.cell_settings(Cell(g.settings_list[0], "alie", "multi-krum", 2))
    cfg = from_mapping(s)
    assert (cfg.model, cfg.clients, cfg.rounds, cfg.shuffle, cfg.n_malicious, cfg.seed) == ("mlp", 20, 10, "ideal", 4, 2)


def test_full_grid_adds_rules_partitions_model_and_rounds():
    g = default_grid(full=True)
    assert set(rule_names()) <= set(g.rules)
    assert [p.label for p in g.partitions] == ["iid", "dir0.3", "dir0.5"] and g.models == ("mlp", "lenet5")
    assert dict(g.base)["rounds"] == 20


def test_skewed_partitions_train_one_client_at_a_time_unless_the_grid_says_otherwise():
    g = default_grid()
    iid, skewed = (Cell(s, "alie", "fedavg", 1) for s in g.settings_list[:2])
    assert "training" not in g.cell_settings(iid) and g.cell_settings(skewed)["training"] == "sequential"
    chosen = dataclasses.replace(g, base=(*g.base, ("training", "batched")))
    assert chosen.cell_settings(skewed)["training"] == "batched"


def test_the_clean_run_has_no_attackers_but_the_rule_keeps_its_f():
    g = default_grid()
    s = g.cell_settings(Cell(g.settings_list[0], "none", "multi-krum", 1))
    cfg = from_mapping(s)
    assert cfg.n_malicious == 0 and cfg.rule_f == 4


def test_eval_subset_is_passed_only_when_the_simulator_has_it(monkeypatch):
    g = default_grid()
    cell = Cell(g.settings_list[0], "alie", "fedavg", 1)
    monkeypatch.setattr(grid_mod, "_has_sim_field", lambda name: True)
    assert g.cell_settings(cell)["eval_subset"] == grid_mod.EVAL_SUBSET
    monkeypatch.setattr(grid_mod, "_has_sim_field", lambda name: False)
    assert "eval_subset" not in g.cell_settings(cell)


@pytest.mark.parametrize("text, want", [("iid", Partition("iid")), ("dirichlet", Partition("dirichlet", 0.3)),
                                        ("dirichlet:0.5", Partition("dirichlet", 0.5))])
def test_partition_names(text, want):
    assert Partition.parse(text) == want


@pytest.mark.parametrize("text", ["iid:0.3", "dirichlet:x", "dirichlet:0", "shards"])
def test_bad_partitions_are_refused(text):
    with pytest.raises(ConfigError, match="partition"):
        Partition.parse(text)


def test_grid_file_overrides_axes_and_base(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text('datasets = ["digits"]\npartitions = ["dirichlet:0.5"]\nattacks = ["alie"]\nrules = "all"\n'
                 'seeds = [4]\nmodels = ["logreg"]\n[base]\nrounds = 3\n')
    g = validate(load_grid_toml(p, default_grid()))
    assert g.datasets == ("digits",) and g.partitions == (Partition("dirichlet", 0.5),)
    assert g.all_attacks == ("none", "alie") and list(g.rules) == list(rule_names()) and g.seeds == (4,)
    assert dict(g.base)["rounds"] == 3 and dict(g.base)["clients"] == 20
    p.write_text('datasets = ["digits"]\ncolour = "red"\n')
    with pytest.raises(ConfigError, match="unknown key"):
        load_grid_toml(p, default_grid())
    p.write_text('[base]\nbatch_size = 0\n')
    bad = dataclasses.replace(load_grid_toml(p, default_grid()), datasets=("digits",))
    with pytest.raises(ConfigError, match="batch_size"):
        validate(bad)


def test_long_horizon_cells_run_their_rounds_and_a_grid_file_or_the_command_line_sets_it(tmp_path):
    g = default_grid()
    cell = next(c for c in g.cells() if c.rounds is not None and c.attack == "badnets")
    s = g.cell_settings(cell)
    assert s["rounds"] == 30 and cell.relpath.endswith("__r30.json") and "30 rounds" in cell.name
    p = tmp_path / "g.toml"
    p.write_text('long_rounds = 12\nlong_rules = ["default"]\nrules = ["multi-krum", "default"]\n')
    short = validate(load_grid_toml(p, g))
    assert short.all_long_rules == ("fedavg", "default") and short.long_rounds == 12
    assert {(c.attack == "none", c.rule) for c in short.cells() if c.rounds == 12} == {
        (True, "fedavg"), (True, "default"), (False, "default")}
    every = dataclasses.replace(short, long_rules=None)
    assert {c.rule for c in every.cells() if c.rounds == 12 and c.attack == "dba"} == {"fedavg", "multi-krum", "default"}
    assert not [c for c in Selection(long_rounds=0).apply_base(short).cells() if c.rounds is not None]
    p.write_text('long_rules = ["flame"]\nrules = ["multi-krum"]\n')
    with pytest.raises(ConfigError, match="long_rules"):
        validate(load_grid_toml(p, g))
    p.write_text('long_rounds = -1\n')
    with pytest.raises(ConfigError, match="long_rounds"):
        load_grid_toml(p, g)
