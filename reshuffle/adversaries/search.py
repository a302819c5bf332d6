"""Depth-first search over the PS's schedules, shared by the explorers.

Each explorer knows its world: the moves a PS may make from a state, the
state a move leads to, and what must hold at every state and at every
schedule's end. The walk itself is the same for all: every distinct state
once (by its key), moves in the order listed, a bound on the moves of one
path and on the distinct states visited.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Hashable, Iterable, Protocol


class SearchReport(Protocol):
    max_depth: int
    kinds: dict[str, int]
    complete: bool


def move_kind(name: str) -> str:
    """The kind of a move, as the reports count it: a replay by what it replays, any other by its message."""
    return " ".join(name.split()[:2]) if name.startswith("replay") else name.split()[0]


def deliver_each(w: Any, deliveries: Iterable[tuple[int, bytes]],
                 deliver: Callable[[Any, int, bytes], tuple[Any, Any] | None],
                 absorb: Callable[[int, bytes, Any], None], sent: Callable[[int, bytes], None] | None = None) -> bool:
    """Hand each (participant, message) of ``deliveries`` to ``deliver(w, pid, data)`` in the world ``w`` (a branch
    the caller owns), each message at most once per participant; return whether any was accepted.

    ``sent(pid, data)`` runs for every message handed over (the PS records what it sends, accepted or not); an
    accepted one (``deliver`` gives (the participant's new state, its replies)) updates ``w.parts``, the hash
    chain ``w.inbox``, ``w.got`` and ``w.sent``, then ``absorb(pid, data, replies)`` takes what it answered.
    """
    ok = False
    for pid, data in deliveries:
        digest = hashlib.sha256(data).digest()
        if digest in w.got[pid]:
            continue
        if sent is not None:
            sent(pid, data)
        res = deliver(w, pid, data)
        if res is None:
            continue
        ok = True
        part, replies = res
        w.parts[pid] = part
        w.inbox[pid] = hashlib.sha256(w.inbox[pid] + digest).digest()
        w.got[pid] = w.got[pid] | {digest}
        w.sent = w.sent + ((pid, data),)
        absorb(pid, data, replies)
    return ok


def depth_first(root: Any, successors: Callable[[Any], Iterable[tuple[str, Any]]], *,
                key: Callable[[Any], Hashable], check: Callable[[Any], None], leaf: Callable[[Any], bool],
                depth: int, budget: int, report: SearchReport,
                on_states: Callable[[int], None] | None = None) -> int:
    """Visit the states reachable from ``root`` depth-first; return the number of distinct states seen.

    ``successors(w)`` yields (move name, the state it leads to, or None where the move is refused);
    ``check(w)`` runs at every state; ``leaf(w)`` at every state with no new successor (a schedule's
    end), and returns True to stop the search there. A path has at most ``depth`` moves; the search
    stops once ``budget`` distinct states are seen. It sets ``report.complete`` (False when a stop
    left states unvisited), ``report.max_depth`` and counts each applied move's kind in
    ``report.kinds``; ``on_states`` is called with the states seen, every 100 states.
    """
    seen = {key(root)}
    stack = [root]
    while stack:
        w = stack.pop()
        report.max_depth = max(report.max_depth, len(w.path))
        check(w)
        children = []
        if len(w.path) < depth:
            for name, child in successors(w):
                if child is None:
                    continue
                kind = move_kind(name)
                report.kinds[kind] = report.kinds.get(kind, 0) + 1
                k = key(child)
                if k not in seen:
                    seen.add(k)
                    children.append(child)
        if not children and leaf(w):
            report.complete = not stack
            break
        if len(seen) >= budget:
            report.complete = not stack and not children
            break
        stack.extend(reversed(children))
        if on_states is not None and len(seen) // 100 != (len(seen) - len(children)) // 100:
            on_states(len(seen))
    return len(seen)
