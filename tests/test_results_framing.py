"""docs/results.md's framing-grid section and the README's brief one are the renderings of the framing grid's
committed summary, and that summary covers the whole configuration (not a slice that ran last)."""

from pathlib import Path

from reshuffle.evaluation.grid import default_grid, load_grid_toml
from reshuffle.evaluation.report import brief_section, docs_section

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "experiments/configs/framing-grid.toml"
OUT = Path("experiments/evaluation/framing")


def test_the_docs_framing_section_is_generated_from_the_committed_summary(monkeypatch):
    import json

    monkeypatch.chdir(ROOT)  # the section names its paths relative to the repository, as the command writes them
    summary = json.loads((OUT / "summary.json").read_text())
    assert summary["grid"]["config"] == CONFIG
    assert summary["counts"]["total"] == len(load_grid_toml(CONFIG, default_grid()).cells())
    section = docs_section(summary, OUT, Path("docs/results.md"))
    assert section in (ROOT / "docs" / "results.md").read_text()
    assert brief_section(summary, OUT, Path("README.md")) in (ROOT / "README.md").read_text()


def test_the_default_rule_is_the_complete_framing_grids_choice():
    import json

    import pytest

    from reshuffle.server.rules import DEFAULT_RULE

    choice = json.loads((ROOT / OUT / "summary.json").read_text())["choice"]
    ranked = [r["rule"] for r in choice["ranking"]]
    assert choice["rule"] == ranked[0] and DEFAULT_RULE in ranked  # the default is one of the rules it ranks
    if not choice["complete"]:
        pytest.skip(f"the framing grid is not complete; `default` ({DEFAULT_RULE}) follows its choice once it is")
    assert DEFAULT_RULE == choice["rule"], f"the complete framing grid chooses {choice['rule']}, not {DEFAULT_RULE}"
