"""The small frictions a new user meets: help text, plots, grid summaries, `make flower`'s output, plug-in errors."""

from __future__ import annotations

import json
import re

import pytest

from flower_helpers import ROOT
from reshuffle.cli import main
from reshuffle.errors import ConfigError


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
    from reshuffle.flower.flwr_private import parse_federation_config_overrides, read_superlink_connection

    monkeypatch.setenv("FLWR_HOME", str(ROOT / "flower"))
    conn = read_superlink_connection()
    assert conn.address == ":local:" and conn.options is None
    sim = parse_federation_config_overrides([_make_flower_federation_config()], conn)
    assert sim.num_supernodes == 10 and sim.client_resources_num_cpus == 1
    assert "deprecated" not in capsys.readouterr().out


def test_make_flower_output_has_no_colour_codes_off_a_terminal_and_no_contradicting_sizes():
    from reshuffle.flower.app.local import clean

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


# ------------------------------------------------------------- the Flower apps refuse impossible runs
@pytest.mark.parametrize("config,message", [
    ({"rule": "nosuch"}, "unknown rule 'nosuch'; choose one of"),
    ({"rounds": -1}, "rounds must be a positive int, got -1"),
    ({"fraction": 1.5}, "fraction must be a number in (0, 1], got 1.5"),
    ({"resume": "no-such-run"}, "resume = 'no-such-run': no such folder"),
])
def test_the_server_app_refuses_an_impossible_run_in_one_line_before_any_message(config, message, tmp_path,
                                                                                 monkeypatch, capsys):
    from flwr.app import Context, RecordDict

    from flower_helpers import LoopbackGrid
    from reshuffle.flower.app import client_app, server_app

    monkeypatch.chdir(tmp_path)
    lg = LoopbackGrid(client_app.app, 2)
    run_config = {"dataset": "digits", "model": "logreg", "out-dir": str(tmp_path / "out"), **config}
    # Execute
    with pytest.raises(server_app.RunRefused) as refused:
        server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=run_config))
    # Assert: one line says why; the exception carries no chain for Flower's log; nothing went out
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("reshuffle: error: ") and message in err
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
    assert lg.sent == []


# What `flwr run --stream` shows of a local simulation whose ServerApp refused its settings (flwr 1.41; paths cut).
REFUSED_RUN = """\
Successfully started run 1537
\x1b[92mINFO \x1b[0m:      Starting Flower Simulation
\x1b[91mERROR \x1b[0m:     ClientApp raised an exception
reshuffle: error: unknown rule 'nosuch'; choose one of fedavg, krum
\x1b[91mERROR \x1b[0m:     Simulation raised an exception
Traceback (most recent call last):
  File "flwr/simulation/app.py", line 337, in run_simulation_process
    simulation_result = _run_simulation(
  File "reshuffle/flower/app/server_app.py", line 234, in main
    raise RunRefused(str(exc)) from None
reshuffle.flower.app.server_app.RunRefused: unknown rule 'nosuch'; choose one of fedavg, krum
\x1b[91mERROR \x1b[0m:     Exit Code: 700

An unhandled exception occurred when running the simulation.

For more information, visit: <https://flower.ai/docs/framework/1.41/en/ref-exit-codes/700.html>
"""


def test_make_flower_shows_a_refused_run_as_its_one_line_and_fails():
    from reshuffle.flower.app.local import RunOutput

    stream = RunOutput(colour=False)
    shown = [x for x in map(stream.feed, REFUSED_RUN.splitlines(keepends=True)) if x is not None]
    assert shown == ["Successfully started run 1537\n", "INFO :      Starting Flower Simulation\n",
                     "ERROR :     ClientApp raised an exception\n",
                     "reshuffle: error: unknown rule 'nosuch'; choose one of fedavg, krum\n"]
    assert stream.failed
    # A node's failure is not the run's; any other ServerApp failure keeps Flower's traceback
    ok = RunOutput(colour=False)
    assert [ok.feed(line) for line in REFUSED_RUN.splitlines(keepends=True)[:3]] and not ok.failed
    crash = RunOutput(colour=False)
    lines = [crash.feed(line) for line in ["\x1b[91mERROR \x1b[0m:     ServerApp raised an exception\n",
                                           "Traceback (most recent call last):\n", "ZeroDivisionError: x\n",
                                           "\x1b[91mERROR \x1b[0m:     Exit Code: 700\n"]]
    assert crash.failed and lines[:3] == [None, None, None]
    assert lines[3] == ("ERROR :     ServerApp raised an exception\nTraceback (most recent call last):\n"
                        "ZeroDivisionError: x\nERROR :     Exit Code: 700\n")


