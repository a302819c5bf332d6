"""The project's Flower ServerApp: ``reshuffle simulate``'s round loop and outputs over :class:`ReshuffleGrid`.

Per round it draws the cohort with the run's sampler (every node, or those
``fraction`` / ``clients-per-round`` samples; the simulator's sampler, over the
connected nodes in id order), sends W_g as an ordinary train message to them
through :class:`~reshuffle.flower.grid.ReshuffleGrid`, which runs the Re-Shuffle
round and hands back the raw models, unlinked from their senders, and finishes
the round on the loop every driver shares (:class:`reshuffle.run.round.FLRound`:
the FL step, canonical order, rule, server optimiser; the evaluation; the record).
``metrics.json`` has ``reshuffle simulate``'s format plus, per round, the grid's
report (roster, dropouts per phase, ``blamed``) and the round's ``outcome``.

With ``group-size`` the first round runs every connected node and forms the stable
anonymity groups; the FL round's federation state keeps them with the epoch pseudonyms
(:class:`~reshuffle.run.federation.Federation`, which the grid fills and reads), the
checkpoint saves it (a resumed run keeps both), and every later round the FL round
draws whole groups (the sampler's fraction, or its clients per round, counts groups),
which run with no new assignment. Each reply carries its group, and the FL round
delivers a group all or none, as in the simulator; the app amends no delivery.

A round that yields fewer usable models than the rule needs (every node's training
diverged, too few nodes answered, the shuffle failed) is recorded with its reason
and keeps W_g; the run goes on. A run in which no round delivered a model ends
failed, with one line naming the last round's cause (its outputs are written
first). After every round the app saves a checkpoint in its output folder
(:mod:`reshuffle.run.checkpoint`); the run-config key ``resume`` (that folder)
continues a killed run after its last finished round. A round the
kill interrupted is lost, never run again: nodes take part in each round number once.

Settings that make the run impossible (an unknown rule, a negative round count, a
bad fraction, a resume folder that is missing, fewer connected nodes than one
stable set needs) stop it before any message goes out, with one line
(``reshuffle: error: ...``) and :class:`RunRefused`, which Flower records as the
run's failure; ``make flower`` then shows that line alone and exits non-zero
(:mod:`reshuffle.flower.app.local`). So do stable groups that cannot form because
nodes refuse (:class:`~reshuffle.flower.grid.GroupsCannotForm`), and a run that
delivered nothing.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from reshuffle.clients import FlatLayout, build_model, load_dataset, predict
from reshuffle.errors import ConfigError, ReShuffleError
from reshuffle.flower.app.common import ARRAYS, ATTACKER_METRIC, CONFIG, METRICS, FlowerSettings, resume_identity, settings
from reshuffle.flower import grid as grid_module
from reshuffle.flower.grid import ReshuffleGrid, RoundReport
from reshuffle.protocol.params import smallest_round
from reshuffle.run import checkpoint
from reshuffle.run.config import SimConfig
from reshuffle.run.delivery import PSEUDONYM, SET, Delivery
from reshuffle.run.federation import Federation
from reshuffle.run.pseudonyms import EpochBook, run_base
from reshuffle.run.record import RoundRecord
from reshuffle.run.report import claim_out_dir, metrics, write_outputs
from reshuffle.run.round import FEDERATION, Evaluation, FLRound, make_step

app = ServerApp()

KIND = "flower"
COMPLETED = "completed"
INTERRUPTED = "interrupted: the ServerApp stopped during this round; a round runs once, so it is lost"


def _model_of(reply: Message, size: int) -> tuple[np.ndarray, bool | None] | None:
    """(W, the node's own label: attacker or not, None when it does not score) of a reply, or None if it is
    not one finite flat float32 model of the right size."""
    c = reply.content
    if ARRAYS not in c or len(c[ARRAYS]) != 1:
        return None
    W = c[ARRAYS].to_numpy_ndarrays()[0]
    if W.dtype != np.float32 or W.size != size or not np.all(np.isfinite(W)):
        return None
    label = c[METRICS].get(ATTACKER_METRIC) if METRICS in c else None
    return W.ravel(), None if label is None else label == 1


def run_federation(s: FlowerSettings) -> Federation:
    """A run's cross-round state: the groups its nodes form and the epoch pseudonyms, kept across rounds and in
    the checkpoint.

    Its epochs are numbered above every earlier run's (its nodes keep their pseudonyms). A resumed app keeps the
    groups and opens a new epoch: a node that restarted meanwhile may hold no pseudonym, and under the saved
    issuance record could not ask for one again before the epoch ended.
    """
    sim = s.sim
    return Federation(book=EpochBook(sim.group, base=run_base()),
                      group_size=sim.set_size if sim.stable_sets else sim.group_size, resume_epochs=False)


def make_grid(grid: Grid, s: FlowerSettings, federation: Federation | None = None) -> ReshuffleGrid:
    """The run's ReshuffleGrid over the FL round's ``federation`` (its groups, kept by a resumed run, and its
    pseudonym book; default: a fresh one, :func:`run_federation`)."""
    federation = run_federation(s) if federation is None else federation
    extra = {"R_max": s.r_max} if s.r_max is not None else {}
    # Stable sets (the default) are the grid's stable groups; without them, one group per round (or group_size's).
    size = None if federation.assignments else s.sim.set_size if s.sim.stable_sets else s.sim.group_size
    # This app knows its number of rounds and fails a run in which none delivered (RunFailed): the grid never does
    return ReshuffleGrid(grid, key_dir=s.key_dir or None, phase_timeout=s.phase_timeout,
                         train_timeout=s.train_timeout, group=s.sim.group, group_size=size, federation=federation,
                         max_empty_rounds=None, **extra)


def grid_delivery(rgrid: ReshuffleGrid, s: FlowerSettings, T: int, W_g: np.ndarray,
                  cohort: list[int]) -> tuple[Delivery, RoundReport, int]:
    """One round over the grid: W_g out as train messages to ``cohort``, the unlinked usable models back.

    Returns the Delivery (rows labelled by the nodes' own labels when any node
    scores), the grid's report, and the replies that were not one finite
    float32 model of W_g's size.
    """
    content = RecordDict({ARRAYS: ArrayRecord([W_g]), CONFIG: ConfigRecord({"server-round": T})})
    msgs = [Message(content, dst_node_id=n, message_type="train", group_id=str(T)) for n in cohort]
    before = len(rgrid.rounds)
    models, flags, nyms, sets, rejected = [], [], [], [], 0
    for r in rgrid.send_and_receive(msgs, timeout=s.round_timeout):
        got = None if r.has_error() else _model_of(r, W_g.size)
        if got is None:
            rejected += 1
            continue
        models.append(got[0])
        flags.append(got[1])
        nyms.append(rgrid.pseudonym_of(r))
        sets.append(rgrid.set_of(r))
    # No node connected: no train message went out, so the grid ran no round.
    rep = rgrid.rounds[-1] if len(rgrid.rounds) > before else RoundReport(T, 0, failed="no node connected")
    failure = rep.failed or None
    if len(models) < 2 and failure is None:
        failure = (f"{rep.replies} replies, {rejected} of them not a finite model of the global model's size"
                   if rep.replies else "no replies")
    # Only nodes whose own config enables scoring label their model. Without any label no row is scored;
    # with some, a row without one counts as honest (attacking nodes that score say so).
    labels = [bool(f) for f in flags] if any(f is not None for f in flags) else None
    # Every delivered row's epoch pseudonym, for the rules that keep a history (none: the rule runs without).
    meta = {PSEUDONYM: nyms} if nyms and all(n is not None for n in nyms) else {}
    # Each row's group: the FL round delivers a group whose reply was rejected not at all, as any incomplete set.
    if any(g is not None for g in sets):
        meta[SET] = sets
    d = Delivery(models, labels, failure=failure, seconds=dict(rep.phase_seconds),
                 bytes={"ps_total": rep.protocol_bytes, "per_participant": rep.protocol_bytes / max(rep.roster, 1)},
                 meta=meta)
    return d, rep, rejected


class _Run:
    """The ServerApp's run: the shared round loop, the Flower reports; saved after every round."""

    def __init__(self, s: FlowerSettings, out_dir: Path) -> None:
        self.s, self.out_dir = s, out_dir
        sim = s.sim
        self.ds = load_dataset(sim.dataset, sim.data_dir)
        self.model = build_model(sim.model, self.ds.input_shape, self.ds.num_classes, seed=sim.seed, dataset=sim.dataset)
        self.layout = FlatLayout.of(self.model)
        self.rounds = FLRound(make_step(sim, statistics=self.layout.statistics(self.model),
                                           layout=self.layout.entries), sim.sampler(),
                              self.layout.get(self.model), run_federation(s))
        self.initial = self.evaluate(self.W_g).accuracy
        self.records: list[RoundRecord] = []
        self.reports: list[dict] = []
        self.nodes = 0
        self.identity = resume_identity(s)

    @property
    def W_g(self) -> np.ndarray:
        return self.rounds.W_g

    def evaluate(self, W_g: np.ndarray) -> Evaluation:
        """W_g on the whole test set (the PS holds it; no node is asked)."""
        pred = predict(self.model, W_g, self.ds.x_test, layout=self.layout)
        return Evaluation.of(W_g, [pred], self.ds.y_test)

    # --- checkpoint -----------------------------------------------------------------
    def save(self, started: int | None = None) -> None:
        """Checkpoint the finished rounds; ``started``: the round about to start (it is then never run again)."""
        arrays, data = self.rounds.state()
        T = data["round"]
        state = {"rounds": [asdict(r) for r in self.records], "reshuffle": self.reports,
                 "initial_accuracy": self.initial, "nodes": self.nodes, "started": max(T, started or 0),
                 "banned": data["banned"], FEDERATION: data[FEDERATION]}
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
            # The federation's state, or (a checkpoint of an earlier version) the groups alone.
            self.rounds.restore(dict(ck.arrays), {"round": ck.round, "banned": ck.state.get("banned", {}),
                                                  FEDERATION: ck.state.get(FEDERATION),
                                                  "groups": ck.state.get("groups")})
        except ConfigError as exc:
            raise checkpoint.CheckpointError(f"{where}: {exc}") from None
        if started > ck.round:
            why = INTERRUPTED
            print(f"[reshuffle] round {started} was interrupted: lost (W_g kept); a round runs once", flush=True)
            self.records.append(self.rounds.interrupted(started, why, self.evaluate(self.W_g)))
            self.reports.append({"round": started, "sent": 0, "roster": 0, "replies": 0, "dropouts": {},
                                 "blamed": {}, "errors": [], "failed": why, "rejected": 0,
                                 "outcome": f"W_g kept: {why}"})
        return self.records[-1].round if self.records else 0

    # --- one round --------------------------------------------------------------------
    def round(self, rgrid: ReshuffleGrid, T: int) -> None:
        nodes = list(rgrid.get_node_ids())
        self.nodes = len(nodes)
        cohort = self.rounds.cohort(T, nodes)
        before = len(rgrid.rounds)
        try:
            d, rep, rejected = grid_delivery(rgrid, self.s, T, self.W_g, cohort)
        except ReShuffleError as exc:  # the grid ends the run (groups that cannot form): the round is recorded
            rep = rgrid.rounds[-1] if len(rgrid.rounds) > before else RoundReport(T, len(cohort), failed=str(exc))
            self.records.append(self.rounds.interrupted(T, str(exc), self.evaluate(self.W_g)))
            self.reports.append({"round": T, **{k: v for k, v in asdict(rep).items() if k != "T"},
                                 "rejected": 0, "outcome": f"W_g kept: {exc}"})
            raise
        rec = self.rounds.step(T, d, self.evaluate, sampled=len(cohort), cohort=cohort)
        self.records.append(rec)
        outcome = f"W_g kept: {rec.skipped}" if rec.skipped else COMPLETED
        self.reports.append({"round": T, **{k: v for k, v in asdict(rep).items() if k != "T"},
                             "rejected": rejected, "outcome": outcome})
        if rec.skipped:
            print(f"[reshuffle] round {T}: {rec.models_received} usable models; W_g kept ({rec.skipped})", flush=True)
        else:
            print(f"[reshuffle] round {T}: accuracy {rec.accuracy:.4f}, models {rec.models_received}/{self.nodes}, "
                  f"accepted {rec.models_accepted}, blamed {rep.blamed or 'none'}", flush=True)

    def outputs(self) -> dict:
        cfg = replace(self.s.sim, clients=self.nodes, out=str(self.out_dir)).as_dict()
        cfg.update({"driver": "flower", "phase_timeout": self.s.phase_timeout})
        return metrics(cfg, self.records, {"model_size": int(self.W_g.size), "initial_accuracy": self.initial,
                                           "reshuffle": self.reports})


#: How a refused run's one line starts (``make flower`` shows that line alone and exits non-zero).
REFUSED = "reshuffle: error: "


class RunRefused(ConfigError):
    """The run's settings make it impossible (raised before any message goes out); Flower marks the run failed."""


class RunFailed(ReShuffleError):
    """The run delivered no model in any round, or its stable groups cannot form; Flower marks it failed."""


def federation_too_small(s: FlowerSettings, nodes: int) -> str | None:
    """Why ``nodes`` connected nodes cannot run this run's first round, as the simulator says it; or None."""
    from reshuffle.run.sets import MIN_SET

    sim = s.sim
    hint = f"run at least {{k}} nodes (Flower's simulation: --federation-config \"num-supernodes={{k}}\")"
    if sim.stable_sets and nodes < sim.set_size:
        k = sim.set_size
        return (f"{nodes} node(s) connected cannot form one stable anonymity set of set-size = {k}: lower set-size "
                f"(at least {MIN_SET}) or {hint.format(k=k)}")
    if not sim.stable_sets and sim.group_size is not None and nodes < sim.group_size:
        k = sim.group_size
        return (f"{nodes} node(s) connected cannot form one anonymity group of group-size = {k}: lower "
                f"group-size (at least {MIN_SET}) or {hint.format(k=k)}")
    if nodes < smallest_round():
        k = smallest_round()
        return f"{nodes} node(s) connected; a round of the real protocol needs at least {k}: {hint.format(k=k)}"
    return None


def _first_nodes(rgrid: ReshuffleGrid, s: FlowerSettings) -> None:
    """Wait (at most the phase timeout and :data:`reshuffle.flower.grid.NODE_WAIT`) until the first round has the
    nodes it needs; ConfigError naming how many are missing otherwise."""
    deadline = time.monotonic() + min(s.phase_timeout, grid_module.NODE_WAIT)
    while (why := federation_too_small(s, len(list(rgrid.get_node_ids())))) is not None:
        if time.monotonic() >= deadline:
            raise ConfigError(why)
        time.sleep(0.5)


_NODE_ERROR = re.compile(r"^\[[^\]]+\] (?:from|node) \d+(?: failed)?: (.+)$")


def _nodes_said(errors: list[str]) -> str:
    """The reason most nodes gave in a round's errors (a refusal names the real cause: a group below the
    nodes' floor, say), as ``"; N node(s): reason"``; "" when none gave one."""
    reasons = Counter(m.group(1) for e in errors if (m := _NODE_ERROR.match(e)))
    if not reasons:
        return ""
    reason, count = reasons.most_common(1)[0]
    return f"; {count} node(s): {reason}"


def _fail(run: _Run, why: str, exc: type[ReShuffleError]) -> None:
    """End the run with one line: its outputs first (nothing is lost), then the line, then ``exc`` for Flower."""
    write_outputs(run.out_dir, run.outputs())
    print(f"{REFUSED}{why}", file=sys.stderr, flush=True)
    raise exc(why) from None


def _start(grid: Grid, context: Context) -> tuple[FlowerSettings, _Run, int, ReshuffleGrid]:
    """Settings, output folder, checkpoint and grid of a run, every one checked: (settings, run, first round, grid)."""
    s = settings(dict(context.run_config))
    out = s.out_dir or s.resume or str(Path("outputs/flower") / time.strftime("%Y%m%d-%H%M%S"))
    if s.resume and not Path(s.resume).is_dir():
        raise ConfigError(f"resume = {s.resume!r}: no such folder (the out-dir of the run to continue)")
    if not s.resume:
        claim_out_dir(out, s.overwrite, ("overwrite = true", f'resume = "{out}"', "another out-dir"))
    run = _Run(s, Path(out))
    first = 1
    if s.resume:
        first = run.restore(Path(s.resume)) + 1
        print(f"[reshuffle] resuming {s.resume} after round {first - 1} of {s.sim.rounds}", flush=True)
        run.save()  # an interrupted round is recorded before the next starts
    rgrid = make_grid(grid, s, run.rounds.federation)
    if not rgrid.epochs:  # the groups form in the first round: enough nodes for one, as in the simulator
        _first_nodes(rgrid, s)
    return s, run, first, rgrid


@app.main()
def main(grid: Grid, context: Context) -> None:
    try:
        s, run, first, rgrid = _start(grid, context)
    except ReShuffleError as exc:
        # One line says why; the exception (without the chain) tells Flower the run failed.
        print(f"{REFUSED}{exc}", file=sys.stderr, flush=True)
        raise RunRefused(str(exc)) from None
    for T in range(first, s.sim.rounds + 1):
        run.save(started=T)  # before any message of round T goes out: a resume never runs T again
        rgrid.skip_to(T)
        try:
            run.round(rgrid, T)
        except ReShuffleError as exc:  # the groups cannot form (nodes refuse): no later round would differ
            run.save()
            _fail(run, str(exc), RunFailed)
        run.save()
        write_outputs(run.out_dir, run.outputs(), plots=False)  # what is finished so far, readable at once
    if run.records and all(r.skipped for r in run.records):
        last = run.records[-1]
        _fail(run, f"no round delivered a model ({len(run.records)} round(s)); round {last.round}: {last.skipped}"
              + _nodes_said(run.reports[-1].get("errors", [])), RunFailed)
    write_outputs(run.out_dir, run.outputs())
    print(f"[reshuffle] final accuracy {run.records[-1].accuracy:.4f}; outputs in {run.out_dir}", flush=True)
