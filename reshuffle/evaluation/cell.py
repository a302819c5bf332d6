"""One cell: simulate, reduce to a compact record, store it atomically.

``run_cell`` runs in whichever process a backend gives it (this one, a pool
worker, a Ray task) and never raises for a failed simulation: the failure is
the record, and the next invocation of the grid retries it. A run whose global
model diverges is a result like any other (``diverged_at``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import traceback
from pathlib import Path
from typing import Any

#: Version of the cell file layout.
FORMAT = 1
#: SimConfig fields that do not change a cell's result (where the data lies, where outputs go).
_NOT_COMPARED = {"data_dir", "out"}
_ROUND_KEYS = ("round", "accuracy", "attack_success", "tpr", "fpr", "honest_rows", "honest_flagged",
               "malicious_rows", "malicious_flagged", "models_received", "models_accepted", "diverged", "lost",
               "malicious_share", "honest_weight", "malicious_weight", "attack_choices", "malicious_influence",
               "attack_projection", "honest_downweighted", "honest_zeroed")


def _one_thread() -> None:
    import torch

    # One core per cell: more threads than cores only wait on each other when cells run side by side.
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


#: Key of a cell id (``run_cell``'s ``cell``) asking for the record of the same run at an earlier round too, and
#: of the record that answers it.
SHORT = "short_rounds"
SHORT_RECORD = "short_record"


def run_cell(settings: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any]:
    """Simulate ``settings`` and return the cell record (status ``done`` or ``failed``).

    With ``cell[SHORT] = S``, the record also holds, under :data:`SHORT_RECORD`, the record of the same settings
    over S rounds: nothing a round does depends on the rounds still to come, so the first S rounds are that
    run's, with round S evaluated as its last (on the whole test set). It is the record a run of S rounds gives,
    timings aside, and it is kept if a later round fails.
    """
    _one_thread()
    from reshuffle.run.config import from_mapping
    from reshuffle.sim.simulator import Simulation

    cell = dict(cell)
    short = cell.pop(SHORT, None)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    record: dict[str, Any] = {"format": FORMAT, "cell": cell, "config": dict(settings), "host": os.uname().nodename}
    short_record = None
    try:
        sim = Simulation(from_mapping(settings, source=f"cell {cell}"))
        rounds = []
        while sim.rounds.round < sim.cfg.rounds:
            rounds.append(sim.step())
            if sim.rounds.round == short and short < sim.cfg.rounds:
                short_record = _short_record(sim, rounds, cell, wall0, cpu0)
        data = sim.result(rounds)
    except Exception as exc:  # a cell never aborts the grid; it is retried next time
        record.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                      traceback="".join(traceback.format_exception(exc)[-6:]))
    else:
        record.update(_done(sim, data))
    record["wall_seconds"] = time.perf_counter() - wall0
    record["cpu_seconds"] = time.process_time() - cpu0
    if short_record is not None:
        record[SHORT_RECORD] = short_record
    return record


def _done(sim, data: dict[str, Any]) -> dict[str, Any]:
    from reshuffle.attacks import Backdoor

    return {"status": "done", "config": data["config"], "backdoor": isinstance(sim.attackers.attack, Backdoor),
            "malicious_clients": data.get("malicious_clients", []), **reduce_metrics(data),
            "class_accuracy": sim.evaluator.per_class(sim.W_g)}


def _short_record(sim, rounds: list, cell: dict[str, Any], wall0: float, cpu0: float) -> dict[str, Any]:
    """The record of ``sim``'s settings over its rounds so far, as a run of that many rounds gives it."""
    S = len(rounds)
    last = rounds[-1]
    # Round S as a run of S rounds evaluates it; its divergence flag already holds what the subset saw.
    ev = sim.evaluator(sim.W_g, S, diverged=last.diverged, last=True)
    last = dataclasses.replace(last, accuracy=ev.accuracy, attack_success=ev.attack_success, diverged=ev.diverged,
                               eval_samples=ev.samples)
    data = sim.result([*rounds[:-1], last])
    data["config"] = {**data["config"], "rounds": S}
    return {"format": FORMAT, "cell": cell, "host": os.uname().nodename, **_done(sim, data),
            "wall_seconds": time.perf_counter() - wall0, "cpu_seconds": time.process_time() - cpu0,
            "shared_with": sim.cfg.rounds}


def _lost_ids(r: dict) -> set[int]:
    return {int(k) for k in r.get("lost", {})}


