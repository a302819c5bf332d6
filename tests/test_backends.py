"""The local process backend: every cell comes back, workers are replaced, a dead worker is one failed cell."""

import os

from reshuffle.evaluation.backends import ProcessBackend


def where(settings, cell):
    """A stand-in cell: which worker ran it, or the worker's death where the cell asks for it."""
    if settings.get("die"):
        os._exit(3)
    return {"status": "done", "pid": os.getpid(), "n": cell["n"]}


def test_more_cells_than_the_workers_may_run_all_come_back_on_fresh_workers():
    # CPython's max_tasks_per_child leaves queued cells waiting forever once a worker retires with a backlog
    # (2 workers, 2 cells each, 9 cells); the backend replaces its workers itself.
    backend = ProcessBackend(2, cells_per_worker=2, work=where)
    got = dict(backend.run((n, {}, {"n": n}) for n in range(9)))
    assert sorted(got) == list(range(9)) and all(r["n"] == n for n, r in got.items())
    per_worker = {}
    for r in got.values():
        per_worker[r["pid"]] = per_worker.get(r["pid"], 0) + 1
    assert max(per_worker.values()) <= 2 and len(per_worker) >= 5
    assert os.getpid() not in per_worker


def test_a_worker_that_dies_is_one_failed_cell_and_the_rest_still_run():
    backend = ProcessBackend(2, cells_per_worker=3, work=where)
    jobs = [(n, {"die": n == 2}, {"n": n}) for n in range(6)]
    got = dict(backend.run(iter(jobs)))
    assert sorted(got) == list(range(6))
    assert got[2]["status"] == "failed" and got[2]["error"].startswith("worker lost: BrokenProcessPool")
    assert all(got[n]["status"] == "done" and got[n]["n"] == n for n in range(6) if n != 2)
