"""Where one attack's class drops come from, read from a grid's finished cells.

The grid's class drop is the most accuracy one class loses against the same rule's run with the attackers
idle. This script splits it for one attack (default ``frame-class``), per setting, horizon, rule and seed:
the class that drops and how much, the same class under FedAvg and the same attack (no rule there to aim,
so what FedAvg loses is the attack's own effect, not a lever), the attack's target class (where it has one),
how often the rule down-weighted honest rows, how far that class already moves between the rule's two
reference runs (idle and clean), and the range that class spans over the rule's other runs of the same seed
(every other attack, idle and clean included): the last two bound what one final accuracy can tell.

    python experiments/class_drops.py --config experiments/configs/framing-grid.toml \\
        --out experiments/evaluation/framing \\
        --config experiments/configs/frame-class-fedavg.toml --out experiments/evaluation/frame-class-fedavg \\
        [--attack frame-class] [--json drops.json]

Each ``--config`` goes with the ``--out`` in the same place; the cells of all the grids named are read as one
(the second above adds FedAvg's 30-round runs). It prints one Markdown table per setting and horizon;
``--json`` writes the rows too. Nothing is run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from reshuffle.attacks.base import make_attack  # noqa: E402
from reshuffle.errors import ConfigError  # noqa: E402
from reshuffle.evaluation.cell import read_cell  # noqa: E402
from reshuffle.evaluation.grid import CLASS_REFERENCE, CLEAN, REFERENCE_RULE, default_grid, load_grid_toml  # noqa: E402
from reshuffle.evaluation.summary import worst_class  # noqa: E402


def _done(rec: dict | None) -> bool:
    return rec is not None and rec.get("status") == "done" and bool(rec.get("class_accuracy"))


def rows(grids: list[tuple[Path, Path]], attack: str) -> list[dict]:
    """One row per finished cell of ``attack`` whose idle twin (same setting, horizon, rule, seed) is done.

    ``grids``: (configuration, output folder) pairs, read as one set of cells; a cell stored in several
    folders is taken from the first that has it done.
    """
    recs: dict[tuple, dict | None] = {}
    for config, out in grids:
        grid = load_grid_toml(config, default_grid())
        if attack not in grid.all_attacks:
            raise ConfigError(f"{config} has no attack {attack!r} (it has {', '.join(grid.all_attacks)})")
        for c in grid.cells():
            key = (c.setting.label, c.rounds, c.attack, c.rule, c.seed)
            if not _done(recs.get(key)):
                recs[key] = read_cell(out / c.relpath)
    target = getattr(make_attack(attack), "target", None)
    result = []
    for (setting, rounds, a, rule, seed), rec in recs.items():
        idle = recs.get((setting, rounds, CLASS_REFERENCE, rule, seed))
        if a != attack or not _done(rec) or not _done(idle):
            continue
        mine, base = rec["class_accuracy"], idle["class_accuracy"]
        worst = worst_class(base, mine)
        if worst is None:
            continue
        drop, k = worst
        fed, fed_idle = recs.get((setting, rounds, a, REFERENCE_RULE, seed)), recs.get(
            (setting, rounds, CLASS_REFERENCE, REFERENCE_RULE, seed))
        clean = recs.get((setting, rounds, CLEAN, rule, seed))
        swing = _change(base, clean["class_accuracy"], k) if _done(clean) else None
        others = [_value(other["class_accuracy"], k) for (s2, r2, a2, rule2, seed2), other in recs.items()
                  if (s2, r2, rule2, seed2) == (setting, rounds, rule, seed) and a2 != attack and _done(other)]
        others = [v for v in others if v is not None]
        fed_done = _done(fed) and _done(fed_idle)
        fed_change = _change(fed_idle["class_accuracy"], fed["class_accuracy"], k) if fed_done else None
        result.append({
            "setting": setting, "rounds": rounds, "rule": rule, "seed": seed, "class": k, "drop": drop,
            "fedavg_drop": None if fed_change is None else -fed_change,
            "target": target, "target_change": None if target is None else _change(base, mine, target),
            "honest_downweighted": rec.get("honest_downweighted"),
            "reference_swing": None if swing is None else abs(swing),
            "others": len(others), "others_low": min(others, default=None), "others_high": max(others, default=None),
            "value": _value(mine, k),
        })
    return result


def _value(acc: list, k: int) -> float | None:
    return acc[k] if k < len(acc) else None


def _change(before: list, after: list, k: int) -> float | None:
    """Class ``k``'s accuracy from ``before`` to ``after`` (None where a run has no value for it)."""
    a, b = _value(before, k), _value(after, k)
    return None if a is None or b is None else b - a


def _pts(v: float | None, signed: bool = False) -> str:
    return "–" if v is None else f"{100 * v:+.1f}" if signed else f"{100 * v:.1f}"


def _others(r: dict) -> str:
    if not r["others"]:
        return f"{_pts(r['value'])}; –"
    return f"{_pts(r['value'])}; {_pts(r['others_low'])}–{_pts(r['others_high'])} ({r['others']})"


def table(found: list[dict], attack: str) -> str:
    """Markdown: one table per (setting, horizon), rules in the grid's order of appearance, then seeds."""
    lines = []
    for setting, rounds in dict.fromkeys((r["setting"], r["rounds"]) for r in found):
        mine = [r for r in found if (r["setting"], r["rounds"]) == (setting, rounds)]
        lines += [f"{attack}, {setting}, {rounds or 'base'} rounds:", "",
                  "| rule | seed | class drop vs idle (points) | same class, FedAvg, same attack | target class "
                  "change | honest rows down-weighted | that class, idle vs clean run | that class: this attack; the rule's "
                  "other runs, min–max (runs) |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in sorted(mine, key=lambda r: (r["rule"] != REFERENCE_RULE, r["rule"], r["seed"])):
            target = "–" if r["target"] is None else f"{_pts(r['target_change'], True)} (class {r['target']})"
            lines.append(f"| {r['rule']} | {r['seed']} | {_pts(r['drop'])} (class {r['class']}) | "
                         f"{_pts(r['fedavg_drop'])} | {target} | {r['honest_downweighted']} | "
                         f"{_pts(r['reference_swing'])} | {_others(r)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, action="append", required=True, help="a grid's TOML (repeatable)")
    ap.add_argument("--out", type=Path, action="append", required=True,
                    help="that grid's output folder, holding its cells/ (one per --config)")
    ap.add_argument("--attack", default="frame-class", help="the attack whose class drops to split")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    try:
        if len(args.config) != len(args.out):
            raise ConfigError(f"{len(args.config)} --config but {len(args.out)} --out: give one folder per grid")
        for out in args.out:
            if not (out / "cells").is_dir():
                raise ConfigError(f"{out} has no cells/ folder: give the grid's --out")
        found = rows(list(zip(args.config, args.out)), args.attack)
    except (ConfigError, OSError) as e:
        print(f"class_drops: {e}", file=sys.stderr)
        return 2
    if not found:
        print(f"class_drops: no finished {args.attack} cell has a finished idle twin in "
              f"{', '.join(map(str, args.out))}", file=sys.stderr)
        return 1
    print(table(found, args.attack))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
