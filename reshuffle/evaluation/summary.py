"""What the finished cells say: per-cell statistics over seeds, the worst case per rule, the goal.

All quantities are fractions in ``summary.json`` and points / percent in the
Markdown. Definitions (per setting and seed s):

* drop(attack, rule, s) = acc(none, fedavg, s) − acc(attack, rule, s): the accuracy a
  rule gives up against clean FedAvg;
* impact(attack, s) = drop(attack, fedavg, s): the attack's effect without defense;
  an attack with a mean impact below 1 point is *harmless* in that setting,
  unless it is a backdoor that succeeds (> 5 %) against FedAvg;
* share(attack, rule, s) = the attackers' share of the aggregate's weight
  (their rows' Decision weights over all rows'), averaged over rounds: for a
  rule that down-weights rather than rejects, what TPR does not show;
* the worst case of a rule in a setting is the largest seed-mean drop over all
  attacks (the clean run included), the largest single-seed drop, and the
  largest seed-mean backdoor success over the backdoor attacks, over both
  horizons (the long horizon's drops are against clean FedAvg over as many
  rounds);
* class_drop(attack, rule, s) = the most accuracy one class loses against the same
  rule's run with the attackers ``idle`` (zero updates: they add nothing, and the
  share of a class their own data carried is missing there too), or without
  attackers where the grid has no idle run (none for the idle run itself: what
  its missing rows cost shows in its accuracy drop);
* the goal: worst backdoor success ≤ 5 %, worst drop ≤ 2 points, clean FPR ≤ 0.10,
  no class drop above 5 points.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

from reshuffle.evaluation.cell import read_cell, same_settings
from reshuffle.evaluation.grid import CLASS_REFERENCE, CLEAN, REFERENCE_RULE, Cell, Grid

HARMLESS_POINTS = 1.0
GOAL_BACKDOOR = 0.05
GOAL_DROP_POINTS = 2.0
GOAL_CLEAN_FPR = 0.10
#: No class may lose more than this many points of accuracy to any attack (against the same rule with the
#: attackers idle, else without attackers): framing aimed at one class's holders shows there, not in the
#: overall accuracy.
GOAL_CLASS_POINTS = 5.0


def load_records(cells: Iterable[Cell], out: Path, expected: Mapping[Cell, dict] | None = None
                 ) -> dict[Cell, dict | None]:
    """The stored record of every cell in ``cells`` (None when missing, or run with other settings)."""
    got: dict[Cell, dict | None] = {}
    for cell in cells:
        rec = read_cell(out / cell.relpath)
        if rec is not None and rec.get("status") == "done" and expected is not None and cell in expected:
            if not same_settings(rec["config"], expected[cell]):
                rec = None  # run with other settings: stale
        got[cell] = rec
    return got


def stats(values: Iterable[float | None]) -> dict[str, float] | None:
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    return {"mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def _done(rec: dict | None) -> bool:
    return rec is not None and rec.get("status") == "done"


def summarize(grid: Grid, records: Mapping[Cell, dict | None]) -> dict[str, Any]:
    """The summary.json object of ``records`` (cell → record, None where not run).

    ``records`` names the cells the summary covers; ``grid`` gives the order of
    its settings, attacks and rules and the base settings it reports.
    """
    cells = list(records)
    by_group: dict[tuple[str, int | None, str, str], dict[int, dict | None]] = defaultdict(dict)
    for c in cells:
        by_group[c.setting.label, c.rounds, c.attack, c.rule][c.seed] = records.get(c)

    def acc(setting: str, rounds: int | None, attack: str, rule: str, seed: int) -> float | None:
        rec = by_group.get((setting, rounds, attack, rule), {}).get(seed)
        return rec["final_accuracy"] if _done(rec) and rec.get("final_accuracy") is not None else None

    def per_class(setting: str, rounds: int | None, attack: str, rule: str, seed: int) -> list | None:
        rec = by_group.get((setting, rounds, attack, rule), {}).get(seed)
        return rec.get("class_accuracy") if _done(rec) else None

    rows = []
    for (setting, rounds, attack, rule), seeds in by_group.items():
        done = {s: r for s, r in seeds.items() if _done(r)}
        drops, impacts, class_drops = {}, {}, {}
        class_refs: set[str] = set()
        for s in seeds:
            # What the attack costs a class: against the same rule (a rule's own clean cost shows in the overall
            # drop against clean FedAvg; per class, 10 rounds of two rules differ widely) with the attackers idle
            # where the grid has that run, else without attackers.
            cref = None if attack in REFERENCES else next(
                (a for a in (CLASS_REFERENCE, CLEAN) if per_class(setting, rounds, a, rule, s)), None)
            if cref is not None:
                worst = worst_class(per_class(setting, rounds, cref, rule, s),
                                    per_class(setting, rounds, attack, rule, s))
                if worst is not None:
                    class_drops[s] = worst[0]
                    class_refs.add(cref)
            base = acc(setting, rounds, CLEAN, REFERENCE_RULE, s)
            mine, ref = acc(setting, rounds, attack, rule, s), acc(setting, rounds, attack, REFERENCE_RULE, s)
            if base is not None and mine is not None:
                drops[s] = base - mine
            if base is not None and ref is not None:
                impacts[s] = base - ref
        backdoor = any(r.get("backdoor") for r in done.values())
        ref_success = [by_group.get((setting, rounds, attack, REFERENCE_RULE), {}).get(s) for s in seeds]
        ref_bd = stats(r.get("final_attack_success") for r in ref_success if _done(r))
        imp = stats(impacts.values())
        harmless = None
        if attack != CLEAN and imp is not None:
            harmless = 100 * imp["mean"] < HARMLESS_POINTS and not (
                backdoor and ref_bd is not None and ref_bd["mean"] > GOAL_BACKDOOR)
        rows.append({
            "setting": setting, "rounds": rounds, "attack": attack, "rule": rule, "backdoor": backdoor,
            "seeds_done": sorted(done), "missing_seeds": sorted(s for s, r in seeds.items() if r is None),
            "failed": [{"seed": s, "error": r.get("error", "")} for s, r in sorted(seeds.items())
                       if r is not None and not _done(r)],
            "accuracy": stats(r.get("final_accuracy") for r in done.values()),
            "attack_success": stats(r.get("final_attack_success") for r in done.values()) if backdoor else None,
            "tpr": stats(r.get("tpr") for r in done.values()),
            "fpr": stats(r.get("fpr") for r in done.values()),
            "share": stats(r.get("malicious_share") for r in done.values()),
            "influence": stats(r.get("malicious_influence") for r in done.values()),
            "projection": stats(r.get("attack_projection") for r in done.values()),
            "honest_downweighted": stats(r.get("honest_downweighted") for r in done.values()),
            "honest_zeroed": stats(r.get("honest_zeroed") for r in done.values()),
            "class_drop": stats(class_drops.values()), "class_reference": sorted(class_refs),
            "drop": stats(drops.values()), "drop_by_seed": {str(s): d for s, d in sorted(drops.items())},
            "impact": imp, "harmless": harmless,
            "diverged": sum(r.get("diverged_at") is not None for r in done.values()),
            "cpu_seconds": {str(s): float(r.get("cpu_seconds", 0.0)) for s, r in sorted(seeds.items())
                            if r is not None},
        })
    # Tables show what has a stored record; the cells never run are counted (and costed) all the same.
    stored = [c for c, r in records.items() if r is not None]
    settings = [s.label for s in grid.settings_list if any(c.setting == s for c in stored)]
    not_run = sorted({c.setting.label for c in cells} - set(settings))
    rules = [r for r in grid.all_rules if any(c.rule == r for c in stored)]
    attacks = [a for a in grid.all_attacks if any(c.attack == a for c in cells)]
    rows = [r for r in rows if r["setting"] in settings and r["rule"] in rules]
    worst = [worst_case(rows, setting, rule) for rule in rules for setting in settings
             if any(r["setting"] == setting and r["rule"] == rule for r in rows)]
    recs = [r for r in records.values() if r is not None]
    n_done = sum(_done(r) for r in recs)
    return {
        "generated": time.strftime("%Y-%m-%d %H:%M"),
        "grid": grid.describe(),
        "shown": {"attacks": attacks, "rules": rules},
        "settings": settings,
        "settings_not_run": not_run,
        "counts": {"total": len(cells), "done": n_done, "failed": len(recs) - n_done,
                   "missing": len(cells) - len(recs)},
        "cost": cost(records),
        "cells": rows,
        "worst_case": worst,
        "choice": choose(worst, [r for r in rules if r != REFERENCE_RULE]),
        "goal": {"backdoor_max": GOAL_BACKDOOR, "drop_max_points": GOAL_DROP_POINTS, "clean_fpr_max": GOAL_CLEAN_FPR,
                 "harmless_points": HARMLESS_POINTS, "class_drop_max_points": GOAL_CLASS_POINTS},
    }


#: Runs no class drop is measured for: the clean run, and the idle one (it adds nothing by definition; what its
#: missing rows cost shows in its accuracy drop).
REFERENCES = (CLEAN, CLASS_REFERENCE)


def worst_class(base: list | None, mine: list | None) -> tuple[float, int] | None:
    """The most accuracy a class loses from ``base`` to ``mine``, and that class (the first of equals); None where
    either is missing."""
    if not base or not mine or len(base) != len(mine):
        return None
    gaps = [(b - m, k) for k, (b, m) in enumerate(zip(base, mine)) if b is not None and m is not None]
    return max(gaps, key=lambda g: g[0]) if gaps else None


def cost(records: Mapping[Cell, dict | None]) -> dict[str, Any]:
    """CPU seconds spent, and the core-hours the cells not done need at the measured rate (the whole grid's:
    the done cells' CPU plus that estimate).

    A cell not done is estimated by the mean CPU time of the finished cells of
    its setting, else of its dataset and model; cells with neither are counted
    as ``unmeasured_cells`` and left out of the estimate. A base-horizon cell
    whose long twin is not done either costs nothing more (one run gives both),
    nor does a record taken from a longer run on the way (``shared_with``).
    """
    per_setting: dict[str, list[float]] = defaultdict(list)
    per_kind: dict[tuple[str, str, int | None], list[float]] = defaultdict(list)
    spent = {"done": 0.0, "failed": 0.0}
    for c, r in records.items():
        if r is None:
            continue
        secs = float(r.get("cpu_seconds", 0.0))
        # A record taken from a longer run on the way (``shared_with``) cost nothing beyond that run's CPU.
        spent["done" if _done(r) else "failed"] += 0.0 if r.get("shared_with") else secs
        if _done(r):
            per_setting[_cost_label(c)].append(secs)
            per_kind[c.setting.dataset, c.setting.model, c.rounds].append(secs)
    est, unmeasured = 0.0, 0
    # A base-horizon cell whose long twin is not done either comes with that run (runner.short_twins).
    with_long_pending = {c.base_twin for c, r in records.items() if c.rounds is not None and not _done(r)}
    for c, r in records.items():
        if _done(r) or c in with_long_pending:
            continue
        xs = per_setting.get(_cost_label(c)) or per_kind.get((c.setting.dataset, c.setting.model, c.rounds))
        if xs:
            est += sum(xs) / len(xs)
        else:
            unmeasured += 1
    every = [x for xs in per_setting.values() for x in xs]
    return {"core_seconds": spent["done"] + spent["failed"], "core_seconds_failed": spent["failed"],
            "cells_measured": len(every), "mean_cell_seconds": sum(every) / len(every) if every else None,
            "per_setting": {k: {"cells": len(xs), "mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs)}
                            for k, xs in per_setting.items()},
            "remaining_cells": sum(not _done(r) for r in records.values()), "unmeasured_cells": unmeasured,
            "remaining_core_hours": est / 3600, "total_core_hours": (spent["done"] + est) / 3600}


def _cost_label(c: Cell) -> str:
    return c.setting.label if c.rounds is None else f"{c.setting.label}, {c.rounds} rounds"


def attack_label(row: dict) -> str:
    """The attack of a summary row, with its horizon when it is the long one."""
    return row["attack"] if row.get("rounds") is None else f"{row['attack']}, {row['rounds']} rounds"


def _argmax(pairs: list[tuple[float, Any]]) -> tuple[float, Any] | None:
    return max(pairs, key=lambda p: p[0]) if pairs else None


def worst_case(rows: list[dict], setting: str, rule: str) -> dict[str, Any]:
    """The worst case of ``rule`` in ``setting`` over the attacks whose cells exist, and the goal check."""
    mine = [r for r in rows if r["setting"] == setting and r["rule"] == rule]
    drop = _argmax([(r["drop"]["mean"], attack_label(r)) for r in mine if r["drop"]])
    seed = _argmax([(d, (attack_label(r), int(s))) for r in mine for s, d in r["drop_by_seed"].items()])
    bd = _argmax([(r["attack_success"]["mean"], attack_label(r)) for r in mine
                  if r["backdoor"] and r["attack_success"]])
    cls = _argmax([(r["class_drop"]["mean"], attack_label(r)) for r in mine if r.get("class_drop")])
    # The clean run's FPR at either horizon, the larger one.
    fprs = [r["fpr"]["mean"] for r in mine if r["attack"] == CLEAN and r["fpr"]]
    fpr = max(fprs) if fprs else None
    clean = [r["drop"]["mean"] for r in mine if r["attack"] == CLEAN and r["drop"]]
    incomplete = sum(len(r["missing_seeds"]) + len(r["failed"]) for r in mine)
    # A backdoor attack whose cells are all missing is not known to be one: pending, not passed.
    checks = {
        "backdoor": None if bd is None and incomplete else (bd is None or bd[0] <= GOAL_BACKDOOR),
        "accuracy": None if drop is None else 100 * drop[0] <= GOAL_DROP_POINTS,
        "clean_fpr": None if fpr is None else fpr <= GOAL_CLEAN_FPR,
        "class_drop": None if cls is None else 100 * cls[0] <= GOAL_CLASS_POINTS,
    }
    if any(v is False for v in checks.values()):
        met: bool | None = False
    elif incomplete or any(v is None for k, v in checks.items() if k != "class_drop"):
        # cells stored before per-class accuracy was recorded leave the class check unknown, not open
        met = None
    else:
        met = True
    return {
        "setting": setting, "rule": rule,
        "worst_drop": None if drop is None else {"value": drop[0], "attack": drop[1]},
        "worst_drop_seed": None if seed is None else {"value": seed[0], "attack": seed[1][0], "seed": seed[1][1]},
        "worst_backdoor": None if bd is None else {"value": bd[0], "attack": bd[1]},
        "worst_class_drop": None if cls is None else {"value": cls[0], "attack": cls[1]},
        "clean_fpr": fpr, "clean_drop": max(clean) if clean else None, "cells_not_done": incomplete,
        "checks": checks, "goal_met": met,
    }


#: worst-case entry → (goal bound, the value's scale in the bound's unit): each miss is judged as a multiple of
#: its goal, so that a backdoor's percent and a drop's points compare.
_GOALS = {"worst_backdoor": (GOAL_BACKDOOR, 1.0), "worst_drop": (GOAL_DROP_POINTS, 100.0),
          "clean_fpr": (GOAL_CLEAN_FPR, 1.0), "worst_class_drop": (GOAL_CLASS_POINTS, 100.0)}


def choose(worst: list[dict], rules: list[str]) -> dict[str, Any] | None:
    """The rule whose worst case misses the goal least: per rule, its largest value over settings and goal
    entries as a multiple of that entry's bound (≤ 1: met); ties go to the smaller clean cost (the clean run's
    drop against clean FedAvg). ``complete`` says whether every cell of those rules was done."""
    ranking = []
    for rule in rules:
        mine = [w for w in worst if w["rule"] == rule]
        misses = []
        for w in mine:
            for key, (bound, scale) in _GOALS.items():
                v = w.get(key)
                value = v if isinstance(v, (int, float)) or v is None else v["value"]
                if value is not None:
                    misses.append((scale * value / bound, key, w["setting"],
                                   None if not isinstance(v, dict) else v["attack"], value))
        if not misses:
            continue
        ratio, key, setting, attack, value = max(misses, key=lambda m: m[0])
        clean = [w["clean_drop"] for w in mine if w.get("clean_drop") is not None]
        ranking.append({"rule": rule, "ratio": ratio, "entry": key, "setting": setting, "attack": attack,
                        "value": value, "clean_drop": max(clean) if clean else None,
                        "cells_not_done": sum(w["cells_not_done"] for w in mine)})
    if not ranking:
        return None
    ranking.sort(key=lambda r: (r["ratio"], r["clean_drop"] if r["clean_drop"] is not None else float("inf")))
    return {"rule": ranking[0]["rule"], "complete": all(r["cells_not_done"] == 0 for r in ranking),
            "ranking": ranking}

