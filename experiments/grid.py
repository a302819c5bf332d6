"""The complete evaluation grid: row sets × attacks × rules, one finished cell per file.

A *row set* is a data setting (dataset, partition); a *cell* is one simulated
federation (row set, attack, rule) and is stored, once finished, as
``<out>/<row set>/<attack>__<rule>.json``: the run's configuration and its
per-round accuracy, attack success, TPR and FPR (no models). Finished cells are
skipped, so the grid resumes; the summary is rebuilt from whatever cells exist
and lists the missing ones by name.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Goals of issue 13, checked on the finished cells.
ACC_POINTS = 1.5
BACKDOOR_MAX = 0.05
DEFAULT_RULE = "multi-krum"
DETECTION_GOALS = {  # attack -> (rule scope, TPR at least, FPR at most)
    "sign-flip": ("default", 0.95, 0.05),
    "alie": ("any", 0.9, 0.2),
    "ipm": ("any", 0.9, 0.3),
}


def registry_attacks() -> list[str]:
    from reshuffle.attacks import attack_names

    return attack_names()


def registry_rules() -> list[str]:
    """Every registered rule (the rules registry when present, else the fixed list)."""
    from reshuffle.server import rules

    names = getattr(rules, "rule_names", None)
    return list(names()) if callable(names) else list(rules.RULES)


@dataclass(frozen=True)
class Grid:
    name: str
    base: dict[str, Any]
    rowsets: dict[str, dict[str, Any]]
    attacks: list[str]
    rules: list[str]

    def cells(self) -> list[tuple[str, str, str]]:
        return [(rs, a, r) for rs in self.rowsets for a in self.attacks for r in self.rules]

    def settings(self, rowset: str, attack: str, rule: str, data_root: Path | None) -> dict[str, Any]:
        s = {**self.base, **self.rowsets[rowset], "attack": attack, "rule": rule}
        if attack == "none":
            s["malicious"] = 0.0
        if data_root is not None:
            s["data_dir"] = str(data_root / s["dataset"])
        return s


def load_grid(path: Path, attacks: list[str] | None = None, rules: list[str] | None = None,
              rowsets: list[str] | None = None) -> Grid:
    """The grid of ``path``; attacks and rules default to the registries ("all"), plus its ``compositions``."""
    spec = tomllib.loads(path.read_text())
    all_sets = spec.get("rowsets", {})
    if not all_sets:
        raise SystemExit(f"{path}: no [rowsets.<name>] tables")
    pick_sets = rowsets or list(all_sets)
    unknown = [r for r in pick_sets if r not in all_sets]
    if unknown:
        raise SystemExit(f"unknown row set(s) {unknown}; {path} has {list(all_sets)}")
    known_a, known_r = registry_attacks(), registry_rules()
    pick_a = attacks or (known_a if spec.get("attacks", "all") == "all" else spec["attacks"])
    pick_r = rules or (known_r if spec.get("rules", "all") == "all" else spec["rules"])
    if not rules:
        # Composed candidates (e.g. "geomed+signstat+cosine") join the registered rules as grid columns.
        pick_r = [*pick_r, *(c for c in spec.get("compositions", []) if c not in pick_r)]
    for kind, got, known in (("attack", pick_a, known_a), ("rule", pick_r, known_r)):
        bad = [x for x in got if x not in known and "+" not in x and ":" not in x]
        if bad:
            raise SystemExit(f"unknown {kind}(s) {bad}; registered: {', '.join(known)}")
    # the clean baseline every comparison needs, first
    pick_a = ["none", *(a for a in pick_a if a != "none")]
    return Grid(spec.get("name", path.stem), dict(spec.get("base", {})),
                {k: all_sets[k] for k in pick_sets}, list(pick_a), list(pick_r))


def cell_path(out: Path, rowset: str, attack: str, rule: str) -> Path:
    return out / rowset / f"{attack}__{rule}.json"


def run_cell(path: str, settings: dict[str, Any]) -> tuple[str, float]:
    """Simulate one cell and write its compact result atomically."""
    import torch

    torch.set_num_threads(1)  # one core per worker; more threads than cores only wait on each other
    from reshuffle.sim import from_mapping, simulate

    from reshuffle.errors import ReShuffleError

    t0 = time.perf_counter()
    try:
        data = simulate(from_mapping(settings, source=path))
    except (ReShuffleError, FloatingPointError, RuntimeError) as exc:
        # A run that breaks (e.g. a model driven to non-finite values) is a result, recorded with its reason.
        cell = {"config": settings, "seconds": time.perf_counter() - t0, "final_accuracy": None,
                "error": f"{type(exc).__name__}: {exc}"}
        _write(Path(path), cell)
        return path, cell["seconds"]
    secs = time.perf_counter() - t0
    rounds = data["rounds"]
    cell = {
        "config": data["config"],
        "malicious_clients": data["malicious_clients"],
        "seconds": secs,
        "final_accuracy": data["final_accuracy"],
        **{k: [r[k] for r in rounds] for k in ("accuracy", "attack_success", "tpr", "fpr", "models_received",
                                                 "diverged")},
        "lost": [r["lost"] for r in rounds],
    }
    _write(Path(path), cell)
    return path, secs


def _write(p: Path, cell: dict) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(cell) + "\n")
    os.replace(tmp, p)


def run_grid(grid: Grid, out: Path, workers: int, data_root: Path | None, quiet: bool = False) -> None:
    todo = [(str(cell_path(out, *c)), grid.settings(*c, data_root)) for c in grid.cells()
            if not cell_path(out, *c).is_file()]
    total = len(grid.cells())
    print(f"{grid.name}: {total - len(todo)} of {total} cells finished, {len(todo)} to run ({workers} workers)",
          flush=True)
    if not todo:
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    cols = (TextColumn("cells"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[last]}"),
            TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*cols, disable=quiet) as bar, ProcessPoolExecutor(max_workers=workers) as pool:
        task = bar.add_task("grid", total=len(todo), last="")
        futures = [pool.submit(run_cell, p, s) for p, s in todo]
        for fut in as_completed(futures):
            path, secs = fut.result()
            name = str(Path(path).relative_to(out))
            bar.update(task, advance=1, last=f"{name} {secs:.0f} s")
            if quiet:
                print(f"{name}: {secs:.0f} s", flush=True)


# --- summary -------------------------------------------------------------------------------


def load_cells(grid: Grid, out: Path) -> dict[tuple[str, str, str], dict]:
    got = {}
    for c in grid.cells():
        p = cell_path(out, *c)
        if p.is_file():
            got[c] = json.loads(p.read_text())
    return got


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def cell_stats(cell: dict) -> dict[str, float | None]:
    """Final accuracy, mean TPR / FPR over rounds, final attack success (all None for a failed run)."""
    if cell.get("error"):
        return {"acc": None, "tpr": None, "fpr": None, "success": None}
    return {"acc": cell["final_accuracy"], "tpr": _mean(cell["tpr"]), "fpr": _mean(cell["fpr"]),
            "success": cell["attack_success"][-1] if cell["attack_success"] else None}


def losses(cell: dict) -> tuple[int, dict[str, int], int]:
    """(models lost over all rounds, count per cause kind, rounds ending with a diverged global model)."""
    kinds: dict[str, int] = {}
    for lost in cell.get("lost", []):
        for why in lost.values():
            kind = why.split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    return sum(kinds.values()), kinds, sum(bool(x) for x in cell.get("diverged", []))


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _rate(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _table(grid: Grid, rs: str, got: dict, fmt) -> list[str]:
    lines = [f"| attack | {' | '.join(grid.rules)} |", "|---" * (len(grid.rules) + 1) + "|"]
    for a in grid.attacks:
        row = [("failed" if got[rs, a, r].get("error") else fmt(cell_stats(got[rs, a, r]))) if (rs, a, r) in got
               else "missing" for r in grid.rules]
        lines.append(f"| {a} | {' | '.join(row)} |")
    return lines


def goal_checks(grid: Grid, rs: str, got: dict) -> tuple[list[str], dict[str, list[str]]]:
    """Issue 13's goals on one row set; also, per attack, the rules that meet the accuracy/backdoor goal."""
    lines, winners = [], {}
    clean = got.get((rs, "none", "fedavg"))
    if clean is None:
        return ["- clean FedAvg (none × fedavg) missing: accuracy goals cannot be checked"], winners
    base = clean["final_accuracy"]
    for a in grid.attacks:
        if a == "none":
            continue
        ok, seen = [], 0
        for r in grid.rules:
            if (rs, a, r) not in got:
                continue
            seen += 1
            st = cell_stats(got[rs, a, r])
            if st["acc"] is None:
                continue
            backdoor_ok = a not in BACKDOORS or (st["success"] is not None and st["success"] <= BACKDOOR_MAX)
            if 100 * (base - st["acc"]) <= ACC_POINTS and backdoor_ok:
                ok.append(r)
        winners[a] = ok
        if seen:
            verdict = "PASS" if ok else "FAIL"
            lines.append(f"- {a}: rules within {ACC_POINTS} points of clean FedAvg ({100 * base:.1f} %)"
                         f"{' with backdoor success ≤ 5 %' if a in BACKDOORS else ''}: "
                         f"{', '.join(ok) or 'none'} ({seen} rules run): {verdict}")
    for a, (scope, tpr_min, fpr_max) in DETECTION_GOALS.items():
        if a not in grid.attacks:
            continue
        rules = [DEFAULT_RULE] if scope == "default" else grid.rules
        hits = []
        for r in rules:
            if (rs, a, r) in got:
                st = cell_stats(got[rs, a, r])
                if st["tpr"] is not None and st["tpr"] >= tpr_min and st["fpr"] <= fpr_max:
                    hits.append(f"{r} ({st['tpr']:.2f} / {st['fpr']:.2f})")
        ran = [r for r in rules if (rs, a, r) in got]
        if ran:
            lines.append(f"- {a} detected with TPR ≥ {tpr_min} at FPR ≤ {fpr_max} by "
                         f"{'the default rule ' + DEFAULT_RULE if scope == 'default' else 'some rule'}: "
                         f"{', '.join(hits) or 'no'}: {'PASS' if hits else 'FAIL'}")
    return lines, winners


