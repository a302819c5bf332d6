"""`reshuffle grid`: argument errors, a tiny grid that resumes and retries, the docs section."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reshuffle.cli import main
from reshuffle.errors import ConfigError
from reshuffle.evaluation.report import docs_markers, update_docs
from reshuffle.evaluation.grid import DEFAULT_RULES

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--datasets", "digits", "--partitions", "iid", "--models", "logreg", "--rounds", "2", "--seeds", "1"]


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own errors
        return exc.code


@pytest.mark.parametrize("extra, message", [
    (["--attacks", "no-such-attack"], "unknown attack(s) no-such-attack"),
    (["--rules", "no-such-rule"], "unknown rule(s) no-such-rule"),
    (["--datasets", "cifar"], "unknown dataset(s) cifar"),
    (["--partitions", "dirichlet:-1"], "alpha must be positive"),
    (["--jobs", "0"], "'0' must be positive"),
    (["--jobs", "two"], "invalid int value 'two'"),
    (["--seeds", "-3"], "'-3' must be >= 0"),
])
def test_bad_arguments_exit_2_with_the_reason(tmp_path, capsys, extra, message):
    # Execute
    code = _exit_code(["grid", "--out", str(tmp_path / "g"), *TINY, *extra])
    # Assert: exit 2, the reason on stderr, nothing run
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "g" / "cells").exists()


def test_a_missing_grid_config_is_a_clear_error(tmp_path, capsys):
    assert _exit_code(["grid", "--config", str(tmp_path / "none.toml"), "--out", str(tmp_path)]) == 2
    assert "grid config" in capsys.readouterr().err


PLUGIN = '''
import os
from pathlib import Path

from reshuffle.attacks import register_attack
from reshuffle.attacks.simple import SignFlip


@register_attack("flaky")
class Flaky(SignFlip):
    """Sign flipping that raises while the marker file exists."""

    def __call__(self, observed, m, rng):
        if Path(os.environ["GRID_FLAKY_MARKER"]).exists():
            raise RuntimeError("flaky attack refused")
        return super().__call__(observed, m, rng)
'''


def _grid(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "OMP_NUM_THREADS": "1",
           "GRID_FLAKY_MARKER": str(tmp_path / "marker")}
    cmd = [sys.executable, "-m", "reshuffle.cli", "grid", "--config", str(tmp_path / "grid.toml"),
           "--out", str(tmp_path / "out"), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def _mtimes(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.glob("cells/**/*.json")}


def test_tiny_grid_runs_resumes_and_retries_failed_cells(tmp_path):
    # Prepare: a plugin attack that fails while a marker exists; 2 attacks × 2 rules × 1 seed (+ the clean run)
    (tmp_path / "grid_flaky_plugin.py").write_text(PLUGIN)
    (tmp_path / "grid.toml").write_text(textwrap.dedent('''
        datasets = ["digits"]
        partitions = ["iid"]
        models = ["logreg"]
        attacks = ["sign-flip", "flaky"]
        rules = ["fedavg", "multi-krum"]
        seeds = [1]
        plugins = ["grid_flaky_plugin"]
        [base]
        rounds = 2
        clients = 10
    '''))
    (tmp_path / "marker").touch()
    out = tmp_path / "out"
    docs = tmp_path / "results.md"
    docs.write_text("# Results\n\n" + "\n".join(docs_markers("out")) + "\n\nHand-written.\n")
    # A docs file without the grid's markers is refused before any cell runs
    (tmp_path / "other.md").write_text("# Other\n" + "\n".join(docs_markers("grid")) + "\n")
    refused = _grid(tmp_path, "--quiet", "--docs", str(tmp_path / "other.md"))
    assert refused.returncode == 2 and "<!-- grid:begin out -->" in refused.stderr and not out.exists()
    # A slice summarised as the configuration must stay inside it: a partition it does not hold is refused
    outside = _grid(tmp_path, "--quiet", "--partitions", "dirichlet:0.5")
    assert outside.returncode == 2 and "cells outside" in outside.stderr and "digits-dir0.5-logreg" in outside.stderr
    assert not out.exists()

    # Execute: stop after 3 of the 6 cells, on two worker processes, keeping the docs section current
    first = _grid(tmp_path, "--jobs", "2", "--max-cells", "3", "--quiet", "--attacks", "sign-flip",
                  "--docs", str(docs))
    # Assert: 3 cells of the slice stored, the summary written: the configuration's whole grid, not the slice
    assert first.returncode == 0, first.stderr
    assert "ran 3 cells (0 failed)" in first.stdout
    done = _mtimes(out)
    assert len(done) == 3 and not any("flaky" in k for k in done)
    for name in ("summary.md", "worst_case.md", "summary.json"):
        assert (out / name).is_file()
    first_summary = json.loads((out / "summary.json").read_text())
    assert first_summary["counts"]["total"] == 6 and first_summary["grid"]["config"] == str(tmp_path / "grid.toml")
    text = docs.read_text()
    assert "## The out grid" in text and "| done | 3 |" in text and text.endswith("Hand-written.\n")
    assert f"`reshuffle grid --config {tmp_path / 'grid.toml'} --out {out}` runs the cells" in text

    # Execute: the rest; the flaky cells raise
    second = _grid(tmp_path, "--jobs", "1", "--quiet")
    # Assert: only the 3 missing cells ran; finished ones untouched; failures recorded, not fatal
    assert second.returncode == 0, second.stderr
    assert "ran 3 cells (2 failed)" in second.stdout
    after = _mtimes(out)
    assert {k: after[k] for k in done} == done and len(after) == 6
    failed = json.loads((out / "cells/digits/iid/logreg/flaky__multi-krum__s1.json").read_text())
    assert failed["status"] == "failed" and "RuntimeError: flaky attack refused" in failed["error"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"total": 6, "done": 4, "failed": 2, "missing": 0}
    assert "## Failed cells (2; run again to retry)" in (out / "summary.md").read_text()

    # Execute: the cause is gone; run again
    (tmp_path / "marker").unlink()
    third = _grid(tmp_path, "--jobs", "1", "--quiet")
    # Assert: only the two failed cells ran again, and now finished
    assert third.returncode == 0, third.stderr
    assert "ran 2 cells (0 failed)" in third.stdout
    final = _mtimes(out)
    changed = {k for k in final if final[k] != after[k]}
    assert changed == {"cells/digits/iid/logreg/flaky__fedavg__s1.json",
                       "cells/digits/iid/logreg/flaky__multi-krum__s1.json"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["done"] == 6
    cell = json.loads((out / "cells/digits/iid/logreg/sign-flip__multi-krum__s1.json").read_text())
    assert cell["config"]["rounds"] == 2 and len(cell["rounds"]) == 2
    assert cell["final_accuracy"] == cell["rounds"][-1]["accuracy"]
    assert (out / "heatmap_digits-iid-logreg.png").is_file()
    assert "| rule | digits-iid-logreg |" in (out / "worst_case.md").read_text()


def test_docs_section_is_replaced_between_the_markers(tmp_path):
    # Prepare: a summary.json and a docs file with text around the markers
    out = tmp_path / "grid"
    out.mkdir()
    summary = {"generated": "2026-01-01 00:00", "settings": ["digits-iid-logreg"], "settings_not_run": [],
               "grid": {"datasets": ["digits"], "partitions": ["iid"], "models": ["logreg"], "attacks": ["none"],
                        "rules": ["fedavg"], "seeds": [1], "base": {"rounds": 2}, "skipped_rules": []},
               "shown": {"attacks": ["none"], "rules": ["fedavg"]},
               "counts": {"total": 1, "done": 1, "failed": 0, "missing": 0},
               "cost": {"core_seconds": 1.0, "core_seconds_failed": 0.0, "cells_measured": 1,
                        "mean_cell_seconds": 1.0,
                        "per_setting": {"digits-iid-logreg": {"cells": 1, "mean": 1.0, "min": 1.0, "max": 1.0}},
                        "remaining_cells": 0, "unmeasured_cells": 0, "remaining_core_hours": 0.0,
                        "total_core_hours": 1 / 3600},
               "cells": [{"setting": "digits-iid-logreg", "attack": "none", "rule": "fedavg", "backdoor": False,
                          "seeds_done": [1], "missing_seeds": [], "failed": [],
                          "accuracy": {"mean": 0.9, "min": 0.9, "max": 0.9, "n": 1}, "attack_success": None,
                          "tpr": None, "fpr": {"mean": 0.0, "min": 0.0, "max": 0.0, "n": 1},
                          "drop": {"mean": 0.0, "min": 0.0, "max": 0.0, "n": 1}, "drop_by_seed": {"1": 0.0},
                          "impact": None, "harmless": None, "diverged": 0, "cpu_seconds": {"1": 1.0}}],
               "worst_case": [{"setting": "digits-iid-logreg", "rule": "fedavg",
                               "worst_drop": {"value": 0.0, "attack": "none"},
                               "worst_drop_seed": {"value": 0.0, "attack": "none", "seed": 1},
                               "worst_backdoor": None, "clean_fpr": 0.0, "cells_not_done": 0,
                               "checks": {"backdoor": True, "accuracy": True, "clean_fpr": True}, "goal_met": True}],
               "goal": {"backdoor_max": 0.05, "drop_max_points": 2.0, "clean_fpr_max": 0.1, "harmless_points": 1.0}}
    (out / "summary.json").write_text(json.dumps(summary))
    docs = tmp_path / "results.md"
    DOCS_BEGIN, DOCS_END = docs_markers("grid")
    other = "\n".join(docs_markers("framing"))  # another grid's section, left alone
    docs.write_text(f"# Results\n\nBefore.\n\n{DOCS_BEGIN}\nold hand-written table\n{DOCS_END}\n\nAfter.\n{other}\n")
    # Execute
    update_docs(docs, out)
    text = docs.read_text()
    # Assert: the old section is gone, the generated one holds the summary's numbers, the rest is unchanged
    assert "old hand-written table" not in text
    assert text.startswith("# Results\n\nBefore.\n\n" + DOCS_BEGIN) and text.endswith(DOCS_END + f"\n\nAfter.\n{other}\n")
    assert "## The decision grid" in text
    assert "| none (clean) | 90.0 |" in text and "| fedavg | met |" in text
    assert "| digits-iid-logreg | 1 | 1.0 [1.0–1.0] |" in text
    # The commands it gives name the grid's rules (else they would run the default grid's rules too)
    assert f"`reshuffle grid --out {out} --rules fedavg` runs the cells" in text
    # Execute again: regenerating is stable
    update_docs(docs, out)
    assert docs.read_text() == text
    # A grid of the default rules needs no --rules
    summary["grid"]["rules"] = list(DEFAULT_RULES)
    (out / "summary.json").write_text(json.dumps(summary))
    update_docs(docs, out)
    assert f"`reshuffle grid --out {out}` runs the cells" in docs.read_text()
    # A grid read from a configuration file is named by it
    summary["grid"]["config"] = "experiments/configs/x.toml"
    (out / "summary.json").write_text(json.dumps(summary))
    update_docs(docs, out)
    assert f"`reshuffle grid --config experiments/configs/x.toml --out {out}` runs the cells" in docs.read_text()
    # The brief markers get one table of each rule's worst cases
    brief_begin, _ = docs_markers("grid", brief=True)
    docs.write_text(f"# Readme\n{brief_begin}\nold\n{DOCS_END}\nAfter.\n")
    update_docs(docs, out)
    text = docs.read_text()
    assert "old" not in text and text.endswith(f"{DOCS_END}\nAfter.\n") and "## " not in text
    assert "| fedavg | digits-iid-logreg | – | 0.0 (none) | – | 0.000 | met |" in text
    assert "1 of 1 cells done, 0.0 CPU-hours in all;" in text  # a complete grid's cost is not "so far"
    # Both kinds of markers for one grid, or none, are refused with the reason
    docs.write_text(f"{DOCS_BEGIN}\n{brief_begin}\n{DOCS_END}\n")
    with pytest.raises(ConfigError, match="grid:begin"):
        update_docs(docs, out)
    docs.write_text("# Results\n")
    with pytest.raises(ConfigError, match="grid:begin"):
        update_docs(docs, out)
