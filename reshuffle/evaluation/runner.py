"""Run the cells of a grid that are not done yet, store each as it finishes, keep the summary current.

A cell is done when its file holds a finished run of the same settings; a
missing, failed or stale cell (run with other settings) runs again. The
summary files are rewritten after every finished cell (the heat maps at most
once a minute, and at the end).
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence, TextIO

from reshuffle.evaluation.cell import SHORT, SHORT_RECORD, write_atomic
from reshuffle.evaluation.grid import Cell, Grid
from reshuffle.evaluation.report import docs_parts, update_docs, write_reports
from reshuffle.evaluation.summary import load_records, summarize

HEATMAP_EVERY_S = 60.0


@dataclass
class RunResult:
    ran: int
    failed: int
    core_seconds: float
    wall_seconds: float
    interrupted: bool
    summary: dict[str, Any]


def cells_covered(grid: Grid, whole: Grid | None) -> list[Cell]:
    """The cells a summary covers: those of the whole grid, then those of ``grid`` beyond it."""
    if whole is None:
        return grid.cells()
    cells = whole.cells()
    seen = set(cells)
    return cells + [c for c in grid.cells() if c not in seen]


def expected_configs(cells: list[Cell], grid: Grid, data_root: Path | None) -> dict[Cell, dict[str, Any]]:
    """cell → its full, validated SimConfig as a dict (what a finished cell's file must hold)."""
    from reshuffle.run.config import from_mapping

    return {c: from_mapping(grid.cell_settings(c, data_root), source=c.name).as_dict() for c in cells}


class Progress:
    """Cells done / total, failures, ETA and core-seconds: a bar on a terminal, one line per cell otherwise."""

    def __init__(self, total: int, done_before: int, todo: int, quiet: bool, stream: TextIO | None = None) -> None:
        self.total, self.done, self.todo = total, done_before, todo
        self.finished = self.failed = 0
        self.core_s = 0.0
        self.t0 = time.perf_counter()
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self._bar = None
        if not quiet and todo and self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

            self._bar = Bar(TextColumn("cells"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[info]}"),
                            TextColumn("ETA"), TimeRemainingColumn(), console=Console(file=self.stream))
            self._task = self._bar.add_task("grid", total=total, completed=done_before, info="")
            self._bar.start()

    def eta_s(self) -> float | None:
        if not self.finished:
            return None
        return (time.perf_counter() - self.t0) / self.finished * (self.todo - self.finished)

    def advance(self, cell: Cell, rec: dict) -> None:
        self.finished += 1
        self.done += 1
        self.failed += rec.get("status") != "done"
        self.core_s += float(rec.get("cpu_seconds", 0.0))
        info = f"failed {self.failed}, {self.core_s:.0f} core-s"
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, info=info)
        elif not self.quiet:
            eta = self.eta_s()
            what = "done" if rec.get("status") == "done" else f"FAILED ({rec.get('error', '')})"
            print(f"[{self.done}/{self.total}] {cell.name}: {what}, {rec.get('cpu_seconds', 0.0):.1f} CPU s; "
                  f"{info}, ETA {_hms(eta)}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _hms(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def run_grid(grid: Grid, out: Path, backend, data_root: Path | None = None, *, summary_grid: Grid | None = None,
             max_cells: int | None = None, quiet: bool = False, plots: bool = True,
             stream: TextIO | None = None, docs: Sequence[Path] = ()) -> RunResult:
    """Run ``grid``'s cells that are not done (at most ``max_cells``) on ``backend``.

    The summary covers ``summary_grid`` (default: ``grid``), so a run of a slice
    keeps the other cells of a larger grid in its tables. The grid's section of
    each file in ``docs`` is regenerated with the summary, after every cell.
    """
    for path in docs:
        docs_parts(path, out)  # a file without the grid's markers is refused before any cell runs
    covered = cells_covered(grid, summary_grid)
    summary_grid = grid if summary_grid is None else summary_grid.union(grid)
    for tmp in out.glob("cells/**/.*.tmp"):  # left by a driver killed between write and rename
        tmp.unlink(missing_ok=True)
    records = load_records(covered, out, expected_configs(covered, summary_grid, data_root))
    # Missing, failed or stale (run with other settings: load_records gives None) cells run, in grid order.
    # Settings whose dataset is absent wait for their data: listed in the summary, neither run nor failed.
    waiting = grid.needs_data(data_root)
    not_done = [c for c in grid.cells() if (records[c] or {}).get("status") != "done" and c.setting not in waiting]
    todo = not_done if max_cells is None else not_done[:max_cells]
    total = len(grid.cells())
    progress = Progress(total, total - len(not_done), len(todo), quiet, stream)
    result = RunResult(0, 0, 0.0, 0.0, False, {})
    last_plot = time.perf_counter()
    t0 = time.perf_counter()
    shorts = short_twins(grid, todo, data_root)
    paired = {c.base_twin for c in shorts}
    jobs = ((c, grid.cell_settings(c, data_root), _cell_id(c, shorts.get(c))) for c in todo if c not in paired)
    try:
        with contextlib.closing(backend.run(jobs)) as finished:
            for cell, rec in finished:
                got = [(cell, rec)]
                if SHORT_RECORD in rec:  # the short horizon's cell, from the same run
                    got.append((cell.base_twin, rec.pop(SHORT_RECORD)))
                for c, r in got:
                    write_atomic(out / c.relpath, r)
                    if c in records:
                        records[c] = r
                    result.ran += 1
                    result.failed += r.get("status") != "done"
                    result.core_seconds += 0.0 if r.get("shared_with") else float(r.get("cpu_seconds", 0.0))
                    progress.advance(c, r)
                now = time.perf_counter()
                draw = plots and now - last_plot >= HEATMAP_EVERY_S
                _report(_summary(summary_grid, records, data_root), out, draw, docs)
                last_plot = now if draw else last_plot
    except KeyboardInterrupt:
        result.interrupted = True
    finally:
        progress.close()
        result.wall_seconds = time.perf_counter() - t0
        result.summary = _summary(summary_grid, records, data_root)
        _report(result.summary, out, plots, docs)
    return result


