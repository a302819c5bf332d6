"""One cell of the framing grid, measured round by round: what the rule is given, and what it makes of it.

The framing grid's setting (20 clients, 4 attackers, Flower's Dirichlet(0.3) split, ideal shuffle, batch 16,
learning rate 0.1), one attack under one rule.

``energy``: do the attackers' models carry more backdoor energy (MARS's signal) than the honest ones? Each
round prints the AUC of "more energy than an honest model" for the attackers' models (MARS rejects the
high-energy cluster, so it needs values near 1), the attackers' total CBE and the honest models' range
(:mod:`reshuffle.evaluation.energy`).

``steps``: how long is the rule's step, and where does it point, relative to the honest rows' mean, with the
attackers' rows and without them, beside FedAvg's (:mod:`reshuffle.evaluation.steps`).

    python experiments/probe.py energy --model lenet5 --attack saturate-cover --rule clip-trim \\
        --seed 1 --rounds 10 --data-dir data/fashion-mnist --json outputs/energy.json
    python experiments/probe.py steps --model mlp --attack idle --rule clip-trim --data-dir data/fashion-mnist
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

BASE = {"clients": 20, "malicious": 0.2, "shuffle": "ideal", "batch_size": 16, "lr": 0.1, "partition": "dirichlet",
        "alpha": 0.3, "training": "sequential", "eval_subset": 2000, "device": "cpu"}


def _energy(settings: dict, a: argparse.Namespace) -> list:
    from reshuffle.evaluation.energy import probe

    rounds = probe(settings, a.share)
    print("| round | AUC (attackers above honest) | attackers' CBE | honest min / median / max |")
    print("|---|---|---|---|")
    for r in rounds:
        att = ", ".join(f"{x:.2f}" for x in sorted(set(r.attackers)))
        print(f"| {r.round} | {r.auc:.2f} | {att} | {r.honest_min:.2f} / {r.honest_median:.2f} / {r.honest_max:.2f} |")
    return rounds


def _steps(settings: dict, a: argparse.Namespace) -> list:
    from reshuffle.evaluation.steps import probe

    rounds = probe(settings)
    print("| round | length | cosine | without the attackers: length | cosine | FedAvg's length |")
    print("|---|---|---|---|---|---|")
    for r in rounds:
        print(f"| {r.round} | {r.length:.3f} | {r.cosine:.3f} | {r.honest_length:.3f} | {r.honest_cosine:.3f} "
              f"| {r.fedavg_length:.3f} |")
    return rounds


PROBES = {"energy": _energy, "steps": _steps}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=sorted(PROBES), help="what to measure each round")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--data-dir", required=True, help="the dataset's folder (idx files)")
    p.add_argument("--model", default="lenet5")
    p.add_argument("--attack", default="saturate-cover")
    p.add_argument("--rule", default="clip-trim")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--share", type=float, default=0.05, help="energy: the share of each layer's neurons kept "
                                                             "(MARS: 5 %%)")
    p.add_argument("--json", type=Path, help="also write the rounds here")
    a = p.parse_args(argv)
    if not Path(a.data_dir).is_dir():
        p.error(f"--data-dir {a.data_dir}: no such folder")
    import torch

    from reshuffle.errors import ConfigError

    torch.set_num_threads(1)
    settings = {**BASE, "dataset": a.dataset, "data_dir": a.data_dir, "model": a.model, "attack": a.attack,
                "rule": a.rule, "seed": a.seed, "rounds": a.rounds}
    try:
        rounds = PROBES[a.what](settings, a)
    except ConfigError as exc:
        print(f"{a.what} probe: {exc}", file=sys.stderr)
        return 2
    if not rounds:
        print(f"{a.what} probe: no round delivered both attackers' and honest models", file=sys.stderr)
        return 1
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        extra = {"share": a.share} if a.what == "energy" else {}
        a.json.write_text(json.dumps({"probe": a.what, "settings": settings, **extra,
                                      "rounds": [dataclasses.asdict(r) for r in rounds]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
