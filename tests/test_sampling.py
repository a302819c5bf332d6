"""Client sampling and server optimisers in ``reshuffle simulate`` and the grid.

Each round samples its cohort (seeded); training, the attack, the protocol, the
rule and the counts run over it, and attackers are sampled like everyone else.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from reshuffle.cli import main
from reshuffle.errors import ConfigError
from reshuffle.run.delivery import threshold
from reshuffle.sim import SimConfig, Simulation

# Clients sampled and delivered one by one (the per-client sampler these tests pin down).
SMALL = dict(dataset="digits", model="logreg", rounds=3, batch_size=32, seed=2, stable_sets=False)


def test_each_round_trains_and_shuffles_only_its_sampled_cohort(monkeypatch):
    sim = Simulation(SimConfig(**SMALL, clients=30, fraction=0.2, attack="sign-flip", malicious=0.3,
                               rule="median", shuffle="none"))
    trained: list[list[int]] = []
    train = sim.training.train

    def spy(T, who, W_g):
        trained.append(list(who))
        return train(T, who, W_g)
    monkeypatch.setattr(sim.training, "train", spy)
    records = sim.run()
    # Assert: 6 of 30 clients per round, a different cohort each round, the same one for the same seed
    assert [len(c) for c in trained] == [6, 6, 6] and len({tuple(c) for c in trained}) == 3
    assert trained == [sim.cfg.sampler().cohort(T, range(30)) for T in (1, 2, 3)]
    assert [r.sampled for r in records] == [r.models_received for r in records] == [6, 6, 6]
    # Attackers are sampled like everyone else: each round counts those it drew, and only their rows
    mal = set(sim.malicious)
    assert [r.malicious_sampled for r in records] == [len(mal & set(c)) for c in trained]
    assert [r.malicious_rows for r in records] == [r.malicious_sampled for r in records]
    assert len({r.malicious_sampled for r in records}) > 1  # the attackers' share varies from round to round


def test_the_real_protocol_runs_among_the_cohort():
    sim = Simulation(SimConfig(**dict(SMALL, rounds=1), clients=12, clients_per_round=4, shuffle="real"))
    assert threshold(4) == 3  # t for N = 4 participants, not 12
    rounds: list = []
    deliver = sim.channel.deliver
    sim.channel = type("Spy", (), {"deliver": staticmethod(lambda up: rounds.append(up.cohort) or deliver(up))})()
    rec = sim.step()
    assert [len(c) for c in rounds] == [4]
    assert rec.models_received == 4 and rec.lost == {} and rec.sampled == 4


def test_sampling_settings_are_checked():
    with pytest.raises(ConfigError, match="samples 1 per round; a round needs 2: use fraction >= 0.2"):
        SimConfig(clients=10, fraction=0.1).validated()
    with pytest.raises(ConfigError, match="not both"):
        SimConfig(clients=10, fraction=0.5, clients_per_round=4).validated()
    with pytest.raises(ConfigError, match=r"clients_per_round must be an int in \[2, clients=10\]"):
        SimConfig(clients=10, clients_per_round=11).validated()
    assert SimConfig(clients=100, fraction=0.1, malicious=0.2).rule_f == 2


def test_a_server_optimiser_changes_the_step_and_every_one_learns():
    accs = {}
    for opt in ("sgd", "momentum", "adam", "yogi"):
        sim = Simulation(SimConfig(**dict(SMALL, rounds=4), clients=4, shuffle="none", server_opt=opt))
        accs[opt] = [r.accuracy for r in sim.run()]
        assert sim.fl.optimizer.name == opt
    assert all(a[-1] > 0.5 for a in accs.values()), accs
    assert len({tuple(a) for a in accs.values()}) == 4


def test_the_grid_runs_sampled_cells_with_a_server_optimiser(tmp_path):
    out = tmp_path / "grid"
    assert main(["grid", "--datasets", "digits", "--partitions", "iid", "--models", "logreg", "--attacks",
                 "sign-flip", "--rules", "fedavg", "--seeds", "1", "--rounds", "2", "--fraction", "0.5",
                 "--server-opt", "adam", "--jobs", "1", "--quiet", "--out", str(out)]) == 0
    cell = json.loads(next(out.glob("cells/**/sign-flip__fedavg__s1.json")).read_text())
    assert cell["status"] == "done" and cell["config"]["fraction"] == 0.5 and cell["config"]["server_opt"] == "adam"
    clean = json.loads(next(out.glob("cells/**/none__fedavg__s1.json")).read_text())
    assert clean["config"]["f"] == 2  # the attacked cells' f: 20 % of a 10-client round
    assert np.isfinite(cell["final_accuracy"])
