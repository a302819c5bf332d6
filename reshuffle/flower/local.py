"""Running ``flwr`` from this venv on one machine: free ports, the environment, leftover SuperLinks.

Shared by the Flower tests, ``reshuffle bench flower``, the soak and
``experiments/flower_groups.py``; users go through ``make flower`` or their own ``flwr run``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flwr_env(home: Path, root: Path) -> dict:
    """The environment for ``flwr`` commands with ``FLWR_HOME=home`` that import the package at ``root``."""
    env = dict(os.environ)
    env.update({
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p),
        # Use this venv: no per-run `uv sync` (it would pull a CUDA torch).
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "PYTHONUNBUFFERED": "1",
        # A SuperNode's SuperExec polls for tasks every second by default; each protocol phase is a task.
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.05",
        # Every Flower process posts a telemetry event and waits up to 4 s for it on exit.
        "FLWR_TELEMETRY_ENABLED": "0",
    })
    return env


def write_simulation_home(home: Path, nodes: int) -> None:
    """A FLWR_HOME whose default connection is Flower's local simulation: ``nodes`` SuperNodes, one CPU each."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'
        f"options.num-supernodes = {nodes}\noptions.backend.client-resources.num-cpus = 1\n"
    )


def stop_processes_of(home: Path, sig: int = signal.SIGKILL) -> None:
    """``flwr run`` leaves the local SuperLink it started running; its command line names FLWR_HOME.
    Signal each such process's group (or the process alone if it leads none)."""
    out = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True)
    for pid in out.stdout.split():
        try:
            os.killpg(int(pid), sig)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(int(pid), sig)
            except ProcessLookupError:
                pass
