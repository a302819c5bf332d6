"""The small frictions a new user meets: help text, plots, grid summaries, `make flower`'s output, plug-in errors."""

from __future__ import annotations

import json
import re

import pytest

from flower_helpers import ROOT
from reshuffle.cli import main


def test_simulate_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for option, default in (("--rounds ROUNDS number of rounds", "20"), ("--clients CLIENTS number of clients N", "10"),
                            ("--shuffle SHUFFLE", "real"), ("--server-opt SERVER_OPT", "sgd"),
                            ("--fraction FRACTION", "1.0")):
        assert re.search(re.escape(option) + r"[^-]*\(default: " + re.escape(default) + r"\)", text), option


def test_time_plot_stacks_each_phase_once(tmp_path, monkeypatch):
    # `training_total` sums every client's training, `training` is one client's: stacking both counts it twice.
    import matplotlib.axes

    from reshuffle.run.report import write_outputs

    stacked: list[str] = []
    bar = matplotlib.axes.Axes.bar

    def record(self, *args, label=None, **kwargs):
        stacked.append(label)
        return bar(self, *args, label=label, **kwargs)
    monkeypatch.setattr(matplotlib.axes.Axes, "bar", record)
    rnd = {"round": 1, "accuracy": 0.5, "attack_success": None, "tpr": None, "fpr": 0.0, "models_received": 4,
           "models_accepted": 4, "bytes": {}, "seconds": {"training": 1.0, "training_total": 4.0, "shuffle": 0.5,
                                                          "detection": 0.1, "evaluation": 0.2}}
    write_outputs(tmp_path, {"rounds": [rnd]})
    assert sorted(stacked) == ["detection", "evaluation", "shuffle", "training"]


def test_a_grid_subset_is_summarised_against_its_own_cells(tmp_path, capsys):
    out = tmp_path / "grid"
    # Execute: 2 cells of the default grid (the clean run and one attack, under FedAvg)
    assert main(["grid", "--datasets", "digits", "--partitions", "iid", "--models", "logreg", "--attacks",
                 "sign-flip", "--rules", "fedavg", "--seeds", "1", "--rounds", "1", "--jobs", "1", "--quiet",
                 "--out", str(out)]) == 0
    # Assert: counted against those 2 cells, not the default grid's
    assert "grid: 2 of 2 cells done, 0 failed" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["counts"]["total"] == 2


def test_a_plugin_with_a_syntax_error_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_rules.py").write_text("import numpy as np\n\ndef f(:\n    pass\n")
    assert main(["simulate", "--plugin", "broken_rules", "--rounds", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err and "No module named" not in err
    assert f"plugin 'broken_rules': syntax error in {tmp_path / 'broken_rules.py'}, line 3: " in err


# --------------------------------------------------------------------------- make flower
def _make_flower_federation_config() -> str:
    recipe = (ROOT / "Makefile").read_text().split("\nflower:", 1)[1].split("\n\n", 1)[0]
    return re.search(r'--federation-config "([^"]+)"', recipe).group(1)


def test_make_flower_configures_flower_without_deprecated_options(monkeypatch, capsys):
    # flwr 1.41 warns about `options.` in a SuperLink connection; the size now comes with the run.
    from flwr.cli.flower_config import read_superlink_connection
    from flwr.cli.run.run import _parse_federation_config_overrides

    monkeypatch.setenv("FLWR_HOME", str(ROOT / "flower"))
    conn = read_superlink_connection()
    assert conn.address == ":local:" and conn.options is None
    sim = _parse_federation_config_overrides([_make_flower_federation_config()], conn)
    assert sim.num_supernodes == 10 and sim.client_resources_num_cpus == 1
    assert "deprecated" not in capsys.readouterr().out


def test_make_flower_output_has_no_colour_codes_off_a_terminal_and_no_contradicting_sizes():
    from reshuffle.flower.local import clean

    lines = ["\x1b[92mINFO \x1b[0m:      Starting Flower Simulation\n",
             "\x1b[93mWARNING \x1b[0m:   Since flwr 1.32, default simulated SuperNodes changed from 10 to 2.\n",
             "\x1b[92mINFO \x1b[0m:      Federation `@none/default` (10 simulated SuperNodes)\n",
             "\x1b[92mINFO \x1b[0m:      To change federation size, use the following command:\n",
             "\x1b[92mINFO \x1b[0m:      \tflwr federation simulation-config @none/default <superlink> "
             "--num-supernodes <N>\n"]
    shown = [x for x in (clean(line, colour=False) for line in lines) if x is not None]
    assert shown == ["INFO :      Starting Flower Simulation\n",
                     "INFO :      Federation `@none/default` (10 simulated SuperNodes)\n"]
    assert clean(lines[0], colour=True) == lines[0]
