"""Results are never lost or silently changed: output folders, provenance, resume, extension, Ctrl-C.

A checkpoint is data someone may hand over: resuming one never imports a module
or reads a path it names. The plug-ins come from the command line again and must
match the hashes the run recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reshuffle.cli import main
from reshuffle.run import checkpoint

RUN = ["--dataset", "digits", "--model", "logreg", "--clients", "4", "--set-size", "4", "--shuffle", "none", "--quiet"]

PLUGIN = '''
import numpy as np
from reshuffle.server.rules import Rule, register_rule


@register_rule("{name}")
class Halved(Rule):
    def decide(self, updates, *, round=0):
        from reshuffle.server.rules import Decision
        d = Decision.mean_of(np.asarray(updates, float), range(len(updates)))
        return Decision(d.aggregate * {factor}, d.accepted, d.weights)
'''


def _simulate(*args: str) -> int:
    return main(["simulate", *RUN, *args])


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def _plugin(folder: Path, module: str, factor: float = 0.5) -> str:
    (folder / f"{module}.py").write_text(PLUGIN.format(name=module.replace("_", "-"), factor=factor))
    return module


# --------------------------------------------------------------------------- output folders
def test_out_refuses_a_folder_holding_a_run_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    assert _simulate("--rounds", "1", "--out", str(out)) == 0
    first = (out / "metrics.json").read_bytes()
    # Execute: another run into the same folder
    assert _simulate("--rounds", "2", "--seed", "1", "--out", str(out)) == 2
    # Assert: refused, naming the way out, and the first run's results untouched
    err = capsys.readouterr().err
    assert f"{out} holds a run (metrics.json, metrics.csv, checkpoint.npz" in err and "--overwrite" in err
    assert (out / "metrics.json").read_bytes() == first
    assert _simulate("--rounds", "2", "--seed", "1", "--out", str(out), "--overwrite") == 0
    assert _metrics(out)["rounds_run"] == 2 and checkpoint.load(out).round == 2


def test_metrics_record_version_commit_and_plugin_hashes(tmp_path, monkeypatch):
    import hashlib

    import reshuffle

    monkeypatch.chdir(tmp_path)
    name = _plugin(tmp_path, "halved_rule_a")
    assert _simulate("--rounds", "1", "--plugin", name, "--rule", "halved-rule-a", "--out", "run") == 0
    p = _metrics(tmp_path / "run")["provenance"]
    assert p["reshuffle_version"] == reshuffle.__version__
    assert p["git_commit"] is not None and len(p["git_commit"]) == 40  # this checkout is a git repository
    data = (tmp_path / f"{name}.py").read_bytes()
    want = hashlib.sha256(b"reshuffle/plugin-source/v1\0" + f"{name}.py\0{len(data)}\0".encode() + data).hexdigest()
    assert p["plugins"] == {name: want}


# --------------------------------------------------------------------------- resume
def _crafted_checkpoint(folder: Path, tmp_path: Path, **config) -> None:
    """A finished run's checkpoint whose settings were rewritten (the recorded hash recomputed)."""
    assert _simulate("--rounds", "1", "--out", str(folder)) == 0
    ck = checkpoint.load(folder)
    checkpoint.save(folder, checkpoint.Checkpoint(ck.kind, ck.round, {**ck.config, **config}, ck.arrays,
                                                  {**ck.state, "plugins": {m: "0" * 64 for m in
                                                                           config.get("plugins", [])}}))


