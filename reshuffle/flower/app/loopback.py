"""An in-process Flower ``Grid``: each pushed message goes straight to a real ``ClientApp``.

For tests and benchmarks: the ClientApp (with its mods), the strategies and the
protocol are the real ones; only the transport is replaced. Each node keeps one
``Context`` across messages, as a SuperNode does.
"""

from __future__ import annotations

import tempfile

import copy
import uuid
from typing import Callable, Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid

from reshuffle.flower.flwr_private import Run, TaskIdentity, make_message, set_message_id

SUPERLINK_NODE = 1


def _delivered(m: Message) -> Message:
    """A copy of ``m`` whose records a mod may change without touching the sender's."""
    content = RecordDict({k: type(r)(dict(r.items())) for k, r in m.content.items()})
    return make_message(copy.copy(m.metadata), content)


class LoopbackGrid(Grid):
    """Run ``client_app`` for each pushed message, in process, with per-node Contexts.

    ``node_config(i)`` gives node i's config (default: Flower's simulation keys
    ``partition-id``/``num-partitions``). ``drop`` is a callable
    ``(node_id, message) -> bool``: True leaves that message unanswered. ``ungrouped`` adds
    ``reshuffle-ungrouped=true`` to every node's config: the nodes then also take part in rounds
    bound to no stable group (``ReshuffleGrid(group_size=None)``), which they refuse by default.
    The nodes share one fresh state folder (:attr:`state_dir`, each node's files its own) unless their
    config names another.
    """

    def __init__(self, client_app, num_nodes: int, run_id: int = 7,
                 node_config: Callable[[int], dict] | None = None,
                 drop: Callable[[int, Message], bool] | None = None, ungrouped: bool = False) -> None:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, SUPERLINK_NODE, 0
        self.app = client_app
        self.node_ids = [1000 + i for i in range(num_nodes)]
        base = node_config or (lambda i: {"partition-id": i, "num-partitions": num_nodes})
        # Each grid's nodes keep their state in a fresh folder of its own unless their config names one: the
        # simulation keys of one run id are the same in every grid, and a grid stands for a fresh deployment.
        self.state_dir = tempfile.mkdtemp(prefix="reshuffle-loopback-")
        cfg = lambda i: {"reshuffle-state-dir": self.state_dir, **base(i),  # noqa: E731
                         **({"reshuffle-ungrouped": True} if ungrouped else {})}
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
            set_message_id(m, uuid.uuid4().hex)
            self.sent.append(m)
            ids.append(m.metadata.message_id)
            node = m.metadata.dst_node_id
            if self.drop(node, m):
                continue
            try:
                # Each node gets its own copy, as after Flower's serialization (mods may mutate it).
                reply = self.app(_delivered(m), self.contexts[node])
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
