"""The project's Flower ServerApp: ``reshuffle simulate``'s rules and outputs over :class:`ReshuffleGrid`.

Per round it sends W_g as an ordinary train message to the round's nodes (every
node, or those ``fraction`` / ``clients-per-round`` samples) through
:class:`~reshuffle.flower.grid.ReshuffleGrid`, which runs the Re-Shuffle round and
hands back the raw models, unlinked from their senders. The recovered models go
through the same FL step as ``reshuffle simulate`` (:class:`reshuffle.server.aggregate.FLStep`:
canonical order, rule, server optimiser; built once per run) and the same evaluation;
``metrics.json`` has the same format plus, per round, the grid's report
(roster, dropouts per phase, ``blamed``) and the round's ``outcome``.

A round that yields fewer usable models than the rule needs (every node's training
diverged, too few nodes answered, the shuffle failed) is recorded with its reason
and keeps W_g; the run goes on. After every round the app saves a checkpoint in its
output folder (:mod:`reshuffle.run.checkpoint`); the run-config key ``resume``
(that folder) continues a killed run after its last finished round. A round the
kill interrupted is lost, never run again: nodes take part in each round number once.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from reshuffle.clients import build_model, get_flat, load_dataset, predict
from reshuffle.errors import ConfigError
from reshuffle.flower.common import (
    ARRAYS, ATTACKER_METRIC, CONFIG, METRICS, FlowerSettings, resume_identity, settings,
)
from reshuffle.flower.grid import ReshuffleGrid, RoundReport
from reshuffle.server import make_rule
from reshuffle.server.aggregate import FLStep
from reshuffle.server.optimizers import make_server_optimizer
from reshuffle.run import checkpoint
from reshuffle.run.config import SimConfig
from reshuffle.run.report import claim_out_dir, metrics, write_outputs
from reshuffle.run.record import RoundRecord

app = ServerApp()

KIND = "flower"
COMPLETED = "completed"
INTERRUPTED = "interrupted: the ServerApp stopped during this round; a round runs once, so it is lost"


def _model_of(reply: Message, size: int) -> tuple[np.ndarray, bool] | None:
    """(W, attacker flag) of a reply, or None if it is not one finite flat float32 model of the right size."""
    c = reply.content
    if ARRAYS not in c or len(c[ARRAYS]) != 1:
        return None
    W = c[ARRAYS].to_numpy_ndarrays()[0]
    if W.dtype != np.float32 or W.size != size or not np.all(np.isfinite(W)):
        return None
    flag = METRICS in c and c[METRICS].get(ATTACKER_METRIC, 0) == 1
    return W.ravel(), bool(flag)


def make_grid(grid: Grid, s: FlowerSettings) -> ReshuffleGrid:
    extra = {"R_max": s.r_max} if s.r_max is not None else {}
    return ReshuffleGrid(grid, key_dir=s.key_dir or None, phase_timeout=s.phase_timeout,
                         train_timeout=s.train_timeout, group=s.sim.group, group_size=s.sim.group_size, **extra)


#: Checkpoint array-name prefix of the server optimiser's state.
OPT = "opt."


def make_step(s: FlowerSettings) -> FLStep:
    """The run's FL step: its rule, server optimiser and model step (CRFL's), built once.

    The rule assumes the run config's ``f`` attackers (0 when unset): the PS cannot
    count them, and a node's self-declared label only scores the rule afterwards.
    """
    sim = s.sim
    rule = make_rule(sim.rule, sim.rule_f, seed=sim.seed, pre=sim.pre, pre_options=sim.pre_options,
                     **sim.rule_options)
    return FLStep(rule, make_server_optimizer(sim.server_opt, sim.server_lr, **sim.server_options), sim.rule,
                  sim.model_step())


@dataclass
class Delivery:
    """What one round handed back: usable models, their flags, and the replies that were not usable."""

    models: list[np.ndarray]
    flags: list[bool]
    rejected: int = 0  # replies that are not one finite float32 model of W_g's size


def sample_nodes(nodes, s: FlowerSettings, T: int) -> list[int]:
    """Round T's cohort: every node, or ``fraction`` / ``clients-per-round`` of them, seeded by (seed, T).

    Sizes as in ``reshuffle simulate`` with ``clients`` = the nodes connected; a
    ``clients-per-round`` above that takes every node.
    """
    nodes = sorted(nodes)
    m = min(replace(s.sim, clients=len(nodes)).cohort_size, len(nodes))
    if m >= len(nodes):
        return nodes
    rng = np.random.default_rng(np.random.SeedSequence([s.sim.seed, T, 9]))
    return sorted(nodes[i] for i in rng.choice(len(nodes), size=m, replace=False))


def collect(rgrid: ReshuffleGrid, s: FlowerSettings, T: int, W_g: np.ndarray) -> Delivery:
    """One round: W_g out as train messages to the round's sampled nodes, the unlinked usable models
    (and self-declared flags) back."""
    content = RecordDict({ARRAYS: ArrayRecord([W_g]), CONFIG: ConfigRecord({"server-round": T,
                                                                          "train-seed": s.sim.seed * 7919 + T})})
    msgs = [Message(content, dst_node_id=n, message_type="train", group_id=str(T))
            for n in sample_nodes(rgrid.get_node_ids(), s, T)]
    out = Delivery([], [])
    for r in rgrid.send_and_receive(msgs, timeout=s.round_timeout):
        got = None if r.has_error() else _model_of(r, W_g.size)
        if got is None:
            out.rejected += 1
            continue
        out.models.append(got[0])
        out.flags.append(got[1])
    return out


class _Run:
    """The ServerApp's loop state: global model, records, reports; saved after every round."""

    def __init__(self, s: FlowerSettings, out_dir: Path) -> None:
        self.s, self.out_dir = s, out_dir
        sim = s.sim
        self.ds = load_dataset(sim.dataset, sim.data_dir)
        self.model = build_model(sim.model, self.ds.input_shape, self.ds.num_classes, seed=sim.seed)
        self.W_g = get_flat(self.model)
        self.initial = self.accuracy()
        self.records: list[RoundRecord] = []
        self.reports: list[dict] = []
        self.nodes = 0
        self.identity = resume_identity(s)
        self.fl = make_step(s)

    def accuracy(self) -> float:
        return float(np.mean(predict(self.model, self.W_g, self.ds.x_test) == self.ds.y_test))

    # --- checkpoint -----------------------------------------------------------------
    def save(self, started: int | None = None) -> None:
        """Checkpoint the finished rounds; ``started``: the round about to start (it is then never run again)."""
        T = self.records[-1].round if self.records else 0
        state = {"rounds": [asdict(r) for r in self.records], "reshuffle": self.reports,
                 "initial_accuracy": self.initial, "nodes": self.nodes, "started": max(T, started or 0)}
        arrays = {"global_model": self.W_g, **{OPT + k: v for k, v in self.fl.state().items()}}
        checkpoint.save(self.out_dir, checkpoint.Checkpoint(KIND, T, self.identity, arrays, state))

    def restore(self, folder: Path) -> int:
        """Load ``folder``'s checkpoint (same settings only); return the last round.

        A round that had started when the ServerApp stopped is lost: it is recorded as
        such (W_g kept) and the run continues with the next round number, since
        nodes take part in each round number once.
        """
        ck = checkpoint.load(folder, kind=KIND)
        checkpoint.check_config(ck, self.identity, f"the Flower run in {folder}", SimConfig().as_dict())
        where = checkpoint.path_of(folder)
        W = ck.arrays.get("global_model")
        if W is None or W.dtype != np.float32 or W.shape != self.W_g.shape:
            raise checkpoint.CheckpointError(f"{where}: no global model of shape {self.W_g.shape}")
        try:
            self.records = [checkpoint.round_record(r, where) for r in ck.state["rounds"]]
            self.reports = list(ck.state["reshuffle"])
            self.initial = float(ck.state["initial_accuracy"])
            self.nodes = int(ck.state["nodes"])
            started = int(ck.state.get("started", ck.round))
        except (KeyError, TypeError, ValueError) as exc:
            raise checkpoint.CheckpointError(f"{where}: state incomplete ({exc})") from None
        if len(self.records) != ck.round or len(self.reports) != ck.round:
            raise checkpoint.CheckpointError(f"{where}: {len(self.records)} rounds recorded "
                                             f"for round {ck.round}")
        try:
            self.fl.restore({k[len(OPT):]: v for k, v in ck.arrays.items() if k.startswith(OPT)})
        except ConfigError as exc:
            raise checkpoint.CheckpointError(f"{where}: {exc}") from None
        self.W_g = W.copy()
        if started > ck.round:
            why = INTERRUPTED
            print(f"[reshuffle] round {started} was interrupted: lost (W_g kept); a round runs once", flush=True)
            self.records.append(RoundRecord(started, self.accuracy(), None, None, None, {}, {}, 0, 0, skipped=why))
            self.reports.append({"round": started, "sent": 0, "roster": 0, "replies": 0, "dropouts": {},
                                 "blamed": {}, "errors": [], "failed": why, "rejected": 0,
                                 "outcome": f"W_g kept: {why}"})
        return self.records[-1].round if self.records else 0

    # --- one round --------------------------------------------------------------------
    def _kept(self, T: int, d: Delivery, why: str, seconds: dict, sent: int) -> None:
        """A round that keeps W_g: recorded, with its reason."""
        print(f"[reshuffle] round {T}: {len(d.models)} usable models; W_g kept ({why})", flush=True)
        self.records.append(RoundRecord(T, self.accuracy(), None, None, None, seconds, {}, len(d.models), 0,
                                        skipped=why, sampled=sent))
        self.reports[-1]["outcome"] = f"W_g kept: {why}"

    def round(self, rgrid: ReshuffleGrid, T: int) -> None:
        self.nodes = len(list(rgrid.get_node_ids()))
        before = len(rgrid.rounds)
        d = collect(rgrid, self.s, T, self.W_g)
        # No node connected: no train message went out, so the grid ran no round.
        rep = rgrid.rounds[-1] if len(rgrid.rounds) > before else RoundReport(T, 0, failed="no node connected")
        self.reports.append({"round": T, **{k: v for k, v in asdict(rep).items() if k != "T"},
                             "rejected": d.rejected, "outcome": COMPLETED})
        seconds = dict(rep.phase_seconds)
        if len(d.models) < 2:
            why = rep.failed or (f"{rep.replies} replies, {d.rejected} of them not a finite model of the "
                                 f"global model's size" if rep.replies else "no replies")
            self._kept(T, d, why, seconds, rep.sent)
            return
        t0 = time.perf_counter()
        # Only nodes whose own config enables scoring label their model: without any, no row is labelled.
        res = self.fl(self.W_g, d.models, T, d.flags if any(d.flags) else None)
        if res.skipped:  # e.g. dropouts left fewer models than the rule needs
            self._kept(T, d, res.skipped, seconds, rep.sent)
            return
        accepted, c = set(res.accepted), res.counts
        self.W_g = res.W_g
        seconds["detection"] = time.perf_counter() - t0
        acc = self.accuracy()
        tpr = c["malicious_flagged"] / c["malicious_rows"] if c["malicious_rows"] else None
        fpr = c["honest_flagged"] / c["honest_rows"] if c["honest_rows"] else None
        nbytes = {"ps_total": rep.protocol_bytes, "per_participant": rep.protocol_bytes / max(rep.roster, 1)}
        self.records.append(RoundRecord(T, acc, None, tpr, fpr, seconds, nbytes, len(d.models), len(accepted),
                                        sampled=rep.sent, **c))
        print(f"[reshuffle] round {T}: accuracy {acc:.4f}, models {len(d.models)}/{self.nodes}, "
              f"accepted {len(accepted)}, blamed {rep.blamed or 'none'}", flush=True)

    def outputs(self) -> dict:
        cfg = replace(self.s.sim, clients=self.nodes, out=str(self.out_dir)).as_dict()
        cfg.update({"driver": "flower", "phase_timeout": self.s.phase_timeout})
        return metrics(cfg, self.records, {"model_size": int(self.W_g.size), "initial_accuracy": self.initial,
                                           "reshuffle": self.reports})


