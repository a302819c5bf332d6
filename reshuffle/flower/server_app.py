"""The Flower ServerApp: the PS of :mod:`reshuffle.protocol.server`, driven over Flower's Grid.

Per round: ``train.local`` to every node (W_g, T); the nodes that answer in time
form the roster (their certificates are checked against the CA); then the
protocol's outbox goes out as ``train.reshuffle`` messages phase by phase, and
a node that does not answer within ``phase-timeout`` is dropped from that phase
on, exactly like a dropout in the in-process runner. The recovered models go
through the same canonical order, rule and evaluation as ``reshuffle simulate``,
and ``metrics.json`` has the same format.

Flower's SuperLink tags every message with its sender's node id. That is no
loss: the PS of the core also knows who sent each message. What it cannot
link is a position of the model list to a sender, and nothing here needs that.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from reshuffle.attacks import make_attack
from reshuffle.clients import build_model, get_flat, load_dataset, predict
from reshuffle.crypto.signatures import (
    ROLE_SERVER, SERVER_ID, Certificate, CertificateAuthority, SigningKey, load_identity,
)
from reshuffle.errors import BelowThreshold, ConfigError, ProtocolError
from reshuffle.flower.common import MSG_LOCAL, MSG_PROTOCOL, RECORD, FlowerSettings, settings, simulation_identity
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.participant import global_model_hash
from reshuffle.protocol.server import Server
from reshuffle.server import make_rule
from reshuffle.sim.report import write_outputs
from reshuffle.sim.simulator import RoundRecord, canonical_order

app = ServerApp()


def _ps_identity(s: FlowerSettings) -> tuple[SigningKey, Certificate, CertificateAuthority]:
    if s.key_dir:
        sk, cert = load_identity(s.key_dir, SERVER_ID, ROLE_SERVER)
        return sk, cert, CertificateAuthority.load(s.key_dir, public_only=True)
    ca, _ = simulation_identity(s.sim_key_seed, 0)
    sk = SigningKey.from_seed(hashlib.sha256(b"reshuffle/flower/ps" + s.sim_key_seed.encode()).digest())
    return sk, ca.issue(SERVER_ID, sk.verify_key, ROLE_SERVER), CertificateAuthority.verifier(ca.verify_key)


def _send(grid: Grid, per_node: dict[int, dict], mtype: str, T: int, timeout: float) -> dict[int, Message]:
    msgs = [Message(RecordDict({RECORD: ConfigRecord(c)}), dst_node_id=node, message_type=mtype, group_id=str(T))
            for node, c in per_node.items()]
    out = {}
    for r in grid.send_and_receive(msgs, timeout=timeout):
        if not r.has_error():
            out[r.metadata.src_node_id] = r
    return out


def _protocol_payloads(content: RecordDict) -> list[bytes]:
    """The byte strings of a ``train.reshuffle`` reply's content; malformed content counts as no answer."""
    try:
        data = content[RECORD]["data"] if "data" in content[RECORD] else []
    except KeyError:
        return []
    if isinstance(data, bytes):
        data = [data]
    return [d for d in data if isinstance(d, bytes)] if isinstance(data, list) else []


def run_round(grid: Grid, s: FlowerSettings, T: int, W_g: np.ndarray, nodes: list[int], malicious: set[int],
              ps: tuple, seconds: dict) -> tuple[list[np.ndarray], dict, set[bytes]]:
    """One round over Flower; returns (recovered models, bytes stats, digests of malicious models)."""
    sk, cert, ca = ps
    t0 = time.perf_counter()
    content = {
        n: {"T": T, "global": W_g.astype("<f4").tobytes(), "num-nodes": len(nodes), "train-seed": s.sim.seed * 7919 + T,
            "attack": s.sim.attack if n in malicious else "none", "score": s.score_detection}
        for n in nodes
    }
    answers = _send(grid, content, MSG_LOCAL, T, s.train_timeout)
    seconds["training"] = time.perf_counter() - t0
    roster, node_of, mal_digests = {}, {}, set()
    for node, r in answers.items():
        try:
            rec = r.content[RECORD]
            c = Certificate.decode(rec["cert"])
            ca.verify(c, subject=int(rec["pid"]))
        except (ProtocolError, KeyError, ValueError, TypeError):
            continue  # a malformed or unverifiable answer leaves its node out of the round
        if c.subject in roster:
            continue
        roster[c.subject], node_of[c.subject] = c, node
        if node in malicious and isinstance(rec.get("digest"), bytes):
            mal_digests.add(rec["digest"])
    if len(roster) < 2:
        raise ConfigError(f"only {len(roster)} nodes answered the training request in round {T}")
    print(f"[reshuffle] round {T}: roster of {len(roster)} participants, protocol starts", flush=True)
    p = RoundParams.default(len(roster), W_g.size, group=s.sim.group)
    server = Server(p, T, roster, sk, cert, ca, global_model_hash(W_g.astype("<f4").tobytes()))
    pid_of = {node: pid for pid, node in node_of.items()}
    nbytes = 0
    outbox = server.start()
    while not server.done:
        ph = server.phase_name
        t0 = time.perf_counter()
        per_node: dict[int, dict] = {}
        for pid, data in outbox:
            per_node.setdefault(node_of[pid], {"data": []})["data"].append(data)
            nbytes += len(data)
        replies = _send(grid, per_node, MSG_PROTOCOL, T, s.phase_timeout) if per_node else {}
        for node, r in replies.items():
            for data in _protocol_payloads(r.content):
                nbytes += len(data)
                server.receive(pid_of[node], data)
        outbox = server.close_phase()
        seconds[ph] = seconds.get(ph, 0.0) + time.perf_counter() - t0
    return server.output.models, {"ps_total": nbytes, "per_participant": nbytes / len(roster)}, mal_digests