# What `flwr run --stream` shows when the drop-in's ServerApp raises one of the project's errors (flwr 1.41).
PROJECT_ERROR_RUN = """\
\x1b[92mINFO \x1b[0m:      Starting Flower Simulation
\x1b[91mERROR \x1b[0m:     Simulation raised an exception
Traceback (most recent call last):
  File "flwr/simulation/app.py", line 337, in run_simulation_process
    simulation_result = _run_simulation(
  File "dropin/server_app.py", line 37, in main
    raise ConfigError(f"strategy {name!r}: this app runs 'multikrum' or 'bulyan'")
reshuffle.errors.ConfigError: strategy 'nosuch': this app runs 'multikrum' or 'bulyan'
\x1b[91mERROR \x1b[0m:     Exit Code: 700

An unhandled exception occurred when running the simulation.

For more information, visit: <https://flower.ai/docs/framework/1.41/en/ref-exit-codes/700.html>
"""


@pytest.mark.parametrize("ends_with_note", [True, False])
def test_a_project_error_in_any_server_app_is_its_one_line(ends_with_note):
    from reshuffle.flower.app.local import RunOutput

    text = PROJECT_ERROR_RUN if ends_with_note else PROJECT_ERROR_RUN.split("\x1b[91mERROR \x1b[0m:     Exit")[0]
    stream = RunOutput(colour=False)
    shown = [x for x in map(stream.feed, text.splitlines(keepends=True)) if x is not None] + [stream.close()]
    assert "".join(shown) == ("INFO :      Starting Flower Simulation\n"
                              "reshuffle: error: strategy 'nosuch': this app runs 'multikrum' or 'bulyan'\n")
    assert stream.failed


def test_an_unknown_run_config_key_is_named_before_flwr_runs(tmp_path, capsys):
    from reshuffle.flower.app.local import run_filtered, unknown_run_config

    example = ROOT / "examples" / "flower-dropin"
    # Flower's SuperLink refuses it as "[code: 15] Invalid run configuration.", naming no key
    assert run_filtered(["flwr", "run", str(example), "--stream", "--run-config", "strategy='bulyan' rounds=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("reshuffle: error: --run-config: unknown key 'rounds'; ")
    assert "num-server-rounds" in err
    assert unknown_run_config(["flwr", "run", str(example), "-c", "strategy='bulyan' num-server-rounds=1"]) is None
    assert unknown_run_config(["flwr", "run", str(ROOT), "--run-config=nosuch=1"]) is not None  # the project's app
    assert unknown_run_config(["flwr", "ls"]) is None


def test_make_flower_exits_non_zero_when_the_run_failed(tmp_path):
    import sys

    from reshuffle.flower.app.local import run_filtered

    # `flwr run --stream` exits 0 whatever became of the run; a stand-in prints a refused run's stream
    fake = tmp_path / "flwr_run.py"
    fake.write_text(f"import sys\nsys.stdout.write({REFUSED_RUN!r})\n")
    assert run_filtered([sys.executable, str(fake)]) == 1
    fine = tmp_path / "flwr_ok.py"
    fine.write_text("print('Successfully started run 1')\n")
    assert run_filtered([sys.executable, str(fine)]) == 0


def test_the_dropin_refuses_a_strategy_it_does_not_run(monkeypatch, tmp_path):
    from flwr.app import Context, RecordDict

    from flower_helpers import LoopbackGrid

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "flower-dropin"))
    monkeypatch.chdir(tmp_path)
    from dropin import client_app, server_app

    cfg = {"num-server-rounds": 1, "fraction-train": 1.0, "local-epochs": 1, "lr": 0.1, "strategy": "nosuch",
           "num-malicious-nodes": 1}
    lg = LoopbackGrid(client_app.app, 4)
    with pytest.raises(ConfigError, match="strategy 'nosuch': this app runs 'multikrum' or 'bulyan'"):
        server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    assert lg.sent == []  # refused before any round (it used to run MultiKrum)


