"""What stable anonymity sets cost: models and rounds lost to dropouts, and the upload per participant.

    python experiments/stable_sets_cost.py                 # both tables (a few minutes on one core)
    python experiments/stable_sets_cost.py --rounds 500    # fewer rounds per cell
    python experiments/stable_sets_cost.py --seeds         # without the accuracy runs
    python experiments/stable_sets_cost.py --shuffle real --rounds 50 --seeds   # the loss table on the real channel

1. **Losses.** The simulator's own pieces, without training (who is delivered
   depends only on who drops): the partition (:func:`reshuffle.run.sets.form_sets`),
   the sampler (whole sets, or clients one by one), and the ideal channel
   (:class:`reshuffle.run.delivery.IdealShuffle`: the all-or-none rule, and
   without sets the round's threshold) on models of 4 words. In every round each
   member of the cohort drops out independently with probability p, at a phase
   drawn uniformly from the protocol's five (a drop at ``unmask`` is recovered, as
   in the real round; at the four before, its model is lost). A round is lost when
   it delivers fewer than 2 models (the FL step needs 2).
2. **Upload.** Real rounds (:func:`reshuffle.shuffle`) of N = 20 participants with
   models of d = 1,000 words, in one group and in groups of 5 and 10: the bytes each
   participant sends in the upload phase, measured, against the protocol's count
   (N_g + d_y) rows of d words of b bits (N_g the group's size, d_y its decoys);
   the count then gives the MNIST MLP (d = 199,210) for groups of k against one
   group of N.
3. **Accuracy.** MNIST IID and Dir(0.3), Fashion-MNIST Dir(0.3), 100 clients, 10 sampled per round, MLP,
   batch 64, FedAvg, 30 rounds, the ideal shuffle, no dropouts: per-client
   sampling against stable sets of 5, one run per seed.

With ``--shuffle real`` the loss table is measured on the simulator's real channel
(:class:`reshuffle.run.delivery.RealShuffle`: the protocol in process, the DC-net round
in each stable set, the Shamir-shared round of the whole cohort without sets, epoch
pseudonyms kept across a cell's rounds), and a model lost although nobody of its set
dropped is counted.

Writes ``experiments/stable_sets/results.json`` and ``results.md`` (``results-real.*`` with
``--shuffle real``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "experiments" / "stable_sets"
RATES = (0.0, 0.02, 0.05, 0.10)
SIZES = (None, 5, 10)  # None: per-client sampling and delivery
POPULATIONS = ((100, 0.1), (20, 1.0))  # (clients, fraction sampled per round)
MLP_D = 199_210  # the MNIST MLP's parameters
ACCURACY = (("mnist", "iid"), ("mnist", "dirichlet"), ("fashion-mnist", "dirichlet"))


def losses(clients: int, fraction: float, k: int | None, p: float, rounds: int, seed: int = 11,
           shuffle: str = "ideal") -> dict:
    """Delivered, lost-to-sets and lost rounds over ``rounds`` rounds (see the module's docstring); ``shuffle``
    "real" delivers through the simulator's real channel (the protocol in process, epoch pseudonyms kept
    across the rounds) instead of the ideal one."""
    from reshuffle.protocol.schedule import STAGES
    from reshuffle.run.delivery import UNMASK, IdealShuffle, RealShuffle, Uploads
    from reshuffle.run.federation import Federation
    from reshuffle.run.pseudonyms import EpochBook
    from reshuffle.run.sampling import DROPOUT, SetSampler, UniformSampler, seed_of
    from reshuffle.run.sets import INCOMPLETE, StableSets, form_sets

    sets = form_sets(range(clients), k, seed) if k else None
    sampler = SetSampler(seed, sets, fraction) if sets else UniformSampler(seed, fraction)
    book = EpochBook()
    channel = RealShuffle(epochs=book) if shuffle == "real" else IdealShuffle(seed)
    # The FL round's all-or-none rule is the federation's: the channels deliver what the protocol did.
    federation = Federation(sets=StableSets(sets) if sets else None, book=book, seed=seed)
    of = {i: j for j, s in enumerate(sets or ()) for i in s}
    W_g = np.zeros(4, np.float32)
    models = {i: np.full(4, 0.01 * i, np.float32) for i in range(clients)}
    cohort_models = delivered = to_sets = own = lost_rounds = unexplained = 0
    for T in range(1, rounds + 1):
        cohort = sampler.cohort(T, range(clients))
        rng = np.random.default_rng(seed_of(seed, T, DROPOUT, int(p * 1000)))
        drops: dict[str, list[int]] = {}
        for i in np.asarray(cohort)[rng.random(len(cohort)) < p].tolist():
            drops.setdefault(STAGES[int(rng.integers(len(STAGES)))], []).append(i)
        groups = tuple(sets[j] for j in sorted({of[i] for i in cohort})) if sets else ()
        d = channel.deliver(Uploads(T, W_g, {i: models[i] for i in cohort}, drops, {}, frozenset(), (), groups))
        d = federation.receive(d, cohort)
        cohort_models += len(cohort)
        delivered += len(d.models)
        to_sets += sum(1 for why in d.lost.values() if why.startswith(INCOMPLETE))
        own += sum(len(ids) for ph, ids in drops.items() if ph != UNMASK)
        lost_rounds += len(d.models) < 2
        # A model lost although neither its sender nor (with sets) a member of its set dropped before unmask.
        gone = {i for ph, ids in drops.items() if ph != UNMASK for i in ids}
        hit = {i for g in groups if set(g) & gone for i in g} if sets else gone
        sent = {int(i) for i in d.senders}
        unexplained += sum(1 for i in cohort if i not in hit and i not in sent)
    return {"clients": clients, "fraction": fraction, "set_size": k, "p": p, "rounds": rounds, "shuffle": shuffle,
            "models": cohort_models, "lost_unexplained": unexplained, "delivered": delivered, "lost_own_dropout": own,
            "lost_to_sets": to_sets,
            "rounds_lost": lost_rounds, "delivered_frac": delivered / cohort_models,
            "lost_to_sets_frac": to_sets / cohort_models, "rounds_lost_frac": lost_rounds / rounds,
            # a member's model survives with 1 − 0.8 p (4 of 5 phases lose it); a set of k with that to the k
            "expected_delivered_frac": (1 - 0.8 * p) ** (k or 1)}


def upload(N: int, g: int | None, d: int = 1000) -> dict:
    """Bytes each participant sends in a real round's upload phase, measured and counted."""
    from reshuffle.harness.api import shuffle
    from reshuffle.protocol.params import default_decoys
    from reshuffle.protocol.groups import group_sizes

    rng = np.random.default_rng(0)
    r = shuffle([rng.normal(0, 0.1, d).astype(np.float32) for _ in range(N)], seed=1, group_size=g)
    sizes = group_sizes(N, g) if g else [N]
    counted = float(np.mean([(n + default_decoys(n)) * d * 32 // 8 for n in sizes for _ in range(n)]))
    return {"N": N, "group_size": g, "groups": len(sizes), "d": d, "delivered": len(r.models),
            "upload_bytes_measured": r.stats["upload"]["participant_bytes_sent"], "upload_bytes_counted": counted}


def accuracy(dataset: str, partition: str, stable: bool, seed: int, data_root: Path) -> dict:
    """Final accuracy of one 30-round run: MLP, batch 64, FedAvg, ideal shuffle, 100 clients, 10 per round."""
    from reshuffle.run.config import SimConfig, from_mapping
    from reshuffle.sim import Simulation

    cfg = from_mapping(dict(dataset=dataset, data_dir=str(data_root / dataset), partition=partition, alpha=0.3,
                            model="mlp", batch_size=64, seed=seed, rounds=30, rule="fedavg", shuffle="ideal",
                            clients=100, fraction=0.1, eval_subset=2000, stable_sets=stable), SimConfig())
    recs = Simulation(cfg).run()
    return {"dataset": dataset, "partition": partition, "stable_sets": stable, "seed": seed,
            "final_accuracy": recs[-1].accuracy, "models": sum(r.models_received for r in recs)}


def counted(n: int, d: int = MLP_D) -> float:
    """The protocol's upload per participant in a group of n: (n + d_y) rows of d 32-bit words."""
    from reshuffle.protocol.params import default_decoys

    return (n + default_decoys(n)) * d * 4


def markdown(data: dict) -> str:
    channel = "real channel (the protocol in process)" if data.get("shuffle") == "real" else "ideal channel"
    out = ["# What stable anonymity sets cost", "",
           f"`{data.get('command', 'python experiments/stable_sets_cost.py')}` ({data['date']}).", "",
           "Models and rounds lost: each member of a round's cohort drops out with probability p at one of the five "
           f"stages (a drop at unmask is recovered); the simulator's sampler, partition and {channel}, "
           f"{data['rounds']} rounds per cell. Delivered: share of the cohort's models delivered; lost to sets: share "
           "lost only because another member of their set dropped; rounds lost: rounds that delivered fewer than 2.",
           "", "| clients, sampled | sampling | p | delivered | lost to sets | rounds lost | (1 − 0.8p)^k |",
           "|---|---|---|---|---|---|---|"]
    for r in data["losses"]:
        sampled = "all" if r["fraction"] == 1 else f"{round(r['fraction'] * r['clients'])} per round"
        who = f"{r['clients']}, {sampled}"
        mode = "per client" if r["set_size"] is None else f"sets of {r['set_size']}"
        out.append(f"| {who} | {mode} | {100 * r['p']:g} % | {100 * r['delivered_frac']:.1f} % | "
                   f"{100 * r['lost_to_sets_frac']:.1f} % | {100 * r['rounds_lost_frac']:.1f} % | "
                   f"{100 * r['expected_delivered_frac']:.1f} % |")
    acc = data.get("accuracy") or []
    if acc:
        out += ["", "Final accuracy after 30 rounds (MLP, batch 64, FedAvg, ideal shuffle, 100 clients, 10 "
                "per round; evaluated on the whole test set), per seed:", "",
                "| data | sampling | " + " | ".join(f"seed {s}" for s in data["seeds"]) + " | mean |",
                "|---|---|" + "---|" * (len(data["seeds"]) + 1)]
        for ds, part in ACCURACY:
            for stable in (False, True):
                got = [a["final_accuracy"] for a in acc
                       if (a["dataset"], a["partition"], a["stable_sets"]) == (ds, part, stable)]
                name = ("MNIST" if ds == "mnist" else "Fashion-MNIST") + (" IID" if part == "iid" else " Dir(0.3)")
                out.append(f"| {name} | {'stable sets of 5' if stable else 'per client'} | "
                           + " | ".join(f"{a:.4f}" for a in got) + f" | {np.mean(got):.4f} |")
    out += ["", "Upload per participant, real rounds of N = 20, d = 1,000 (measured) and the protocol's count:", "",
            "| groups | upload bytes measured | counted (N_g + d_y)·d·4 |", "|---|---|---|"]
    for u in data["upload"]:
        what = "one group of 20" if u["group_size"] is None else f"{u['groups']} groups of {u['group_size']}"
        out.append(f"| {what} | {u['upload_bytes_measured']:,.0f} | {u['upload_bytes_counted']:,.0f} |")
    out += ["", f"The MNIST MLP (d = {MLP_D:,}), counted:", "", "| group of | upload per participant |", "|---|---|"]
    for n, b in data["upload_mlp"].items():
        out.append(f"| {n} | {b / 1e6:.2f} MB |")
    return "\n".join(out) + "\n"


def loss_table(data: dict) -> str:
    """The loss table as docs/results.md shows it: per population and sampling, per p, the share of the
    cohort's models delivered (with sets: the share lost only to a set), and the share of rounds lost; the last
    column counts models lost although nobody of their set (their sender, without sets) dropped before unmask
    (without sets, a round left below its threshold at the consent loses them all)."""
    out = ["| clients, sampled | sampling | p = 0 | p = 2 % | p = 5 % | p = 10 % | lost with no dropout in the set |",
           "|---|---|---|---|---|---|---|"]
    rows = data["losses"]
    for clients, fraction in POPULATIONS:
        for k in SIZES:
            cells = [r for r in rows if (r["clients"], r["fraction"], r["set_size"]) == (clients, fraction, k)]
            if not cells:
                continue
            per_round = round(fraction * clients)
            who = f"{clients}, {'all' if fraction == 1 else f'{per_round} per round'}"
            mode = "per client" if k is None else f"sets of {k} ({per_round // k} per round)"
            vals = []
            for r in sorted(cells, key=lambda r: r["p"]):
                sets = "" if k is None else f" ({100 * r['lost_to_sets_frac']:.1f} %)"
                vals.append(f"{100 * r['delivered_frac']:.1f} %{sets}; {100 * r['rounds_lost_frac']:.1f} %")
            out.append(f"| {who} | {mode} | " + " | ".join(vals)
                       + f" | {sum(r.get('lost_unexplained', 0) for r in cells)} |")
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=2000, help="rounds per cell of the loss table")
    ap.add_argument("--seeds", type=int, nargs="*", default=[11, 12, 13], help="seeds of the accuracy runs (none: skip)")
    ap.add_argument("--shuffle", choices=("ideal", "real"), default="ideal",
                    help="the loss table's channel: the ideal one, or the real protocol in process (results-real.*)")
    ap.add_argument("--data-root", type=Path, default=ROOT / "data")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    t0 = time.time()
    rows = []
    for n, f in POPULATIONS:
        for k in SIZES:
            for p in RATES:
                c0 = time.time()
                rows.append(losses(n, f, k, p, args.rounds, shuffle=args.shuffle))
                print(f"{n} clients, {'per client' if k is None else f'sets of {k}'}, p = {p:g}: "
                      f"{100 * rows[-1]['delivered_frac']:.1f} % delivered ({time.time() - c0:.0f} s)", flush=True)
    ups = [upload(20, g) for g in (None, 10, 5)]
    acc = [accuracy(ds, part, stable, seed, args.data_root) for ds, part in ACCURACY
           for stable in (False, True) for seed in args.seeds]
    data = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "rounds": args.rounds, "shuffle": args.shuffle,
            "command": "python experiments/stable_sets_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "losses": rows, "upload": ups, "upload_mlp": {str(n): counted(n) for n in (5, 10, 20, 100)},
            "seeds": args.seeds, "accuracy": acc, "wall_s": round(time.time() - t0, 1)}
    OUT.mkdir(parents=True, exist_ok=True)
    stem = "results" if args.shuffle == "ideal" else "results-real"
    (OUT / f"{stem}.json").write_text(json.dumps(data, indent=2) + "\n")
    text = (markdown(data) + "\nAs docs/results.md shows it (delivered (lost to sets); rounds lost):\n\n"
            + loss_table(data))
    (OUT / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
