"""``reshuffle`` command line. Bad arguments and failures give one-line errors."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reshuffle.errors import ConfigError, ReShuffleError


def _parse_ids(spec: str) -> list[int]:
    """``"1-5,8"`` → [1, 2, 3, 4, 5, 8]."""
    out: list[int] = []
    try:
        for part in spec.split(","):
            if "-" in part:
                a, b = part.split("-", 1)
                lo, hi = int(a), int(b)
                if lo > hi:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid id list {spec!r} (expected e.g. 0-9,12)") from None
    if any(i < 0 or i >= 0xFFFFFFFF for i in out) or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"ids in {spec!r} must be distinct and in [0, 2^32-1)")
    return out


class _Steps:
    """A progress line on stderr in the simulator's style (what, done/total, bar, status, time elapsed), so that
    a long command shows it is working and stdout keeps its table or JSON. ``total`` None: a count and no end."""

    def __init__(self, what: str, total: int | None = None, enabled: bool = True) -> None:
        self.what, self.total, self.enabled = what, total, enabled
        self.done, self._started = 0, False

    def __enter__(self) -> "_Steps":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn(self.what), MofNCompleteColumn(), BarColumn(),
                                TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=False)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.what, total=self.total, status="starting")
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)

    def step(self, status: str, advance: int = 1) -> None:
        """``advance`` more done; ``status`` says what was done or what runs now."""
        self.done += advance
        if self.enabled:
            self.bar.update(self.task, advance=advance, status=status)

    def starting(self, name: str) -> None:
        """The part before ``name`` is done and ``name`` runs now (a bench's parts)."""
        self.step(f"running {name}", advance=1 if self._started else 0)
        self._started = True


def cmd_ca(args: argparse.Namespace) -> int:
    from reshuffle.crypto.signatures import ROLE_SERVER, CertificateAuthority, load_identity

    d = Path(args.dir)
    if args.ca_cmd == "init":
        if (d / CertificateAuthority.CA_KEY).exists() and not args.force:
            raise ReShuffleError(f"{d / CertificateAuthority.CA_KEY} exists; use --force to replace it")
        ca = CertificateAuthority.generate()
        ca.save(d)
        print(f"CA created in {d} (public key {ca.verify_key.to_bytes().hex()})")
    elif args.ca_cmd == "issue":
        ca = CertificateAuthority.load(d)
        out = Path(args.out) if args.out else d
        for pid in args.ids:
            print(ca.issue_files(out, pid))
        if args.server:
            print(ca.issue_files(out, 0xFFFFFFFF, ROLE_SERVER))
    elif args.ca_cmd == "verify":
        ca = CertificateAuthority.load(d, public_only=True)
        out = Path(args.out) if args.out else d
        for pid in args.ids:
            _, cert = load_identity(out, pid)
            ca.verify(cert, subject=pid)
            print(f"participant-{pid}: certificate valid")
    return 0


def _bench_parts(args: argparse.Namespace) -> int:
    """The parts a bench runs one after another (its progress line's total)."""
    if args.what == "crypto":
        return 7
    if args.what == "simulate":
        return 2
    if args.what == "models":
        from reshuffle.bench.models import CASES

        return len(args.models) if args.models else len(CASES)
    if args.what == "flower":
        from reshuffle.bench import flower

        Ns = args.N or flower.DEFAULT_NS
        return (len([n for n in Ns if n <= 10]) or 1) if args.quick else len(Ns) + 1
    Ns = args.N or [10, 50, 100]
    return (len([n for n in Ns if n <= 10]) or 1) if args.quick else len(Ns)


def cmd_bench(args: argparse.Namespace) -> int:
    from reshuffle.bench.common import print_table

    with _Steps(f"bench {args.what}", _bench_parts(args), enabled=not args.quiet) as steps:
        results = _run_bench(args, steps.starting)
        steps.step("done")
    if args.what == "models" and not args.json:
        from reshuffle.bench import models as models_bench

        models_bench.print_models_table(results)
        return 0
    if args.what == "round" and args.stable and not args.json:
        from reshuffle.bench import round as round_bench

        round_bench.print_stable(results)
        return 0
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(f"reshuffle bench {args.what}", results)
    return 0


def _run_bench(args: argparse.Namespace, on_step) -> dict:
    if args.what == "crypto":
        from reshuffle.bench import crypto

        return crypto.run(quick=args.quick, on_step=on_step)
    if args.what == "flower":
        from reshuffle.bench import flower

        return flower.run(Ns=args.N or flower.DEFAULT_NS, d=args.d, quick=args.quick, on_step=on_step)
    if args.what == "simulate":
        from reshuffle.bench import simulate as sim_bench

        return sim_bench.run(args.dataset, args.model, args.clients or 20, args.data_dir,
                             samples=256 if args.quick else None, threads=args.threads, on_step=on_step)
    if args.what == "models":
        from reshuffle.bench import models as models_bench

        return models_bench.run(clients=args.clients or 8, threads=args.threads, quick=args.quick,
                                models=tuple(args.models) if args.models else None, on_step=on_step)
    from reshuffle.bench import round as round_bench

    if args.stable:
        results = round_bench.run_stable(Ns=args.N or [20, 100, 200], d=args.d, group_size=args.group_size or 5,
                                         quick=args.quick, train_model=args.train_model)
        if args.availability:
            results["availability"] = round_bench.availability(group_size=args.group_size or 5,
                                                               rounds=2 if args.quick else 5)
        return results
    return round_bench.run(Ns=args.N or [10, 50, 100], d=args.d, quick=args.quick, group_size=args.group_size,
                           workers=args.workers, baseline=args.baseline, set_size=args.set_size, on_step=on_step)


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid fraction {text!r}") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"fraction {text!r} must lie in [0, 1)")
    return v


def _number(kind, ok, what: str):
    """An argparse type: ``kind(text)`` for which ``ok`` holds, else an error saying it must be ``what``."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value {text!r}") from None
        if not ok(v):
            raise argparse.ArgumentTypeError(f"{text!r} must be {what}")
        return v

    return parse


def _positive(kind):
    return _number(kind, lambda v: v > 0, "positive")


def _non_negative(kind):
    return _number(kind, lambda v: 0 <= v < float("inf"), ">= 0 and finite")


_non_negative_int = _non_negative(int)


def _dataset_help() -> str:
    """The registered datasets, for help texts (the registry needs no torch)."""
    from reshuffle.clients.data import dataset_names

    return f"{', '.join(dataset_names())}, hf:NAME (a Hugging Face dataset) or a plug-in's name"


def _model_help() -> str:
    """The registered models, for help texts (naming them imports no torch)."""
    from reshuffle.clients.catalog import model_names

    return ", ".join(model_names())


def _share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid fraction {text!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"fraction {text!r} must lie in (0, 1]")
    return v


# (flag, type, help); dest = SimConfig field name. Defaults come from SimConfig (the help shows them),
# so an option left out does not override a --config file.
_SIM_OPTIONS = [
    ("--dataset", str, _dataset_help()),
    ("--data-dir", str, "folder holding the dataset's files (default: data/<dataset>; for hf:NAME its cache)"),
    ("--model", str, f"{_model_help()} or a plug-in's name"),
    ("--clients", _positive(int), "number of clients N"),
    ("--fraction", _share, "fraction of the clients sampled for each round (seeded; attackers like everyone)"),
    ("--clients-per-round", _positive(int), "clients sampled for each round, instead of --fraction "
                                            "(default: all)"),
    ("--rounds", _positive(int), "number of rounds"),
    ("--local-epochs", _positive(int), "local epochs per round"),
    ("--batch-size", _positive(int), "local batch size"),
    ("--lr", _positive(float), "local learning rate alpha"),
    ("--optimizer", str, "local optimizer: sgd or adam"),
    ("--partition", str, "iid, dirichlet, pathological, shard, natural (by writer) or dirichlet-legacy; "
                         "Flower Datasets' partitions"),
    ("--alpha", _positive(float), "Dirichlet concentration (with --partition dirichlet)"),
    ("--classes-per-client", _positive(int), "classes each client holds (with --partition pathological)"),
    ("--shards-per-client", _positive(int), "label-sorted shards each client holds (with --partition shard)"),
    ("--device", str, "auto (the best available), cpu, cuda, cuda:N or mps: where local training and evaluation run"),
    ("--attack", str, "an attack's name (none, sign-flip, alie, badnets, agr-tailored, ...; all are listed in "
                      "docs/fl.md)"),
    ("--malicious", _fraction, "fraction of malicious clients"),
    ("--rule", str, "default (chosen by its worst case in the detection grid), fedavg, krum, multi-krum, bulyan, "
                    "cosine, fltrust, median, trimmed-mean, cclip, geomed, dnc, flame, signguard, ...; join with + to "
                    "intersect (signguard+flame)"),
    ("--f", _non_negative_int, "attackers the rule assumes per round (default: the expected number in a round)"),
    ("--server-opt", str, "server optimiser stepping from the rule's aggregate: sgd, momentum (FedAvgM), adam, "
                          "yogi (FedOpt)"),
    ("--server-lr", _positive(float), "server step size (default: 1 for sgd and momentum, 0.01 for adam and "
                                      "yogi)"),
    ("--model-clip", _positive(float), "CRFL: clip the global model's norm to this after every round "
                                       "(default: no clipping)"),
    ("--model-noise", _non_negative(float), "CRFL: add Gaussian noise of this standard deviation to every "
                                           "coordinate of the global model after every round (default: none)"),
    ("--dropout", _fraction, "fraction of a round's clients that drop out (at a random stage of the protocol)"),
    ("--shuffle", str, "real (the protocol), ideal (its ideal functionality), none (plaintext)"),
    ("--training", str, "auto, batched (all clients in one stacked computation) or sequential"),
    ("--group", str, "ristretto255 or secp256k1 (real shuffle)"),
    ("--group-size", _positive(int), "per-round anonymity groups of at least this size, with --no-stable-sets "
                                     "(real shuffle; default: one group)"),
    ("--set-size", _positive(int), "stable anonymity sets of at least this many clients, formed once per run, "
                                   "sampled whole and delivered all or none"),
    ("--seed", _non_negative_int, "seed of data split, initial model, sampling, training order, attacks"),
    ("--root-samples", _positive(int), "size of FLTrust's server root dataset"),
    ("--eval-subset", _positive(int), "evaluate on this many fixed test samples in every round but the last "
                                      "(default: all)"),
    ("--adversary", str, "protocol adversary played in every real round (names: reshuffle redteam --json)"),
    ("--dp-clip", _positive(float), "client-side DP: every honest client clips its update to this L2 norm "
                                    "(default: no DP)"),
    ("--dp-noise", _non_negative(float), "client-side DP: Gaussian noise of this multiple of --dp-clip per "
                                         "coordinate, drawn by the client from OS randomness"),
    ("--dp-delta", _fraction, "client-side DP: delta of the epsilon recorded each round"),
]


def _help_with_default(flag: str, text: str) -> str:
    """``text`` with SimConfig's default for ``flag`` (unless the text says it, or there is none)."""
    from reshuffle.run.config import SimConfig

    default = SimConfig().as_dict().get(flag[2:].replace("-", "_"))
    if "default" in text or default is None:
        return text
    return f"{text} (default: {default})"


class _Interrupted(Exception):
    """Ctrl-C during a simulation whose finished rounds are checkpointed in ``out``."""

    def __init__(self, out: str, cfg) -> None:
        self.out, self.cfg = out, cfg


def cmd_simulate(args: argparse.Namespace) -> int:
    from reshuffle.run.config import from_mapping, load_toml
    from reshuffle.run.config import SimConfig
    from reshuffle.run.report import claim_out_dir, default_out_dir

    if args.resume is not None:
        return _resume_simulation(args)
    if args.overwrite and not (args.out or args.config):
        raise ReShuffleError("--overwrite replaces the run in --out: give --out")
    values = load_toml(args.config) if args.config else {}
    cfg = from_mapping(values, SimConfig(), source=args.config or "config")
    explicit = {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_")) for flag, _, _ in _SIM_OPTIONS}
    explicit = {k: v for k, v in explicit.items() if v is not None}
    if args.local_bn:
        explicit["local_bn"] = True
    if args.linker:
        explicit["linker"] = True
    if args.no_stable_sets:
        explicit["stable_sets"] = False
    if args.plugin:
        explicit["plugins"] = cfg.plugins + args.plugin
    if args.pre:
        explicit["pre"] = [p for arg in args.pre for p in arg.split(",") if p]
    out = args.out or cfg.out or str(default_out_dir())
    explicit["out"] = out
    cfg = from_mapping(explicit, cfg, source="command line")
    claim_out_dir(out, overwrite=args.overwrite)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    given = {k.replace("-", "_") for k in values} | set(explicit)
    return _finish(_run_with_progress(cfg, out, quiet=args.quiet, given=given), cfg, out)


# Options that may come with --resume: they leave a run's results unchanged, name what the checkpoint may
# not (the plug-ins, checked against its hashes, and where the data lies), or extend it (--rounds).
_RESUME_ALLOWS = {"resume", "quiet", "threads", "func", "cmd", "plugin", "data_dir", "rounds"}


def _resume_simulation(args: argparse.Namespace) -> int:
    from reshuffle.run.checkpoint import load_simulation

    given = sorted(f"--{k.replace('_', '-')}" for k, v in vars(args).items()
                   if k not in _RESUME_ALLOWS and v not in (None, [], False))
    if given:
        raise ReShuffleError(f"--resume continues a run with the settings it started with; "
                             f"leave out {', '.join(given)}")
    cfg, ck = load_simulation(args.resume, plugins=args.plugin, data_dir=args.data_dir, rounds=args.rounds)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    print(f"resuming {args.resume} after round {ck.round} of {cfg.rounds}")
    return _finish(_run_with_progress(cfg, args.resume, quiet=args.quiet, resume=ck), cfg, args.resume)


def _finish(data: dict, cfg, out: str) -> int:
    """Print the run's outcome and its headline figures (cohort, attackers' weight, linker, DP's ε); rounds that
    kept W_g and the headline's warnings go to stderr, one line each (metrics.json has every reason)."""
    from reshuffle.sim.headline import lines

    skipped = data["skipped_rounds"]
    if skipped:
        first = min(skipped, key=int)
        print(f"reshuffle: warning: {len(skipped)} of {data['rounds_run']} rounds left the global model unchanged; "
              f"round {first}: {skipped[first]}", file=sys.stderr)
    head = data.get("headline")
    if head:
        for line in head["warnings"]:
            print(f"reshuffle: warning: {line}", file=sys.stderr)
        for line in lines(head, data["config"]):
            print(line)
    diverged = f"; the global model diverged in round {data['diverged_at']}" if data["diverged_at"] else ""
    print(f"final accuracy {data['final_accuracy']:.4f} after {cfg.rounds} rounds{diverged}; outputs in {out}")
    return 0


def resume_command(out: str, cfg) -> str:
    """The command that continues the run checkpointed in ``out``."""
    import shlex

    parts = ["reshuffle", "simulate", "--resume", out]
    for p in cfg.plugins:
        parts += ["--plugin", p]
    if cfg.data_dir:
        parts += ["--data-dir", cfg.data_dir]
    return " ".join(shlex.quote(p) for p in parts)


def _run_with_progress(cfg, out: str, quiet: bool, resume=None, given=()) -> dict:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from reshuffle.run import checkpoint
    from reshuffle.run.report import write_metrics, write_outputs
    from reshuffle.sim.notices import option_notices
    from reshuffle.sim.simulator import Simulation

    sim = Simulation(cfg)  # loads data and validates before any output
    sim.notices[:0] = option_notices(sim.cfg, given)
    for line in sim.notices:
        print(f"reshuffle: note: {line}", file=sys.stderr)
    records: list = [] if resume is None else checkpoint.restore_simulation(sim, resume)
    done = len(records)  # sim.run extends records before each callback

    def save(rec) -> None:
        # The checkpoint first: metrics.json never shows a round that a resumed run would redo.
        checkpoint.save(out, checkpoint.simulation_checkpoint(sim, records))
        write_metrics(out, sim.result(records))  # atomically, so an interrupted run keeps its rounds

    try:
        if quiet:
            return write_outputs(out, sim.result(sim.run(save, records)))
        cols = (TextColumn("round"), MofNCompleteColumn(), BarColumn(), TextColumn("{task.fields[status]}"),
                TimeElapsedColumn())
        with Progress(*cols, transient=False) as bar:
            task = bar.add_task("rounds", total=cfg.rounds, completed=done, status="training")

            def on_round(rec) -> None:
                save(rec)
                det = "".join(f" {k} {v:.2f}" for k, v in (("tpr", rec.tpr), ("fpr", rec.fpr)) if v is not None)
                status = f"skipped ({rec.skipped})" if rec.skipped else f"accuracy {rec.accuracy:.4f}{det}"
                bar.update(task, advance=1, status=status)

            data = sim.result(sim.run(on_round, records))
    except KeyboardInterrupt:
        raise _Interrupted(out, cfg) from None
    write_outputs(out, data)
    return data


def cmd_data(args: argparse.Namespace) -> int:
    from reshuffle.clients import fetch as dl
    from reshuffle.clients.data import DataError, default_data_root

    root = Path(args.dir) if args.dir else default_data_root()
    if args.data_cmd == "fetch":
        if args.quiet:
            results = dl.fetch(args.name, root, args.url)
        else:
            from rich.console import Console

            with dl.progress_bar(Console(stderr=True)) as on_bytes:
                results = dl.fetch(args.name, root, args.url, on_bytes)
        folder = root / args.name
        for f, what in results:
            print(f"{what:<10} {folder / f.name}")
        use = "" if args.dir is None else f"; pass --data-dir {folder} to use it"
        print(f"{args.name}: {len(results)} files in {folder}, SHA-256 verified{use}")
        return 0
    names = args.names or [n for n in dl.downloadable() if (root / n).exists()]
    if not names:
        raise DataError(f"no dataset in {root}; get one with `reshuffle data fetch {'|'.join(dl.downloadable())}` "
                        f"or pass --data-dir to the commands that load data")
    bad = 0
    for name in names:
        for check in dl.verify(name, root):
            print(f"{check.status:<8} {check.path}" + (f" ({check.detail})" if check.detail else ""))
            bad += check.status != "ok"
    if bad:
        print(f"{bad} file(s) missing or wrong; `reshuffle data fetch NAME` downloads and replaces them")
    return 1 if bad else 0


def cmd_games(args: argparse.Namespace) -> int:
    from reshuffle.games import GAME_ROWS, run_games

    with _Steps("games", GAME_ROWS, enabled=not args.quiet) as steps:
        results = run_games(quick=args.quick, on_result=lambda r: steps.step(r.game[:48]))
    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        t = Table(title="reshuffle games" + (" --quick" if args.quick else ""))
        for col in ("game", "assumption", "advantage", "bound", "expected", "result"):
            t.add_column(col, justify="right" if col in ("advantage", "bound") else "left")
        for r in results:
            t.add_row(escape(r.game), escape(r.assumption), f"{r.advantage:.4f}", f"{r.bound:.4f}", r.expected,
                      "pass" if r.passed else "FAIL")
        Console(width=200).print(t)
    return 0 if all(r.passed for r in results) else 1


#: ``reshuffle redteam --explore --weak NAME``: participants of reshuffle.adversaries.weak, each with one fix undone
WEAK_PARTICIPANTS = {"reopens-after-upload": "ReopensAfterUpload", "answers-every-complaint": "AnswersEveryComplaint",
                     "trusts-announced-parameters": "TrustsAnnouncedParameters",
                     "opens-without-view": "OpensWithoutView",
                     "keeps-pseudonym-only-when-done": "KeepsPseudonymOnlyWhenDone"}


def cmd_explore(args: argparse.Namespace) -> int:
    from reshuffle.adversaries import weak
    from reshuffle.adversaries.explorer import ExploreConfig, explore
    from reshuffle.protocol.participant import Participant

    cls = Participant if args.weak == "none" else getattr(weak, WEAK_PARTICIPANTS[args.weak])
    cfg = ExploreConfig(N=args.N or 4, R_max=args.r_max, depth=args.depth, budget=args.budget, split=args.split,
                        announce=not args.fixed_params, forge=not args.no_forge, seed=args.seed)
    with _Steps("states", cfg.budget, enabled=not args.quiet) as steps:
        r = explore(cfg, cls, on_states=lambda n: steps.step(f"{n} distinct states", advance=n - steps.done))
        steps.step(f"{r.states} states, {r.schedules} schedules", advance=r.states - steps.done)
    if args.json:
        print(json.dumps(r.as_dict(), indent=2))
    else:
        done = "all reachable states" if r.complete else f"stopped at the budget of {args.budget} states"
        print(f"explored {r.states} states and {r.schedules} schedules of the PS ({done}), paths up to "
              f"{r.max_depth} moves, {r.uploads} with an honest upload, in {r.seconds:.1f} s "
              f"(N={cfg.N}, R_max={cfg.R_max}, {'each recipient apart too' if cfg.split else 'broadcast moves'})")
        print("moves accepted: " + ", ".join(f"{k} {v}" for k, v in sorted(r.kinds.items())))
        print("round parameters accepted (c, t): " + ", ".join(f"({c}, {t})" for c, t in r.announced)
              + (" (every other c and t the messages allow was refused)" if cfg.announce else ""))
        print(f"honest models linked on any path: {r.links}")
        if cfg.forge:
            print(f"forged evidence checked at the leaves: {r.evidence_tried} candidates")
        for v in r.violations:
            print(f"VIOLATION {v}")
        if not r.violations:
            print("no violation: no key masked two plaintexts, no uploader revealed its slot phase, nothing linked"
                  + (", no forged evidence accepted" if cfg.forge else "")
                  + "; every pseudonym recorded as issued is held, and no uploader would ask twice")
    if args.weak != "none" or args.no_dcnet:
        return 1 if r.violations else 0
    # The DC-net round of a stable group of 5, two colluders: its own explorer (reshuffle/adversaries/dcexplore.py).
    from reshuffle.adversaries.dcexplore import DCExploreConfig, explore_dc

    dc = explore_dc(DCExploreConfig(budget=min(args.budget, 2000), depth=min(args.depth, 12), seed=args.seed))
    if args.json:
        print(json.dumps({"dcnet": dc.as_dict()}, indent=2))
    else:
        done = "all reachable states" if dc.complete else f"stopped at {dc.states} states"
        print(f"DC-net round of a stable group of 5 (2 colluders): explored {dc.states} states and {dc.schedules} "
              f"schedules ({done}), paths up to {dc.max_depth} moves, {dc.uploads} with the group's upload, in "
              f"{dc.seconds:.1f} s; moves accepted: " + ", ".join(f"{k} {v}" for k, v in sorted(dc.kinds.items())))
        for v in dc.violations:
            print(f"VIOLATION {v}")
        if not dc.violations:
            print("no violation: no key masked two plaintexts, no real row opened, no honest member read alone, "
                  "every pseudonym recorded as issued is held")
    # The group assignment and the round it starts: its own explorer (reshuffle/adversaries/assignexplore.py).
    from reshuffle.adversaries.assignexplore import AssignExploreConfig, explore_assignment

    acfg = AssignExploreConfig(budget=min(args.budget, 3000), depth=min(args.depth, 14), seed=args.seed)
    ga = explore_assignment(acfg)
    if args.json:
        print(json.dumps({"assignment": ga.as_dict()}, indent=2))
    else:
        done = "all reachable states" if ga.complete else f"stopped at {ga.states} states"
        print(f"group assignment of {acfg.N} (groups of {acfg.g}, {len(acfg.colluders)} colluder): explored "
              f"{ga.states} states and {ga.schedules} schedules ({done}), {ga.assigned} with every honest member "
              f"assigned, {ga.rounds_started} with a round started, in {ga.seconds:.1f} s; moves accepted: "
              + ", ".join(f"{k} {v}" for k, v in sorted(ga.kinds.items())))
        for v in ga.violations:
            print(f"VIOLATION {v}")
        if not ga.violations:
            print("no violation: no group below a member's floor, no draw from a list the PS chose, one partition "
                  "per draw, no round without a group")
    return 1 if r.violations or dc.violations or ga.violations else 0


def cmd_redteam(args: argparse.Namespace) -> int:
    from reshuffle.adversaries.redteam import LINKER, run_redteam

    if args.explore:
        return cmd_explore(args)
    from reshuffle.adversaries import adversary_names, dcteam

    names = args.only or [*adversary_names(), LINKER, *dcteam.ROWS]
    # A behaviour's name gives two rows (its Shamir-shared and its DC-net round); the others one.
    total = sum(1 if n == LINKER or n.startswith(dcteam.PREFIX) else 2 for n in names)
    with _Steps("rows", total, enabled=not args.quiet) as steps:
        rows = run_redteam(rounds=args.rounds, N=args.N or 8, names=names,
                           on_row=lambda r: steps.step(f"{r.behaviour}: {'holds' if r.holds else 'FAILS'}"))
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=2))
    else:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        t = Table(title=f"reshuffle redteam (N={args.N or 8}, {args.rounds} rounds each)")
        for col in ("behaviour", "round", "role", "rounds", "honest delivered", "culprit named", "honest named",
                    "what holds", "extra s", "result"):
            t.add_column(col)
        for r in rows:
            if not r.rounds:  # no form in this round: the row says why
                t.add_row(escape(r.behaviour), r.round, r.role, "0", "-", "-", "-", escape(r.detail), "-", "n/a")
                continue
            t.add_row(escape(r.behaviour), r.round, r.role, str(r.rounds), f"{r.delivered}/{r.expected}",
                      f"{r.culprit_right}/{r.rounds}", str(r.wrong),
                      escape(r.outcome if r.round == "dcnet" else r.detected_by), f"{r.extra_s:+.3f}",
                      "holds" if r.holds else "FAILS")
        Console(width=220).print(t)
        for r in rows:
            if r.behaviour == LINKER:
                print(f"{r.behaviour}: {r.detail}")
    return 0 if all(r.holds for r in rows) else 1


