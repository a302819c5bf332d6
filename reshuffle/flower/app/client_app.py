"""The project's Flower ClientApp: local training; :func:`~reshuffle.flower.mod.reshuffle_mod` does the rest.

The train handler trains from the global model it receives and replies with the
new model (one float32 array). Its training randomness (batch order, initialisation
draws) is the node's own, fresh from OS randomness every time it trains: a PS that
sends the same content twice gets two different models, which do not link by content.
A node whose own config says ``reshuffle-seeded-training=true`` trains instead with the
seed ``reshuffle simulate`` gives the same client in the same round
(:mod:`reshuffle.run.sampling`; node ``partition-id`` i trains as simulated client i),
for runs that must match a simulation. Re-Shuffle is the mod's business. Simulated attacks
and scoring are the node's own choice: only its ``node_config`` enables them
(``attack="sign-flip"``, ``score=true``); a train message that asks for them is
refused with an error naming the key, so a server cannot make an honest node
poison or label its model. A node whose model holds NaN/Inf values (its training
diverged) sends none: it raises :class:`TrainingDiverged`, which reaches the server
as the node's error, and the round goes on without it.
"""

from __future__ import annotations

import secrets
from functools import lru_cache

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from reshuffle.errors import ConfigError, ReShuffleError
from reshuffle.flower.app.common import ARRAYS, ATTACKER_METRIC, CONFIG, FORBIDDEN_CONFIG, METRICS, settings
from reshuffle.flower.keys import NODE_PARTICIPANT_ID, SIM_PARTITION_ID
from reshuffle.flower.mod import reshuffle_mod
from reshuffle.flower.reserved import RECORD
from reshuffle.run.sampling import ATTACK, POISON, TRAIN, seed_of

NODE_FAULT = "fault"  # node_config: a simulated faulty node, the node's own choice (``reshuffle soak``)
FAULTS = ("none", "malformed")


def fault_mod(msg: Message, ctx: Context, call_next) -> Message:
    """A node whose own config says ``fault="malformed"`` answers every protocol phase with garbled bytes.

    Its train stage is honest, so it joins the roster; each later message it sends is
    its real reply with every byte inverted. The round must drop it and go on.
    """
    fault = str(ctx.node_config.get(NODE_FAULT, "none"))
    if fault not in FAULTS:
        raise ConfigError(f"node_config {NODE_FAULT} must be one of {', '.join(FAULTS)}, got {fault!r}")
    reply = call_next(msg, ctx)
    if fault == "none" or reply.has_error() or RECORD not in reply.content or "data" not in reply.content[RECORD]:
        return reply
    garbled = [bytes(b ^ 0xFF for b in item) for item in reply.content[RECORD]["data"]]
    reply.content[RECORD] = ConfigRecord({"data": garbled})
    return reply


app = ClientApp(mods=[fault_mod, reshuffle_mod])


class TrainingDiverged(ReShuffleError):
    """This node's new model has NaN/Inf values: it takes no part in the round."""


@lru_cache(maxsize=4)
def _data(dataset: str, data_dir: str | None, n: int, kind: str, seed: int, alpha: float, classes_per_client: int,
          shards_per_client: int):
    """The dataset and its n partitions, split as ``reshuffle simulate`` splits them among n clients."""
    from reshuffle.clients import load_dataset, partition

    ds = load_dataset(dataset, data_dir)
    return ds, partition(ds.y_train, n, kind, seed, alpha, classes_per_client=classes_per_client,
                         shards_per_client=shards_per_client, natural_ids=ds.natural_ids)


def _own_attack(node_config: dict) -> tuple[str, bool]:
    """(attack, score) from this node's own config: the only place they may come from."""
    attack = str(node_config.get("attack", "none"))
    return attack, bool(node_config.get("score", False))


def _check_config(config: ConfigRecord) -> None:
    for key in FORBIDDEN_CONFIG:
        if key in config:
            raise ConfigError(
                f"train message sets {key!r}: only this node's own node_config may enable attacks or scoring"
            )


NODE_SEEDED = "reshuffle-seeded-training"  # node_config: train with the simulation's seed (default: fresh)


def _train_seed(node_config: dict, run_seed: int, T: int, part: int) -> int:
    """This node's training seed: fresh OS randomness, or (its own opt-in) the simulation's seed for round T,
    which the server's content and round number decide."""
    seeded = node_config.get(NODE_SEEDED, False)
    if not isinstance(seeded, bool):
        raise ConfigError(f"node_config {NODE_SEEDED} must be true or false, got {seeded!r}")
    return seed_of(run_seed, T, TRAIN, part) if seeded else secrets.randbits(63)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train from W_g on this node's partition; reply with W (and, if this node scores, its label: attacker or not)."""
    # torch, the attacks and the rules they use only where training happens: every protocol phase of a
    # deployment starts a fresh ClientApp process that imports this module
    from reshuffle.attacks import make_attack
    from reshuffle.clients import TrainConfig, build_model, local_train

    config = msg.content[CONFIG] if CONFIG in msg.content else ConfigRecord()
    _check_config(config)
    sim = settings(dict(context.run_config)).sim
    nc = dict(context.node_config)
    if SIM_PARTITION_ID not in nc and NODE_PARTICIPANT_ID not in nc:
        raise ConfigError(f"node config needs {SIM_PARTITION_ID} or {NODE_PARTICIPANT_ID} to pick its data")
    part = int(nc.get(SIM_PARTITION_ID, nc.get(NODE_PARTICIPANT_ID)))
    n = int(nc.get("num-partitions", 1))
    ds, parts = _data(sim.dataset, sim.data_dir, n, sim.partition, sim.seed, sim.alpha, sim.classes_per_client,
                      sim.shards_per_client)
    idx = parts[part % n]
    x, y = ds.x_train[idx], ds.y_train[idx]
    W_g = msg.content[ARRAYS].to_numpy_ndarrays()[0].astype(np.float32).ravel()
    attack, score = _own_attack(nc)
    a = make_attack(attack, **sim.attack_options)
    if a.omniscient:
        raise ConfigError(f"attack {attack!r} needs the honest updates: use reshuffle simulate")
    if attack != "none":
        a.prepare(n, ds.x_train)
        x, y = a.poison_data(x, y, part, n, ds.num_classes, np.random.default_rng(seed_of(sim.seed, POISON, part)))
    T = int(config.get("server-round", 0))
    seed = _train_seed(nc, sim.seed, T, part)
    model = build_model(sim.model, ds.input_shape, ds.num_classes, seed=sim.seed, dataset=sim.dataset)
    W = local_train(model, W_g, x, y, TrainConfig(sim.local_epochs, sim.batch_size, sim.lr, sim.optimizer), seed=seed)
    if attack != "none":
        U = a((W - W_g)[None, :].astype(np.float64), 1, np.random.default_rng(seed_of(sim.seed, T, ATTACK, part)))
        W = (W_g + U[0]).astype(np.float32)
    W = W.astype(np.float32)
    bad = int(W.size - np.count_nonzero(np.isfinite(W)))
    if bad:
        raise TrainingDiverged(f"local training diverged: {bad} of {W.size} values are NaN/Inf; "
                               "this node sends no model this round")
    content = RecordDict({ARRAYS: ArrayRecord([W])})
    if score:  # this node's own label for the evaluator: 1 attacker, 0 honest
        content[METRICS] = MetricRecord({ATTACKER_METRIC: int(attack != "none")})
    return Message(content, reply_to=msg)
