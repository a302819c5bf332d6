"""Run outputs: metrics.json, metrics.csv and PNG plots, all in one folder."""

from __future__ import annotations

import csv
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from reshuffle.errors import ConfigError

if TYPE_CHECKING:
    from reshuffle.sim.simulator import RoundRecord


def default_out_dir(root: str | Path = "outputs/simulate") -> Path:
    return Path(root) / time.strftime("%Y%m%d-%H%M%S")


def metrics(config: dict[str, Any], records: Sequence["RoundRecord"], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The metrics.json object: ``config``, ``final_accuracy``, ``rounds`` and ``extra``'s keys."""
    out = {
        "config": config,
        "final_accuracy": records[-1].accuracy if records else None,
        "rounds": [asdict(r) for r in records],
    }
    out.update(extra or {})
    return out


def write_outputs(out_dir: str | Path, data: dict[str, Any], plots: bool = True) -> dict[str, Any]:
    """Write metrics.json, metrics.csv and (unless ``plots`` is False) the PNG plots; return ``data``."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output folder {out}: {exc}") from None
    (out / "metrics.json").write_text(json.dumps(data, indent=2) + "\n")
    rounds = data["rounds"]
    phases = sorted({k for r in rounds for k in r["seconds"]})
    byte_keys = sorted({k for r in rounds for k in r["bytes"]})
    with open(out / "metrics.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["round", "accuracy", "attack_success", "tpr", "fpr", "models_received", "models_accepted"]
                   + [f"seconds_{p}" for p in phases] + [f"bytes_{b}" for b in byte_keys])
        for r in rounds:
            w.writerow([r["round"], r["accuracy"], _blank(r["attack_success"]), _blank(r["tpr"]), _blank(r["fpr"]),
                        r["models_received"], r["models_accepted"]]
                       + [r["seconds"].get(p, 0.0) for p in phases] + [r["bytes"].get(b, 0) for b in byte_keys])
    if plots and rounds:
        _plots(out, rounds, phases)
    return data


def _blank(v: Any) -> Any:
    return "" if v is None else v


def _plots(out: Path, rounds: list[dict], phases: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["round"] for r in rounds]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(xs, [r["accuracy"] for r in rounds], marker="o", label="test accuracy")
    if any(r["attack_success"] is not None for r in rounds):
        ax.plot(xs, [r["attack_success"] for r in rounds], marker="x", label="attack success")
    ax.set(xlabel="round", ylabel="fraction", ylim=(0, 1), title="Accuracy per round")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "accuracy.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.2))
    if any(r["tpr"] is not None for r in rounds):
        ax.plot(xs, [r["tpr"] for r in rounds], marker="o", label="TPR (malicious rejected)")
        ax.plot(xs, [r["fpr"] for r in rounds], marker="x", label="FPR (honest rejected)")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no attackers: detection rates undefined", ha="center", va="center", transform=ax.transAxes)
    ax.set(xlabel="round", ylabel="rate", ylim=(-0.05, 1.05), title="Detection rates")
    fig.tight_layout()
    fig.savefig(out / "detection.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.4))
    bottom = [0.0] * len(xs)
    for ph in phases:
        vals = [r["seconds"].get(ph, 0.0) for r in rounds]
        ax.bar(xs, vals, bottom=bottom, label=ph)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set(xlabel="round", ylabel="seconds", title="Time per phase")
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(out / "time.png", dpi=120)
    plt.close(fig)