@app.main()
def main(grid: Grid, context: Context) -> None:
    s = settings(dict(context.run_config))
    out = s.out_dir or s.resume or str(Path("outputs/flower") / time.strftime("%Y%m%d-%H%M%S"))
    if not s.resume:
        claim_out_dir(out, s.overwrite, ("overwrite = true", f'resume = "{out}"', "another out-dir"))
    run = _Run(s, Path(out))
    first = 1
    if s.resume:
        first = run.restore(Path(s.resume)) + 1
        print(f"[reshuffle] resuming {s.resume} after round {first - 1} of {s.sim.rounds}", flush=True)
        run.save()  # an interrupted round is recorded before the next starts
    rgrid = make_grid(grid, s)
    for T in range(first, s.sim.rounds + 1):
        run.save(started=T)  # before any message of round T goes out: a resume never runs T again
        rgrid.skip_to(T)
        run.round(rgrid, T)
        run.save()
        write_outputs(run.out_dir, run.outputs(), plots=False)  # what is finished so far, readable at once
    if not run.records:
        raise ConfigError("rounds must be at least 1")
    write_outputs(run.out_dir, run.outputs())
    print(f"[reshuffle] final accuracy {run.records[-1].accuracy:.4f}; outputs in {run.out_dir}", flush=True)
