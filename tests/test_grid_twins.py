"""A long-horizon cell and its base-horizon twin come from one run: the twin's record is the one a run of the
base horizon gives, and the long run is unchanged by taking it (timings aside)."""

import json

import pytest

from reshuffle.evaluation.backends import InlineBackend
from reshuffle.evaluation.cell import SHORT_RECORD, run_cell
from reshuffle.evaluation.grid import Cell, Grid, Partition, Setting
from reshuffle.evaluation.runner import _cell_id, run_grid, short_twins
from reshuffle.evaluation.summary import cost, load_records

SETTING = Setting("digits", Partition("dirichlet", 0.5), "logreg")
# A backdoor (so the long horizon runs) against a rule with a per-pseudonym history, and the clean run.
GRID = Grid(datasets=("digits",), partitions=(Partition("dirichlet", 0.5),), models=("logreg",),
            attacks=("slow-drift",), rules=("hammer-anvil",), seeds=(3,), long_rounds=5, long_rules=("hammer-anvil",),
            base=(("clients", 10), ("malicious", 0.2), ("rounds", 3), ("eval_subset", 100)))
TIMING = {"wall_seconds", "cpu_seconds", "host", "shared_with"}


def _comparable(rec: dict) -> dict:
    out = {k: v for k, v in rec.items() if k not in TIMING}
    out["rounds"] = [{k: v for k, v in r.items() if k != "seconds"} for r in rec["rounds"]]
    return json.loads(json.dumps(out))


def test_one_run_gives_the_long_cell_and_its_twin_as_separate_runs_do(tmp_path):
    cells = GRID.cells()
    twins = short_twins(GRID, cells, None)
    longs = [c for c in cells if c.rounds == 5]
    assert set(twins) == set(longs) and all(c.base_twin == Cell(c.setting, c.attack, c.rule, c.seed) and r == 3
                                            for c, r in twins.items())
    res = run_grid(GRID, tmp_path, InlineBackend(), quiet=True)
    assert res.ran == len(cells) and res.failed == 0
    got = load_records(cells, tmp_path)
    for long in twins:
        short = long.base_twin
        derived = got[short]
        assert derived["shared_with"] == 5 and derived["config"]["rounds"] == 3 and len(derived["rounds"]) == 3
        alone = run_cell(GRID.cell_settings(short), _cell_id(short))
        assert _comparable(derived) == _comparable(alone)
        # The long run is the same with or without the twin's record taken on the way.
        alone_long = run_cell(GRID.cell_settings(long), _cell_id(long))
        assert SHORT_RECORD not in got[long] and _comparable(got[long]) == _comparable(alone_long)
    # The twins' CPU is inside their long runs': counted once, in what was spent and in the whole grid's cost.
    spent = cost(got)
    assert spent["core_seconds"] == sum(r["cpu_seconds"] for c, r in got.items() if c not in
                                        {c.base_twin for c in twins})
    assert spent["remaining_core_hours"] == 0 and spent["total_core_hours"] * 3600 == pytest.approx(spent["core_seconds"])
