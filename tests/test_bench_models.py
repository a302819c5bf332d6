"""``reshuffle bench models``: every engine timed in one run; no GPU figure without a GPU."""

import json

import torch

from reshuffle.cli import main


def test_bench_models_json(capsys):
    # Execute
    assert main(["bench", "models", "--quick", "--models", "logreg", "cnn", "--clients", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # Assert: the ratios are the measured times', the engines agree, the stacked engine only where it applies
    cpu = out["cpu"]
    assert sorted(cpu) == ["cnn", "logreg"] and out["clients"] == 2
    for row in cpu.values():
        assert row["loop"] > 0 and row["func"] > 0 and abs(row["func_over_loop"] - row["func"] / row["loop"]) < 1e-9
        assert row["max_abs_diff"] < 1e-3
    assert "stacked" in cpu["logreg"] and "stacked" not in cpu["cnn"]
    if not torch.cuda.is_available():
        assert out["gpu_name"] is None
        assert all(v is None for row in out["gpu"].values() for v in row.values())


def test_bench_models_table_leaves_gpu_columns_empty(capsys):
    assert main(["bench", "models", "--quick", "--models", "logreg", "--clients", "2"]) == 0
    table = capsys.readouterr().out
    assert "logreg" in table and ("GPU: no GPU" in table) == (not torch.cuda.is_available())