def cmd_grid(args: argparse.Namespace) -> int:
    import os

    from reshuffle.clients.data import default_data_root
    from reshuffle.evaluation.backends import make_backend
    from reshuffle.evaluation.grid import Selection, default_grid, load_grid_toml, validate
    from reshuffle.evaluation.report import update_docs
    from reshuffle.evaluation.runner import run_grid, summary_only

    whole = default_grid(full=args.full)
    if args.config:
        whole = load_grid_toml(args.config, whole)
    sel = Selection(datasets=args.datasets, partitions=args.partitions, attacks=args.attacks, rules=args.rules,
                    seeds=args.seeds, models=args.models, rounds=args.rounds, fraction=args.fraction,
                    server_opt=args.server_opt, server_lr=args.server_lr, long_rounds=args.long_rounds)
    whole = sel.apply_base(whole)
    grid = validate(sel.apply(whole))
    if args.config:
        # A slice of a configuration is summarised as the whole configuration: it must stay inside it.
        inside = set(whole.cells())
        outside = [c for c in grid.cells() if c not in inside]
        if outside:
            names = sorted({c.setting.label for c in outside} | {c.attack for c in outside if c.attack not in
                                                                 whole.all_attacks})
            raise ConfigError(f"the selection names {len(outside)} cells outside {args.config} ({', '.join(names)}); "
                              "narrow it to the configuration's settings (--datasets, --partitions, --models)")
    elif any((args.datasets, args.partitions, args.attacks, args.rules, args.seeds, args.models)):
        whole = None  # a subset named on the command line is summarised against its own cells
    out = Path(args.out)
    data_root = Path(args.data_dir_root) if args.data_dir_root else default_data_root()
    if args.summary_only:
        summary = summary_only(grid, out, data_root, whole=whole)
        interrupted = False
    else:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        backend = make_backend(args.jobs or cores, args.ray)
        cells = grid.cells()
        n_long = sum(c.rounds is not None for c in cells)
        long = f", {n_long} more over {grid.long_rounds} rounds" if n_long else ""
        print(f"grid: {len(cells)} cells ({len(grid.settings_list)} settings × {len(grid.all_attacks)} attacks × "
              f"{len(grid.all_rules)} rules × {len(grid.seeds)} seeds{long}) in {out}, on {backend.name}", flush=True)
        if grid.skipped_rules:
            print(f"grid: rule(s) {', '.join(grid.skipped_rules)} not registered: left out", flush=True)
        for setting, why in grid.needs_data(data_root).items():
            print(f"grid: {setting.label} needs data, its cells wait: {why}", flush=True)
        res = run_grid(grid, out, backend, data_root, summary_grid=whole, max_cells=args.max_cells, quiet=args.quiet,
                       docs=[Path(d) for d in args.docs or ()])
        summary, interrupted = res.summary, res.interrupted
        print(f"grid: ran {res.ran} cells ({res.failed} failed) in {res.wall_seconds:.0f} s: "
              f"{res.core_seconds / 3600:.3f} core-hours measured" + (" (interrupted)" if interrupted else ""))
    c, n = summary["cost"], summary["counts"]
    print(f"grid: {n['done']} of {n['total']} cells done, {n['failed']} failed", end="")
    if c["mean_cell_seconds"] is not None:
        per = ", ".join(f"{k} {v['mean']:.1f}" for k, v in c["per_setting"].items())
        print(f"; CPU s per cell: {per}; the {c['remaining_cells'] - c['unmeasured_cells']} cells not done of "
              f"measured settings need about {c['remaining_core_hours']:.2f} core-hours", end="")
        if c["unmeasured_cells"]:
            print(f", {c['unmeasured_cells']} more cells not yet measured", end="")
    print(f"\ngrid: summary in {out / 'summary.md'}, {out / 'worst_case.md'}, {out / 'summary.json'}")
    for docs in args.docs or ():
        update_docs(Path(docs), out)
        print(f"grid: regenerated the {out.name} grid's section of {docs}")
    return 130 if interrupted else 0


