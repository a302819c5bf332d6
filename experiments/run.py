"""Reproduce the other measurements: rawness, overhead, detection.

    python experiments/run.py --exp rawness-real rawness --out experiments/evaluation/rawness
    python experiments/run.py --exp overhead --out results --docs   # and write its figures into the docs

The attack × rule decision grid is ``reshuffle grid`` (``reshuffle/evaluation/``).
Each experiment here writes ``<out>/<experiment>/<run>/metrics.json`` and
``<out>/summary.md``; finished runs are skipped. ``--data-root DIR`` points at a
folder holding ``mnist/`` and ``fashion-mnist/`` (otherwise the datasets'
default location applies).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "experiments" / "configs"
EXPERIMENTS = ("detection", "overhead", "rawness-real", "rawness")
PROTOCOL_PHASES = ("setup", "ot", "reserve", "upload", "unmask")
# Targets checked here rather than in tests (they need the full runs).
TARGET_ACC_POINTS = 1.5
TARGET_TPR, TARGET_FPR = 0.95, 0.05
ACC_ATTACKS = ("sign-flip", "gaussian", "scaling", "label-flip")
DET_ATTACKS = ("sign-flip", "gaussian", "scaling")


def load_experiment(path: Path, data_root: Path | None = None) -> dict:
    import tomllib

    spec = tomllib.loads(path.read_text())
    base = dict(spec.get("base", {}))
    if base.get("data_dir"):
        base["data_dir"] = str((ROOT / base["data_dir"]).resolve())
    elif data_root is not None and base.get("dataset") in ("mnist", "fashion-mnist"):
        base["data_dir"] = str(data_root / base["dataset"])
    grid = spec.get("grid", {})
    keys = sorted(grid)
    runs = []
    for values in itertools.product(*(grid[k] for k in keys)):
        over = dict(zip(keys, values))
        name = "_".join(f"{k}={v}" for k, v in over.items()) or "base"
        runs.append((name, {**base, **over}))
    return {"name": spec.get("name", path.stem), "compare_with": spec.get("compare_with"), "runs": runs}


def _one(run_dir: str, settings: dict) -> tuple[str, float]:
    import torch

    torch.set_num_threads(1)  # one core per worker
    from reshuffle.sim import from_mapping, simulate

    t0 = time.perf_counter()
    simulate(from_mapping(settings, source=run_dir), out_dir=run_dir, plots=False)
    return run_dir, time.perf_counter() - t0


def run_all(experiments: list[dict], out: Path, workers: int, only: list[str] | None = None) -> None:
    jobs = []
    for exp in experiments:
        for name, settings in exp["runs"]:
            if only and not all(part in name.split("_") for part in only):
                continue
            d = out / exp["name"] / name
            if not (d / "metrics.json").is_file():
                jobs.append((str(d), settings))
    print(f"{len(jobs)} runs to do ({workers} workers)", flush=True)
    if not jobs:
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_one, d, s) for d, s in jobs]
        for i, fut in enumerate(as_completed(futures), 1):
            d, secs = fut.result()
            print(f"[{i}/{len(jobs)}] {Path(d).relative_to(out)}: {secs:.0f} s", flush=True)


def _load(out: Path, exp: dict) -> dict[str, dict]:
    got = {}
    for name, _ in exp["runs"]:
        p = out / exp["name"] / name / "metrics.json"
        if p.is_file():
            got[name] = json.loads(p.read_text())
    return got


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _fmt(x, pct=False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.2f}" if pct else f"{x:.2f}"


def summarise_grid(exp: dict, got: dict[str, dict]) -> tuple[list[str], list[str]]:
    """Markdown table attack × rule (final accuracy %, mean TPR, mean FPR) and target checks."""
    runs = {name: m for name, m in got.items()}
    attacks = sorted({m["config"]["attack"] for m in runs.values()}, key=lambda a: (a != "none", a))
    rules = sorted({m["config"]["rule"] for m in runs.values()})
    table = [f"| attack | {' | '.join(rules)} |", "|---" * (len(rules) + 1) + "|"]
    cell = {}
    for m in runs.values():
        c = m["config"]
        cell[c["attack"], c["rule"]] = m
    for a in attacks:
        row = []
        for r in rules:
            m = cell.get((a, r))
            if m is None:
                row.append("not run")
                continue
            rr = m["rounds"]
            tpr, fpr = _mean(x["tpr"] for x in rr), _mean(x["fpr"] for x in rr)
            det = "" if tpr is None else f" ({_fmt(tpr)} / {_fmt(fpr)})"
            row.append(f"{_fmt(m['final_accuracy'], True)}{det}")
        table.append(f"| {a} | {' | '.join(row)} |")
    checks = []
    clean = cell.get(("none", "fedavg"))
    if clean is not None:
        base = clean["final_accuracy"]
        for a in ACC_ATTACKS:
            m = cell.get((a, "multi-krum"))
            if m is not None:
                gap = 100 * (base - m["final_accuracy"])
                ok = gap <= TARGET_ACC_POINTS
                checks.append(f"- Multi-Krum vs {a}: {gap:+.2f} points below clean FedAvg "
                              f"(target ≤ {TARGET_ACC_POINTS}): {'PASS' if ok else 'FAIL'}")
    for a in DET_ATTACKS:
        m = cell.get((a, "multi-krum"))
        if m is not None:
            tpr = _mean(x["tpr"] for x in m["rounds"])
            fpr = _mean(x["fpr"] for x in m["rounds"])
            ok = tpr >= TARGET_TPR and fpr <= TARGET_FPR
            checks.append(f"- Multi-Krum detection vs {a}: TPR {tpr:.3f}, FPR {fpr:.3f} "
                          f"(targets ≥ {TARGET_TPR}, ≤ {TARGET_FPR}): {'PASS' if ok else 'FAIL'}")
    return table, checks


def summarise_rawness(exp: dict, got: dict, ref: dict) -> list[str]:
    """Plaintext runs (``got``) against real ones (``ref``): equal curves, and the cause of every lost model."""
    lines = ["| run | rounds | rounds before the first lost model | accuracy identical there | "
             "whole curve identical | models lost in the real run (causes) |", "|---|---|---|---|---|---|"]
    for name, m in sorted(got.items()):
        other = ref.get(name)
        if other is None:
            lines.append(f"| {name} | 0 | – | – | – | real run missing |")
            continue
        a = [r["accuracy"] for r in m["rounds"]]
        b = [r["accuracy"] for r in other["rounds"]]
        lost = [r.get("lost", {}) for r in other["rounds"]]
        first = next((i for i, x in enumerate(lost) if x), len(lost))
        causes: dict[str, int] = {}
        for x in lost:
            for why in x.values():
                causes[why] = causes.get(why, 0) + 1
        why = ", ".join(f"{n} × {c}" for c, n in sorted(causes.items())) or "none"
        lines.append(f"| {name} | {len(a)} | {first} | {'yes' if a[:first] == b[:first] else 'NO'} | "
                     f"{'yes' if a == b else 'no'} | {sum(causes.values())} ({why}) |")
    return lines


OVERHEAD_PHASES = ("training",) + PROTOCOL_PHASES + ("detection",)
# Where --docs writes the overhead figures: the table in docs/results.md and the README's sentence.
DOCS_TABLE = ("<!-- overhead table: python experiments/run.py --exp overhead --docs -->",
              "<!-- end of the overhead table -->")
README_FIGURES = ("<!-- overhead figures: python experiments/run.py --exp overhead --docs -->",
                  "<!-- end of the overhead figures -->")


def overhead_rows(got: dict) -> list[dict]:
    """Per N: the mean seconds per phase over the rounds, the protocol's total, bytes per participant."""
    rows = []
    for m in sorted(got.values(), key=lambda m: m["config"]["clients"]):
        rr = m["rounds"]
        avg = {p: _mean(r["seconds"].get(p, 0.0) for r in rr) for p in OVERHEAD_PHASES}
        rows.append({"N": m["config"]["clients"], "seconds": avg, "protocol": sum(avg[p] for p in PROTOCOL_PHASES),
                     "bytes": _mean(r["bytes"]["per_participant"] for r in rr)})
    return rows


