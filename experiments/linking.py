"""Cross-round linking: what a passive PS names from model content and rosters, with and without client-side DP.

    python experiments/linking.py                 # every setting (about 20 minutes on one core)
    python experiments/linking.py --only before   # the settings without DP
    python experiments/linking.py --only dp       # MNIST Dir(0.3) under client-side DP
    python experiments/linking.py --only after    # the same settings with stable anonymity sets (the default)
    python experiments/linking.py --summary-only  # rebuild the tables from the stored runs

Each setting is one simulated run (MLP, batch 64, seed 11, 30 rounds, FedAvg, the
ideal shuffle: it delivers the same models as the real round) with the linker scored
every round (the ``after`` runs score it in their last round only: the figures are
cumulative, and the last round's are the ones reported); ``before`` and ``dp``
sample and deliver each client on its own (``stable_sets=false``), ``after`` uses
the default stable anonymity sets of 5. ``experiments/linking/<setting>/metrics.json``
holds every round's figures,
``experiments/linking/results.json`` and ``results.md`` the last round's. A finished run
is skipped. ``--data-root DIR`` points at a folder holding ``mnist/`` and
``fashion-mnist/`` (default: the repository's ``data/``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "linking"

BASE = dict(model="mlp", batch_size=64, seed=11, rounds=30, rule="fedavg", shuffle="ideal", alpha=0.3,
            eval_subset=2000, linker=True)
PER_CLIENT = dict(stable_sets=False)
SET_SIZE = 5  # the default

SAMPLED = dict(clients=100, fraction=0.1)
ALL_DROP = dict(clients=20, dropout=0.05)

#: name → (group, what the table says, settings)
SETTINGS: dict[str, tuple[str, str, dict]] = {
    "mnist-dir0.3-sampled": ("before", "MNIST Dir(0.3), 100 clients, 10 sampled per round",
                             dict(dataset="mnist", partition="dirichlet", **SAMPLED)),
    "mnist-iid-sampled": ("before", "MNIST IID, 100 clients, 10 sampled per round",
                          dict(dataset="mnist", partition="iid", **SAMPLED)),
    "fmnist-dir0.3-sampled": ("before", "Fashion-MNIST Dir(0.3), 100 clients, 10 sampled per round",
                              dict(dataset="fashion-mnist", partition="dirichlet", **SAMPLED)),
    "mnist-dir0.3-dropout": ("before", "MNIST Dir(0.3), 20 clients, all sampled, 1 dropout per round",
                             dict(dataset="mnist", partition="dirichlet", **ALL_DROP)),
    "mnist-iid-dropout": ("before", "MNIST IID, 20 clients, all sampled, 1 dropout per round",
                          dict(dataset="mnist", partition="iid", **ALL_DROP)),
    "mnist-dir0.3-stable": ("before", "MNIST Dir(0.3), 20 clients, all sampled, no dropout",
                            dict(dataset="mnist", partition="dirichlet", clients=20)),
}
for _name in list(SETTINGS):
    SETTINGS[_name][2].update(PER_CLIENT)
#: after-setting → (the before-setting it is compared with, the settings it changes)
AFTER = {
    "mnist-dir0.3-sampled-sets": ("mnist-dir0.3-sampled", {}),
    "mnist-iid-sampled-sets": ("mnist-iid-sampled", {}),
    "fmnist-dir0.3-sampled-sets": ("fmnist-dir0.3-sampled", {}),
    "mnist-dir0.3-dropout-sets": ("mnist-dir0.3-dropout", {}),
    "mnist-iid-dropout-sets": ("mnist-iid-dropout", {}),
}
for _name, (_before, _changes) in AFTER.items():
    _group, _what, _settings = SETTINGS[_before]
    _values = {k: v for k, v in _settings.items() if k not in PER_CLIENT}
    SETTINGS[_name] = ("after", f"{_what}; stable sets of {SET_SIZE}",
                       dict(_values, stable_sets=True, set_size=SET_SIZE, **_changes))
DP_CLIP = 0.5  # about the median update norm of this setting without DP (0.46)
for z in (0.0, 0.005, 0.01, 0.02, 0.1, 1.0):
    SETTINGS[f"mnist-dir0.3-sampled-dp{z:g}"] = (
        "dp", f"MNIST Dir(0.3), 100 clients, 10 sampled; DP clip {DP_CLIP:g}, noise z = {z:g}",
        dict(dataset="mnist", partition="dirichlet", dp_clip=DP_CLIP, dp_noise=z, **SAMPLED, **PER_CLIENT))


def run_one(name: str, settings: dict, data_root: Path) -> dict:
    from reshuffle.sim import Simulation, write_metrics
    from reshuffle.run.config import SimConfig, from_mapping

    out = OUT / name
    values = {**BASE, **settings, "data_dir": str(data_root / settings["dataset"]), "out": str(out)}
    cfg = from_mapping(values, SimConfig(), source=name)
    sim = Simulation(cfg)
    if SETTINGS[name][0] == "after":
        # The figures are cumulative: scoring only the last round gives the same final figures at a fraction
        # of the time (the linker itself runs on every round's rows either way).
        score = sim.linking.score
        sim.linking.score = lambda: score() if sim.rounds.round + 1 >= cfg.rounds else None
    t0 = time.time()
    records = sim.run(on_round=lambda r: print(f"  {name} round {r.round}: accuracy {r.accuracy:.3f}, linker "
                                               f"{(r.linking or {}).get('linker_correct')}/"
                                               f"{(r.linking or {}).get('models')}", flush=True))
    data = sim.result(records)
    data["config"]["data_dir"] = None  # where the data lay on the measuring machine says nothing
    data["wall_s"] = round(time.time() - t0, 1)
    write_metrics(out, data)
    return data


def summary(names: list[str]) -> list[dict]:
    rows = []
    for name in names:
        path = OUT / name / "metrics.json"
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        last = data["rounds"][-1]
        f = last["linking"]
        cfg = data["config"]
        rows.append({
            "setting": name, "group": SETTINGS[name][0], "what": SETTINGS[name][1],
            "rounds": data["rounds_run"], "models": f["models"], "participants": f["participants"],
            "nearest_same": f["nearest_same"], "bound_named": f["bound_named"], "bound_expected": f["bound_expected"],
            "bound_mean_set": f["bound_mean_set"], "linker_correct": f["linker_correct"],
            "linker_named": f["linker_named"], "linker_mean_set": f["linker_mean_set"], "chance": f["chance"],
            "final_accuracy": data["final_accuracy"], "dp_clip": cfg.get("dp_clip"), "dp_noise": cfg.get("dp_noise"),
            "dp_epsilon": last.get("dp_epsilon"), "dp_delta": cfg.get("dp_delta"),
            "linking_s": round(sum(r["seconds"].get("linking", 0.0) for r in data["rounds"]), 1),
            "wall_s": data.get("wall_s"),
        })
        if name in AFTER:
            rows[-1].update(_after_figures(data, AFTER[name][0]))
    return rows


def _after_figures(data: dict, before: str) -> dict:
    """What stable sets cost (models and rounds lost) and the per-client run's figures at the same round."""
    sets = data.get("stable_sets") or {}
    out = {"set_size": data["config"].get("set_size"), "set_sizes": sets.get("sizes"),
           "models_lost_to_sets": sets.get("models_lost"), "rounds_lost_to_sets": sets.get("rounds_lost"),
           "limit": None, "before": None}
    f = data["rounds"][-1]["linking"]
    if f["models"]:
        out["limit"] = round(f["bound_expected"] + 0.10 * f["models"], 1)
    path = OUT / before / "metrics.json"
    if path.is_file():
        b = json.loads(path.read_text())
        R = data["rounds_run"]
        bf = b["rounds"][R - 1]["linking"]
        out["before"] = {"round": R, "models": bf["models"], "bound_named": bf["bound_named"],
                         "bound_mean_set": bf["bound_mean_set"], "linker_correct": bf["linker_correct"],
                         "accuracy": b["rounds"][R - 1]["accuracy"], "final_accuracy_30": b["final_accuracy"]}
    return out


