"""The grid's cells as Ray tasks on a local Ray instance (skipped only where Ray is not installed)."""

import json

import pytest

from reshuffle.evaluation.grid import Grid, Partition
from reshuffle.evaluation.runner import run_grid


def test_tiny_grid_on_a_local_ray_instance(tmp_path):
    pytest.importorskip("ray")
    from reshuffle.evaluation.backends import RayBackend

    # Prepare: 2 cells (the clean run and sign flipping, under FedAvg), 2 rounds of logistic regression
    grid = Grid(datasets=("digits",), partitions=(Partition("iid"),), models=("logreg",), attacks=("sign-flip",),
                rules=("fedavg",), seeds=(1,), base=(("rounds", 2), ("clients", 10), ("malicious", 0.2)))
    # Execute: ray.init(num_cpus=1, include_dashboard=False) inside the backend
    result = run_grid(grid, tmp_path, RayBackend("local", local_cpus=1), quiet=True, plots=False)
    # Assert: both cells ran as tasks and were stored by the driver
    assert (result.ran, result.failed, result.interrupted) == (2, 0, False)
    cell = json.loads((tmp_path / "cells/digits/iid/logreg/sign-flip__fedavg__s1.json").read_text())
    assert cell["status"] == "done" and len(cell["rounds"]) == 2 and cell["malicious_clients"]
    assert result.summary["counts"] == {"total": 2, "done": 2, "failed": 0, "missing": 0}