def summarise_overhead(got: dict) -> list[str]:
    lines = [
        "| N | " + " | ".join(OVERHEAD_PHASES) + " | protocol total | bytes per participant |",
        "|---" * (len(OVERHEAD_PHASES) + 3) + "|",
    ]
    for row in overhead_rows(got):
        lines.append(f"| {row['N']} | " + " | ".join(f"{row['seconds'][p]:.2f}" for p in OVERHEAD_PHASES)
                     + f" | {row['protocol']:.2f} | {row['bytes'] / 1e6:.2f} MB |")
    return lines


def readme_overhead(table: list[str]) -> str:
    """The README's overhead sentence, from the table's rows of the smallest and the largest N."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    (n_lo, *_, total_lo, mb_lo), (n_hi, *_, total_hi, mb_hi) = rows[0], rows[-1]
    return (f"A round costs {total_lo} s of protocol time and {mb_lo} per participant at N = {n_lo}, "
            f"{total_hi} s and {mb_hi} at N = {n_hi}")


def _replace_between(path: Path, marks: tuple[str, str], text: str) -> None:
    doc = path.read_text()
    begin, end = marks
    if doc.count(begin) != 1 or doc.count(end) != 1 or doc.index(begin) > doc.index(end):
        raise SystemExit(f"{path} needs one {begin!r} followed by one {end!r}")
    head, rest = doc.split(begin, 1)
    path.write_text(head + begin + text + end + rest.split(end, 1)[1])


def docs_overhead_table(path: Path) -> list[str]:
    """The overhead table as docs/results.md holds it (between its markers)."""
    text = path.read_text().split(DOCS_TABLE[0], 1)[1].split(DOCS_TABLE[1], 1)[0]
    return [line for line in text.splitlines() if line.startswith("|")]


def update_docs(got: dict, results: Path = ROOT / "docs" / "results.md", readme: Path = ROOT / "README.md") -> None:
    """Write the overhead runs' table into ``results`` and its figures into ``readme``: measured, never typed."""
    table = summarise_overhead(got)
    date = time.strftime("%Y-%m-%d")
    _replace_between(results, DOCS_TABLE, f"\n(measured {date})\n\n" + "\n".join(table) + "\n\n")
    _replace_between(readme, README_FIGURES, readme_overhead(table))


