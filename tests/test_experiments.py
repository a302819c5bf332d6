"""The evaluation script: the experiments besides the grid, on their quick config."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = [sys.executable, str(ROOT / "experiments" / "run.py")]


def test_quick_experiment_summary(tmp_path):
    cmd = RUN + ["--config", str(ROOT / "experiments" / "configs" / "quick.toml"), "--out", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    summary = (tmp_path / "summary.md").read_text()
    assert "6 of 6 runs finished" in summary
    assert "| attack | fedavg | multi-krum |" in summary
    # Multi-Krum meets the detection target on the quick grid, and the check is printed.
    assert "Multi-Krum detection vs sign-flip: TPR 1.000, FPR 0.000" in summary
    assert (tmp_path / "quick_accuracy.png").is_file()
    m = json.loads((tmp_path / "quick" / "attack=gaussian_rule=fedavg" / "metrics.json").read_text())
    assert m["config"]["attack"] == "gaussian" and len(m["rounds"]) == 3
    # finished runs are skipped on a second call
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert "0 runs to do" in again.stdout


def test_naming_no_experiment_points_to_the_grid_command():
    r = subprocess.run(RUN, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "reshuffle grid" in r.stderr


PROBE = [sys.executable, str(ROOT / "experiments" / "probe.py")]


def _probe_digits(tmp_path, what, attack, rule, rounds, *extra):
    """``experiments/probe.py what`` on the embedded digits (the data folder is not read)."""
    return subprocess.run(PROBE + [what, "--dataset", "digits", "--data-dir", str(tmp_path), "--model", "mlp",
                                   "--attack", attack, "--rule", rule, "--rounds", str(rounds), *extra],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


def _two_rounds(r, out):
    """The run's JSON, after checking that the probe printed a row for each of its two rounds."""
    assert r.returncode == 0, r.stderr
    assert len([line for line in r.stdout.splitlines() if line.startswith(("| 1 |", "| 2 |"))]) == 2
    data = json.loads(out.read_text())
    assert [x["round"] for x in data["rounds"]] == [1, 2]
    return data


def test_the_energy_probe_prints_each_round_and_writes_its_json(tmp_path):
    out = tmp_path / "energy.json"
    data = _two_rounds(_probe_digits(tmp_path, "energy", "scaling", "clip-trim", 2, "--json", str(out)), out)
    assert data["share"] == 0.05
    # Ten times their honest update: the attackers' models carry more energy than every honest one.
    assert all(x["auc"] == 1.0 and len(x["attackers"]) == 4 for x in data["rounds"])


@pytest.mark.parametrize("what", ["energy", "steps"])
def test_a_probe_refuses_a_missing_data_folder_in_one_line(tmp_path, what):
    r = subprocess.run(PROBE + [what, "--data-dir", str(tmp_path / "absent")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "no such folder" in r.stderr and r.stdout == ""


def test_the_steps_probe_prints_each_round_and_writes_its_json(tmp_path):
    out = tmp_path / "steps.json"
    data = _two_rounds(_probe_digits(tmp_path, "steps", "idle", "hammer-anvil", 2, "--json", str(out)), out)
    assert data["probe"] == "steps" and data["settings"]["rule"] == "hammer-anvil"
    # Four zero rows of twenty: FedAvg's mean is 0.8 of the honest rows' (float32 models).
    assert all(abs(x["fedavg_length"] - 0.8) < 1e-6 for x in data["rounds"])


def test_the_steps_probe_names_the_rule_that_refuses_the_honest_rows_alone_in_one_line(tmp_path):
    r = _probe_digits(tmp_path, "steps", "idle", "bulyan", 1)
    assert r.returncode == 2
    assert r.stderr.startswith("steps probe: round 1: rule 'bulyan' refused the 16 honest rows alone")
    assert len(r.stderr.strip().splitlines()) == 1


def _class_drops():
    import importlib.util

    spec = importlib.util.spec_from_file_location("class_drops", ROOT / "experiments" / "class_drops.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tiny_grid(tmp_path, records, attacks=("frame-class", "idle")):
    """A one-setting grid (``attacks``; clip-trim and FedAvg; seed 1) with the given class accuracies."""
    from reshuffle.evaluation.cell import FORMAT
    from reshuffle.evaluation.grid import default_grid, load_grid_toml

    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "g.toml"
    cfg.write_text('datasets = ["fashion-mnist"]\npartitions = ["dirichlet:0.3"]\nmodels = ["mlp"]\nseeds = [1]\n'
                   f'attacks = {json.dumps(list(attacks))}\nrules = ["clip-trim"]\nlong_rounds = 0\n')
    out = tmp_path / "out"
    for c in load_grid_toml(cfg, default_grid()).cells():
        acc = records.get((c.attack, c.rule))
        if acc is not None:
            path = out / c.relpath
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"format": FORMAT, "status": "done", "class_accuracy": acc,
                                        "honest_downweighted": 3 if c.rule == "clip-trim" else 0}))
    return cfg, out


