"""Targeted cells of the history grid in the reference setting, and their table.

The setting: MLP, 20 clients, 4 attackers (f = 4, also in the clean runs), Flower's Dirichlet(0.3)
split, ideal shuffle, batch 16, learning rate 0.1, 30 rounds, MNIST and Fashion-MNIST, seeds 11 and 7;
every delivered row carries its client's ideal pseudonym.

    python experiments/history_cells.py run --out outputs/history --jobs 2 \\
        --cells fashion-mnist:11:saturate:hammer-anvil mnist:7:none:fedavg ...
    python experiments/history_cells.py table outputs/history/results.jsonl

``run`` appends one JSON line per finished cell to ``results.jsonl`` (cells already there are skipped);
``table`` prints a Markdown table: final accuracy, its drop against clean FedAvg of the same dataset and
seed, backdoor success, the clean runs' FPR, the attackers' mean weight share, and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
from pathlib import Path

#: The reference setting (every cell's SimConfig besides dataset, seed, attack, rule, rounds).
BASE = {"model": "mlp", "clients": 20, "shuffle": "ideal", "batch_size": 16, "lr": 0.1, "partition": "dirichlet",
        "alpha": 0.3, "f": 4, "training": "sequential", "eval_subset": 2000, "device": "cpu"}


def settings(cell: str, data_root: str) -> dict:
    """``dataset:seed:attack:rule[:rounds]`` → the cell's SimConfig mapping."""
    parts = cell.split(":")
    ds, seed, attack, rule = parts[:4]
    rounds = int(parts[4]) if len(parts) > 4 else 30
    return {**BASE, "dataset": ds, "data_dir": f"{data_root}/{ds}", "seed": int(seed), "attack": attack,
            "rule": rule, "rounds": rounds, "malicious": 0.0 if attack == "none" else 0.2}


def _work(args: tuple[str, str]) -> dict:
    import torch

    from reshuffle.evaluation.cell import run_cell

    torch.set_num_threads(1)
    cell, data_root = args
    rec = run_cell(settings(cell, data_root), {"cell": cell})
    rounds = rec.get("rounds", [])
    return {"cell": cell, "status": rec.get("status"), "error": rec.get("error"),
            "final_accuracy": rec.get("final_accuracy"), "final_attack_success": rec.get("final_attack_success"),
            "fpr": rec.get("fpr"), "tpr": rec.get("tpr"), "malicious_share": rec.get("malicious_share"),
            "cpu_seconds": rec.get("cpu_seconds"), "wall_seconds": rec.get("wall_seconds"),
            "acc": [r.get("accuracy") for r in rounds], "bd": [r.get("attack_success") for r in rounds]}


def run(cells: list[str], out: Path, jobs: int, data_root: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.jsonl"
    done = {json.loads(line)["cell"] for line in path.read_text().splitlines()} if path.exists() else set()
    todo = [(c, data_root) for c in cells if c not in done]
    with mp.get_context("spawn").Pool(jobs, maxtasksperchild=1) as pool, path.open("a") as f:
        for r in pool.imap_unordered(_work, todo):
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(r["cell"], r["status"], r["final_accuracy"], r["final_attack_success"], flush=True)


def table(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("status") == "done"]
    key = {}
    for r in rows:
        ds, seed, attack, rule, *rest = r["cell"].split(":")
        key[ds, seed, attack, rule, rest[0] if rest else "30"] = r
    out = ["| dataset | seed | rounds | attack | rule | accuracy | drop vs clean FedAvg | backdoor | clean FPR | "
           "attackers' weight share | CPU s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (ds, seed, attack, rule, rounds), r in sorted(key.items()):
        ref = key.get((ds, seed, "none", "fedavg", rounds))
        acc = r["final_accuracy"]
        drop = f"{100 * (ref['final_accuracy'] - acc):.1f}" if ref and acc is not None else "–"
        bd, share, fpr = r["final_attack_success"], r["malicious_share"], r["fpr"]
        bd_s = "–" if bd is None else f"{100 * bd:.1f} %"
        fpr_s = f"{fpr:.3f}" if attack == "none" and fpr is not None else "–"
        share_s = "–" if share is None else f"{share:.3f}"
        out.append(f"| {ds} | {seed} | {rounds} | {attack} | {rule} | {100 * acc:.1f} % | {drop} | {bd_s} | {fpr_s} | "
                   f"{share_s} | {r['cpu_seconds']:.0f} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--cells", nargs="+", required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--jobs", type=int, default=1)
    r.add_argument("--data", default="data", help="folder holding mnist/ and fashion-mnist/")
    t = sub.add_parser("table")
    t.add_argument("results", type=Path)
    a = p.parse_args()
    if a.cmd == "run":
        run(a.cells, a.out, a.jobs, a.data)
    else:
        print(table(a.results))


if __name__ == "__main__":
    main()