def _report(summary: dict[str, Any], out: Path, plots: bool, docs: Sequence[Path]) -> None:
    write_reports(summary, out, plots=plots)
    for path in docs:
        update_docs(path, out)


def _summary(grid: Grid, records, data_root: Path | None) -> dict[str, Any]:
    """The grid's summary, with the settings that need data (label → how to get it)."""
    return summarize(grid, records) | {"needs_data": {s.label: why for s, why in grid.needs_data(data_root).items()}}


def _cell_id(c: Cell, short_rounds: int | None = None) -> dict[str, Any]:
    out = {"dataset": c.setting.dataset, "partition": c.setting.partition.label, "model": c.setting.model,
           "attack": c.attack, "rule": c.rule, "seed": c.seed}
    if short_rounds is not None:
        out[SHORT] = short_rounds
    return out


def short_twins(grid: Grid, todo: list[Cell], data_root: Path | None) -> dict[Cell, int]:
    """Long-horizon cell → the rounds of its ``base_twin``, where both are to run and their settings differ
    only in rounds (fewer for the base): one run gives both records (:func:`reshuffle.evaluation.cell.run_cell`);
    a twin goes with the first long cell listed."""
    pending = set(todo)
    out: dict[Cell, int] = {}
    for c in todo:
        twin = c.base_twin
        if c.rounds is None or twin not in pending:
            continue
        long, short = grid.cell_settings(c, data_root), grid.cell_settings(twin, data_root)
        same = {k: v for k, v in long.items() if k != "rounds"} == {k: v for k, v in short.items() if k != "rounds"}
        if same and isinstance(short.get("rounds"), int) and short["rounds"] < long["rounds"]:
            out[c] = short["rounds"]
            pending.discard(twin)  # taken by this long cell
    return out


def summary_only(grid: Grid, out: Path, data_root: Path | None = None, whole: Grid | None = None,
                 plots: bool = True) -> dict[str, Any]:
    """Rebuild the summary files of ``out`` from the stored cells of ``grid`` (and of ``whole``)."""
    cells = cells_covered(grid, whole)
    shown = grid if whole is None else whole.union(grid)
    summary = _summary(shown, load_records(cells, out, expected_configs(cells, shown, data_root)), data_root)
    write_reports(summary, out, plots=plots)
    return summary
