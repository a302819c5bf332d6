"""Run outputs: metrics.json, metrics.csv and PNG plots, all in one folder."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from reshuffle.errors import ConfigError
from reshuffle.run.record import RoundRecord, finite_or_none


#: The files a run writes into its output folder.
RUN_FILES = ("metrics.json", "metrics.csv", "checkpoint.npz", "accuracy.png", "detection.png", "time.png",
             "privacy.png")


def default_out_dir(root: str | Path = "outputs/simulate") -> Path:
    """``root/<time>``, or ``root/<time>-2``, ``-3``... when a run started in the same second holds it."""
    stamp = Path(root) / time.strftime("%Y%m%d-%H%M%S")
    out, k = stamp, 1
    while any((out / f).exists() for f in RUN_FILES):
        k += 1
        out = stamp.with_name(f"{stamp.name}-{k}")
    return out


def claim_out_dir(out: str | Path, overwrite: bool = False, options: tuple[str, str, str] | None = None) -> None:
    """Refuse an output folder that holds a run, unless ``overwrite`` (then its run's files are removed).

    ``options`` names the settings that overwrite, resume and choose another folder (the CLI's by default).
    """
    out = Path(out)
    held = [f for f in RUN_FILES if (out / f).exists()]
    if not held:
        return
    if not overwrite:
        replace_, resume, other = options or ("--overwrite", f"--resume {out}", "another --out")
        raise ConfigError(f"{out} holds a run ({', '.join(held)}): {replace_} replaces it, {resume} continues it, "
                          f"or choose {other}")
    for f in held:
        (out / f).unlink()


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def _mean(values) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def metrics(config: dict[str, Any], records: Sequence[RoundRecord], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The metrics.json object.

    ``final_accuracy`` and ``final_attack_success`` are the last round's;
    ``tpr`` and ``fpr`` pool every round's rows (flagged malicious rows over
    malicious rows delivered, flagged honest rows over honest rows delivered),
    so ``fpr`` is a number on clean runs and each malicious row counts once;
    ``honest_weight`` and ``malicious_weight`` average the rounds' mean row
    weights (a rule that down-weights rather than rejects shows it there);
    ``diverged_at`` is the first round whose global model diverged (None if
    none did); ``skipped_rounds`` lists the rounds that left the global model
    unchanged, with why. NaN/Inf values become null.
    """
    last = records[-1] if records else None
    pooled = {k: sum(getattr(r, k) for r in records)
              for k in ("honest_rows", "honest_flagged", "malicious_rows", "malicious_flagged")}
    out = {
        "config": config,
        "rounds_run": len(records),
        "final_accuracy": last.accuracy if last else None,
        "final_attack_success": last.attack_success if last else None,
        "tpr": _rate(pooled["malicious_flagged"], pooled["malicious_rows"]),
        "fpr": _rate(pooled["honest_flagged"], pooled["honest_rows"]),
        **pooled,
        "honest_weight": _mean(r.honest_weight for r in records),
        "malicious_weight": _mean(r.malicious_weight for r in records),
        "diverged_at": next((r.round for r in records if r.diverged), None),
        "skipped_rounds": {str(r.round): r.skipped for r in records if r.skipped},
        "rounds": [asdict(r) for r in records],
    }
    out.update(extra or {})
    return finite_or_none(out)


def _file_mode() -> int:
    """The mode ``open()`` gives a new file (0666 less the umask), which ``mkstemp``'s 0600 would not."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader (or a crash) sees the old file or the new one, never half.

    The file gets the mode a plain write would give it (the plots' mode), not the temporary file's 0600.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: Per-round influence columns of metrics.csv, after the others (:func:`reshuffle.server.aggregate.influence`).
INFLUENCE_COLUMNS = ("malicious_share", "malicious_influence", "attack_projection", "honest_downweighted",
                     "honest_zeroed")


def write_metrics(out_dir: str | Path, data: dict[str, Any]) -> None:
    """Write metrics.json and metrics.csv atomically (called after every round)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output folder {out}: {exc}") from None
    _atomic_write(out / "metrics.json", json.dumps(data, indent=2, allow_nan=False) + "\n")
    rounds = data["rounds"]
    phases = sorted({k for r in rounds for k in r["seconds"]})
    byte_keys = sorted({k for r in rounds for k in r["bytes"]})
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["round", "accuracy", "attack_success", "tpr", "fpr", "models_received", "models_accepted", "skipped"]
               + list(HEADLINE_COLUMNS) + [f"seconds_{p}" for p in phases] + [f"bytes_{b}" for b in byte_keys]
               + list(INFLUENCE_COLUMNS))
    for r in rounds:
        w.writerow([r["round"], _blank(r["accuracy"]), _blank(r["attack_success"]), _blank(r["tpr"]),
                    _blank(r["fpr"]), r["models_received"], r["models_accepted"], _blank(r.get("skipped"))]
                   + [_blank(v) for v in headline_values(r)]
                   + [r["seconds"].get(p, 0.0) for p in phases] + [r["bytes"].get(b, 0) for b in byte_keys]
                   + [_blank(r.get(k)) for k in INFLUENCE_COLUMNS])
    _atomic_write(out / "metrics.csv", buf.getvalue())


#: metrics.csv's per-round cohort, weight and privacy columns (blank where a run does not measure them):
#: the clients sampled and the attackers among them, the mean Decision weight of honest and malicious rows,
#: the attackers' share of the aggregate's weight, DP's ε so far, and the passive linker over the rounds so
#: far (rows whose sender it named correctly, rows it named, rows seen, and rows a linker that knows the
#: true chains names).
HEADLINE_COLUMNS = {
    "sampled": lambda r: r.get("sampled"),
    "malicious_sampled": lambda r: r.get("malicious_sampled"),
    "honest_weight": lambda r: r.get("honest_weight"),
    "malicious_weight": lambda r: r.get("malicious_weight"),
    "malicious_share": lambda r: r.get("malicious_share"),
    "dp_epsilon": lambda r: r.get("dp_epsilon"),
    "linker_correct": lambda r: (r.get("linking") or {}).get("linker_correct"),
    "linker_named": lambda r: (r.get("linking") or {}).get("linker_named"),
    "linker_models": lambda r: (r.get("linking") or {}).get("models"),
    "linker_bound_named": lambda r: (r.get("linking") or {}).get("bound_named"),
}


def headline_values(r: dict) -> list:
    """One round's :data:`HEADLINE_COLUMNS` values (None where not measured)."""
    return [get(r) for get in HEADLINE_COLUMNS.values()]


def write_outputs(out_dir: str | Path, data: dict[str, Any], plots: bool = True) -> dict[str, Any]:
    """Write metrics.json, metrics.csv and (unless ``plots`` is False) the PNG plots; return ``data``.

    The plots' titles name the run from ``data["config"]``; privacy.png is drawn only where the run measured
    the linker or DP's ε.
    """
    write_metrics(out_dir, data)
    rounds = data["rounds"]
    if plots and rounds:
        _plots(Path(out_dir), rounds, stacked_phases(rounds), data.get("config"))
    return data


#: Per-round seconds that are not a phase of the round's time line: the total of every client's
#: training, beside ``training`` (the slowest client's, or the batched computation's per client).
_NOT_PHASES = {"training_total"}


def stacked_phases(rounds: list[dict]) -> list[str]:
    """The phases stacked in time.png: each a part of the round's duration, none counted twice."""
    return sorted({k for r in rounds for k in r["seconds"]} - _NOT_PHASES)


def detection_series(rounds: list[dict]) -> list[tuple[str, list]]:
    """What detection.png draws per round: the rows flagged (TPR, FPR) where rows were scored, and the
    attackers' share of the aggregate's weight where their rows arrived: a rule that bounds rows rather than
    flagging them (``default``) shows its effect there alone."""
    out = []
    for key, label in (("tpr", "TPR (malicious flagged)"), ("fpr", "FPR (honest flagged)"),
                       ("malicious_share", "attackers' share of the weight"),
                       ("malicious_influence", "attackers' share of the aggregate")):
        values = [r.get(key) for r in rounds]
        if any(v is not None for v in values):
            out.append((label, values))
    return out


def _blank(v: Any) -> Any:
    return "" if v is None else v


def _nan(v: Any) -> float:
    return float("nan") if v is None else v


def run_label(config: dict[str, Any] | None) -> str:
    """The run in one line, for plot titles: dataset, model, rule, attack (with its share), shuffle, seed."""
    c = config or {}
    if not c:
        return ""
    attack = c.get("attack", "none")
    if attack != "none" and c.get("malicious"):
        attack = f"{attack} {c['malicious']:.0%}"
    parts = [c.get("dataset"), c.get("model"), c.get("rule") and f"rule {c['rule']}",
             f"attack {attack}" if attack else None, c.get("shuffle") and f"shuffle {c['shuffle']}",
             c.get("seed") is not None and f"seed {c['seed']}"]
    return ", ".join(str(p) for p in parts if p)


def privacy_series(rounds: list[dict]) -> tuple[list[tuple[str, list]], list | None]:
    """What privacy.png draws per round: the linker's share of rows named correctly (and the bound's, a
    linker that knows the true chains), and DP's ε; ([], None) where neither was measured."""
    lines = []
    linking = [r.get("linking") for r in rounds]
    if any(linking):
        def share(key):
            return [l[key] / l["models"] if l and l.get("models") else None for l in linking]
        lines = [("linker: senders named correctly", share("linker_correct")),
                 ("bound: named by a linker knowing the chains", share("bound_named"))]
    eps = [r.get("dp_epsilon") for r in rounds]
    return lines, eps if any(e is not None for e in eps) else None


def _titled(ax, what: str, label: str) -> None:
    ax.set_title(f"{what}\n{label}" if label else what, fontsize="medium")


def _legend_below(ax, n: int) -> None:
    """The legend under the axes, off the data, in as many columns as fit."""
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(n, 3), frameon=False)