def cmd_soak(args: argparse.Namespace) -> int:
    from reshuffle.flower.app.soak import SoakConfig, run_soak

    cfg = SoakConfig.make(args.quick, args.rounds, args.nodes, args.seed, args.dir)
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else \
        (lambda line: print(line, flush=True))
    result = run_soak(cfg, say)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for r in result["rounds"]:
            print(f"round {r['round']:>3}: {r['outcome']}; {r['models_delivered']}/{r['roster']} models delivered; "
                  f"blamed {r['blamed'] or 'nobody'}; honest lost {r['honest_lost']}")
        print(f"final accuracy {result['final_accuracy']:.4f} (fault-free run: {result['fault_free_accuracy']:.4f}); "
              f"{result['resumes']} resume(s); {result['seconds']:.0f} s; "
              + ("nothing honest named or lost" if result["ok"] else "FAILED: see the rounds above"))
    return 0 if result["ok"] else 1


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the usage stays behind ``--help``)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="reshuffle",
        description="Re-Shuffle: anonymous raw-model upload for federated learning.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    ca = sub.add_parser("ca", help="certificate authority: create it, issue participant keys")
    ca_sub = ca.add_subparsers(dest="ca_cmd", required=True)
    init = ca_sub.add_parser("init", help="create a CA key pair in --dir")
    init.add_argument("--dir", required=True)
    init.add_argument("--force", action="store_true", help="replace an existing CA")
    iss = ca_sub.add_parser("issue", help="generate and certify participant keys")
    iss.add_argument("--dir", required=True, help="folder holding the CA")
    iss.add_argument("--ids", type=_parse_ids, required=True, help="participant ids, e.g. 0-9")
    iss.add_argument("--server", action="store_true", help="also issue the PS key")
    iss.add_argument("--out", help="where to write keys (default: --dir)")
    ver = ca_sub.add_parser("verify", help="check participant certificates against the CA")
    ver.add_argument("--dir", required=True)
    ver.add_argument("--ids", type=_parse_ids, required=True)
    ver.add_argument("--out", help="folder holding the participant files (default: --dir)")
    ca.set_defaults(func=cmd_ca)

    bench = sub.add_parser("bench", help="benchmarks (ratios measured in one run)",
                           description="Measured on 2 shared cores: crypto 8 s (--quick 2 s), round --quick 2 s, "
                                       "simulate --quick 11 s, models --quick 77 s; round and flower at their "
                                       "defaults take minutes. A progress line on stderr shows each part.")
    bench.add_argument("what", choices=["crypto", "round", "flower", "simulate", "models"])
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    bench.add_argument("--quiet", action="store_true", help="no progress line (on stderr)")
    bench.add_argument("--N", type=int, nargs="+", help="round, flower: participants (10 50 100; 10 20)")
    bench.add_argument("--d", type=int, default=61_706, help="round: model size δ")
    bench.add_argument("--dataset", default="mnist", help=f"simulate: {_dataset_help()}")
    bench.add_argument("--data-dir", help="simulate: folder holding the dataset's files")
    bench.add_argument("--model", default="lenet5", help=f"simulate: {_model_help()} or a plug-in's name")
    bench.add_argument("--clients", type=_positive(int), help="simulate, models: clients trained (20; 8)")
    bench.add_argument("--threads", type=_positive(int), default=1, help="simulate, models: torch threads")
    from reshuffle.bench.models import CASES

    bench.add_argument("--models", nargs="+", metavar="NAME",
                       help=f"models: only these of its models ({' '.join(c[0] for c in CASES)})")
    bench.add_argument("--group-size", type=_positive(int), help="round: anonymity groups of at least g, drawn "
                                                                   "for the round")
    bench.add_argument("--set-size", type=_positive(int),
                       help="round: the simulator's stable anonymity sets of at least this size, formed once as "
                            "`simulate --set-size` forms them; each set runs its own round")
    bench.add_argument("--workers", type=_positive(int), help="round: participant worker processes")
    bench.add_argument("--stable", action="store_true",
                       help="round: stable groups of --group-size (default 5) in the DC-net round (N: 20 100 200)")
    bench.add_argument("--availability", action="store_true",
                       help="round --stable: also groups and models delivered at 0, 2, 5 and 10 %% silent members")
    bench.add_argument("--train-model", metavar="NAME",
                       help="round --stable: also time N clients training this built-in model (e.g. resnet18)")
    bench.add_argument("--baseline", metavar="PATH",
                       help="round: a checkout of another version whose participant CPU is measured alongside")
    bench.set_defaults(func=cmd_bench)

    red = sub.add_parser("redteam", help="play every registered protocol adversary against the round",
                         description="Every behaviour against the real round (22 s at the defaults, measured on 2 "
                                     "shared cores), or --explore (5 s at the defaults). A progress line on "
                                     "stderr shows each behaviour.",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    red.add_argument("--rounds", type=_positive(int), default=2, help="rounds per behaviour (seeds 1..R)")
    red.add_argument("--N", type=_positive(int), default=None,
                     help="participants per round (>= 4; default 8, or 4 with --explore)")
    red.add_argument("--only", nargs="+", metavar="NAME",
                     help="only these behaviours (each in both rounds; dcnet-NAME: in the DC-net round alone)")
    red.add_argument("--json", action="store_true", help="print JSON")
    red.add_argument("--quiet", action="store_true", help="no progress line (on stderr)")
    ex = red.add_argument_group("explorer of PS schedules (--explore)")
    ex.add_argument("--explore", action="store_true",
                    help="play a PS that sends any message a participant accepts, in every order, over a small real "
                         "round; check one key per plaintext, no reveal about an uploaded slot, no link")
    ex.add_argument("--depth", type=_positive(int), default=60, help="moves per schedule at most")
    ex.add_argument("--budget", type=_positive(int), default=3000, help="distinct states at most")
    ex.add_argument("--split", action="store_true", help="also deliver each message to each recipient alone")
    ex.add_argument("--r-max", type=_positive(int), default=2, help="reservation iterations of the explored round")
    ex.add_argument("--seed", type=int, default=1, help="seed of the explored round's keys and randomness")
    ex.add_argument("--weak", choices=("none", *WEAK_PARTICIPANTS), default="none",
                    help="explore participants with one fix undone, to see the explorer find the break")
    ex.add_argument("--fixed-params", action="store_true",
                    help="the PS announces only the default c and t (by default it tries every c and t the messages "
                         "allow)")
    ex.add_argument("--no-forge", action="store_true", help="skip forging evidence at the leaves")
    ex.add_argument("--no-dcnet", action="store_true",
                    help="skip the explorers of stable groups, run after the round's: the DC-net round's (at most "
                         "2,000 states) and the group assignment's (about 100 states)")
    red.set_defaults(func=cmd_redteam)

    games = sub.add_parser("games", help="run the security games (docs/security/)",
                           description="Play every game of docs/security/ (a progress line on stderr shows each "
                                       "row); --quick took 78 s on 2 shared cores.")
    games.add_argument("--quick", action="store_true", help="fewer trials (78 s measured on 2 shared cores)")
    games.add_argument("--json", action="store_true", help="print a JSON list of results")
    games.add_argument("--quiet", action="store_true", help="no progress line (on stderr)")
    games.set_defaults(func=cmd_games)

    from reshuffle.clients.data import dataset_names, dataset_spec

    fetchable = [n for n in dataset_names() if dataset_spec(n).download is not None]
    data = sub.add_parser("data", help=f"download and verify {', '.join(fetchable)} (default folder: data/)")
    data_sub = data.add_subparsers(dest="data_cmd", required=True)
    dir_help = "data folder holding NAME/ per dataset (default: data/ in the repository)"
    fetch = data_sub.add_parser("fetch", help="download a dataset's files and check their SHA-256")
    fetch.add_argument("name", help=" or ".join(fetchable))
    fetch.add_argument("--dir", help=dir_help)
    fetch.add_argument("--url", help="base URL of a mirror holding the dataset's files (default: the public source)")
    fetch.add_argument("--quiet", action="store_true", help="no progress bar")
    verify = data_sub.add_parser("verify", help="check the files in place against their known SHA-256")
    verify.add_argument("names", nargs="*", help="datasets to check (default: every dataset folder present)")
    verify.add_argument("--dir", help=dir_help)
    data.set_defaults(func=cmd_data)

    grid = sub.add_parser(
        "grid", help="the decision grid: attacks × rules × settings × seeds, resumable",
        description="Run every (dataset, partition, model, attack, rule, seed) cell not done yet, one JSON file "
                    "per finished cell, and rewrite OUT/summary.md, worst_case.md, summary.json and the heat maps. "
                    "Finished cells are skipped, failed ones retried; Ctrl-C stops the workers.")
    grid.add_argument("--out", default="experiments/evaluation/grid",
                      help="folder of the cells and the summary (default: experiments/evaluation/grid)")
    grid.add_argument("--jobs", type=_positive(int), help="local worker processes, one core each (default: all cores)")
    grid.add_argument("--ray", metavar="ADDRESS", help="run cells as Ray tasks on this cluster ('local': start one)")
    grid.add_argument("--full", action="store_true",
                      help="every registered rule, Dir(0.5) and LeNet-5 too, cifar10-dir0.3-cnn and "
                           "femnist-natural-cnn (where their data is), 20 rounds")
    grid.add_argument("--config", help="grid TOML file overriding the default grid's axes and base settings")
    grid.add_argument("--datasets", nargs="+", metavar="NAME", help=f"only these datasets ({_dataset_help()})")
    grid.add_argument("--partitions", nargs="+", metavar="P",
                      help="iid, natural, dirichlet[:ALPHA] (0.3), dirichlet-legacy[:ALPHA], pathological[:K] or "
                           "shard[:K] (K per client, 2)")
    grid.add_argument("--attacks", nargs="+", metavar="NAME", help="only these attacks (the clean run is always in)")
    grid.add_argument("--rules", nargs="+", metavar="NAME", help="only these rules (FedAvg is always in)")
    grid.add_argument("--models", nargs="+", metavar="NAME", help=f"models ({_model_help()}, plug-ins)")
    grid.add_argument("--seeds", nargs="+", type=_non_negative_int, metavar="S", help="seeds (default 1 2 3)")
    grid.add_argument("--rounds", type=_positive(int), help="rounds per run")
    grid.add_argument("--long-rounds", type=_non_negative_int, metavar="N",
                      help="rounds of the backdoor cells' longer horizon (default 30; 0: none)")
    grid.add_argument("--fraction", type=_share, help="fraction of the clients sampled for each round (default: all)")
    grid.add_argument("--server-opt", help="server optimiser: sgd, momentum, adam, yogi (default: sgd)")
    grid.add_argument("--server-lr", type=_positive(float), help="server step size (default: the optimiser's)")
    grid.add_argument("--data-dir-root", metavar="DIR", help="folder holding a folder per dataset (default: data/)")
    grid.add_argument("--max-cells", type=_positive(int), metavar="N", help="run at most N cells, then stop")
    grid.add_argument("--summary-only", action="store_true", help="only rebuild the summary from the stored cells")
    grid.add_argument("--docs", metavar="FILE", action="append",
                      help="keep the section between FILE's markers <!-- grid:begin NAME --> (or, for one table "
                           "of the worst cases, <!-- grid:brief NAME -->) and <!-- grid:end NAME --> (NAME: the "
                           "--out folder's name) generated from the summary, after every cell; repeatable")
    grid.add_argument("--quiet", action="store_true", help="no progress output")
    grid.set_defaults(func=cmd_grid)

    sim = sub.add_parser("simulate", help="run a simulated federation on Re-Shuffle")
    for flag, kind, text in _SIM_OPTIONS:
        sim.add_argument(flag, type=kind, default=None, help=_help_with_default(flag, text))
    sim.add_argument("--local-bn", action="store_true", default=None,
                     help="keep BatchNorm layers with each client (FedBN) instead of federating them")
    sim.add_argument("--linker", action="store_true", default=None,
                     help="score a passive PS that links models across rounds and names senders from the rosters, "
                          "every round (metrics.json: rounds[].linking)")
    sim.add_argument("--no-stable-sets", action="store_true", default=None,
                     help="sample and deliver each client on its own instead of in stable sets (the rosters then "
                          "name senders across rounds: for comparison only)")
    sim.add_argument("--config", help="TOML file with the same keys (command-line options win)")
    sim.add_argument("--out", help="output folder (default: outputs/simulate/<time>); refused if it holds a run")
    sim.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    sim.add_argument("--plugin", action="append", default=[],
                     help="import this module first (it registers attacks, rules, pre-aggregators, models or "
                          "datasets)")
    sim.add_argument("--pre", action="append", default=[],
                     help="pre-aggregator in front of the rule: nnm, bucketing, clip (repeat or comma-separate)")
    sim.add_argument("--threads", type=_positive(int), help="torch threads")
    sim.add_argument("--quiet", action="store_true", help="no progress bar")
    sim.add_argument("--resume", metavar="OUT_DIR",
                     help="continue the run whose output folder this is from its last finished round, with its "
                          "own settings; give its --plugin and --data-dir again (checked, never read from the "
                          "checkpoint), and --rounds N to extend a finished run")
    sim.set_defaults(func=cmd_simulate)

    soak = sub.add_parser("soak", help="the Flower app on a real SuperLink and SuperNodes, under kills, pauses, "
                                       "malformed messages and a ServerApp kill with resume")
    soak.add_argument("--quick", action="store_true",
                      help="2 rounds, 4 nodes, one node kill and restart, one ServerApp kill and resume")
    soak.add_argument("--rounds", type=_positive(int), help="rounds (default 10; 2 with --quick)")
    soak.add_argument("--nodes", type=_positive(int), help="SuperNodes (default 8; 4 with --quick)")
    soak.add_argument("--seed", type=_non_negative_int, default=0, help="seed of the fault plan and the run")
    soak.add_argument("--dir", help="working folder for keys, logs and outputs (default: a new temporary folder)")
    soak.add_argument("--json", action="store_true", help="print one JSON object (progress goes to stderr)")
    soak.set_defaults(func=cmd_soak)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ReShuffleError as exc:
        print(f"reshuffle: error: {exc}", file=sys.stderr)
        return 2
    except _Interrupted as stop:
        from reshuffle.run import checkpoint

        try:
            done = checkpoint.load(stop.out).round
        except checkpoint.CheckpointError:
            print(f"reshuffle: interrupted before the first round finished; nothing to resume in {stop.out}",
                  file=sys.stderr)
        else:
            print(f"reshuffle: interrupted after round {done} of {stop.cfg.rounds}; continue with:\n"
                  f"  {resume_command(stop.out, stop.cfg)}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("reshuffle: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