def test_class_drops_splits_a_drop_into_the_attack_and_the_rule(tmp_path, capsys):
    base = [0.9, 0.8, 0.7]
    cfg, out = _tiny_grid(tmp_path, {
        ("idle", "clip-trim"): base, ("frame-class", "clip-trim"): [0.95, 0.8, 0.55],
        ("none", "clip-trim"): [0.9, 0.8, 0.65],
        ("idle", "fedavg"): base, ("frame-class", "fedavg"): [0.93, 0.8, 0.6]})
    mod = _class_drops()
    found = {r["rule"]: r for r in mod.rows([(cfg, out)], "frame-class")}
    mine = found["clip-trim"]
    # Class 2 loses 15 points under the rule, 10 under FedAvg; the target (class 0) gains 5; the rule's two
    # reference runs already differ by 5 points on that class.
    assert mine["class"] == 2 and abs(mine["drop"] - 0.15) < 1e-9 and abs(mine["fedavg_drop"] - 0.10) < 1e-9
    assert mine["target"] == 0 and abs(mine["target_change"] - 0.05) < 1e-9
    assert abs(mine["reference_swing"] - 0.05) < 1e-9 and mine["honest_downweighted"] == 3
    assert found["fedavg"]["reference_swing"] is None  # no clean FedAvg run stored
    assert mod.main(["--config", str(cfg), "--out", str(out), "--json", str(tmp_path / "d.json")]) == 0
    printed = capsys.readouterr().out
    assert "| clip-trim | 1 | 15.0 (class 2) | 10.0 | +5.0 (class 0) | 3 | 5.0 | 55.0; 65.0–70.0 (2) |" in printed
    assert len(json.loads((tmp_path / "d.json").read_text())) == 2


def test_class_drops_sets_the_drop_against_the_rules_other_runs_of_that_seed(tmp_path):
    # The rule's other runs (another attack, idle, clean) span 50-80 % on the class that drops; FedAvg's runs
    # and the attack's own run stay out of that range.
    cfg, out = _tiny_grid(tmp_path, {
        ("idle", "clip-trim"): [0.9, 0.8], ("frame-class", "clip-trim"): [0.9, 0.6],
        ("saturate", "clip-trim"): [0.9, 0.5], ("none", "clip-trim"): [0.9, 0.78],
        ("saturate", "fedavg"): [0.9, 0.1], ("idle", "fedavg"): [0.9, 0.8]}, attacks=("frame-class", "idle", "saturate"))
    mine = {r["rule"]: r for r in _class_drops().rows([(cfg, out)], "frame-class")}["clip-trim"]
    assert mine["class"] == 1 and mine["others"] == 3
    assert (mine["others_low"], mine["others_high"], mine["value"]) == (0.5, 0.8, 0.6)


def test_class_drops_refuses_bad_input_in_one_line(tmp_path, capsys):
    cfg, out = _tiny_grid(tmp_path, {("idle", "clip-trim"): [0.9, 0.8]})
    mod = _class_drops()
    assert mod.main(["--config", str(cfg), "--out", str(tmp_path / "absent")]) == 2
    assert "has no cells/ folder" in capsys.readouterr().err
    assert mod.main(["--config", str(cfg), "--out", str(out), "--attack", "saturate"]) == 2
    assert "has no attack 'saturate'" in capsys.readouterr().err
    # Nothing to split (the attack's cells are not done): a non-zero exit, not an empty table.
    assert mod.main(["--config", str(cfg), "--out", str(out)]) == 1
    err = capsys.readouterr()
    assert "no finished frame-class cell" in err.err and err.out == ""
    assert mod.main(["--config", str(cfg), "--config", str(cfg), "--out", str(out)]) == 2
    assert "2 --config but 1 --out" in capsys.readouterr().err


def test_class_drops_reads_a_second_grid_for_the_cells_the_first_lacks(tmp_path):
    # The first grid has the rule's runs; the second FedAvg's, which the first lacks.
    first, out1 = _tiny_grid(tmp_path / "a", {("idle", "clip-trim"): [0.9, 0.8],
                                              ("frame-class", "clip-trim"): [0.9, 0.6]})
    second, out2 = _tiny_grid(tmp_path / "b", {("idle", "fedavg"): [0.9, 0.8], ("frame-class", "fedavg"): [0.9, 0.7]})
    mod = _class_drops()
    alone = {r["rule"]: r for r in mod.rows([(first, out1)], "frame-class")}
    both = {r["rule"]: r for r in mod.rows([(first, out1), (second, out2)], "frame-class")}
    assert alone["clip-trim"]["fedavg_drop"] is None and "fedavg" not in alone
    assert abs(both["clip-trim"]["fedavg_drop"] - 0.1) < 1e-9 and abs(both["fedavg"]["drop"] - 0.1) < 1e-9
