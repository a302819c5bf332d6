"""``reshuffle soak``: its plan, fault mod and process records (fast), and ``soak --quick`` on a
real deployment, whole and interrupted at four points (marked ``soak``: ``make soak`` runs them,
``make test`` leaves them out).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flower_helpers import ROOT, LoopbackGrid
from reshuffle.errors import ConfigError
from reshuffle.flower.app import soak as soak_module
from reshuffle.flower.app.soak import TAG_VAR, Processes, SoakConfig, leftovers, schedule


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
    from reshuffle.flower.app.client_app import app
    from reshuffle.flower.app.common import settings
    from reshuffle.flower.app.server_app import grid_delivery, make_grid

    # Per node: in a stable group (the default) the faulty node's group would deliver nothing.
    rc = {"dataset": "digits", "model": "logreg", "rounds": 1, "lr": 0.1, "phase-timeout": 5.0, "stable-sets": False}
    lg = LoopbackGrid(app, 5, node_config=lambda i: {"partition-id": i, "num-partitions": 5,
                                                     **({"fault": "malformed"} if i == 4 else {})},
                      ungrouped=True)  # stable-sets false: the nodes opt in to ungrouped rounds
    for c in lg.contexts.values():
        c.run_config = dict(rc)
    s = settings(rc)
    grid = make_grid(lg, s)
    ds = load_dataset("digits")
    W_g = get_flat(build_model("logreg", ds.input_shape, ds.num_classes, seed=0))
    d, _, _ = grid_delivery(grid, s, 1, W_g, sorted(lg.node_ids))
    rep = grid.rounds[-1]
    assert len(d.models) == 4 and rep.roster == 5 and rep.blamed == {} and not rep.failed
    assert any("from 4: DecodeError" in e for e in rep.errors)


def test_an_unknown_fault_is_refused_naming_the_key():
    from reshuffle.flower.app.client_app import app

    lg = LoopbackGrid(app, 2, node_config=lambda i: {"partition-id": i, "num-partitions": 2, "fault": "slow"})
    lg.contexts[lg.node_ids[0]].run_config = {}
    from flwr.app import Message, RecordDict

    lg.push_messages([Message(RecordDict(), dst_node_id=lg.node_ids[0], message_type="train", group_id="1")])
    assert lg.errors and "node_config fault must be one of none, malformed" in lg.errors[0][1]


# --------------------------------------------------------------------------- process records
def _parent_of_a_detached_child(ready: Path) -> list[str]:
    """A process that starts a child in a session of its own (as a SuperLink starts its SuperExec),
    writes ``ready`` once it has, and sleeps."""
    code = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True); "
            f"open({str(ready)!r}, 'w').close(); time.sleep(600)")
    return [sys.executable, "-c", code]


def _wait_for_file(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout:.0f} s"
        time.sleep(0.02)


@pytest.fixture
def processes():
    """A :class:`Processes` with its signal gate installed (tests run in the main thread)."""
    procs = Processes()
    procs.gate.install()
    yield procs
    procs.gate.restore()
    procs.stop_all()  # whatever a failing test left


def test_a_signal_while_a_process_starts_surfaces_once_the_process_is_recorded(processes, tmp_path, monkeypatch):
    # Prepare: SIGINT delivered inside Popen, after the child exists and before it is recorded
    # (the window in which an interrupted soak used to lose its `flwr run`).
    real_popen = subprocess.Popen

    def popen_then_interrupt(*args, **kwargs):
        p = real_popen(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # its handler runs before raise_signal returns
        return p

    monkeypatch.setattr(soak_module.subprocess, "Popen", popen_then_interrupt)
    # Execute
    with pytest.raises(KeyboardInterrupt):
        processes.start("child", _parent_of_a_detached_child(tmp_path / "ready"), dict(os.environ), tmp_path / "log")
    # Assert: recorded before the interrupt surfaced; stopping leaves nothing, the detached grandchild included
    assert "child" in processes.started
    _wait_for_file(tmp_path / "ready")
    assert len(processes.ours()) == 2
    assert processes.stop_all() == [] and leftovers(processes.tag) == []


def test_a_signal_while_processes_stop_surfaces_once_all_are_stopped(processes, tmp_path, monkeypatch):
    # Prepare: a parent and its detached child; a second SIGINT arrives as the first kills go out.
    processes.start("child", _parent_of_a_detached_child(tmp_path / "ready"), dict(os.environ), tmp_path / "log")
    _wait_for_file(tmp_path / "ready")
    real_kill_all = soak_module._kill_all

    def interrupted_kill_all(pids):
        signal.raise_signal(signal.SIGINT)
        real_kill_all(pids)

    monkeypatch.setattr(soak_module, "_kill_all", interrupted_kill_all)
    # Execute
    with pytest.raises(KeyboardInterrupt):
        processes.stop_all()
    # Assert: the detached child (found by the tag in its environment) was stopped all the same
    assert leftovers(processes.tag) == [] and processes.ours() == []


def test_every_process_started_carries_the_tag_and_leads_its_own_group(processes, tmp_path):
    p = processes.start("child", _parent_of_a_detached_child(tmp_path / "ready"), dict(os.environ), tmp_path / "log")
    _wait_for_file(tmp_path / "ready")
    table = {q.pid: q for q in soak_module.proc_table()}
    assert os.getpgid(p.pid) == p.pid and table[p.pid].sid == p.pid
    assert sorted(q.tag for q in table.values() if q.tag == processes.tag) == [processes.tag] * 2
    assert table[os.getpid()].tag != processes.tag  # the soak's own process is not one of its processes


# --------------------------------------------------------------------------- the real soak
# A quick soak takes 3 to 8 minutes on 2 shared cores; these bounds only stop a hung one.
SOAK_TIMEOUT = 3600


def _soak(folder: Path, tag: str, sigint_ignored: bool = False, **kwargs) -> subprocess.Popen:
    """``reshuffle soak --quick --json`` in a session of its own; every process it starts inherits ``tag``.

    With ``sigint_ignored`` it starts as a shell starts a command put in the background: the soak must
    stop on SIGINT all the same."""
    args = ["soak", "--quick", "--json", "--dir", str(folder)]
    cmd = [sys.executable, "-m", "reshuffle.cli", *args] if not sigint_ignored else [
        sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "from reshuffle.cli import main; sys.exit(main(sys.argv[1:]))", *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", **{TAG_VAR: tag})
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                            **kwargs)


def _new_tag() -> str:
    return f"test-{secrets.token_hex(8)}"


@pytest.mark.soak
def test_quick_soak_names_and_loses_nobody_honest(tmp_path):
    # Execute
    tag = _new_tag()
    p = _soak(tmp_path / "quick", tag, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = p.communicate(timeout=SOAK_TIMEOUT)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            p.communicate(timeout=600)
    # Assert
    assert p.returncode == 0, stdout[-3000:] + stderr[-6000:]
    out = json.loads(stdout)
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
    # nothing of it is left running: neither its own check nor ours (its tag, folder and ports) finds a process
    assert out["left_running"] == [] and leftovers(tag, out["folder"], out["ports"]) == []


# The soak prints each line as it reaches that point: the SIGINT lands while the SuperLink starts,
# while the SuperNodes start, while `flwr run` starts, and inside round 1's protocol.
INTERRUPT_AT = {
    "superlink-start": "soak: starting the SuperLink",
    "nodes-start": "soak: starting 4 SuperNodes",
    "flwr-run-start": "soak: starting flwr run",
    "mid-round": "soak: round 1: the protocol has started",
}


@pytest.mark.soak
@pytest.mark.parametrize("point", list(INTERRUPT_AT))
def test_an_interrupted_soak_stops_every_process_it_started(point, tmp_path):
    # Prepare
    tag, folder = _new_tag(), tmp_path / point
    p = _soak(folder, tag, sigint_ignored=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        lines = []
        for line in p.stderr:
            lines.append(line)
            if line.strip() == INTERRUPT_AT[point]:
                break
        else:
            p.wait()
            pytest.fail(f"the soak ended (exit {p.returncode}) before {INTERRUPT_AT[point]!r}:\n" + "".join(lines))
        # Execute: SIGINT to its process group, as Ctrl-C sends it
        os.killpg(p.pid, signal.SIGINT)
        rest = p.communicate(timeout=SOAK_TIMEOUT)[1]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    # Assert: it stopped there; nothing it started (everything that inherited the tag, or names its
    # folder) is left
    said = "".join(lines) + rest[-3000:]
    assert p.returncode == 130 and "reshuffle: interrupted" in rest, said
    assert leftovers(tag, folder) == []
