"""Each of Flower's robust Message-API strategies on Re-Shuffle's anonymous raw replies.

Seven nodes (Bulyan needs n >= 4f + 3), one of them sending a large sign-flipped
model. Each strategy must reach the result it reaches on the plain, linked replies
(the strategies do not depend on the order of replies) and keep the attacker out.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy import Bulyan, FedMedian, FedTrimmedAvg, Krum, MultiKrum

from flower_helpers import LoopbackGrid, toy_client_app
from reshuffle.flower.grid import ReshuffleGrid

NODES, ATTACKER = 7, 0
STRATEGIES = {
    "Krum": lambda: Krum(num_malicious_nodes=1, min_available_nodes=NODES),
    "MultiKrum": lambda: MultiKrum(num_malicious_nodes=1, num_nodes_to_select=3, min_available_nodes=NODES),
    "Bulyan": lambda: Bulyan(num_malicious_nodes=1, min_available_nodes=NODES),
    "FedMedian": lambda: FedMedian(min_available_nodes=NODES),
    "FedTrimmedAvg": lambda: FedTrimmedAvg(beta=0.2, min_available_nodes=NODES),
}


def reply(msg, ctx) -> RecordDict:
    p = int(ctx.node_config["partition-id"])
    rng = np.random.default_rng(p)
    arrs = [a + 1.0 + 0.1 * rng.normal(size=a.shape).astype(np.float32) for a in msg.content["arrays"].to_numpy_ndarrays()]
    if p == ATTACKER:
        arrs = [-50.0 * a for a in arrs]
    return RecordDict({"arrays": ArrayRecord(arrs), "metrics": MetricRecord({"num-examples": 20})})


@pytest.fixture(scope="module")
def initial() -> ArrayRecord:
    return ArrayRecord([np.zeros((4, 3), np.float32), np.zeros(6, np.float32)])


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_robust_strategy_on_anonymous_raw_models(name, initial):
    # Prepare
    plain = STRATEGIES[name]().start(grid=LoopbackGrid(toy_client_app(reply, mods=[]), NODES),
                                     initial_arrays=initial, num_rounds=1, evaluate_config=None)
    grid = ReshuffleGrid(LoopbackGrid(toy_client_app(reply), NODES, ungrouped=True), group_size=None)
    # Execute
    ours = STRATEGIES[name]().start(grid=grid, initial_arrays=initial, num_rounds=1)
    # Assert: all seven raw replies reached the strategy, which did what it does on linked replies
    assert grid.rounds[-1].replies == NODES
    for a, b in zip(plain.arrays.to_numpy_ndarrays(), ours.arrays.to_numpy_ndarrays()):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        assert np.all(np.abs(b - 1.0) < 0.5)  # the attacker's -50 model is out
