"""Shared helpers for the Flower tests: the in-process Grid, a toy ClientApp, process management.

:class:`~reshuffle.flower.loopback.LoopbackGrid` replaces only the transport:
strategies, mods and the protocol are the real ones. Tests that need Flower's own
engine (simulation, SuperLink, SuperNodes) use the process helpers below.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from flwr.app import Context, Message, RecordDict

from reshuffle.flower.loopback import LoopbackGrid  # noqa: F401  (re-exported for the tests)

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flwr_env(home: Path) -> dict:
    env = dict(os.environ)
    env.update({
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        # Use this venv: no per-run `uv sync` (it would pull a CUDA torch).
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "PYTHONUNBUFFERED": "1",
    })
    return env


def kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait(timeout=30)


@contextmanager
def processes():
    """``start(cmd, env, log)`` starts a process in its own group; all are killed on exit."""
    started: list[subprocess.Popen] = []

    def start(cmd, env, log: Path, cwd: Path = ROOT) -> subprocess.Popen:
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                             start_new_session=True)
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in started:
            kill_group(p)


def toy_client_app(make_reply: Callable[[Message, Context], RecordDict], mods=None):
    """A ClientApp with ``reshuffle_mod`` (unless ``mods`` says otherwise) whose train handler is ``make_reply``."""
    from flwr.app import MetricRecord
    from flwr.clientapp import ClientApp

    from reshuffle.flower.mod import reshuffle_mod

    app = ClientApp(mods=[reshuffle_mod] if mods is None else mods)

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        return Message(make_reply(msg, ctx), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, ctx: Context) -> Message:
        return Message(RecordDict({"metrics": MetricRecord({"num-examples": 1, "node": ctx.node_id})}), reply_to=msg)

    return app
