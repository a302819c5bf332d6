"""Re-Shuffle on Flower: the local simulation (`flwr run . --stream`) and a real deployment.

Both start real Flower processes (SuperLink, SuperNodes, ClientApp and
ServerApp processes) on loopback, wait with bounded timeouts, and kill every
process group they started, also on failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(home: Path) -> dict:
    env = dict(os.environ)
    env.update({
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        # Use this venv: no per-run `uv sync` (it would pull a CUDA torch).
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(_free_port()),
    })
    return env


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait(timeout=30)


@contextmanager
def processes():
    started: list[subprocess.Popen] = []

    def start(cmd, env, log: Path) -> subprocess.Popen:
        p = subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in started:
            _kill_group(p)


def _kill_superlinks_of(home: Path) -> None:
    """`flwr run` leaves a local SuperLink behind (its database lives in FLWR_HOME)."""
    out = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True)
    for pid in out.stdout.split():
        try:
            os.killpg(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_flwr_run_local_simulation(tmp_path):
    home = tmp_path / "flwr-home"
    home.mkdir()
    shutil.copy(ROOT / "flower" / "config.toml", home / "config.toml")
    out = tmp_path / "out"
    try:
        r = subprocess.run(
            [str(BIN / "flwr"), "run", ".", "--stream", "--run-config", f'out-dir="{out}"'],
            cwd=ROOT, env=_env(home), capture_output=True, text=True, timeout=900,
        )
    finally:
        _kill_superlinks_of(home)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["driver"] == "flower" and m["config"]["clients"] == 10
    assert [x["models_received"] for x in m["rounds"]] == [10, 10]
    assert m["final_accuracy"] > m["initial_accuracy"] + 0.3
    assert {"training", "setup", "ot", "reserve", "upload", "unmask"} <= set(m["rounds"][0]["seconds"])


def test_real_deployment_with_a_node_killed_mid_round(tmp_path):
    keys, home = tmp_path / "keys", tmp_path / "flwr-home"
    home.mkdir()
    for args in (["ca", "init", "--dir", str(keys)], ["ca", "issue", "--dir", str(keys), "--ids", "0-4", "--server"]):
        subprocess.run([str(BIN / "reshuffle"), *args], check=True, capture_output=True, timeout=60)
    port = _free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = _env(home)
    out = tmp_path / "out"
    with processes() as start:
        start([str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port),
               "--database", str(tmp_path / "link.db")], env, tmp_path / "superlink.log")
        time.sleep(3)
        nodes = [
            start([str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
                   "--host", "127.0.0.1", "--port", str(_free_port()),
                   "--node-config", f'participant-id={i} key-dir="{keys}" num-partitions=5'],
                  env, tmp_path / f"supernode-{i}.log")
            for i in range(5)
        ]
        time.sleep(3)
        run = start([str(BIN / "flwr"), "run", ".", "deploy", "--stream", "--run-config",
                     f'out-dir="{out}" key-dir="{keys}" rounds=3 rule="multi-krum" phase-timeout=30.0'],
                    dict(env, PYTHONUNBUFFERED="1"), tmp_path / "run.log")
        # Kill node 4 as soon as round 3's protocol starts (it is then in the roster).
        deadline = time.monotonic() + 1500
        killed = False
        while run.poll() is None and time.monotonic() < deadline:
            log = (tmp_path / "run.log").read_text(errors="replace")
            if not killed and "round 3: roster of 5 participants" in log:
                _kill_group(nodes[4])
                killed = True
            time.sleep(1)
        log = (tmp_path / "run.log").read_text(errors="replace")
        assert run.poll() is not None, "flwr run did not finish in time:\n" + log[-3000:]
    assert killed and run.returncode == 0, log[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    rounds = m["rounds"]
    # every surviving model reached the PS: 5 in rounds 1–2, 4 after the kill
    assert [r["models_received"] for r in rounds] == [5, 5, 4], log[-3000:]
    assert rounds[1]["accuracy"] > m["initial_accuracy"] + 0.3
    assert rounds[2]["accuracy"] >= rounds[1]["accuracy"] - 0.05


def test_run_config_is_validated():
    from reshuffle.errors import ConfigError
    from reshuffle.flower.common import settings

    s = settings({"rounds": 3, "rule": "krum", "phase-timeout": 5.0, "data-dir": ""})
    assert s.sim.rounds == 3 and s.sim.rule == "krum" and s.phase_timeout == 5.0 and s.sim.data_dir is None
    with pytest.raises(ConfigError, match="real protocol"):
        settings({"shuffle": "ideal"})
    with pytest.raises(ConfigError, match="phase-timeout"):
        settings({"phase-timeout": 0.0})
    with pytest.raises(ConfigError, match="unknown setting 'epochs'"):
        settings({"epochs": 2})


def test_malformed_replies_count_as_no_answer():
    from flwr.app import ConfigRecord, RecordDict

    from reshuffle.flower.server_app import _protocol_payloads

    def reply(content):
        return RecordDict(content)

    assert _protocol_payloads(reply({"reshuffle": ConfigRecord({"data": [b"a", b"b"]})})) == [b"a", b"b"]
    assert _protocol_payloads(reply({"reshuffle": ConfigRecord({"data": ["text", "more"]})})) == []
    assert _protocol_payloads(reply({"other": ConfigRecord({"x": 1})})) == []
