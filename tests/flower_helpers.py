"""Shared helpers for the Flower tests: an in-process Grid and process management.

:class:`LoopbackGrid` is a Flower ``Grid`` that hands each pushed message to a
real ``ClientApp`` (with its mods) in this process and queues the reply, with one
``Context`` per node kept across messages as a SuperNode keeps it. It is the
transport only: strategies, mods and the protocol are the real ones. Tests that
need Flower's own engine (simulation, SuperLink, SuperNodes) use the process
helpers below.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SUPERLINK_NODE = 1


class LoopbackGrid(Grid):
    """Run ``client_app`` for each pushed message, in process, with per-node Contexts.

    ``node_config(i)`` gives node i's config (default: Flower's simulation keys
    ``partition-id``/``num-partitions``). ``drop`` is a callable
    ``(node_id, message) -> bool``: True leaves that message unanswered.
    """

    def __init__(self, client_app, num_nodes: int, run_id: int = 7,
                 node_config: Callable[[int], dict] | None = None,
                 drop: Callable[[int, Message], bool] | None = None) -> None:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, SUPERLINK_NODE, 0
        self.app = client_app
        self.node_ids = [1000 + i for i in range(num_nodes)]
        cfg = node_config or (lambda i: {"partition-id": i, "num-partitions": num_nodes})
        self.contexts = {n: Context(run_id=run_id, node_id=n, node_config=cfg(i), state=RecordDict(),
                                    run_config={}) for i, n in enumerate(self.node_ids)}
        self.drop = drop or (lambda node, msg: False)
        self._run = Run.create_empty(run_id)
        self._replies: dict[str, Message] = {}
        self.sent: list[Message] = []  # every message pushed, for the tests' eyes only
        self.errors: list[tuple[Message, str]] = []  # (message, reason) of every error reply

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for m in messages:
            m.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            self.sent.append(m)
            ids.append(m.metadata.message_id)
            node = m.metadata.dst_node_id
            if self.drop(node, m):
                continue
            try:
                reply = self.app(m, self.contexts[node])
            except Exception as exc:  # the ClientApp runtime turns an exception into an error reply
                reply = Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=m)
                self.errors.append((m, reply.error.reason))
            self._replies[m.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(self, messages, *, timeout=None):
        ids = self.push_messages(messages)
        return list(self.pull_messages(ids))


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