def test_resume_never_imports_a_module_a_checkpoint_names(tmp_path, monkeypatch, capsys):
    # The attack: a checkpoint whose plug-in list names a module that runs code when imported, placed
    # where an import would find it (the current folder).
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "owned"
    (tmp_path / "evil_plugin.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    _crafted_checkpoint(tmp_path / "run", tmp_path, plugins=["evil_plugin"], rounds=3)
    # Execute
    assert main(["simulate", "--resume", "run", "--quiet"]) == 2
    # Assert: refused, naming the plug-in the command line lacks, and the module never ran
    assert "missing: --plugin evil_plugin" in capsys.readouterr().err
    assert not marker.exists()


def test_resume_never_reads_a_data_folder_a_checkpoint_names(tmp_path, monkeypatch):
    from reshuffle.sim import simulator

    crafted = str(tmp_path / "crafted")
    _crafted_checkpoint(tmp_path / "run", tmp_path, dataset="mnist", data_dir=crafted)
    read: list = []

    def load_dataset(name, data_dir=None):
        read.append(data_dir)
        raise SystemExit("stop here")
    monkeypatch.setattr(simulator, "load_dataset", load_dataset)
    with pytest.raises(SystemExit):
        main(["simulate", "--resume", str(tmp_path / "run"), "--quiet"])
    assert read == [None]  # the default folder (or --data-dir), never the checkpoint's


def test_resume_refuses_a_changed_missing_or_extra_plugin(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name, other = _plugin(tmp_path, "halved_rule_b"), _plugin(tmp_path, "halved_rule_c")
    assert _simulate("--rounds", "1", "--plugin", name, "--rule", "halved-rule-b", "--out", "run") == 0
    # A plug-in edited after the run: refused, and named as changed
    _plugin(tmp_path, name, factor=0.25)
    assert main(["simulate", "--resume", "run", "--rounds", "2", "--plugin", name, "--quiet"]) == 2
    assert f"changed: {name}" in capsys.readouterr().err
    _plugin(tmp_path, name)  # as it was
    assert main(["simulate", "--resume", "run", "--rounds", "2", "--plugin", name, "--plugin", other,
                 "--quiet"]) == 2
    assert f"extra: {other}" in capsys.readouterr().err
    assert main(["simulate", "--resume", "run", "--rounds", "2", "--plugin", name, "--quiet"]) == 0
    assert checkpoint.load(tmp_path / "run").round == 2


def test_a_finished_run_extended_with_rounds_equals_the_longer_run(tmp_path):
    # Adam's moments and W_g carry over: 2 rounds, then --resume --rounds 4, equals 4 rounds straight.
    opts = ("--server-opt", "adam", "--attack", "sign-flip", "--malicious", "0.25", "--rule", "median")
    assert _simulate("--rounds", "2", *opts, "--out", str(tmp_path / "short")) == 0
    assert main(["simulate", "--resume", str(tmp_path / "short"), "--rounds", "4", "--quiet"]) == 0
    assert _simulate("--rounds", "4", *opts, "--out", str(tmp_path / "long")) == 0
    a, b = checkpoint.load(tmp_path / "short"), checkpoint.load(tmp_path / "long")
    assert a.round == b.round == 4 and a.arrays.keys() == b.arrays.keys() >= {"global_model", "opt.m", "opt.v"}
    assert all(a.arrays[k].tobytes() == b.arrays[k].tobytes() for k in a.arrays)
    ma, mb = _metrics(tmp_path / "short"), _metrics(tmp_path / "long")
    assert ma["config"]["rounds"] == 4 and [r["round"] for r in ma["rounds"]] == [1, 2, 3, 4]
    assert [r["accuracy"] for r in ma["rounds"]] == [r["accuracy"] for r in mb["rounds"]]
    assert main(["simulate", "--resume", str(tmp_path / "short"), "--rounds", "3", "--quiet"]) == 2


def test_ctrl_c_says_how_to_resume(tmp_path, monkeypatch, capsys):
    from reshuffle.sim.simulator import Simulation

    step = Simulation.step

    def interrupted_in_round_3(self):
        if self.rounds.round == 2:
            raise KeyboardInterrupt
        return step(self)
    monkeypatch.setattr(Simulation, "step", interrupted_in_round_3)
    out = tmp_path / "run"
    assert _simulate("--rounds", "5", "--out", str(out)) == 130
    err = capsys.readouterr().err
    assert f"interrupted after round 2 of 5; continue with:\n  reshuffle simulate --resume {out}" in err
    monkeypatch.setattr(Simulation, "step", step)
    assert main(["simulate", "--resume", str(out), "--quiet"]) == 0
    assert checkpoint.load(out).round == 5
