"""Per-participant cost of a real round against N (fixed group size g) and against g.

Each point is one ``reshuffle.shuffle(..., group_size=g, workers=W)`` round at
LeNet-5 size. A participant's upload is one row per member of its group (plus
the decoys'), so its bytes should not depend on N and grow linearly in g; its
masking expands g streams over that upload, so its time grows as g².

    python experiments/scale.py --out results/scale            # the curves (minutes)
    python experiments/scale.py --quick --out /tmp/scale       # a smoke run
    python experiments/scale.py --replot --out results/scale   # the plot again from scale.json

Writes ``scale.json`` and ``scale.md`` (the tables) under ``--out`` and the plot
to ``--plot`` (default ``docs/scale.png``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import reshuffle  # noqa: E402
from reshuffle.bench.round import LENET5_D  # noqa: E402


def point(N: int, g: int, d: int, workers: int) -> dict:
    """One round; per-participant figures averaged over the participants."""
    # Test data only; the protocol draws its own secrets from a cryptographic PRG.
    gen = np.random.default_rng(N * 1000 + g)
    ups = [(gen.normal(size=d) * 0.05).astype(np.float32) for _ in range(N)]
    t0 = time.perf_counter()
    r = reshuffle.shuffle(ups, seed=N + g, group_size=g, workers=workers)
    wall = time.perf_counter() - t0
    if len(r.models) != N:
        raise RuntimeError(f"N={N}, g={g}: {len(r.models)} models delivered")
    phases = {ph: v for ph, v in r.stats.items() if isinstance(v, dict) and "ps_s" in v}
    # With groups the assignment is one more entry ("assign"): it counts for the participant.
    return {
        "N": N,
        "g": g,
        "groups": len(r.groups or [()]),
        "wall_s": wall,
        "participant_s": sum(v["participant_s"] for v in phases.values()),
        "participant_critical_s": sum(v["participant_max_s"] for v in phases.values()),
        "participant_upload_s": phases["upload"]["participant_s"],
        # CPU time of the handlers: what a participant's machine spends, whatever else runs here.
        "participant_cpu_s": sum(v["participant_cpu_s"] for v in phases.values()),
        "participant_upload_cpu_s": phases["upload"]["participant_cpu_s"],
        "participant_bytes": sum(v["participant_bytes_sent"] + v["participant_bytes_received"]
                                 for v in phases.values()),
        "participant_upload_bytes": phases["upload"]["participant_bytes_sent"],
        "ps_s": sum(v["ps_s"] for v in phases.values()),
    }


def table(rows: list[dict]) -> str:
    head = ("| g | N | groups | CPU s per participant | of which upload | bytes per participant "
            "| upload bytes | wall s |")
    out = [head, "|" + "---|" * 8]
    for r in rows:
        out.append(
            f"| {r['g']} | {r['N']} | {r['groups']} | {r['participant_cpu_s']:.3f} | {r['participant_upload_cpu_s']:.3f} "
            f"| {r['participant_bytes'] / 1e6:.2f} MB | {r['participant_upload_bytes'] / 1e6:.2f} MB | {r['wall_s']:.1f} |"
        )
    return "\n".join(out)


def plot(by_n: list[dict], by_g: list[dict], g: int, n_for_g: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, rows, key, title in (
        (axes[0], by_n, "N", f"against N (g = {g})"),
        (axes[1], by_g, "g", f"against g (N = {n_for_g})"),
    ):
        x = [r[key] for r in rows]
        ax.plot(x, [r["participant_cpu_s"] for r in rows], "o-", label="CPU s per participant")
        ax.set_xlabel(key)
        ax.set_ylabel("CPU seconds")
        ax.set_title(title)
        ax2 = ax.twinx()
        ax2.plot(x, [r["participant_bytes"] / 1e6 for r in rows], "s--", color="tab:orange", label="MB per participant")
        ax2.set_ylabel("MB")
        ax.set_ylim(0, 1.3 * max(r["participant_cpu_s"] for r in rows))
        ax2.set_ylim(0, 1.3 * max(r["participant_bytes"] / 1e6 for r in rows))
        lines = ax.get_lines() + ax2.get_lines()
        ax.legend(lines, [ln.get_label() for ln in lines], loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for scale.json and scale.md")
    ap.add_argument("--plot", default=str(ROOT / "docs" / "scale.png"), help="PNG of both curves")
    ap.add_argument("--d", type=int, default=LENET5_D, help="model size")
    ap.add_argument("--workers", type=int, default=2, help="participant processes")
    ap.add_argument("--g", type=int, default=20, help="group size of the N curve")
    ap.add_argument("--Ns", type=int, nargs="+", default=[20, 40, 80, 160], help="N of the N curve")
    ap.add_argument("--gs", type=int, nargs="+", default=[5, 10, 20, 40], help="g of the g curve")
    ap.add_argument("--N-for-g", type=int, default=80, help="N of the g curve")
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--replot", action="store_true", help="redraw the plot from --out/scale.json, run nothing")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.replot:
        saved = json.loads((out / "scale.json").read_text())
        by_n, by_g = saved["by_N"], saved["by_g"]
        plot(by_n, by_g, by_n[0]["g"], by_g[0]["N"], Path(args.plot))
        return 0
    if args.quick:
        args.d, args.g, args.Ns, args.gs, args.N_for_g = 2000, 5, [10, 20], [5, 10], 20
    by_n = [point(N, args.g, args.d, args.workers) for N in args.Ns]
    by_g = [point(args.N_for_g, g, args.d, args.workers) for g in args.gs]
    out.mkdir(parents=True, exist_ok=True)
    meta = {"d": args.d, "workers": args.workers, "date": time.strftime("%Y-%m-%d")}
    (out / "scale.json").write_text(json.dumps({"meta": meta, "by_N": by_n, "by_g": by_g}, indent=2))
    md = (f"Per participant against N (g = {args.g}):\n\n{table(by_n)}\n\n"
          f"Per participant against g (N = {args.N_for_g}):\n\n{table(by_g)}\n")
    (out / "scale.md").write_text(md)
    plot(by_n, by_g, args.g, args.N_for_g, Path(args.plot))
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
