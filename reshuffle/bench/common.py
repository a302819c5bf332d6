"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import time
from typing import Any, Callable


def best_of(fn: Callable[[], Any], repeat: int = 5, clock: Callable[[], float] = time.perf_counter) -> float:
    """Minimum time of ``repeat`` calls: the least noisy estimate on a busy machine.

    ``clock`` is wall time by default; ``time.thread_time`` gives this thread's CPU time.
    """
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def without_vartime(fn: Callable[[], Any]) -> Any:
    """Run fn with the variable-time Feldman evaluation switched off (the libsodium path), for a ratio."""
    from reshuffle.crypto import vartime

    saved, vartime.AVAILABLE = vartime.AVAILABLE, False
    try:
        return fn()
    finally:
        vartime.AVAILABLE = saved


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dict → dotted keys, for printing."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def print_table(title: str, results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = [(k, f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in flatten(results).items()]
    # The metric names whole (never cut with an ellipsis): the table is at least as wide as the longest
    # name and a short value; long values wrap in their own column.
    key_w = max((len(k) for k, _ in rows), default=6)
    console = Console()
    console = Console(width=max(console.width, key_w + 24))
    table = Table(title=title)
    table.add_column("metric", no_wrap=True, min_width=key_w)
    table.add_column("value", justify="right", overflow="fold")
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
