"""One FL round for every driver: the simulator, in each shuffle mode, and the Flower ServerApp run the
same loop (reshuffle/run/round.py) and agree on everything they both know.

The same settings and seed give the same cohorts, the same models (a Flower node
trains with the seed the simulator gives the same client), the same rows, the same
records and the same W_g, bit for bit. The ServerApp runs in process over
:class:`flower_helpers.LoopbackGrid` (real ClientApps, mods and protocol).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, RecordDict
from flwr.clientapp import ClientApp

from flower_helpers import LoopbackGrid
from reshuffle.flower.mod import reshuffle_mod
from reshuffle.flower.reserved import RECORD
from reshuffle.protocol.params import RoundParams, smallest_round
from reshuffle.run import checkpoint
from reshuffle.run.config import SimConfig
from reshuffle.sim.simulator import Simulation

NODES = 10
# Five of ten per round, two of them attackers overall; Multi-Krum assuming one attacker per round.
SETTINGS = dict(dataset="digits", model="logreg", rounds=2, seed=5, fraction=0.5, rule="multi-krum", f=1,
                local_epochs=1, batch_size=16, lr=0.1, stable_sets=False)
# What each driver measures on its own: times, bytes on its transport, and the attackers a round drew
# (the simulator knows them before the round; a Flower PS learns only the delivered rows' labels).
DRIVER_ONLY = ("seconds", "bytes", "malicious_sampled")


def _comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in json.loads(json.dumps(r)).items() if k not in DRIVER_ONLY} for r in records]


def _simulation(shuffle: str) -> tuple[Simulation, list[list[int]], list[dict]]:
    # Per client in both drivers (SETTINGS): stable groups are formed from fresh randomness on Flower, so
    # the two drivers' partitions, and with them their cohorts, differ.
    sim = Simulation(SimConfig(**SETTINGS, clients=NODES, attack="sign-flip", malicious=0.2, shuffle=shuffle,
                               training="sequential"))
    cohorts: list[list[int]] = []
    channel = sim.channel

    class Recording:
        def deliver(self, up):
            cohorts.append(up.cohort)
            return channel.deliver(up)

    sim.channel = Recording()
    records = [dataclasses.asdict(r) for r in sim.run()]
    return sim, cohorts, records


def _quantised_client_app() -> ClientApp:
    """The project's ClientApp, its reply carrying Dec(Enc(W)): what every simulated channel carries (the
    grid carries a reply's words exactly)."""
    from reshuffle.flower.app import client_app

    codec = RoundParams.default(smallest_round(), 1).codec
    app = ClientApp(mods=[reshuffle_mod])

    @app.train()
    def train(msg, ctx):
        reply = client_app.train(msg, ctx)
        W = reply.content["arrays"].to_numpy_ndarrays()[0]
        reply.content["arrays"] = ArrayRecord([codec.roundtrip(W)])
        return reply

    return app


def _flower(tmp_path, malicious: list[int]) -> tuple[np.ndarray, list[list[int]], list[dict]]:
    from reshuffle.flower.app import server_app

    def node_config(i: int) -> dict:
        # Every node labels its own row for the evaluator; the simulator's attackers attack.
        own = {"attack": "sign-flip"} if i in malicious else {}
        # Seeded training (the node's own choice): the simulator's seeds, so that the models compare bit for bit
        return {"partition-id": i, "num-partitions": NODES, "score": True, "reshuffle-seeded-training": True, **own}

    # stable_sets=False: one round of the sampled nodes, which the nodes opt in to
    lg = LoopbackGrid(_quantised_client_app(), NODES, node_config=node_config, ungrouped=True)
    run_config = {k.replace("_", "-"): v for k, v in SETTINGS.items()}
    for c in lg.contexts.values():
        c.run_config = dict(run_config)
    cfg = {**run_config, "phase-timeout": 30.0, "out-dir": str(tmp_path)}
    server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    claimed = [sorted(m.metadata.dst_node_id - lg.node_ids[0] for m in lg.sent
                      if RECORD in m.content and m.content[RECORD]["stage"] == "claim" and m.content[RECORD]["T"] == T)
               for T in range(1, SETTINGS["rounds"] + 1)]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    return checkpoint.load(tmp_path, kind="flower").arrays["global_model"], claimed, metrics["rounds"]


@pytest.fixture(scope="module")
def flower_run(tmp_path_factory):
    malicious = _simulation("none")[0].malicious
    return malicious, _flower(tmp_path_factory.mktemp("flower"), malicious)


@pytest.mark.parametrize("shuffle", ["none", "ideal", "real"])
def test_the_simulator_and_the_server_app_draw_the_same_cohorts_and_records_and_global_model(flower_run, shuffle):
    malicious, (W_flower, cohorts_flower, records_flower) = flower_run
    # Execute
    sim, cohorts, records = _simulation(shuffle)
    # Assert: the same 5 of 10 clients each round (a different 5 in each round) ...
    assert sim.malicious == malicious
    assert cohorts == cohorts_flower and [len(c) for c in cohorts] == [5, 5] and cohorts[0] != cohorts[1]
    # ... the same record of every round, in all the driver does not measure alone ...
    assert _comparable(records) == _comparable(records_flower)
    # ... and the same global model, bit for bit
    assert sim.W_g.tobytes() == W_flower.tobytes()
    # The rounds did something to compare: rows delivered and scored, attackers among them, W_g moved.
    assert all(r["models_received"] == 5 and r["honest_rows"] + r["malicious_rows"] == 5 for r in records)
    assert sum(r["malicious_rows"] for r in records) > 0
    assert records[-1]["accuracy"] > 0.5
