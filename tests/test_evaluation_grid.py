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
    # The Dirichlet split the published cells were computed with: this project's earlier one.
    assert [p.label for p in g.partitions] == ["iid", "ldir0.3"] and g.seeds == (1, 2, 3)
    assert g.partitions[1].settings() == {"partition": "dirichlet-legacy", "alpha": 0.3} and g.extra == ()
    # the backdoors and the clean run again over the long horizon, under the long horizon's rules
    assert g.long_rounds == 30 and set(g.long_attacks) == {"none"} | {a for a in attack_names() if is_backdoor(a)}
    assert {"badnets", "dba", "maxproj-backdoor"} <= set(g.long_attacks) and "alie" not in g.long_attacks
    # there: clean FedAvg and `default` under the clean run, `default` alone under each backdoor
    assert g.all_long_rules == ("fedavg", "default") and g.long_rules_of("badnets") == ("default",)
    assert g.describe()["long_rules"] == ["default"]  # what the docs say the backdoors meet over 30 rounds
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
    assert [p.label for p in g.partitions] == ["iid", "ldir0.3", "dir0.5"] and g.models == ("mlp", "lenet5")
    assert dict(g.base)["rounds"] == 20
    assert [s.label for s in g.settings_list[-2:]] == ["cifar10-dir0.3-cnn", "femnist-natural-cnn"]
    assert g.cell_settings(Cell(g.settings_list[-1], "alie", "fedavg", 1))["partition"] == "natural"


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


@pytest.mark.parametrize("text, want, label, settings", [
    ("iid", Partition("iid"), "iid", {"partition": "iid"}),
    ("dirichlet", Partition("dirichlet", 0.3), "dir0.3", {"partition": "dirichlet", "alpha": 0.3}),
    ("dirichlet:0.5", Partition("dirichlet", 0.5), "dir0.5", {"partition": "dirichlet", "alpha": 0.5}),
    ("dirichlet-legacy", Partition("dirichlet-legacy", 0.3), "ldir0.3", {"partition": "dirichlet-legacy", "alpha": 0.3}),
    ("pathological:3", Partition("pathological", per_client=3), "path3",
     {"partition": "pathological", "classes_per_client": 3}),
    ("shard", Partition("shard", per_client=2), "shard2", {"partition": "shard", "shards_per_client": 2}),
    ("natural", Partition("natural"), "natural", {"partition": "natural"}),
])
def test_partition_names(text, want, label, settings):
    p = Partition.parse(text)
    assert p == want and p.label == label and p.settings() == settings


def test_selection_keeps_the_extra_settings_its_axes_still_hold():
    g = default_grid(full=True)
    assert [s.label for s in Selection(datasets=["cifar10"]).apply(g).extra] == ["cifar10-dir0.3-cnn"]
    assert Selection(models=["mlp"]).apply(g).extra == ()
    assert len(Selection(seeds=[1]).apply(g).extra) == 2


def test_settings_whose_data_is_absent_wait_and_are_listed(tmp_path):
    g = default_grid(full=True)
    waiting = g.needs_data(tmp_path)
    assert {s.dataset for s in waiting} == {"mnist", "fashion-mnist", "cifar10", "femnist"}
    assert "`reshuffle data fetch cifar10 --dir" in waiting[g.settings_list[-2]]
    assert "LEAF" in waiting[g.settings_list[-1]]
    from data_helpers import write_cifar10

    write_cifar10(tmp_path / "cifar10")
    assert g.settings_list[-2] not in g.needs_data(tmp_path)
    assert g.cell_settings(Cell(g.settings_list[-2], "none", "fedavg", 1), tmp_path)["data_dir"] == str(
        tmp_path / "cifar10")


