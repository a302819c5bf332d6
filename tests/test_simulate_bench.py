"""``reshuffle bench simulate``: batched and sequential training timed in one run."""

import json

from reshuffle.cli import main


def test_bench_simulate_json(capsys):
    # Execute
    assert main(["bench", "simulate", "--dataset", "digits", "--model", "mlp", "--clients", "4", "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # Assert: both timings measured, the ratio is theirs, and the two trainings agree
    assert out["sequential_s"] > 0 and out["batched_s"] > 0
    assert abs(out["speedup"] - out["sequential_s"] / out["batched_s"]) < 1e-9
    assert out["max_abs_diff"] < 1e-4
    assert out["clients"] == 4 and out["samples_per_client"] == 256 and out["auto_picks"] == "batched"
