"""``reshuffle soak``: its plan and fault mod (fast), and ``soak --quick`` on a real deployment.

The quick soak and its interrupted twin start with the session, in the background
(``SoakRuns``, claimed by tests/conftest.py like the other Flower runs); the tests here
collect their results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flower_helpers import ROOT, LoopbackGrid, _Background, _read_result, _write_result
from reshuffle.errors import ConfigError
from reshuffle.flower.soak import SoakConfig, leftovers, schedule


# --------------------------------------------------------------------------- plan and fault mod
def test_soak_settings_are_validated():
    assert (SoakConfig.make(True, None, None, 0, None).rounds, SoakConfig.make(True, None, None, 0, None).nodes) == (2, 4)
    assert (SoakConfig.make(False, None, None, 0, None).rounds, SoakConfig.make(False, None, None, 0, None).nodes) == (10, 8)
    with pytest.raises(ConfigError, match="at least 2 rounds"):
        SoakConfig.make(True, 1, None, 0, None)
    with pytest.raises(ConfigError, match="at least 7 nodes"):
        SoakConfig.make(False, None, 6, 0, None)


@pytest.mark.parametrize("seed", range(5))
def test_the_fault_plan_kills_the_server_once_and_never_the_malformed_node(seed):
    cfg = SoakConfig.make(False, 10, 8, seed, None)
    plan = schedule(cfg, malformed=3)
    assert [f.kind for f in plan].count("server") == 1
    server = next(f for f in plan if f.kind == "server")
    assert 2 <= server.round <= cfg.rounds  # mid-run: after a finished round, so there is one to resume from
    assert all(f.node != 3 for f in plan if f.kind in ("kill", "pause"))
    assert {f.round for f in plan if f.kind == "kill"} == set(range(1, cfg.rounds + 1))
    assert [(f.round, f.kind, f.node, f.phase) for f in schedule(cfg, 3)] == [(f.round, f.kind, f.node, f.phase)
                                                                               for f in plan]


def test_a_node_answering_malformed_messages_is_dropped_and_the_round_goes_on():
    from reshuffle.clients import build_model, get_flat, load_dataset
    from reshuffle.flower.client_app import app
    from reshuffle.flower.common import settings
    from reshuffle.flower.server_app import collect, make_grid

    rc = {"dataset": "digits", "model": "logreg", "rounds": 1, "lr": 0.1, "phase-timeout": 5.0}
    lg = LoopbackGrid(app, 5, node_config=lambda i: {"partition-id": i, "num-partitions": 5,
                                                     **({"fault": "malformed"} if i == 4 else {})})
    for c in lg.contexts.values():
        c.run_config = dict(rc)
    s = settings(rc)
    grid = make_grid(lg, s)
    ds = load_dataset("digits")
    d = collect(grid, s, 1, get_flat(build_model("logreg", ds.input_shape, ds.num_classes, seed=0)))
    rep = grid.rounds[-1]
    assert len(d.models) == 4 and rep.roster == 5 and rep.blamed == {} and not rep.failed
    assert any("from 4: DecodeError" in e for e in rep.errors)


def test_an_unknown_fault_is_refused_naming_the_key():
    from reshuffle.flower.client_app import app

    lg = LoopbackGrid(app, 2, node_config=lambda i: {"partition-id": i, "num-partitions": 2, "fault": "slow"})
    lg.contexts[lg.node_ids[0]].run_config = {}
    from flwr.app import Message, RecordDict

    lg.push_messages([Message(RecordDict(), dst_node_id=lg.node_ids[0], message_type="train", group_id="1")])
    assert lg.errors and "node_config fault must be one of none, malformed" in lg.errors[0][1]


# --------------------------------------------------------------------------- the real soak
class SoakRuns(_Background):
    """``reshuffle soak --quick --json``, then a second quick soak interrupted with SIGINT once its nodes run.

    The second starts with SIGINT ignored, as a shell starts a command put in the background: the soak
    must stop on it all the same (without a SIGINT handler of its own it ran on, past its caller's end)."""

    def _results(self) -> list[Path]:
        return [self.dir / "quick.json", self.dir / "interrupted.json"]

    @staticmethod
    def _cmd(folder: Path, sigint_ignored: bool = False) -> list[str]:
        args = ["soak", "--quick", "--json", "--dir", str(folder)]
        if not sigint_ignored:
            return [sys.executable, "-m", "reshuffle.cli", *args]
        return [sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                "from reshuffle.cli import main; sys.exit(main(sys.argv[1:]))", *args]

    @staticmethod
    def _env() -> dict:
        return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                    OMP_NUM_THREADS="1")

    def _run(self) -> None:
        r = subprocess.run(self._cmd(self.dir / "quick"), cwd=ROOT, env=self._env(), capture_output=True, text=True,
                           timeout=1800)
        _write_result(self.dir / "quick.json", {"returncode": r.returncode, "stdout": r.stdout,
                                                "stderr": r.stderr[-6000:], "folder": str(self.dir / "quick")})
        folder = self.dir / "interrupted"
        p = subprocess.Popen(self._cmd(folder, sigint_ignored=True), cwd=ROOT, env=self._env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        ports, lines = [], []
        for line in p.stderr:  # the soak names its ports, then starts the run: interrupt it there
            lines.append(line)
            if line.startswith("soak: processes name"):
                ports = json.loads(line.rsplit("ports ", 1)[1])
                break
        os.killpg(p.pid, signal.SIGINT)
        rest = p.communicate(timeout=120)[1]
        _write_result(self.dir / "interrupted.json", {"returncode": p.returncode, "ports": ports,
                                                      "folder": str(folder), "stderr": "".join(lines) + rest[-3000:]})

    @staticmethod
    def load(workdir: Path, name: str, timeout: float = 1800) -> dict:
        return _read_result(Path(workdir) / f"{name}.json", timeout)


@pytest.fixture(scope="module")
def soak_runs(request) -> Path:
    return request.config.reshuffle_background / "SoakRuns"


def test_quick_soak_names_and_loses_nobody_honest(soak_runs):
    r = SoakRuns.load(soak_runs, "quick")
    assert r["returncode"] == 0, r["stdout"][-3000:] + r["stderr"]
    out = json.loads(r["stdout"])
    assert out["ok"] and out["resumes"] == 1 and len(out["rounds"]) == 2
    assert any("killed during" in e for e in out["events"]) and any("restarted" in e for e in out["events"])
    assert any("ServerApp killed" in e for e in out["events"])
    # The ServerApp kill interrupts a round (after its claims went out): that round is lost, never rerun.
    lost = [rnd["round"] for rnd in out["rounds"] if rnd["outcome"].startswith("W_g kept: interrupted")]
    assert len(lost) <= 1 and all(any(e.startswith(f"round {T}: ServerApp killed") for e in out["events"])
                                  for T in lost)
    for rnd in out["rounds"]:
        assert rnd["blamed"] == {} and rnd["honest_lost"] == 0 and (rnd["outcome"] == "completed"
                                                                     or rnd["round"] in lost)
    assert out["final_accuracy"] > 0.5 and abs(out["final_accuracy"] - out["fault_free_accuracy"]) < 0.15
    # nothing of it is left running: neither its own check nor ours finds a process
    assert out["left_running"] == [] and leftovers(out["folder"], out["ports"]) == []


def test_an_interrupted_soak_stops_every_process_it_started(soak_runs):
    r = SoakRuns.load(soak_runs, "interrupted")
    assert r["ports"], r["stderr"]
    assert r["returncode"] == 130, r["stderr"]
    deadline = time.monotonic() + 10  # the kernel reaps the last ones asynchronously
    while leftovers(r["folder"], r["ports"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(r["folder"], r["ports"]) == []