def _plots(out: Path, rounds: list[dict], phases: list[str], config: dict[str, Any] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    label = run_label(config)
    xs = [r["round"] for r in rounds]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, [_nan(r["accuracy"]) for r in rounds], marker="o", label="test accuracy")
    n = 1
    if any(r["attack_success"] is not None for r in rounds):
        ax.plot(xs, [_nan(r["attack_success"]) for r in rounds], marker="x", label="attack success")
        n += 1
    ax.set(xlabel="round", ylabel="fraction", ylim=(0, 1))
    _titled(ax, "Accuracy per round", label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_below(ax, n)
    fig.savefig(out / "accuracy.png", dpi=120, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    series = detection_series(rounds)
    for (name, values), marker in zip(series, "ox^"):
        ax.plot(xs, [_nan(v) for v in values], marker=marker, label=name)
    if series:
        _legend_below(ax, len(series))
    else:
        ax.text(0.5, 0.5, "no rows delivered: detection rates undefined", ha="center", va="center",
                transform=ax.transAxes)
    ax.set(xlabel="round", ylabel="fraction", ylim=(-0.05, 1.05))
    _titled(ax, "Detection: rows flagged, attackers' weight", label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.savefig(out / "detection.png", dpi=120, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4))
    bottom = [0.0] * len(xs)
    for ph in phases:
        vals = [r["seconds"].get(ph, 0.0) for r in rounds]
        ax.bar(xs, vals, bottom=bottom, label=ph)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set(xlabel="round", ylabel="seconds")
    _titled(ax, "Time per phase", label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if phases:
        # Beside the bars, never over them: a legend inside the axes covered the last rounds' bars.
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    fig.savefig(out / "time.png", dpi=120, bbox_inches="tight")
    plt.close(fig)

    lines, eps = privacy_series(rounds)
    if lines or eps:
        fig, ax = plt.subplots(figsize=(6, 4))
        handles = []
        for (name, values), marker in zip(lines, "os"):
            handles += ax.plot(xs, [_nan(v) for v in values], marker=marker, label=name)
        ax.set(xlabel="round", ylabel="share of the rows", ylim=(-0.05, 1.05))
        if eps:
            right = ax.twinx() if lines else ax
            handles += right.plot(xs, [_nan(e) for e in eps], marker="^", color="tab:red",
                                  label="DP ε (most frequent uploader)")
            right.set_ylabel("ε")
            right.set_ylim(bottom=0)
        _titled(ax, "Privacy per round: the passive linker, DP's ε", label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(handles=handles, fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2),
                  ncol=min(len(handles), 2), frameon=False)
        fig.savefig(out / "privacy.png", dpi=120, bbox_inches="tight")
        plt.close(fig)
