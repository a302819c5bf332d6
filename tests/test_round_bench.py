"""`reshuffle bench round` with groups and workers: the reported fields and what they must satisfy."""

import json
import multiprocessing as mp
import os

import numpy as np

from reshuffle.bench import round as round_bench
from reshuffle.cli import main

FIELDS = ("wall_s", "participant_critical_s", "participant_bytes", "ps_s", "peak_rss_mb", "ps_floor_ratio",
          "participant_mask_ratio")


def test_grouped_bench_reports_every_field_and_a_flat_upload():
    # Prepare / Execute: groups of 6 at two N; two workers.
    small = round_bench.bench_N(12, 600, 1, group_size=6, workers=2, blame=False)
    large = round_bench.bench_N(18, 600, 1, group_size=6, workers=2, blame=False)
    # Assert
    for r, groups in ((small, 2), (large, 3)):
        assert all(r[k] > 0 for k in FIELDS)
        assert (r["groups"], r["group_size"], r["workers"]) == (groups, 6, 2)
        assert r["wall_s"] >= r["ps_s"]  # the PS runs inside the timed call
        assert "blame_extra_s" not in r
    # Per participant, a group of 6 uploads the same whatever N is.
    assert small["participant_upload_bytes"] == large["participant_upload_bytes"]


def _hold(n_bytes, ready, release):
    block = np.ones(n_bytes, dtype=np.uint8)  # touched: resident
    ready.set()
    release.wait(30)
    del block


def test_peak_memory_counts_child_processes():
    # Prepare: a child that holds 96 MiB while the sampler runs.
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold, args=(96 << 20, ready, release))
    # Execute
    with round_bench.PeakMemory(interval=0.02) as mem:
        child.start()
        assert ready.wait(30)
        base = mem.peak_kb
        while mem.peak_kb == base:  # at least one sample with the child's block resident
            os.sched_yield()
        release.set()
        child.join(30)
    # Assert
    assert mem.mb >= 96


def test_cli_round_bench_with_groups_and_workers(capsys):
    # Execute
    assert main(["bench", "round", "--quick", "--json", "--N", "10", "--group-size", "5", "--workers", "2"]) == 0
    # Assert
    out = json.loads(capsys.readouterr().out)["10"]
    assert all(out[k] > 0 for k in FIELDS)
    assert (out["groups"], out["group_size"], out["workers"]) == (2, 5, 2)


def test_round_trips_are_reported_from_the_executed_steps():
    # Execute
    r = round_bench.bench_N(6, 64, 1, blame=False)
    # Assert: counted from the steps that ran; three after training; SecAgg+'s four beside them.
    assert r["round_trips"] == len(r["round_trips_steps"]) >= 8
    # 5 fixed trips and 3 a reservation iteration (the first one's vectors ride on the OT step).
    assert r["round_trips"] == 5 + 3 * r["round_trips_steps"].count("reserve-consent")
    assert r["round_trips_after_training"] == r["round_trips_after_training_dropouts"] == 3
    assert r["round_trips_dropouts"] >= 8 and r["secaggplus_round_trips"] == 4
    assert 0 < r["participant_after_training_s"] <= r["participant_critical_s"] + r["ps_s"]
    mc = r["reservation_monte_carlo"]
    assert abs(sum(mc["iterations"].values()) - 1) < 1e-9 and 1 <= mc["mean_iterations"] <= mc["R_max"]


def test_stable_bench_prints_trips_upload_and_the_pools_speedup_per_run(capsys, monkeypatch):
    # Prepare: two stable groups of 5 and a PS with two threads whatever the machine has.
    monkeypatch.setattr(round_bench, "cores_available", lambda: 2)
    # Execute
    res = round_bench.bench_stable(10, 4000, 5, seeds=(1,))
    round_bench.print_stable({"10": res})
    # Assert: one message after training, the upload a multiple of d, the pooled PS compared with the serial one.
    (x,) = res["runs"]
    assert (x["round_trips"], x["round_trips_after_training"]) == (3, 1)
    assert 6 < x["upload_over_d"] < 7  # 5 members + 1 decoy row, each d words plus its trailer
    assert x["ps_workers"] == 2 and x["ps_after_training_s"] > 0 and x["ps_after_training_serial_s"] > 0
    assert x["ps_group_speedup"] == x["ps_after_training_serial_s"] / x["ps_after_training_s"]
    line = capsys.readouterr().out
    assert "3 round trips (1 after training" in line and "on 2 thread(s)" in line and "speedup" in line


def test_the_upload_bench_compares_fused_separate_and_keystream_in_one_run():
    from reshuffle.bench.crypto import bench_upload

    r = bench_upload(300, 5, 1, chunk_bytes=256)
    assert r["rows"] == 6 and r["keystream_MB"] > 0
    for k in ("keystream_s", "sha256_s", "unfused_s", "fused_s", "fused_overlap_s"):
        assert r[k] > 0
    assert r["fused_over_keystream"] == r["fused_s"] / r["keystream_s"]
    assert r["speedup_fused"] == r["unfused_s"] / r["fused_s"]