def plot_grid(got: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attacks = sorted({m["config"]["attack"] for m in got.values()})
    cols = min(4, len(attacks))
    rows = -(-len(attacks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharey=True)
    for ax, a in zip(axes.flat, attacks):
        for m in sorted(got.values(), key=lambda m: m["config"]["rule"]):
            if m["config"]["attack"] == a:
                ax.plot([r["round"] for r in m["rounds"]], [r["accuracy"] for r in m["rounds"]], label=m["config"]["rule"])
        ax.set_title(a, fontsize="small")
        ax.set_ylim(0, 1)
    for ax in axes.flat[len(attacks):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize="x-small")
    fig.supxlabel("round")
    fig.supylabel("test accuracy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_overhead(got: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = sorted(got.values(), key=lambda m: m["config"]["clients"])
    xs = [str(m["config"]["clients"]) for m in ms]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bottom = [0.0] * len(ms)
    for p in ("training",) + PROTOCOL_PHASES:
        vals = [_mean(r["seconds"].get(p, 0.0) for r in m["rounds"]) for m in ms]
        ax.bar(xs, vals, bottom=bottom, label=p)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set(xlabel="participants N", ylabel="seconds per round", title="Round time (critical path)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_summary(experiments: list[dict], out: Path) -> str:
    loaded = {exp["name"]: (exp, _load(out, exp)) for exp in experiments}
    md = ["# Re-Shuffle evaluation", "", f"Generated by `experiments/run.py` on {time.strftime('%Y-%m-%d %H:%M')}.", ""]
    for name, (exp, got) in loaded.items():
        done = f"{len(got)} of {len(exp['runs'])} runs finished"
        if name == "overhead":
            md += [f"## Overhead ({done})", "",
                   "Seconds per round, averaged over rounds; each protocol phase is the PS's time plus the slowest "
                   "participant's (the critical path of a deployment), training is the slowest client's.", ""]
            md += summarise_overhead(got) if got else ["(no runs)"]
            if got:
                plot_overhead(got, out / "overhead.png")
                md += ["", "![overhead](overhead.png)"]
        elif exp.get("compare_with"):
            ref = loaded.get(exp["compare_with"], (None, {}))[1] or _load(out, {"name": exp["compare_with"], "runs": exp["runs"]})
            md += [f"## Rawness: `{name}` against `{exp['compare_with']}` ({done})", ""]
            md += summarise_rawness(exp, got, ref)
        else:
            md += [f"## Detection effect: `{name}` ({done})", "",
                   "Final test accuracy (%), with mean TPR / FPR over rounds where attackers exist.", ""]
            if got:
                table, checks = summarise_grid(exp, got)
                md += table + ["", "Targets:", ""] + (checks or ["- (needed runs not finished)"])
                plot_grid(got, out / f"{name}_accuracy.png")
                md += ["", f"![accuracy]({name}_accuracy.png)"]
        md.append("")
    text = "\n".join(md)
    (out / "summary.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exp", nargs="+", choices=EXPERIMENTS, help="experiments to run")
    p.add_argument("--config", nargs="+", type=Path, help="experiment TOML files (instead of --exp)")
    p.add_argument("--data-root", type=Path, help="folder holding mnist/ and fashion-mnist/")
    p.add_argument("--out", type=Path, help="results folder (default: results)")
    p.add_argument("--workers", type=int, default=1, help="parallel runs, one core each")
    p.add_argument("--only", nargs="+", metavar="KEY=VALUE", help="only grid points with these values")
    p.add_argument("--summary-only", action="store_true", help="only rebuild the summaries from finished runs")
    p.add_argument("--docs", action="store_true",
                   help="then write the overhead runs' table into docs/results.md and its figures into README.md")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error("--workers must be at least 1")
    if not (args.config or args.exp):
        p.error("name the experiments (--exp) or their TOML files (--config); the decision grid is `reshuffle grid`")
    paths = args.config or [CONFIGS / f"{e}.toml" for e in args.exp]
    for path in paths:
        if not path.is_file():
            p.error(f"experiment config {path} not found")
    experiments = [load_experiment(path, args.data_root) for path in paths]
    out = args.out or ROOT / "results"
    out.mkdir(parents=True, exist_ok=True)
    if not args.summary_only:
        run_all(experiments, out, args.workers, args.only)
    print(write_summary(experiments, out))
    if args.docs:
        overhead = next((exp for exp in experiments if exp["name"] == "overhead"), None)
        if overhead is None or not _load(out, overhead):
            p.error("--docs writes the overhead figures: run --exp overhead first")
        update_docs(_load(out, overhead))
        print("wrote the overhead table into docs/results.md and its figures into README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
