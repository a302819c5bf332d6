"""Flower's local simulation with anonymity groups: `flwr run .` with many SuperNodes, round time reported.

    python experiments/flower_groups.py                   # 100 nodes, groups of 20, 2 rounds
    python experiments/flower_groups.py --nodes 30 --group-size 10 --rounds 1

Runs the project's own apps (``reshuffle/flower/app/server_app.py``) in Flower's local
simulation (Ray backend) in a fresh FLWR_HOME, then prints, per round, the wall
time of the round as the ServerApp measured it, its train and protocol phases, the
groups' sizes and any group that failed, and writes them to
``<out>/flower_groups.json``. It stops the local SuperLink it started. Heavy: on a
2-core machine a round of 100 nodes takes minutes.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reshuffle.flower.app.local import BIN, flwr_env, stop_processes_of

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--group-size", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", default="logreg", help="logreg, mlp, lenet5 (digits dataset)")
    ap.add_argument("--rule", default="multi-krum")
    ap.add_argument("--phase-timeout", type=float, default=300.0)
    ap.add_argument("--cpus-per-node", type=int, default=1, help="Ray CPUs per simulated node")
    ap.add_argument("--out", default="experiments/evaluation/flower-groups")
    args = ap.parse_args(argv)

    out = (ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="reshuffle-flwr-groups-"))
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'
        f"options.num-supernodes = {args.nodes}\n"
        f"options.backend.client-resources.num-cpus = {args.cpus_per_node}\n"
    )
    # Groups formed per round (stable-sets = false): group-size alone is refused beside the default stable sets.
    run_config = (f'out-dir="{out}" rounds={args.rounds} stable-sets=false group-size={args.group_size} '
                  f'model="{args.model}" '
                  f'dataset="digits" rule="{args.rule}" phase-timeout={args.phase_timeout} '
                  f'train-timeout=1200.0 round-timeout={1200.0 + 40 * args.phase_timeout}')
    t0 = time.perf_counter()
    try:
        r = subprocess.run([str(BIN / "flwr"), "run", str(ROOT), "--stream", "--run-config", run_config],
                           cwd=ROOT, env=flwr_env(home, ROOT), capture_output=True, text=True)
    finally:
        stop_processes_of(home, signal.SIGTERM)
    wall = time.perf_counter() - t0
    (out / "flwr_run.log").write_text(r.stdout + r.stderr)
    metrics_file = out / "metrics.json"
    if r.returncode != 0 or not metrics_file.is_file():
        print(f"flwr run failed (exit {r.returncode}); log in {out / 'flwr_run.log'}", file=sys.stderr)
        return 1
    m = json.loads(metrics_file.read_text())
    rows = []
    for rec, rep in zip(m["rounds"], m["reshuffle"]):
        phases = rep["phase_seconds"]
        rows.append({
            "round": rep["round"], "round_s": rep["seconds"], "train_s": phases.get("train", 0.0),
            "protocol_s": sum(v for k, v in phases.items() if k != "train"), "roster": rep["roster"],
            "replies": rep["replies"], "groups": rep.get("groups", {}), "failed": rep["failed"],
            "accuracy": rec["accuracy"],
        })
    summary = {"nodes": args.nodes, "group_size": args.group_size, "rounds": rows, "flwr_run_wall_s": wall}
    (out / "flower_groups.json").write_text(json.dumps(summary, indent=2))
    print(f"{args.nodes} SuperNodes in groups of {args.group_size}, {args.rounds} rounds (flwr run: {wall:.0f} s)")
    for x in rows:
        sizes = x["groups"].get("sizes", [])
        print(f"round {x['round']}: {x['round_s']:.1f} s (train {x['train_s']:.1f} s, protocol {x['protocol_s']:.1f} s), "
              f"{x['replies']}/{x['roster']} replies, groups {sizes}, failed {x['groups'].get('failed') or 'none'}, "
              f"accuracy {x['accuracy']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
