"""docs/results.md's table of models and rounds lost to dropouts with stable sets is generated, on the real channel,
by the command it prints (experiments/stable_sets_cost.py --shuffle real), from the results committed beside it."""

import importlib.util
import json
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "stable_sets" / "results-real.json"


def _script():
    spec = importlib.util.spec_from_file_location("stable_sets_cost", ROOT / "experiments" / "stable_sets_cost.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_loss_table_is_the_real_channel_runs_table_and_its_command_exists():
    script = _script()
    data = json.loads(RESULTS.read_text())
    docs = (ROOT / "docs" / "results.md").read_text()
    assert data["shuffle"] == "real"
    # The docs print the command that made the table, and the script takes it.
    assert f"`{data['command']}`" in docs
    argv = shlex.split(data["command"])
    assert argv[:2] == ["python", "experiments/stable_sets_cost.py"]
    args = script.parser().parse_args(argv[2:])
    assert args.shuffle == "real" and args.rounds == data["rounds"] and args.seeds == []
    # The table is the script's rendering of those results, line for line.
    for line in script.loss_table(data).splitlines():
        assert line in docs, line
    # Every cell of the grid was measured; no model of a stable set was lost unless a member of its set dropped
    # in that round (without sets a round below the Shamir-shared round's threshold loses every model).
    assert len(data["losses"]) == len(script.POPULATIONS) * len(script.SIZES) * len(script.RATES)
    assert all(r["lost_unexplained"] == 0 for r in data["losses"] if r["set_size"])


def test_the_real_channel_cell_counts_every_model_of_the_cohort():
    # Two real rounds of one cell: the counts the table is made of add up.
    r = _script().losses(20, 1.0, 5, 0.1, 2, shuffle="real")
    assert r["models"] == 40 and r["shuffle"] == "real"
    assert r["delivered"] + r["lost_to_sets"] + r["lost_own_dropout"] == r["models"]
    assert r["lost_unexplained"] == 0
