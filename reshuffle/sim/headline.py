"""A run's headline figures: what the console prints at its end, and metrics.json keeps as ``headline``.

The cohort (clients sampled, attackers among them, models delivered and
accepted), the attackers' share of the rows and of the aggregate's weight, the
passive linker's result and DP's ε, where the run measured them; and warnings,
one line each, for a run whose accuracy ended far below its best, at chance
level, or under DP noise that swamps the updates.
"""

from __future__ import annotations

import math
from typing import Any

#: Accuracy this far below the run's best at its end is worth a warning.
FELL_BY = 0.10
#: Accuracy within this of chance (1 / classes) at the end: the run learned nothing.
NEAR_CHANCE = 0.05


def _mean(values) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got else None


def headline(data: dict[str, Any], num_classes: int, model_size: int) -> dict[str, Any]:
    """The headline of a metrics.json object ``data`` (its ``config`` and ``rounds``)."""
    cfg, rounds = data["config"], data["rounds"]
    acc = [(r["round"], r["accuracy"]) for r in rounds if r["accuracy"] is not None]
    best = max(acc, key=lambda x: x[1], default=(None, None))
    attacked = [r for r in rounds if r["malicious_rows"]]  # rounds that delivered attackers' rows
    rows = sum(r["honest_rows"] + r["malicious_rows"] for r in attacked)
    out: dict[str, Any] = {
        "rounds": len(rounds),
        "sampled": _mean(r.get("sampled") for r in rounds),
        "malicious_sampled": _mean(r.get("malicious_sampled") for r in rounds),
        "models_received": _mean(r["models_received"] for r in rounds),
        "models_accepted": _mean(r["models_accepted"] for r in rounds),
        "attacked_rounds": len(attacked),
        "malicious_rows_share": sum(r["malicious_rows"] for r in attacked) / rows if rows else None,
        "malicious_share": _mean(r.get("malicious_share") for r in attacked),
        "first_accuracy": acc[0][1] if acc else None,
        "best_accuracy": best[1], "best_round": best[0],
        "final_accuracy": rounds[-1]["accuracy"] if rounds else None,
        "chance": 1 / num_classes,
        "linking": next((r["linking"] for r in reversed(rounds) if r.get("linking")), None),
        "dp_epsilon": next((r["dp_epsilon"] for r in reversed(rounds) if r.get("dp_epsilon") is not None), None),
    }
    if cfg.get("dp_clip") is not None and out["sampled"]:
        honest = max(out["sampled"] - (out["malicious_sampled"] or 0), 1)
        # Noise of z·C per coordinate on each of m updates of norm <= C: their mean carries noise of norm
        # about z·C·sqrt(d/m) and a signal of norm at most C.
        out["dp_noise_to_signal"] = cfg.get("dp_noise", 0) * math.sqrt(model_size / honest)
    out["warnings"] = warnings(out, cfg)
    return out


def warnings(h: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
    """One line per thing a reader of the run should know: accuracy fell, stayed at chance, or DP swamped it."""
    out = []
    final, best, chance = h["final_accuracy"], h["best_accuracy"], h["chance"]
    if final is None:
        return out
    if best is not None and final <= best - FELL_BY:
        out.append(f"accuracy ended at {final:.4f}, {best - final:.2f} below its best ({best:.4f} in round "
                   f"{h['best_round']})")
    r = h.get("dp_noise_to_signal")
    if cfg.get("dp_clip") is not None and final < chance + (1 - chance) / 2:
        out.append(f"with DP (clip {cfg['dp_clip']:g}, noise {cfg.get('dp_noise', 0):g}) accuracy ended at "
                   f"{final:.4f} (chance {chance:.2f}): the noise on the mean of the honest updates is about "
                   f"{r:.3g}× its largest norm; lower --dp-noise, raise --dp-clip or add clients")
    elif final <= chance + NEAR_CHANCE:
        out.append(f"accuracy ended at {final:.4f}, chance level for {round(1 / chance)} classes: the run learned "
                   f"nothing")
    return out


def lines(h: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
    """The headline as console lines (the figures a run measured, each on one line)."""
    if not h["rounds"]:
        return []
    n = h["rounds"]
    out = []
    if h["sampled"] is not None:
        mal = f" ({h['malicious_sampled']:.3g} attackers)" if cfg.get("attack", "none") != "none" else ""
        out.append(f"cohort: {h['sampled']:.3g} clients sampled per round{mal}, {h['models_received']:.3g} models "
                   f"delivered, {h['models_accepted']:.3g} accepted by the rule (means over {n} rounds)")
    if cfg.get("attack", "none") != "none":
        if h["malicious_rows_share"] is None:
            out.append("attackers: none of their rows was delivered")
        else:
            share = "" if h["malicious_share"] is None else f", {h['malicious_share']:.1%} of the aggregate's weight"
            out.append(f"attackers: {h['malicious_rows_share']:.1%} of the rows delivered{share} (over the "
                       f"{h['attacked_rounds']} of {n} rounds that delivered their rows)")
    link = h["linking"]
    if link:
        out.append(f"linker: named the sender of {link['linker_correct']} of {link['models']} rows correctly "
                   f"({link['linker_named']} named; a linker that knows the true chains names "
                   f"{link['bound_named']}; chance {link['chance']:.1f})")
    if h["dp_epsilon"] is not None:
        out.append(f"DP: ε = {h['dp_epsilon']:.3g} at δ = {cfg.get('dp_delta', 0):g} for the client that uploaded "
                   f"most often, after {n} rounds")
    elif cfg.get("dp_clip") is not None:
        out.append("DP: ε is unbounded (no noise: --dp-noise 0)")
    return out
