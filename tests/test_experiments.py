"""The evaluation script: the resumable grid with its summary, and the older experiments on their quick config."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = [sys.executable, str(ROOT / "experiments" / "run.py")]


def test_grid_runs_resumes_and_lists_missing_cells(tmp_path):
    # Prepare: a filtered part of the quick grid
    cmd = RUN + ["--grid", str(ROOT / "experiments" / "configs" / "grid-quick.toml"), "--out", str(tmp_path),
                 "--rowsets", "digits-iid", "--attacks", "sign-flip", "badnets", "--rules", "fedavg", "multi-krum",
                 "--quiet"]
    # Execute
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    # Assert: one file per cell (the clean baseline added), compact, with per-round metrics
    assert r.returncode == 0, r.stderr
    cells = sorted(p.name for p in (tmp_path / "digits-iid").glob("*.json"))
    assert cells == sorted(f"{a}__{r}.json" for a in ("none", "sign-flip", "badnets") for r in ("fedavg", "multi-krum"))
    cell = json.loads((tmp_path / "digits-iid" / "badnets__fedavg.json").read_text())
    assert cell["config"]["attack"] == "badnets" and len(cell["accuracy"]) == 2
    assert cell["attack_success"][-1] > 0.5 and cell["final_accuracy"] == cell["accuracy"][-1]
    summary = (tmp_path / "summary.md").read_text()
    assert "from the finished cells: 6 of 16." in summary
    assert "| attack | fedavg | multi-krum |" in summary and "| sign-flip | 0.00 / 0.00 | 1.00 / 0.00 |" in summary
    # cells not run are named, never silently left out
    assert "Missing cells (2): alie × fedavg; alie × multi-krum" in summary
    assert "sign-flip detected with TPR ≥ 0.95 at FPR ≤ 0.05 by the default rule multi-krum" in summary
    assert "Cost:" in summary and (tmp_path / "digits-iid_acc.png").is_file()
    # Execute again: finished cells are skipped
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert "6 of 6 cells finished, 0 to run" in again.stdout


def test_grid_rejects_unknown_names(tmp_path):
    cmd = RUN + ["--grid", str(ROOT / "experiments" / "configs" / "grid-quick.toml"), "--out", str(tmp_path)]
    r = subprocess.run(cmd + ["--rules", "no-such-rule"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "unknown rule(s) ['no-such-rule']" in r.stderr
    r = subprocess.run(cmd + ["--rowsets", "cifar"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "unknown row set(s) ['cifar']" in r.stderr


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


def test_a_failing_cell_is_recorded_with_its_reason(tmp_path):
    # Prepare: a cell whose run raises (an invalid attack option)
    sys.path.insert(0, str(ROOT / "experiments"))
    from grid import load_grid, run_cell, write_summary

    grid = load_grid(ROOT / "experiments" / "configs" / "grid-quick.toml")
    path = tmp_path / "digits-iid" / "sign-flip__fedavg.json"
    settings = {**grid.settings("digits-iid", "sign-flip", "fedavg", None), "attack_options": {"scale": -1}}
    # Execute
    run_cell(str(path), settings)
    summary = write_summary(grid, tmp_path)
    # Assert: the cell counts as run, reads "failed", and its reason is listed
    assert "ConfigError: sign-flip scale must be a positive number" in json.loads(path.read_text())["error"]
    assert "| sign-flip | failed | missing |" in summary
    assert "Failed runs (1): sign-flip × fedavg (ConfigError: sign-flip scale" in summary


def test_a_cell_that_loses_models_lists_them_by_cause(tmp_path):
    # Prepare: attackers whose sign-flipped update (scale 1e40) is beyond float32, so it cannot be encoded
    sys.path.insert(0, str(ROOT / "experiments"))
    from grid import load_grid, run_cell, write_summary

    grid = load_grid(ROOT / "experiments" / "configs" / "grid-quick.toml")
    path = tmp_path / "digits-iid" / "sign-flip__fedavg.json"
    settings = {**grid.settings("digits-iid", "sign-flip", "fedavg", None), "attack_options": {"scale": 1e40}}
    # Execute
    run_cell(str(path), settings)
    summary = write_summary(grid, tmp_path)
    cell = json.loads(path.read_text())
    # Assert: the run finishes; 2 attackers × 2 rounds are lost, each with its cause, and the summary counts them
    assert "error" not in cell and cell["models_received"] == [8, 8] and cell["diverged"] == [False, False]
    assert all(c.startswith("attack output: ") for lost in cell["lost"] for c in lost.values())
    assert "- sign-flip × fedavg: 4 models lost (attack output × 4), 0 rounds with a diverged" in summary


def test_compositions_join_the_registered_rules(tmp_path):
    # Prepare: a grid whose rules are all registered ones plus one composed candidate
    sys.path.insert(0, str(ROOT / "experiments"))
    from grid import load_grid, registry_rules

    spec = tmp_path / "g.toml"
    spec.write_text('attacks = ["alie"]\nrules = "all"\ncompositions = ["geomed+signstat+cosine", "fedavg"]\n'
                    '[rowsets.d]\ndataset = "digits"\n')
    # Execute
    grid, picked = load_grid(spec), load_grid(spec, rules=["fedavg"])
    # Assert: the composition is one more column (a registered name is not repeated); an explicit choice wins
    assert grid.rules == [*registry_rules(), "geomed+signstat+cosine"]
    assert picked.rules == ["fedavg"]
