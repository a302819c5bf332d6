"""A quick detection probe: TPR/FPR of rules on updates from a few real training rounds, no shuffle.

``python -m reshuffle.bench.probe`` trains 10 clients (digits, MLP, IID) for a
few FedAvg rounds on honest updates only, and at each round lets m of them
attack instead: sign flipping, ALIE, IPM (from :mod:`reshuffle.attacks`) and a
BadNets-style backdoor (the attackers train on data where a share of the
samples carry a 2×2 trigger in the bottom-right corner and the target label 0).
Every rule sees the same rows. It is a probe, not the evaluation: the global
model follows the clean trajectory, so attacks cannot compound over rounds;
``experiments/`` runs the full federations. ``--synthetic`` replaces training by
Gaussian rows (:func:`synthetic`), a harsher and faster case.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from reshuffle.attacks import make_attack
from reshuffle.clients import TrainConfig, build_model, get_flat, load_dataset, local_train, partition
from reshuffle.errors import ConfigError
from reshuffle.server.rules import Rule, make_rule

ATTACKS = ("sign-flip", "alie", "ipm", "badnets")
SYNTHETIC_ATTACKS = ("sign-flip", "alie", "ipm", "gaussian", "scaling", "min-max")


@dataclass(frozen=True)
class ProbeRound:
    """One round's honest updates (h, d) and each attack's m malicious rows."""

    honest: np.ndarray
    malicious: dict[str, np.ndarray]


def _trigger(x: np.ndarray, y: np.ndarray, share: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x, y = x.copy(), y.copy()
    pick = rng.random(len(y)) < share
    x[pick, ..., -2:, -2:] = x.max()
    y[pick] = 0
    return x, y


def collect(rounds: int = 6, clients: int = 10, m: int = 2, seed: int = 0, lr: float = 0.1) -> list[ProbeRound]:
    """Updates of ``rounds`` rounds; the first m clients are the attackers."""
    if not 0 < m < clients / 2:
        raise ConfigError(f"the probe needs 0 < m < clients/2, got m={m} with clients={clients}")
    data = load_dataset("digits")
    parts = partition(data.y_train, clients, "iid", seed)
    model = build_model("mlp", data.input_shape, data.num_classes, seed=seed)
    W = get_flat(model)
    cfg = TrainConfig(epochs=1, batch_size=16, lr=lr)
    rng = np.random.default_rng(seed)
    out = []
    for T in range(1, rounds + 1):
        local = [local_train(model, W, data.x_train[p], data.y_train[p], cfg, seed * 1000 + T * 100 + i) - W
                 for i, p in enumerate(parts)]
        U = np.stack(local).astype(np.float64)
        honest, own = U[m:], U[:m]
        mal = {}
        for name in ("sign-flip", "alie", "ipm"):
            attack = make_attack(name)
            mal[name] = attack(honest if attack.omniscient else own, m, rng)
        bad = []
        for i in range(m):
            x, y = _trigger(data.x_train[parts[i]], data.y_train[parts[i]], 0.5, rng)
            bad.append(local_train(model, W, x, y, cfg, seed * 1000 + T * 100 + 50 + i) - W)
        mal["badnets"] = np.stack(bad).astype(np.float64)
        out.append(ProbeRound(honest, mal))
        W = (W + U.mean(axis=0)).astype(np.float32)
    return out


def synthetic(rounds: int = 10, clients: int = 10, m: int = 2, d: int = 3000, seed: int = 0) -> list[ProbeRound]:
    """Harsher synthetic rounds: honest rows μ + N(0, I) with μ ~ N(0, ¼ I) drawn afresh per round.

    The per-coordinate noise is twice the signal, and the Gaussian attack's
    N(0, I) rows have the honest rows' scale. There is no BadNets here: a
    backdoor needs training.
    """
    if not 0 < m < clients / 2:
        raise ConfigError(f"the probe needs 0 < m < clients/2, got m={m} with clients={clients}")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        mu = 0.5 * rng.normal(size=d)
        honest = mu + rng.normal(size=(clients - m, d))
        own = mu + rng.normal(size=(m, d))
        mal = {}
        for name in SYNTHETIC_ATTACKS:
            attack = make_attack(name)
            mal[name] = attack(honest if attack.omniscient else own, m, rng)
        out.append(ProbeRound(honest, mal))
    return out


def rates(rule: Rule, rounds: list[ProbeRound], attack: str) -> tuple[float, float]:
    """Mean TPR and FPR of ``rule`` over the rounds; malicious rows come last in U."""
    tprs, fprs = [], []
    for T, r in enumerate(rounds, start=1):
        U = np.vstack([r.honest, r.malicious[attack]])
        h = r.honest.shape[0]
        flagged = set(rule.decide(U, round=T).flagged)
        tprs.append(sum(i in flagged for i in range(h, U.shape[0])) / (U.shape[0] - h))
        fprs.append(sum(i in flagged for i in range(h)) / h)
    return float(np.mean(tprs)), float(np.mean(fprs))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reshuffle.bench.probe", description=__doc__.splitlines()[0])
    p.add_argument("--rules", nargs="+", default=["multi-krum", "cclip", "geomed", "dnc", "flame", "signguard",
                                                   "signguard+flame", "signguard+dnc"])
    p.add_argument("--pre", nargs="*", default=[], help="pre-aggregators in front of every rule")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--synthetic", action="store_true", help="Gaussian synthetic rows instead of training (no BadNets)")
    args = p.parse_args(argv)
    rounds = synthetic(rounds=args.rounds, seed=args.seed) if args.synthetic else collect(rounds=args.rounds, seed=args.seed)
    attacks = list(rounds[0].malicious)
    m = rounds[0].malicious[attacks[0]].shape[0]
    print(f"| rule (f={m}) | " + " | ".join(f"{a} TPR / FPR" for a in attacks) + " |")
    print("|---" * (len(attacks) + 1) + "|")
    for name in args.rules:
        rule = make_rule(name, m, seed=args.seed, pre=args.pre)
        cells = [rates(rule, rounds, a) for a in attacks]
        print(f"| {name} | " + " | ".join(f"{t:.2f} / {f:.2f}" for t, f in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