BACKDOORS = ("badnets", "dba", "model-replacement")


def reading(grid: Grid, rs: str, got: dict, winners: dict[str, list[str]]) -> list[str]:
    """A data-driven reading: the best rule per attack, and the attacks every run rule fails."""
    lines = []
    clean = got.get((rs, "none", "fedavg"))
    for a in grid.attacks:
        ran = [r for r in grid.rules if (rs, a, r) in got and not got[rs, a, r].get("error")]
        if a == "none" or not ran or clean is None:
            continue
        best = max(ran, key=lambda r: got[rs, a, r]["final_accuracy"])
        st = cell_stats(got[rs, a, best])
        drop = 100 * (clean["final_accuracy"] - st["acc"])
        extra = f", backdoor success {_pct(st['success'])} %" if a in BACKDOORS else ""
        if winners.get(a):
            lines.append(f"- **{a}**: choose {', '.join(winners[a])}; best {best} "
                         f"({_pct(st['acc'])} %, {-drop:+.1f} points vs clean{extra}).")
        else:
            lines.append(f"- **{a}**: every rule run fails ({len(ran)} of {len(grid.rules)}); best is {best} "
                         f"({_pct(st['acc'])} %, {-drop:+.1f} points vs clean{extra}).")
    return lines


def _heatmap(grid: Grid, rs: str, got: dict, key: str, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    attacks = [a for a in grid.attacks if key != "success" or a in BACKDOORS + ("label-flip",)]
    if not attacks:
        return
    M = np.full((len(attacks), len(grid.rules)), np.nan)
    for i, a in enumerate(attacks):
        for j, r in enumerate(grid.rules):
            if (rs, a, r) in got and cell_stats(got[rs, a, r])[key] is not None:
                M[i, j] = 100 * cell_stats(got[rs, a, r])[key]
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(grid.rules), 0.9 + 0.4 * len(attacks)))
    cmap = plt.get_cmap("viridis" if key == "acc" else "magma_r").with_extremes(bad="lightgrey")
    im = ax.imshow(np.ma.masked_invalid(M), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    for i in range(len(attacks)):
        for j in range(len(grid.rules)):
            ax.text(j, i, "–" if np.isnan(M[i, j]) else f"{M[i, j]:.0f}", ha="center", va="center", fontsize=7,
                    color="black" if np.isnan(M[i, j]) or (M[i, j] > 60) == (key == "acc") else "white")
    ax.set_xticks(range(len(grid.rules)), grid.rules, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(attacks)), attacks, fontsize=7)
    ax.set_title(f"{rs}: {title} (%; grey = missing)", fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_summary(grid: Grid, out: Path) -> str:
    got = load_cells(grid, out)
    cells = grid.cells()
    secs = [c["seconds"] for c in got.values()]
    md = [f"# Evaluation grid `{grid.name}`", "",
          f"Rebuilt by `experiments/run.py` on {time.strftime('%Y-%m-%d %H:%M')} from the finished cells: "
          f"{len(got)} of {len(cells)}.", ""]
    base = ", ".join(f"{k} = {v}" for k, v in sorted(grid.base.items()))
    md += [f"Common settings: {base}. The attack `none` runs without attackers (the clean baseline).", ""]
    if secs:
        per = sum(secs) / len(secs)
        left = len(cells) - len(got)
        md += [f"Cost: {per:.0f} s per cell measured (mean of {len(secs)}, one core each); the {left} missing "
               f"cells need about {left * per / 3600:.1f} core-hours.", ""]
    for rs, over in grid.rowsets.items():
        mine = {k: v for k, v in got.items() if k[0] == rs}
        md += [f"## {rs} ({', '.join(f'{k} = {v}' for k, v in over.items())}): "
               f"{len(mine)} of {len(grid.attacks) * len(grid.rules)} cells", ""]
        if not mine:
            md += ["No finished cells.", ""]
        else:
            md += ["Final test accuracy (%):", ""] + _table(grid, rs, got, lambda s: _pct(s["acc"])) + [""]
            md += ["TPR / FPR, mean over rounds (– : no attackers; rules that accept every row show "
                   "0.00 / 0.00):", ""]
            md += _table(grid, rs, got, lambda s: "–" if s["tpr"] is None else f"{_rate(s['tpr'])} / {_rate(s['fpr'])}")
            bd = [a for a in grid.attacks if a in BACKDOORS or a == "label-flip"]
            if bd:
                md += ["", "Attack success after the last round (%; backdoors: triggered non-target test inputs "
                       "classified as the target; label-flip: test inputs classified as the flipped label):", ""]
                sub = Grid(grid.name, grid.base, grid.rowsets, bd, grid.rules)
                md += _table(sub, rs, got, lambda s: _pct(s["success"]))
            checks, winners = goal_checks(grid, rs, got)
            md += ["", "Goals:", ""] + checks + ["", "Reading (generated from the cells):", ""]
            md += reading(grid, rs, got, winners) or [
                "- (clean baseline missing)" if (rs, "none", "fedavg") not in got else "- (no attacked cells yet)"]
            for key, title in (("acc", "final accuracy"), ("success", "attack success")):
                png = f"{rs}_{key}.png"
                _heatmap(grid, rs, got, key, title, out / png)
                if (out / png).is_file():
                    md += ["", f"![{rs} {title}]({png})"]
        hurt = []
        for (s, a, r) in cells:
            if s == rs and (s, a, r) in got and not got[s, a, r].get("error"):
                n, kinds, div = losses(got[s, a, r])
                if n or div:
                    why = ", ".join(f"{k} × {c}" for k, c in sorted(kinds.items()))
                    hurt.append(f"{a} × {r}: {n} models lost ({why or 'none'}), {div} rounds with a diverged "
                                f"(NaN/Inf) global model")
        if hurt:
            md += ["", "Runs that lost models or diverged (every lost model has its recorded cause in the cell):", ""]
            md += [f"- {h}" for h in hurt]
        failed = [f"{a} × {r} ({got[s, a, r]['error']})" for (s, a, r) in cells
                  if s == rs and (s, a, r) in got and got[s, a, r].get("error")]
        if failed:
            md += ["", f"Failed runs ({len(failed)}): " + "; ".join(failed)]
        missing = [f"{a} × {r}" for (s, a, r) in cells if s == rs and (s, a, r) not in got]
        md += ["", f"Missing cells ({len(missing)}): " + ("; ".join(missing) if missing else "none"), ""]
    text = "\n".join(md)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(text)
    return text