@pytest.mark.parametrize("text", ["iid:0.3", "dirichlet:x", "dirichlet:0", "shards", "shard:0", "pathological:x",
                                  "natural:2"])
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
    assert {c.rule for c in every.cells() if c.rounds == 12 and c.attack == "dba"} == {
        "fedavg", "multi-krum", "default"}
    assert not [c for c in Selection(long_rounds=0).apply_base(short).cells() if c.rounds is not None]
    p.write_text('long_rules = ["flame"]\nrules = ["multi-krum"]\n')
    with pytest.raises(ConfigError, match="long_rules flame"):
        load_grid_toml(p, g)
    p.write_text('long_rounds = -1\n')
    with pytest.raises(ConfigError, match="long_rounds"):
        load_grid_toml(p, g)


def test_a_setting_without_its_data_waits_and_is_not_failed(tmp_path):
    from reshuffle.evaluation.backends import InlineBackend
    from reshuffle.evaluation.grid import Grid, Setting
    from reshuffle.evaluation.runner import run_grid

    # Prepare: digits (embedded) runs; cifar10 with the CNN has no files under the data root
    grid = validate(Grid(datasets=("digits",), partitions=(Partition("iid"),), models=("logreg",), rules=("fedavg",),
                         seeds=(1,), base=(("clients", 4), ("set_size", 4), ("rounds", 1), ("shuffle", "ideal")),
                         extra=(Setting("cifar10", Partition("dirichlet", 0.3), "cnn"),)))
    # Execute
    res = run_grid(grid, tmp_path / "out", InlineBackend(), tmp_path / "data", plots=False, quiet=True)
    # Assert: one cell ran, none failed; the other is listed as needing its data, with how to get it
    assert (res.ran, res.failed) == (1, 0)
    assert res.summary["counts"] == {"total": 2, "done": 1, "failed": 0, "missing": 1}
    assert list(res.summary["needs_data"]) == ["cifar10-dir0.3-cnn"]
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "## Settings that need data (1; not run, not failed)" in md and "reshuffle data fetch cifar10" in md


def test_a_grid_file_adds_an_extended_horizon_and_single_settings(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text('datasets = ["mnist"]\npartitions = ["dirichlet:0.3"]\nattacks = ["saturate", "slow-drift"]\n'
                 'rules = ["hammer-anvil"]\nseeds = [1]\nlong_rules = ["hammer-anvil"]\nextended_rounds = 60\n'
                 'extended_attacks = ["slow-drift"]\nextra_settings = ["fashion-mnist:dirichlet-legacy:0.3:lenet5"]\n')
    g = load_grid_toml(p, default_grid())
    assert [s.label for s in g.settings_list] == ["mnist-dir0.3-mlp", "fashion-mnist-ldir0.3-lenet5"]
    sixty = {(c.setting.label, c.attack, c.rule) for c in g.cells() if c.rounds == 60}
    for label in ("mnist-dir0.3-mlp", "fashion-mnist-ldir0.3-lenet5"):
        # The extended attacks and the clean run (under FedAvg too: every drop is measured against it).
        assert {(label, "slow-drift", "hammer-anvil"), (label, "none", "hammer-anvil"), (label, "none", "fedavg")} \
            <= sixty
    assert not any(a == "saturate" for _, a, _ in sixty) and g.describe()["extended_rounds"] == 60
    p.write_text('extra_settings = ["mnist"]\n')
    with pytest.raises(ConfigError, match="dataset:partition"):
        load_grid_toml(p, default_grid())


def test_long_also_runs_attacks_that_plant_no_backdoor_over_the_long_horizon(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text('datasets = ["mnist"]\npartitions = ["dirichlet:0.3"]\nattacks = ["frame-class", "poisonedfl", '
                 '"frame-ban"]\nrules = ["hammer-anvil"]\nseeds = [1]\nlong_rules = ["hammer-anvil"]\n'
                 'long_also = ["frame-class"]\n')
    g = load_grid_toml(p, default_grid())
    thirty = {c.attack for c in g.cells() if c.rounds == 30}
    assert thirty == {"none", "frame-class", "frame-ban"}  # frame-ban is a backdoor; poisonedfl is not listed
    assert len(set(g.cells())) == len(g.cells())
    p.write_text('long_also = ["no-such-attack"]\n')
    with pytest.raises(ConfigError, match="no-such-attack"):
        validate(load_grid_toml(p, default_grid()))
