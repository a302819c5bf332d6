"""Tables, heat maps and the generated section of docs/results.md, all from the summary object.

Everything here reads ``summary.json`` (or the same dict in memory), so the
documentation can be regenerated without the cells.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from reshuffle.errors import ConfigError
from reshuffle.evaluation.cell import write_atomic
from reshuffle.evaluation.grid import CLEAN, DEFAULT_RULES, REFERENCE_RULE

_MISSING, _FAILED = "–", "failed"


def docs_markers(name: str, brief: bool = False) -> tuple[str, str]:
    """The lines around a grid's generated section in a docs file; ``name`` is its output folder's name.
    ``brief``: the worst case per rule in one table (a README's), else the whole section."""
    return f"<!-- grid:{'brief' if brief else 'begin'} {name} -->", f"<!-- grid:end {name} -->"


def _axes_line(g: dict, attacks: str) -> str:
    """One sentence naming the grid's axes and common settings."""
    extra = g.get("extra_settings") or []
    also = [a for a in g.get("long_attacks", ()) if a in g.get("long_also", ())]
    backdoors = [a for a in g.get("long_attacks", ()) if a not in also]
    long = " and ".join(x for x in (f"the backdoor attacks ({', '.join(backdoors)})" if backdoors else "",
                                    ", ".join(also)) if x)
    return (f"Datasets {', '.join(g['datasets'])}; partitions {', '.join(g['partitions'])}; models "
            f"{', '.join(g['models'])}" + (f"; also {', '.join(extra)}" if extra else "")
            + f"; {attacks}; rules {', '.join(g['rules'])}; seeds "
            f"{', '.join(map(str, g['seeds']))}. Common settings: "
            + ", ".join(f"{k} = {v}" for k, v in g["base"].items()) + "."
            + (f" {long[0].upper()}{long[1:]} also run over {g['long_rounds']} rounds, "
               f"under {', '.join(g['long_rules'])}, beside the clean run under these rules and FedAvg."
               if long else ""))


def _pts(x: float) -> str:
    return f"{100 * x:.1f}"


def _spread(st: dict | None, scale: float = 100.0, digits: int = 1) -> str:
    """``mean [min–max]`` (one seed: the value alone)."""
    if st is None:
        return _MISSING
    f = f"{{:.{digits}f}}"
    text = f.format(scale * st["mean"])
    if st["n"] > 1:
        text += f" [{f.format(scale * st['min'])}–{f.format(scale * st['max'])}]"
    return text


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _index(summary: dict, rounds: int | None = None) -> dict[tuple[str, str, str], dict]:
    """(setting, attack, rule) → summary row, for one horizon (None: the grid's base rounds)."""
    return {(c["setting"], c["attack"], c["rule"]): c for c in summary["cells"] if c.get("rounds") == rounds}


def _horizons(summary: dict, setting: str) -> list[int | None]:
    """The horizons with a row in ``setting``: the base first, then the long one."""
    got = {c.get("rounds") for c in summary["cells"] if c["setting"] == setting}
    return sorted(got, key=lambda r: (r is not None, r or 0))


def _entry(c: dict | None, key: str, scale: float = 100.0, digits: int = 1) -> str:
    if c is None or (not c["seeds_done"] and not c["failed"]):
        return _MISSING
    if not c["seeds_done"]:
        return _FAILED
    text = _spread(c[key], scale, digits)
    total = len(c["seeds_done"]) + len(c["missing_seeds"]) + len(c["failed"])
    return text if len(c["seeds_done"]) == total else f"{text} ({len(c['seeds_done'])}/{total} seeds)"


def _attack_label(c_ref: dict | None, attack: str) -> str:
    if attack == CLEAN:
        return "none (clean)"
    if c_ref is None or c_ref["impact"] is None:
        return attack
    imp = f"{attack} (impact {_pts(c_ref['impact']['mean'])})"
    return imp + (" harmless" if c_ref["harmless"] else "")


def _worst(key: str, points: bool = True):
    """A worst-case entry's text: its value (points or %) and the attack, with the seed where it has one."""
    def fmt(w: dict) -> str:
        d = w.get(key)
        if d is None:
            return _MISSING
        where = d["attack"] if "seed" not in d else f"{d['attack']}, seed {d['seed']}"
        return f"{_pts(d['value'])}{'' if points else ' %'} ({where})"
    return fmt


def _fpr(w: dict) -> str:
    return _MISSING if w["clean_fpr"] is None else f"{w['clean_fpr']:.3f}"


def _goal(w: dict) -> str:
    if w["goal_met"] is True:
        return "met"
    failed = [k.replace("_", " ") for k, v in w["checks"].items() if v is False]
    if failed:
        return "not met: " + ", ".join(failed)
    return f"open ({w['cells_not_done']} cells not done)"


def _marked(fmt, w: dict) -> str:
    """``fmt(w)``, starred where some cells of that rule and setting are not done."""
    text = fmt(w)
    return text + " *" if w["cells_not_done"] and text != _MISSING else text


NOT_DONE_NOTE = "\\* over the cells done so far: some cells of that rule and setting are not done."


def worst_case_tables(summary: dict) -> list[str]:
    """Rows = rules, columns = settings: worst drop, worst seed, worst backdoor, clean FPR, the goal."""
    settings, rules = summary["settings"], summary["shown"]["rules"]
    wc = {(w["rule"], w["setting"]): w for w in summary["worst_case"]}
    g = summary["goal"]

    def table(fmt, mark: bool = True) -> list[str]:
        def entry(w):
            return _marked(fmt, w) if mark else fmt(w)

        return _table(["rule", *settings], [[r, *(entry(wc[r, s]) if (r, s) in wc else _MISSING for s in settings)]
                                            for r in rules])

    lines = [
        "Worst accuracy drop against clean FedAvg (points, mean over seeds; the attack that caused it):", "",
        *table(_worst("worst_drop")), "",
        "Worst single-seed accuracy drop (points):", "", *table(_worst("worst_drop_seed")), "",
        "Worst backdoor success over the backdoor attacks (%, mean over seeds):", "",
        *table(_worst("worst_backdoor")), "",
        "Clean FPR (honest rows flagged in the clean run, pooled over rounds, mean over seeds):", "", *table(_fpr), "",
        "Worst class-accuracy drop to an attack (points against the same rule with the attackers idle, or without "
        "attackers where the grid has no idle run; the class that lost most, mean over seeds):", "",
        *table(_worst("worst_class_drop")), "",
        f"Goal (worst backdoor success ≤ {100 * g['backdoor_max']:.0f} %, worst drop ≤ {g['drop_max_points']:g} points, "
        f"clean FPR ≤ {g['clean_fpr_max']:.2f}, no class losing more than "
        f"{g.get('class_drop_max_points', 5.0):g} points):", "", *table(_goal, mark=False),
    ]
    if any(w["cells_not_done"] for w in wc.values()):
        lines += ["", NOT_DONE_NOTE]
    return lines


_ENTRY = {"worst_backdoor": "backdoor success", "worst_drop": "accuracy drop", "clean_fpr": "clean FPR",
          "worst_class_drop": "class drop"}


def _miss(r: dict) -> str:
    """One ranked rule's worst miss: the entry, its value and what caused it, as a multiple of its goal."""
    v = r["value"]
    value = f"{v:.3f}" if r["entry"] == "clean_fpr" else (
        f"{_pts(v)} %" if r["entry"] == "worst_backdoor" else f"{_pts(v)} points")
    cause = ", ".join(x for x in (r["attack"], r["setting"]) if x)
    return f"{_ENTRY[r['entry']]} {value} ({cause}), {r['ratio']:.1f}× its goal"


def choice_lines(summary: dict) -> list[str]:
    """The rule whose worst case misses the goal least, and the others' worst misses."""
    c = summary.get("choice")
    if not c:
        return []
    best, rest = c["ranking"][0], c["ranking"][1:]
    text = (f"By worst case (each rule's largest value over the goal's entries and settings, as a multiple of "
            f"its goal; ties to the smaller clean cost): `{best['rule']}`, {_miss(best)}")
    text += "".join(f"; then `{r['rule']}`, {_miss(r)}" for r in rest) + "."
    if not c["complete"]:
        text += " Over the cells done so far: the grid is not complete."
    return [text]


def brief_table(summary: dict) -> list[str]:
    """One row per rule and setting: worst backdoor success, accuracy drop, class drop, clean FPR, the goal."""
    wc = {(w["rule"], w["setting"]): w for w in summary["worst_case"]}
    rows = [[r, s, _marked(_worst("worst_backdoor", points=False), w), _marked(_worst("worst_drop"), w),
             _marked(_worst("worst_class_drop"), w), _marked(_fpr, w), _goal(w)]
            for r in summary["shown"]["rules"] for s in summary["settings"] if (w := wc.get((r, s)))]
    lines = _table(["rule", "setting", "worst backdoor success", "worst accuracy drop (points)",
                    "worst class drop (points)", "clean FPR", "goal"], rows)
    if any(w["cells_not_done"] for w in summary["worst_case"]):
        lines += ["", NOT_DONE_NOTE]
    return lines + ["", *choice_lines(summary)] if summary.get("choice") else lines


def setting_tables(summary: dict, setting: str, rounds: int | None = None) -> list[str]:
    """Attack × rule tables of one setting and horizon: accuracy, backdoor success, TPR / FPR / share."""
    idx = _index(summary, rounds)
    rules, attacks = summary["shown"]["rules"], summary["shown"]["attacks"]
    ref = REFERENCE_RULE
    attacks = [a for a in attacks if any(idx.get((setting, a, r), {}).get("seeds_done") or
                                         idx.get((setting, a, r), {}).get("failed") for r in rules)]
    label = {a: _attack_label(idx.get((setting, a, ref)), a) for a in attacks}
    out = ["Final accuracy (%, mean [min–max] over seeds; impact = clean FedAvg − FedAvg under the attack, "
           "points):", ""]
    out += _table(["attack", *rules], [[label[a], *(_entry(idx.get((setting, a, r)), "accuracy") for r in rules)]
                                       for a in attacks])
    bd = [a for a in attacks if any(idx.get((setting, a, r), {}).get("backdoor") for r in rules)]
    if bd:
        out += ["", "Backdoor success (%, triggered non-target test inputs classified as the target, final round):", ""]
        out += _table(["attack", *rules], [[a, *(_entry(idx.get((setting, a, r)), "attack_success") for r in rules)]
                                           for a in bd])
    out += ["", "TPR / FPR / influence (flagged malicious / honest rows, pooled over rounds; the attackers' share "
            "of the aggregate after clipping, what their rows put in, mean over rounds; means over seeds; clean run: "
            "FPR):", ""]

    def rates(c):
        if c is None or not c["seeds_done"]:
            return _entry(c, "fpr")
        tpr = "–" if c["tpr"] is None else f"{c['tpr']['mean']:.2f}"
        fpr = "–" if c["fpr"] is None else f"{c['fpr']['mean']:.2f}"
        share = c.get("influence") or c.get("share")
        share = "" if not share else f" / {share['mean']:.2f}"
        return f"{tpr} / {fpr}{share}"

    out += _table(["attack", *rules], [[a, *(rates(idx.get((setting, a, r))) for r in rules)] for a in attacks])
    return out


def _cost_lines(summary: dict) -> list[str]:
    """Cells and core-hours: done, failed, not done (estimated at the measured rate), and CPU seconds per setting."""
    c, n = summary["cost"], summary["counts"]
    done_h = (c["core_seconds"] - c["core_seconds_failed"]) / 3600
    left = f"{c['remaining_core_hours']:.2f} (estimated)"
    if c["unmeasured_cells"]:
        left += f", {c['unmeasured_cells']} cells of settings not measured yet left out"
    lines = _table(["cells", "count", "core-hours"], [
        ["done", str(n["done"]), f"{done_h:.2f}"],
        ["failed (run again)", str(n["failed"]), f"{c['core_seconds_failed'] / 3600:.2f}"],
        ["not done", str(n["failed"] + n["missing"]), left],
        ["whole grid", str(n["total"]), f"{c['total_core_hours']:.2f}"],
    ])
    if c["per_setting"]:
        lines += ["", *_table(["setting", "cells done", "CPU seconds per cell, mean [min–max]"], [
            [k, str(v["cells"]), f"{v['mean']:.1f} [{v['min']:.1f}–{v['max']:.1f}]"]
            for k, v in c["per_setting"].items()])]
    if summary.get("settings_not_run"):
        lines += ["", f"Settings with no cell run yet: {', '.join(summary['settings_not_run'])}."]
    return lines


def summary_markdown(summary: dict, heatmaps: dict[str, str]) -> str:
    g = summary["grid"]
    md = ["# Decision grid", "", f"Generated by `reshuffle grid` on {summary['generated']}.", ""]
    md += [_axes_line(g, f"{len(g['attacks'])} attacks (with the clean run `none`)"), ""]
    md += _cost_lines(summary) + [""]
    if g["skipped_rules"]:
        md += [f"Warning: rule(s) {', '.join(g['skipped_rules'])} are not registered here and were left out.", ""]
    md += ["## Worst case per rule", ""] + worst_case_tables(summary) + [""]
    for setting in summary["settings"]:
        for rounds in _horizons(summary, setting):
            title = setting if rounds is None else f"{setting}, {rounds} rounds"
            md += [f"## {title}", ""] + setting_tables(summary, setting, rounds) + [""]
            if rounds is None and setting in heatmaps:
                md += [f"![{setting}]({heatmaps[setting]})", ""]
    waiting = summary.get("needs_data") or {}
    if waiting:
        md += [f"## Settings that need data ({len(waiting)}; not run, not failed)", ""]
        md += [f"- {setting}: {why}" for setting, why in waiting.items()] + [""]
    failed = [(c, f) for c in summary["cells"] for f in c["failed"]]
    if failed:
        md += [f"## Failed cells ({len(failed)}; run again to retry)", ""]
        md += [f"- {c['setting']} {c['attack']} × {c['rule']} seed {f['seed']}: {f['error']}" for c, f in failed]
        md.append("")
    return "\n".join(md)


def heatmap(summary: dict, setting: str, path: Path) -> bool:
    """Rule × attack accuracy drop (points, annotated) and backdoor success; False when no cell is done."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    idx = _index(summary)
    rules = summary["shown"]["rules"]
    attacks = [a for a in summary["shown"]["attacks"]
               if any(idx.get((setting, a, r), {}).get("seeds_done") for r in rules)]
    bd = [a for a in attacks if any(idx.get((setting, a, r), {}).get("backdoor") for r in rules)]

    def matrix(cols: list[str], key: str) -> np.ndarray:
        M = np.full((len(rules), len(cols)), np.nan)
        for i, r in enumerate(rules):
            for j, a in enumerate(cols):
                st = idx.get((setting, a, r), {}).get(key)
                if st is not None:
                    M[i, j] = 100 * st["mean"]
        return M

    drop = matrix(attacks, "drop")
    if np.all(np.isnan(drop)):
        return False
    panels = [(drop, attacks, "accuracy drop vs clean FedAvg (points)", "Reds",
               max(10.0, float(np.nanmax(drop))))]
    if bd:
        panels.append((matrix(bd, "attack_success"), bd, "backdoor success (%)", "Purples", 100.0))
    widths = [max(len(p[1]), 1) for p in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.2 + 0.55 * sum(widths) + 1.2 * len(panels),
                                                       1.4 + 0.42 * len(rules)),
                             gridspec_kw={"width_ratios": widths}, squeeze=False)
    for ax, (M, cols, title, cmap, vmax) in zip(axes[0], panels):
        cm = plt.get_cmap(cmap).with_extremes(bad="lightgrey")
        im = ax.imshow(np.ma.masked_invalid(np.clip(M, 0, None)), cmap=cm, vmin=0, vmax=vmax, aspect="auto")
        for i in range(M.shape[0]):
            for j in range(M.shape[1]):
                v = M[i, j]
                ax.text(j, i, "–" if np.isnan(v) else f"{v:.1f}", ha="center", va="center", fontsize=7,
                        color="white" if not np.isnan(v) and v > 0.6 * vmax else "black")
        ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(len(rules)), rules, fontsize=7)
        ax.set_title(title, fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.04).ax.tick_params(labelsize=7)
    fig.suptitle(f"{setting} (mean over seeds; grey: not done)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_reports(summary: dict, out: Path, plots: bool = True) -> None:
    """summary.json, summary.md, worst_case.md and (with ``plots``) heatmap_<setting>.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    maps = {}
    for setting in summary["settings"]:
        name = f"heatmap_{setting}.png"
        if (plots and heatmap(summary, setting, out / name)) or (not plots and (out / name).is_file()):
            maps[setting] = name
    write_atomic(out / "summary.json", summary)
    _write_text(out / "summary.md", summary_markdown(summary, maps) + "\n")
    _write_text(out / "worst_case.md", "\n".join(["# Worst case per rule", "", *_cost_lines(summary), "",
                                                  *worst_case_tables(summary)]) + "\n")


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _rules_flag(g: dict) -> str:
    """The ``--rules`` option that names this grid's rules where they are not the default grid's."""
    if set(g["rules"]) == set(DEFAULT_RULES):
        return ""
    return " --rules " + " ".join([r for r in g["rules"] if r != REFERENCE_RULE] or [REFERENCE_RULE])


def docs_section(summary: dict, summary_dir: Path, docs: Path) -> str:
    """The generated section: grid, cost, worst-case tables, per-setting tables and heat maps."""
    g = summary["grid"]
    rel = os.path.relpath(summary_dir.resolve(), docs.resolve().parent)  # for links from the docs file
    begin, end = docs_markers(summary_dir.name)
    command = _grid_command(g, summary_dir)
    title = "The decision grid" if summary_dir.name == "grid" else f"The {summary_dir.name} grid"
    md = [begin, _generated(summary, summary_dir, docs),
          f"## {title}", "",
          f"`{command}` runs the cells that are not done (one file each under "
          f"`{summary_dir}/cells/`; `--jobs N` local processes, `--ray ADDRESS` a Ray cluster) and rewrites "
          f"`summary.md`, `worst_case.md`, `summary.json` and the heat maps there; `--docs` regenerates this "
          "section from `summary.json`.", "",
          _axes_line(g, f"attacks {', '.join(g['attacks'])}"), ""]
    md += _cost_lines(summary) + [""]
    if g["skipped_rules"]:
        md += [f"Rule(s) {', '.join(g['skipped_rules'])}: not registered when the summary was written, left out.", ""]
    md += ["### Worst case per rule", ""] + worst_case_tables(summary) + [""]
    if summary.get("choice"):
        md += choice_lines(summary) + [""]
    for setting in summary["settings"]:
        for rounds in _horizons(summary, setting):
            idx = _index(summary, rounds)
            if not any(k[0] == setting and c["seeds_done"] for k, c in idx.items()):
                continue
            title = setting if rounds is None else f"{setting}, {rounds} rounds"
            md += [f"### {title}", ""] + setting_tables(summary, setting, rounds) + [""]
            png = summary_dir / f"heatmap_{setting}.png"
            if rounds is None and png.is_file():
                md += [f"![{setting}]({rel}/{png.name})", ""]
    md.append(end)
    return "\n".join(md)


def update_docs(docs: Path, summary_dir: Path) -> None:
    """Replace the text between the markers of ``summary_dir``'s grid in ``docs`` (:func:`docs_markers`) by the
    section generated from its summary.json."""
    src = summary_dir / "summary.json"
    if not src.is_file():
        raise ConfigError(f"{src} not found: run `reshuffle grid --out {summary_dir}` first")
    head, tail, brief = docs_parts(docs, summary_dir)
    summary: dict[str, Any] = json.loads(src.read_text())
    section = brief_section if brief else docs_section
    _write_text(docs, head + section(summary, summary_dir, docs) + tail)


def docs_parts(docs: Path, summary_dir: Path) -> tuple[str, str, bool]:
    """The text of ``docs`` before and after the section of ``summary_dir``'s grid, and whether it is the brief
    one; a missing file or markers raise ConfigError (checked before a grid runs, so that a long run does not
    end on it)."""
    if not docs.is_file():
        raise ConfigError(f"{docs} not found")
    text = docs.read_text()
    (begin, end), (short, _) = docs_markers(summary_dir.name), docs_markers(summary_dir.name, brief=True)
    brief = short in text
    start = short if brief else begin
    one = text.count(start) == 1 and text.count(end) == 1 and not (brief and begin in text)
    if not one or text.index(start) > text.index(end):
        raise ConfigError(f"{docs} needs one {begin} (or {short}) line followed by one {end} line")
    head, rest = text.split(start, 1)
    return head, rest.split(end, 1)[1], brief


def brief_section(summary: dict, summary_dir: Path, docs: Path) -> str:
    """The brief generated section: the grid's command, its progress and :func:`brief_table`."""
    n, c = summary["counts"], summary["cost"]
    begin, end = docs_markers(summary_dir.name, brief=True)
    return "\n".join([
        begin, _generated(summary, summary_dir, docs),
        f"Worst case per rule over the {summary_dir.name} grid (`{_grid_command(summary['grid'], summary_dir)}`: "
        f"{n['done']} of {n['total']} cells done, {c['core_seconds'] / 3600:.1f} CPU-hours "
        f"{'in all' if n['done'] == n['total'] else 'so far'}; worst backdoor "
        "success over the backdoor attacks, accuracy drop against clean FedAvg, mean over seeds):", "",
        *brief_table(summary), end])


def _grid_command(g: dict, summary_dir: Path) -> str:
    """The command that runs the grid's cells not done. A configuration file names the whole grid; without one,
    the rules flag keeps it to this grid's rules (else it would run the default grid's other rules too)."""
    if g.get("config"):
        return f"reshuffle grid --config {g['config']} --out {summary_dir}"
    return f"reshuffle grid --out {summary_dir}{_rules_flag(g)}"


def _generated(summary: dict, summary_dir: Path, docs: Path) -> str:
    """The comment that opens a generated section: the command that regenerates it, and from what."""
    return (f"<!-- Generated by `{_grid_command(summary['grid'], summary_dir)} --summary-only --docs {docs}` from "
            f"summary.json ({summary['generated']}); edit the grid, not this section. -->")