def _pct(a: float, b: int) -> str:
    return f"{100 * a / b:.1f} %" if b else "-"


def markdown(rows: list[dict]) -> str:
    out = ["# Cross-round linking by a passive PS", "",
           "MLP, batch 64, seed 11, 30 rounds, FedAvg; figures after the last round, over every honest model "
           "delivered (`python experiments/linking.py`).", "",
           "| setting | nearest model in another round is the same sender | bound: named (a linker with the true "
           "chains) | bound: mean anonymity set | linker: named correctly | chance | final accuracy |",
           "|---|---|---|---|---|---|---|"]
    for r in (r for r in rows if r["group"] == "before"):
        near = "-" if r["nearest_same"] is None else f"{100 * r['nearest_same']:.1f} %"
        out.append(f"| {r['what']} | {near} | {r['bound_named']} of {r['models']} ({_pct(r['bound_named'], r['models'])}) "
                   f"| {r['bound_mean_set']:.2f} | **{r['linker_correct']} of {r['models']}** "
                   f"({_pct(r['linker_correct'], r['models'])}) | {r['chance']:.1f} | {r['final_accuracy']:.4f} |")
    after = [r for r in rows if r["group"] == "after"]
    if after:
        out += ["", f"With stable anonymity sets of {SET_SIZE} (the default): sampling draws whole sets, a set with a "
                "member that dropped out delivers nothing. The limit is what a linker with the true chains names by "
                "guessing within each set, plus 10 points of the rows; \"before\" is the per-client run above, read "
                "at the same round.", "",
                "| setting | rounds | models delivered | models lost to incomplete sets (rounds with none) | bound: mean "
                "anonymity set | linker: named correctly | limit | before: linker named correctly | accuracy after / "
                "before |", "|---|---|---|---|---|---|---|---|---|"]
        for r in after:
            b = r.get("before") or {}
            bef = (f"{b['linker_correct']} of {b['models']} ({_pct(b['linker_correct'], b['models'])})"
                   if b else "-")
            acc_b = b.get("final_accuracy_30") if r["rounds"] == 30 else b.get("accuracy")
            out.append(f"| {r['what']} | {r['rounds']} | {r['models']} | {r['models_lost_to_sets']} "
                       f"({len(r['rounds_lost_to_sets'] or [])}) | {r['bound_mean_set']:.2f} | "
                       f"**{r['linker_correct']} of {r['models']}** ({_pct(r['linker_correct'], r['models'])}) | "
                       f"{r['limit']} ({_pct(r['limit'] or 0, r['models'])}) | {bef} | {r['final_accuracy']:.4f} / "
                       f"{'-' if acc_b is None else f'{acc_b:.4f}'} |")
    dp = [r for r in rows if r["group"] == "dp"]
    if dp:
        out += ["", "Client-side DP (clip C, noise z·C per coordinate; ε at δ = 1e-5 of the client that uploaded "
                "most often):", "",
                "| noise z | ε | nearest same sender | linker: named correctly | chance | final accuracy |",
                "|---|---|---|---|---|---|"]
        for r in dp:
            eps = "∞" if r["dp_epsilon"] is None else f"{r['dp_epsilon']:.3g}"
            near = "-" if r["nearest_same"] is None else f"{100 * r['nearest_same']:.1f} %"
            out.append(f"| {r['dp_noise']:g} | {eps} | {near} | **{r['linker_correct']} of {r['models']}** "
                       f"({_pct(r['linker_correct'], r['models'])}) | {r['chance']:.1f} | {r['final_accuracy']:.4f} |")
        from reshuffle.privacy import noise_for_epsilon

        need = {(e, k): noise_for_epsilon(e, k) for e in (1.0, 8.0) for k in (3, 30)}
        out += ["", "Noise multiplier z that ε ≤ 1 and ε ≤ 8 (δ = 1e-5) need: "
                + "; ".join(f"ε ≤ {e:g} after {k} uploads: z ≥ {z:.3g}" for (e, k), z in need.items())
                + " (3 uploads: the expected number at fraction 0.1 over 30 rounds; 30: a client in every round)."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="settings or groups (before, dp, after) to run")
    ap.add_argument("--data-root", type=Path, default=ROOT / "data")
    ap.add_argument("--summary-only", action="store_true")
    args = ap.parse_args(argv)
    names = [n for n in SETTINGS if not args.only or n in args.only or SETTINGS[n][0] in args.only]
    unknown = sorted(set(args.only or ()) - set(SETTINGS) - {"before", "dp", "after"})
    if unknown:
        print(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}", file=sys.stderr)
        return 2
    if not args.summary_only:
        for name in names:
            if (OUT / name / "metrics.json").is_file():
                print(f"{name}: done before, skipped")
                continue
            print(f"{name}: running", flush=True)
            run_one(name, SETTINGS[name][2], args.data_root)
    rows = summary(list(SETTINGS))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    (OUT / "results.md").write_text(markdown(rows))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