def round_rows(r: dict, malicious: set[int]) -> dict[str, int]:
    """Delivered and flagged rows of one round, honest and malicious.

    Uses the simulator's counts when the round has them; otherwise derives them
    from what every round records: delivered malicious rows are the attackers
    not in ``lost``, flagged rows are ``models_received − models_accepted``,
    split by the round's TPR.
    """
    if "honest_rows" in r and "malicious_rows" in r:
        return {k: int(r[k] or 0) for k in ("honest_rows", "honest_flagged", "malicious_rows", "malicious_flagged")}
    received = int(r.get("models_received", 0))
    flagged = received - int(r.get("models_accepted", received))
    mal_rows = len(malicious - _lost_ids(r))
    mal_flagged = int(round(r["tpr"] * mal_rows)) if r.get("tpr") is not None else 0
    return {"honest_rows": received - mal_rows, "honest_flagged": max(flagged - mal_flagged, 0),
            "malicious_rows": mal_rows, "malicious_flagged": mal_flagged}


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def reduce_metrics(data: dict[str, Any]) -> dict[str, Any]:
    """The summary fields and compact per-round metrics of a ``simulate()`` result.

    Prefers the simulator's pooled fields (``tpr``, ``fpr``, ``final_attack_success``,
    ``diverged_at``) and computes the same quantities from the rounds when absent.
    """
    cfg = data["config"]
    attacked = cfg.get("attack", "none") != "none"
    malicious = set(data.get("malicious_clients", [])) if attacked else set()
    rounds = []
    for r in data["rounds"]:
        row = {k: r[k] for k in _ROUND_KEYS if k in r}
        row.update(round_rows(r, malicious))
        row["seconds"] = sum(v for k, v in r.get("seconds", {}).items() if k != "training")
        rounds.append(row)
    tot = {k: sum(r[k] for r in rounds) for k in ("honest_rows", "honest_flagged", "malicious_rows",
                                                     "malicious_flagged")}
    last = rounds[-1] if rounds else {}
    diverged = next((r["round"] for r in rounds if r.get("diverged")), None)
    shares = [r["malicious_share"] for r in rounds if r.get("malicious_share") is not None]
    infl = [r["malicious_influence"] for r in rounds if r.get("malicious_influence") is not None]
    proj = [r["attack_projection"] for r in rounds if r.get("attack_projection") is not None]
    return {
        "malicious_share": sum(shares) / len(shares) if shares else None,
        # the attackers' share of the aggregate after clipping (mean over rounds), the aggregate's summed move
        # along the attack's direction, and the honest rows down-weighted or zeroed (banned, cut), summed
        "malicious_influence": sum(infl) / len(infl) if infl else None,
        "attack_projection": sum(proj) if proj else None,
        "honest_downweighted": sum(r.get("honest_downweighted") or 0 for r in rounds),
        "honest_zeroed": sum(r.get("honest_zeroed") or 0 for r in rounds),
        "honest_weight": data.get("honest_weight"),
        "final_accuracy": data.get("final_accuracy", last.get("accuracy")),
        "final_attack_success": data.get("final_attack_success", last.get("attack_success")),
        "tpr": data["tpr"] if "tpr" in data else _ratio(tot["malicious_flagged"], tot["malicious_rows"]),
        "fpr": data["fpr"] if "fpr" in data else _ratio(tot["honest_flagged"], tot["honest_rows"]),
        "diverged_at": data.get("diverged_at", diverged),
        "rounds": rounds,
    }


def same_settings(stored: dict[str, Any], expected: dict[str, Any]) -> bool:
    """True when a cell stored with ``stored`` settings is the run ``expected`` asks for.

    Where the data lies does not count. A setting the stored run predates counts
    as the value the simulator behaved by then (its default, or
    :data:`reshuffle.run.config.PREDATED`); one the simulator no longer has is ignored.
    """
    from reshuffle.run.config import recorded_defaults

    defaults = recorded_defaults()
    for key, want in expected.items():
        if key in _NOT_COMPARED:
            continue
        have = stored[key] if key in stored else defaults.get(key)
        if have != want:
            return False
    return True


def write_atomic(path: Path, obj: Any) -> None:
    """Write JSON to ``path`` through a temporary file and a rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_plain) + "\n")
    os.replace(tmp, path)


def _plain(x: Any) -> Any:
    # numpy scalars and similar: their Python value
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def read_cell(path: Path) -> dict[str, Any] | None:
    """The stored record at ``path``, or None when absent or unreadable (it is then run again)."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("format") == FORMAT else None