# ---------------------------------------------------------------------- simulate's settings and plug-ins
def test_a_rules_f_in_its_options_is_refused_in_one_line(tmp_path, capsys):
    cfg = tmp_path / "krum.toml"
    cfg.write_text('rounds = 1\nclients = 8\nrule = "krum"\nshuffle = "none"\n[rule_options]\nf = 2\n')
    # It used to crash: TypeError: make_rule() got multiple values for argument 'f'
    assert main(["simulate", "--config", str(cfg), "--quiet", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "set f = 2 at the top level (--f 2)" in err


def test_a_plugin_model_with_the_wrong_number_of_outputs_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wide_model.py").write_text(
        "from torch import nn\nfrom reshuffle.clients import register_model\n\n"
        "@register_model('wide')\n"
        "def wide(input_shape, num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, 7))\n")
    assert main(["simulate", "--plugin", "wide_model", "--model", "wide", "--rounds", "1", "--shuffle", "none",
                 "--quiet", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model 'wide' outputs 7 values per sample" in err
    assert "dataset 'digits' has 10 classes" in err


def test_batchnorm_statistics_stay_valid_under_server_momentum_and_a_large_step(monkeypatch):
    import numpy as np

    from reshuffle.run.config import SimConfig
    from reshuffle.sim.simulator import Simulation

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "byo"))
    __import__("byo_plugin")
    sim = Simulation(SimConfig(dataset="blobs", model="bn-cnn", clients=4, set_size=4, rounds=4, shuffle="none",
                               rule="fedavg",
                               batch_size=32, server_opt="momentum", server_lr=2.0))
    layout = sim.training.layout
    var = np.concatenate([np.full(int(np.prod(s)), n.endswith("running_var")) for n, s in zip(layout.names,
                                                                                            layout.shapes)])
    lowest: list[float] = []
    # Execute
    records = sim.run(lambda rec: lowest.append(float(sim.W_g[var].min())))
    # Assert: the running variances are each round's mean of the clients' (the momentum step overshot them
    # to -0.25 in round 2 before) ...
    assert var.any() and min(lowest) > 0
    # ... so the model does not "diverge" for no reason, and it learns
    assert not any(r.diverged for r in records) and records[-1].accuracy > 0.5


def test_the_detection_plot_shows_the_attackers_weight_share(tmp_path, monkeypatch):
    # `default` flags no row, it bounds them: TPR and FPR are flat at 0, the attackers' share is what moves.
    import matplotlib.axes

    from reshuffle.run.report import write_outputs

    drawn: dict[str, list] = {}
    plot = matplotlib.axes.Axes.plot

    def record(self, xs, ys, *args, label=None, **kwargs):
        drawn[label] = list(ys)
        return plot(self, xs, ys, *args, label=label, **kwargs)
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", record)
    rounds = [{"round": T, "accuracy": 0.9, "attack_success": 0.01, "tpr": 0.0, "fpr": 0.0, "malicious_share": share,
               "models_received": 10, "models_accepted": 10, "bytes": {}, "seconds": {"detection": 0.1}}
              for T, share in ((1, 0.08), (2, 0.17))]
    write_outputs(tmp_path, {"rounds": rounds})
    assert drawn["attackers' share of the weight"] == [0.08, 0.17]
    assert drawn["TPR (malicious flagged)"] == drawn["FPR (honest flagged)"] == [0.0, 0.0]
    assert (tmp_path / "detection.png").stat().st_size > 0
