"""The project's own Flower apps: run config, and attacks only by a node's own choice.

A real deployment on loopback is the quick soak's (tests/test_soak.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

from flower_helpers import LoopbackGrid
from reshuffle.errors import ConfigError
from reshuffle.flower.app.common import settings

# Per node: these tests run fewer nodes than a stable group (tests/test_flower_groups.py has the default).
RUN_CONFIG = {"dataset": "digits", "model": "logreg", "rounds": 1, "local-epochs": 1, "batch-size": 16, "lr": 0.1,
              "stable-sets": False}


def test_run_config_is_validated():
    s = settings({"rounds": 3, "rule": "krum", "phase-timeout": 5.0, "data-dir": ""})
    assert s.sim.rounds == 3 and s.sim.rule == "krum" and s.phase_timeout == 5.0 and s.sim.data_dir is None
    assert s.round_timeout == 600.0 + 30 * 5.0
    with pytest.raises(ConfigError, match="real protocol"):
        settings({"shuffle": "ideal"})
    with pytest.raises(ConfigError, match="phase-timeout"):
        settings({"phase-timeout": 0.0})
    with pytest.raises(ConfigError, match="unknown setting 'epochs'"):
        settings({"epochs": 2})
    with pytest.raises(ConfigError, match="node_config"):
        settings({"attack": "sign-flip", "malicious": 0.2})
    # r-max sets the protocol's reservation iterations; "" keeps its default
    assert settings({"r-max": 3}).r_max == 3 and settings({"r-max": ""}).r_max is None
    for bad in (0, 65, 2.5, "3"):
        with pytest.raises(ConfigError, match="r-max"):
            settings({"r-max": bad})


def _project_grid(n: int, node_config=None) -> LoopbackGrid:
    from reshuffle.flower.app.client_app import app

    lg = LoopbackGrid(app, n, node_config=node_config, ungrouped=True)  # stable-sets false: the nodes opt in
    for c in lg.contexts.values():
        c.run_config = dict(RUN_CONFIG)
    return lg


def _w_g() -> np.ndarray:
    from reshuffle.clients import build_model, get_flat, load_dataset

    ds = load_dataset("digits")
    return get_flat(build_model("logreg", ds.input_shape, ds.num_classes, seed=0))


def test_server_sent_attack_and_score_keys_are_refused():
    # The attack: an unmodified (old) server asks honest nodes to sign-flip and to label their model.
    from reshuffle.flower.grid import ReshuffleGrid

    lg = _project_grid(3)
    grid = ReshuffleGrid(lg, group_size=None)
    content = RecordDict({"arrays": ArrayRecord([_w_g()]),
                          "config": ConfigRecord({"server-round": 1, "attack": "sign-flip", "score": True})})
    msgs = [Message(content, dst_node_id=n, message_type="train", group_id="1") for n in lg.node_ids]
    # Execute
    replies = list(grid.send_and_receive(msgs, timeout=60))
    # Assert: no node trained, poisoned or answered; each said which key it refused
    assert replies == [] and grid.rounds[-1].replies == 0
    assert len(lg.errors) == 3 and all("'attack'" in reason for _, reason in lg.errors)


def test_only_a_nodes_own_config_makes_it_attack_and_label_its_model():
    from reshuffle.flower.app.common import FlowerSettings
    from reshuffle.flower.app.server_app import grid_delivery, make_grid

    # Prepare: node 0 chose, in its own node_config, to sign-flip and to label its model for scoring; node 1
    # to label its (honest) model
    def cfg(i):
        own = {"attack": "sign-flip", "score": True} if i == 0 else {"score": True} if i == 1 else {}
        return {"partition-id": i, "num-partitions": 4, **own}
    s: FlowerSettings = settings(dict(RUN_CONFIG, **{"phase-timeout": 10.0, "r-max": 5}))
    lg = _project_grid(4, cfg)
    grid = make_grid(lg, s)
    assert grid.round_params["R_max"] == 5  # the run config's r-max reaches the protocol
    W_g = _w_g()
    # Execute
    d, _, _ = grid_delivery(grid, s, 1, W_g, sorted(lg.node_ids))
    models, flags = d.models, d.labels
    # Assert: four unlinked models, exactly one labelled, and that one moved against the others
    assert len(models) == 4 and sum(flags) == 1
    U = np.stack(models) - W_g
    mal, hon = U[flags.index(True)], U[[i for i, f in enumerate(flags) if not f]]
    assert float(mal @ hon.mean(axis=0)) < 0 < float(hon[0] @ hon[1])
    assert grid.rounds[-1].blamed == {}


def test_client_app_module_imports_neither_torch_nor_scikit_learn():
    # A deployment starts a fresh ClientApp process for every protocol phase, which imports
    # this module: torch and scikit-learn (seconds each) belong to the train handler only.
    import subprocess
    import sys

    code = "import sys, reshuffle.flower.app.client_app; print(sorted({'torch', 'sklearn'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
