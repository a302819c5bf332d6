"""The evaluation script: the experiments besides the grid, on their quick config."""

import json
import subprocess
import sys
from pathlib import Path

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


PROBE = [sys.executable, str(ROOT / "experiments" / "energy_probe.py")]


def test_the_energy_probe_prints_each_round_and_writes_its_json(tmp_path):
    out = tmp_path / "energy.json"
    r = subprocess.run(PROBE + ["--dataset", "digits", "--data-dir", str(tmp_path), "--model", "mlp", "--attack",
                                "scaling", "--rule", "clip-trim", "--rounds", "2", "--json", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2
    data = json.loads(out.read_text())
    assert data["share"] == 0.05 and [x["round"] for x in data["rounds"]] == [1, 2]
    # Ten times their honest update: the attackers' models carry more energy than every honest one.
    assert all(x["auc"] == 1.0 and len(x["attackers"]) == 4 for x in data["rounds"])


def test_the_energy_probe_refuses_a_missing_data_folder_in_one_line(tmp_path):
    r = subprocess.run(PROBE + ["--data-dir", str(tmp_path / "absent")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no such folder" in r.stderr and r.stdout == ""
