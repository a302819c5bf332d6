"""The Flower ClientApp: local training, then every protocol message through a session.

State between messages lives in the ``Context`` (:data:`common.STATE`): the
encoded :class:`SessionState` of the current round. The participant's id and
keys come from the node config: ``participant-id`` and ``key-dir`` (files made by
``reshuffle ca issue``) in a deployment; in a simulation, ``partition-id`` and
keys derived from the run config's ``sim-key-seed``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from reshuffle.attacks import make_attack
from reshuffle.crypto.signatures import CertificateAuthority, load_identity
from reshuffle.errors import ConfigError, ReShuffleError
from reshuffle.flower.common import RECORD, STATE, model_digest, settings, simulation_identity
from reshuffle.protocol import session
from reshuffle.protocol.participant import global_model_hash
from reshuffle.protocol.session import SessionState
from reshuffle.sim.config import SimConfig

app = ClientApp()


@lru_cache(maxsize=4)
def _data(dataset: str, data_dir: str | None, n: int, kind: str, seed: int, alpha: float):
    from reshuffle.clients import load_dataset, partition

    ds = load_dataset(dataset, data_dir)
    return ds, partition(ds.y_train, n, kind, seed, alpha)


def _identity(context: Context, sim_key_seed: str):
    nc = context.node_config
    if "key-dir" in nc and "participant-id" in nc:
        pid = int(nc["participant-id"])
        sk, cert = load_identity(str(nc["key-dir"]), pid)
        return pid, sk, cert, CertificateAuthority.load(str(nc["key-dir"]), public_only=True).verify_key
    if "partition-id" not in nc:
        raise ConfigError("node config needs participant-id and key-dir (or partition-id in a simulation)")
    pid = int(nc["partition-id"])
    ca, sk = simulation_identity(sim_key_seed, pid)
    return pid, sk, ca.issue(pid, sk.verify_key), ca.verify_key


def _partition_of(context: Context, pid: int, sim: SimConfig, n: int) -> tuple[np.ndarray, np.ndarray, object]:
    ds, parts = _data(sim.dataset, sim.data_dir, n, sim.partition, sim.seed, sim.alpha)
    idx = parts[pid % n]
    return ds.x_train[idx], ds.y_train[idx], ds


@app.train("local")
def local(msg: Message, context: Context) -> Message:
    """Train from W_g; keep W_i in a fresh session; answer with our id and certificate."""
    from reshuffle.clients import TrainConfig, build_model, local_train  # torch only where training happens

    rec = msg.content[RECORD]
    s = settings(dict(context.run_config))
    sim = s.sim
    T = int(rec["T"])
    W_g = np.frombuffer(rec["global"], dtype="<f4").astype(np.float32)
    pid, sk, cert, ca_key = _identity(context, s.sim_key_seed)
    n = int(context.node_config.get("num-partitions", rec["num-nodes"]))
    x, y, ds = _partition_of(context, pid, sim, n)
    attack = str(rec.get("attack", "none"))
    if attack != "none":
        a = make_attack(attack, **sim.attack_options)
        if a.omniscient:
            raise ConfigError(f"attack {attack!r} needs honest updates: use reshuffle simulate")
        a.prepare(n, ds.x_train)
        x, y = a.poison_data(x, y, pid, n, ds.num_classes, np.random.default_rng(int(rec["train-seed"]) + pid))
    model = build_model(sim.model, ds.input_shape, ds.num_classes, seed=sim.seed)
    cfg = TrainConfig(sim.local_epochs, sim.batch_size, sim.lr, sim.optimizer)
    W = local_train(model, W_g, x, y, cfg, seed=int(rec["train-seed"]) + pid)
    if attack != "none":
        U = a((W - W_g)[None, :].astype(np.float64), 1, np.random.default_rng(int(rec["train-seed"]) + pid))
        W = (W_g + U[0]).astype(np.float32)
    state = SessionState.new(pid, T, W, sk, cert, ca_key, global_model_hash(rec["global"]))
    context.state[STATE] = ConfigRecord({"session": state.encode()})
    reply = {"pid": pid, "cert": cert.encode()}
    if attack != "none" and bool(rec.get("score", False)):
        reply["digest"] = model_digest(W)  # simulation scoring: an attacker names its own model
    return Message(RecordDict({RECORD: ConfigRecord(reply)}), reply_to=msg)


@app.train("reshuffle")
def protocol(msg: Message, context: Context) -> Message:
    """Hand each protocol message to the session; answer with the participant's replies."""
    if STATE not in context.state:
        raise ConfigError("protocol message before local training: no session in this node's context")
    state = SessionState.decode(context.state[STATE]["session"])
    replies: list[bytes] = []
    for data in msg.content[RECORD]["data"]:
        try:
            state, out = session.handle(state, data)
        except ReShuffleError:
            out = []
        replies.extend(out)
    context.state[STATE] = ConfigRecord({"session": state.encode()})
    return Message(RecordDict({RECORD: ConfigRecord({"data": replies})}), reply_to=msg)