@app.main()
def main(grid: Grid, context: Context) -> None:
    s = settings(dict(context.run_config))
    sim = s.sim
    out_dir = Path(s.out_dir) if s.out_dir else Path("outputs/flower") / time.strftime("%Y%m%d-%H%M%S")
    ds = load_dataset(sim.dataset, sim.data_dir)
    model = build_model(sim.model, ds.input_shape, ds.num_classes, seed=sim.seed)
    W_g = get_flat(model)
    attack = make_attack(sim.attack, **sim.attack_options)
    ps = _ps_identity(s)
    initial = float(np.mean(predict(model, W_g, ds.x_test) == ds.y_test))
    records = []
    for T in range(1, sim.rounds + 1):
        nodes = sorted(grid.get_node_ids())
        rng = np.random.default_rng([sim.seed, T])
        m = int(round(sim.malicious * len(nodes))) if sim.attack != "none" else 0
        malicious = set(rng.choice(nodes, size=m, replace=False).tolist()) if m else set()
        seconds: dict[str, float] = {}
        try:
            models, nbytes, mal_digests = run_round(grid, s, T, W_g, nodes, malicious, ps, seconds)
        except (BelowThreshold, ConfigError) as exc:
            # Too few nodes answered: this round has no models; W_g stays and the next round retries.
            print(f"[reshuffle] round {T} failed: {exc}", flush=True)
            pred = predict(model, W_g, ds.x_test)
            records.append(RoundRecord(T, float(np.mean(pred == ds.y_test)), None, None, None, seconds, {}, 0, 0))
            continue
        t0 = time.perf_counter()
        order = canonical_order(models)
        U = np.stack([models[j] for j in order]).astype(np.float64) - W_g
        f = sim.f if sim.f is not None else m
        rule = make_rule(sim.rule, f, **sim.rule_options)
        accepted = set(rule.select(U))
        W_g = (W_g + rule(U)).astype(np.float32)
        seconds["detection"] = time.perf_counter() - t0
        pred = predict(model, W_g, ds.x_test)
        acc = float(np.mean(pred == ds.y_test))
        tpr = fpr = None
        if mal_digests:
            from reshuffle.flower.common import model_digest

            is_mal = [model_digest(models[j]) in mal_digests for j in order]
            mal_rows = [i for i, b in enumerate(is_mal) if b]
            hon_rows = [i for i, b in enumerate(is_mal) if not b]
            tpr = sum(i not in accepted for i in mal_rows) / len(mal_rows) if mal_rows else None
            fpr = sum(i not in accepted for i in hon_rows) / len(hon_rows) if hon_rows else None
        if malicious:
            attack.prepare(len(nodes), ds.x_train)
        success = attack.success(lambda x: predict(model, W_g, x), ds.x_test, ds.y_test, ds.num_classes) if malicious else None
        rec = RoundRecord(T, acc, success, tpr, fpr, seconds, nbytes, len(models), len(accepted))
        records.append(rec)
        print(f"[reshuffle] round {T}: accuracy {acc:.4f}, models {len(models)}/{len(nodes)}, "
              f"accepted {len(accepted)}", flush=True)
    from dataclasses import replace

    from reshuffle.sim.report import metrics

    cfg = replace(sim, clients=len(nodes), out=str(out_dir)).as_dict()
    cfg.update({"driver": "flower", "phase_timeout": s.phase_timeout})
    write_outputs(out_dir, metrics(cfg, records, {"model_size": int(W_g.size), "initial_accuracy": initial}))
    print(f"[reshuffle] final accuracy {records[-1].accuracy:.4f}; outputs in {out_dir}", flush=True)
