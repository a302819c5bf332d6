"""Where cells run: this process, local worker processes, or Ray tasks.

A backend takes (key, settings, cell) jobs and yields (key, record) as each
finishes, in completion order. The caller writes the records, so a cell is
stored by one process only, wherever it ran. Closing the generator early
(Ctrl-C, an error in the caller) stops the workers: pending cells are cancelled
and running ones are terminated, leaving nothing half-written.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Iterable, Iterator

from reshuffle.errors import ConfigError
from reshuffle.evaluation.cell import FORMAT, run_cell

Job = tuple[Any, dict[str, Any], dict[str, Any]]


def _failed(cell: dict[str, Any], settings: dict[str, Any], why: str) -> dict[str, Any]:
    """The record of a cell its backend lost (a worker died); retried like any failed cell."""
    return {"format": FORMAT, "cell": cell, "config": settings, "status": "failed", "error": why,
            "wall_seconds": 0.0, "cpu_seconds": 0.0}


class InlineBackend:
    """Cells one after another in this process (``--jobs 1``)."""

    slots = 1
    name = "this process"

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Any, dict]]:
        for key, settings, cell in jobs:
            yield key, run_cell(settings, cell)


#: Cells a worker process runs before a fresh one takes its place (a fresh worker imports torch again: ~5 s).
WORKER_CELLS = 16
#: OpenBLAS in the workers: two threads, the count the committed cells were computed with (a multi-threaded dot
#: product rounds by its thread count, so another count changes a cell's last bits and, over rounds, its figures);
#: the idle thread sleeps at once (same bits, about a third less CPU per call of the history rules).
WORKER_BLAS = {"OPENBLAS_NUM_THREADS": "2", "OPENBLAS_THREAD_TIMEOUT": "4"}


def _worker_init() -> None:
    # The terminal's Ctrl-C reaches the whole process group: the driver alone handles it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["OMP_NUM_THREADS"] = "1"


class ProcessBackend:
    """Cells in ``jobs`` local worker processes, one core each.

    Each slot is an executor of one worker that holds one cell at a time, and is
    replaced by a fresh one after ``WORKER_CELLS`` cells or when its worker dies.
    The replacement is done here rather than by ``max_tasks_per_child``: with
    that option CPython's executor (3.11 up to its fix, gh-115634) can fail to
    start a replacement worker and then waits forever on the cells still queued.
    """

    def __init__(self, jobs: int, cells_per_worker: int = WORKER_CELLS, work=run_cell) -> None:
        self.slots = jobs
        self.cells_per_worker = cells_per_worker
        self.work = work  # (settings, cell) -> record; a module-level function, which the workers import
        self.name = f"{jobs} local processes"

    @staticmethod
    def _executor() -> ProcessPoolExecutor:
        # spawn: workers start without the driver's state (no forked torch or thread pools).
        return ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"), initializer=_worker_init)

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Any, dict]]:
        before = {p.pid for p in mp.active_children()}
        # Spawned workers load OpenBLAS before any initializer runs: what they need is set in the environment they
        # inherit (a user's own values win).
        for key, value in WORKER_BLAS.items():
            os.environ.setdefault(key, value)
        todo = iter(jobs)
        slots: list[list] = [[None, 0] for _ in range(self.slots)]  # [executor or None, cells it has run]
        running: dict = {}  # future -> (slot, job)
        clean = False
        try:
            while True:
                busy = {i for i, _ in running.values()}
                for i, slot in enumerate(slots):
                    if i in busy:
                        continue
                    job = next(todo, None)
                    if job is None:
                        break
                    if slot[0] is None or slot[1] >= self.cells_per_worker:
                        # A worker that lived for a whole grid grew to 4–5 GB: a fresh one after a few cells.
                        if slot[0] is not None:
                            slot[0].shutdown(wait=True)
                        slot[:] = [self._executor(), 0]
                    slot[1] += 1
                    running[slot[0].submit(self.work, job[1], job[2])] = (i, job)
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    i, (key, settings, cell) = running.pop(fut)
                    try:
                        rec = fut.result()
                    except Exception as exc:  # the worker died (killed, out of memory): a failed cell
                        rec = _failed(cell, settings, f"worker lost: {type(exc).__name__}: {exc}")
                        slots[i][0].shutdown(wait=False)
                        slots[i][0] = None
                    yield key, rec
            clean = True
        finally:
            for executor, _ in slots:
                if executor is not None:
                    executor.shutdown(wait=clean, cancel_futures=True)
            if not clean:
                for p in mp.active_children():
                    if p.pid not in before:
                        p.terminate()
                        p.join(timeout=5)


class RayBackend:
    """Cells as Ray tasks (one CPU each) on the cluster at ``address``; ``local`` starts a local instance.

    The cluster's workers need the same code (``pip install reshuffle``) and the
    datasets at the same paths (``--data-dir-root``).
    """

    def __init__(self, address: str, local_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray, which is not installed: pip install 'reshuffle[ray]'") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # Ray's notice about GPU variables; cells use none
                if address == "local":
                    # Local workers import the driver's copy of the package, wherever it lies.
                    root = str(Path(__file__).resolve().parents[2])
                    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
                    ray.init(num_cpus=local_cpus, include_dashboard=False, logging_level="WARNING",
                             runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}})
                else:
                    try:
                        ray.init(address=address, logging_level="WARNING")
                    except ConnectionError as exc:
                        raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None
        self.slots = max(int(ray.cluster_resources().get("CPU", 1)), 1)
        self.name = f"Ray ({address}, {self.slots} CPUs)"

    def run(self, jobs: Iterable[Job]) -> Iterator[tuple[Any, dict]]:
        ray = self._ray
        task = ray.remote(num_cpus=1, max_retries=0)(run_cell)
        refs = {}
        clean = False
        try:
            for key, settings, cell in jobs:
                refs[task.remote(settings, cell)] = (key, settings, cell)
            while refs:
                done, _ = ray.wait(list(refs), num_returns=1)
                for ref in done:
                    key, settings, cell = refs.pop(ref)
                    try:
                        rec = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # the task's worker or node was lost
                        rec = _failed(cell, settings, f"Ray task lost: {type(exc).__name__}: {exc}")
                    yield key, rec
            clean = True
        finally:
            if not clean:
                for ref in refs:
                    ray.cancel(ref, force=True)
            if self._started:
                ray.shutdown()


def make_backend(jobs: int, ray_address: str | None) -> InlineBackend | ProcessBackend | RayBackend:
    if ray_address:
        return RayBackend(ray_address, local_cpus=jobs)
    return InlineBackend() if jobs == 1 else ProcessBackend(jobs)
