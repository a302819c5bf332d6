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
