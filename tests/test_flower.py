"""The project's own Flower apps: run config, attacks only by a node's own choice, and a real deployment.

The deployment test starts a real SuperLink and SuperNodes (gRPC, loopback),
with ``reshuffle ca`` key files named in each node's config, kills a node in the
middle of a round's protocol, and reads ``metrics.json`` (``flwr run`` exits 0
even when the ServerApp raised).
"""

from __future__ import annotations

import json
import subprocess
import time

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

from flower_helpers import BIN, LoopbackGrid, flwr_env, free_port, kill_group, processes
from reshuffle.errors import ConfigError
from reshuffle.flower.common import settings

RUN_CONFIG = {"dataset": "digits", "model": "logreg", "rounds": 1, "local-epochs": 1, "batch-size": 16, "lr": 0.1}


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


def _project_grid(n: int, node_config=None) -> LoopbackGrid:
    from reshuffle.flower.client_app import app

    lg = LoopbackGrid(app, n, node_config=node_config)
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
    grid = ReshuffleGrid(lg)
    content = RecordDict({"arrays": ArrayRecord([_w_g()]),
                          "config": ConfigRecord({"server-round": 1, "attack": "sign-flip", "score": True})})
    msgs = [Message(content, dst_node_id=n, message_type="train", group_id="1") for n in lg.node_ids]
    # Execute
    replies = list(grid.send_and_receive(msgs, timeout=60))
    # Assert: no node trained, poisoned or answered; each said which key it refused
    assert replies == [] and grid.rounds[-1].roster == 0
    assert len(lg.errors) == 3 and all("'attack'" in reason for _, reason in lg.errors)


def test_only_a_nodes_own_config_makes_it_attack_and_label_its_model():
    from reshuffle.flower.common import FlowerSettings
    from reshuffle.flower.server_app import make_grid, run_round

    # Prepare: node 0 chose, in its own node_config, to sign-flip and to label its model for scoring
    def cfg(i):
        own = {"attack": "sign-flip", "score": True} if i == 0 else {}
        return {"partition-id": i, "num-partitions": 4, **own}
    s: FlowerSettings = settings(dict(RUN_CONFIG, **{"phase-timeout": 10.0}))
    grid = make_grid(_project_grid(4, cfg), s)
    W_g = _w_g()
    # Execute
    models, flags = run_round(grid, s, 1, W_g)
    # Assert: four unlinked models, exactly one labelled, and that one moved against the others
    assert len(models) == 4 and sum(flags) == 1
    U = np.stack(models) - W_g
    mal, hon = U[flags.index(True)], U[[i for i, f in enumerate(flags) if not f]]
    assert float(mal @ hon.mean(axis=0)) < 0 < float(hon[0] @ hon[1])
    assert grid.rounds[-1].blamed == {}


@pytest.fixture(scope="module")
def ca_files(tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys")
    for args in (["ca", "init", "--dir", str(keys)], ["ca", "issue", "--dir", str(keys), "--ids", "0-2", "--server"]):
        subprocess.run([str(BIN / "reshuffle"), *args], check=True, capture_output=True, timeout=60)
    return keys


def _wait_for(path, text: str, proc, deadline: float) -> bool:
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and text in path.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


def test_real_deployment_with_a_node_killed_mid_round(tmp_path, ca_files):
    home = tmp_path / "flwr-home"
    home.mkdir()
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = flwr_env(home)
    out, log = tmp_path / "out", tmp_path / "run.log"
    with processes() as start:
        link = start([str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port),
                      "--database", str(tmp_path / "link.db")], env, tmp_path / "superlink.log")
        assert _wait_for(tmp_path / "superlink.log", "Application startup complete", link,
                         time.monotonic() + 60), (tmp_path / "superlink.log").read_text()
        nodes = [start([str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
                        "--host", "127.0.0.1", "--port", str(free_port()),
                        "--node-config", f'reshuffle-participant-id={i} reshuffle-key-dir="{ca_files}" '
                                         'num-partitions=3'], env, tmp_path / f"supernode-{i}.log")
                 for i in range(3)]
        run = start([str(BIN / "flwr"), "run", ".", "deploy", "--stream", "--run-config",
                     f'out-dir="{out}" key-dir="{ca_files}" rounds=1 model="logreg" rule="fedavg" phase-timeout=20.0'],
                    env, log)
        # Kill node 2 once the protocol has started (it is then in the roster).
        killed = _wait_for(log, "round 1: roster of 3 participants", run, time.monotonic() + 400)
        if killed:
            kill_group(nodes[2])
        run.wait(timeout=400)
    text = log.read_text(errors="replace")
    assert killed and (out / "metrics.json").is_file(), text[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    # both surviving models reached the PS after the kill
    rep = m["reshuffle"][0]
    assert [r["models_received"] for r in m["rounds"]] == [2], text[-3000:]
    assert rep["roster"] == 3 and sum(rep["dropouts"].values()) >= 1 and rep["blamed"] == {}
    assert m["rounds"][0]["accuracy"] > m["initial_accuracy"] + 0.3
    assert {"train", "setup"} <= set(m["rounds"][0]["seconds"])
