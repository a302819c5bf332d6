"""The project's Flower ServerApp: ``reshuffle simulate``'s rules and outputs over :class:`ReshuffleGrid`.

Per round it sends W_g as an ordinary train message to every node through
:class:`~reshuffle.flower.grid.ReshuffleGrid`, which runs the Re-Shuffle round and
hands back the raw models, unlinked from their senders. The recovered models go
through the same canonical order, rule and evaluation as ``reshuffle simulate``;
``metrics.json`` has the same format plus, per round, the grid's report
(roster, dropouts per phase, ``blamed``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from reshuffle.clients import build_model, get_flat, load_dataset, predict
from reshuffle.errors import ConfigError
from reshuffle.flower.common import ARRAYS, ATTACKER_METRIC, CONFIG, METRICS, FlowerSettings, settings
from reshuffle.flower.grid import ReshuffleGrid
from reshuffle.server import make_rule
from reshuffle.sim.report import metrics, write_outputs
from reshuffle.sim.simulator import RoundRecord, canonical_order

app = ServerApp()


def _model_of(reply: Message, size: int) -> tuple[np.ndarray, bool] | None:
    """(W, attacker flag) of a reply, or None if it is not one flat model of the right size."""
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


def run_round(rgrid: ReshuffleGrid, s: FlowerSettings, T: int, W_g: np.ndarray) -> tuple[list[np.ndarray], list[bool]]:
    """One round: W_g out as train messages, the unlinked models (and their self-declared flags) back."""
    content = RecordDict({ARRAYS: ArrayRecord([W_g]), CONFIG: ConfigRecord({"server-round": T,
                                                                          "train-seed": s.sim.seed * 7919 + T})})
    msgs = [Message(content, dst_node_id=n, message_type="train", group_id=str(T)) for n in sorted(rgrid.get_node_ids())]
    models, flags = [], []
    for r in rgrid.send_and_receive(msgs, timeout=s.round_timeout):
        got = None if r.has_error() else _model_of(r, W_g.size)
        if got is not None:
            models.append(got[0])
            flags.append(got[1])
    return models, flags


@app.main()
def main(grid: Grid, context: Context) -> None:
    s = settings(dict(context.run_config))
    sim = s.sim
    out_dir = Path(s.out_dir) if s.out_dir else Path("outputs/flower") / time.strftime("%Y%m%d-%H%M%S")
    ds = load_dataset(sim.dataset, sim.data_dir)
    model = build_model(sim.model, ds.input_shape, ds.num_classes, seed=sim.seed)
    W_g = get_flat(model)
    rgrid = make_grid(grid, s)
    initial = float(np.mean(predict(model, W_g, ds.x_test) == ds.y_test))
    records, reports = [], []
    nodes = 0
    for T in range(1, sim.rounds + 1):
        nodes = len(list(rgrid.get_node_ids()))
        t0 = time.perf_counter()
        models, flags = run_round(rgrid, s, T, W_g)
        rep = rgrid.rounds[-1]
        reports.append({"round": T, **{k: v for k, v in asdict(rep).items() if k != "T"}})
        seconds = dict(rep.phase_seconds)
        if len(models) < 2:
            print(f"[reshuffle] round {T}: {len(models)} models ({rep.failed or 'too few replies'}); W_g kept",
                  flush=True)
            acc = float(np.mean(predict(model, W_g, ds.x_test) == ds.y_test))
            records.append(RoundRecord(T, acc, None, None, None, seconds, {}, len(models), 0))
            continue
        t0 = time.perf_counter()
        order = canonical_order(models)
        U = np.stack([models[j] for j in order]).astype(np.float64) - W_g
        is_mal = [flags[j] for j in order]
        f = sim.f if sim.f is not None else sum(is_mal)
        rule = make_rule(sim.rule, f, seed=sim.seed, pre=sim.pre, pre_options=sim.pre_options, **sim.rule_options)
        try:
            decision = rule.decide(U, round=T)  # randomized rules draw from (seed, T), as in simulate
            accepted = set(decision.accepted)
        except ConfigError as exc:  # e.g. dropouts left fewer models than the rule needs
            print(f"[reshuffle] round {T}: {len(models)} models, rule not applicable ({exc}); W_g kept", flush=True)
            acc = float(np.mean(predict(model, W_g, ds.x_test) == ds.y_test))
            records.append(RoundRecord(T, acc, None, None, None, seconds, {}, len(models), 0))
            continue
        W_g = (W_g + decision.aggregate).astype(np.float32)
        seconds["detection"] = time.perf_counter() - t0
        acc = float(np.mean(predict(model, W_g, ds.x_test) == ds.y_test))
        mal = [i for i, b in enumerate(is_mal) if b]
        hon = [i for i, b in enumerate(is_mal) if not b]
        # Only nodes whose own config enables scoring label their model, so TPR needs such nodes.
        tpr = sum(i not in accepted for i in mal) / len(mal) if mal else None
        fpr = sum(i not in accepted for i in hon) / len(hon) if mal and hon else None
        nbytes = {"ps_total": rep.protocol_bytes, "per_participant": rep.protocol_bytes / max(rep.roster, 1)}
        records.append(RoundRecord(T, acc, None, tpr, fpr, seconds, nbytes, len(models), len(accepted)))
        print(f"[reshuffle] round {T}: accuracy {acc:.4f}, models {len(models)}/{nodes}, accepted {len(accepted)}, "
              f"blamed {rep.blamed or 'none'}", flush=True)
    if not records:
        raise ConfigError("rounds must be at least 1")
    cfg = replace(sim, clients=nodes, out=str(out_dir)).as_dict()
    cfg.update({"driver": "flower", "phase_timeout": s.phase_timeout})
    write_outputs(out_dir, metrics(cfg, records, {"model_size": int(W_g.size), "initial_accuracy": initial,
                                                  "reshuffle": reports}))
    print(f"[reshuffle] final accuracy {records[-1].accuracy:.4f}; outputs in {out_dir}", flush=True)
