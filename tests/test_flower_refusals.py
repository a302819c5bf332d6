"""Flower runs that cannot train say so: refused before the first round, or failed in one line, never exit 0.

In process (the real ServerApps, ClientApp and mod over :class:`LoopbackGrid`), and, marked ``soak``
(``make soak``), the same through a real ``flwr run``: the drop-in README's exact commands, and a
federation too small for its stable groups.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from flwr.app import Context, RecordDict

from flower_helpers import ROOT, LoopbackGrid, kill_superlinks_of, toy_client_app
from reshuffle.errors import ConfigError
from reshuffle.flower.app import local
from reshuffle.flower.grid import FederationTooSmall, ReshuffleGrid
from reshuffle.flower.reserved import RECORD
from test_flower_grid import noisy_reply, train_messages

EXAMPLE = ROOT / "examples" / "flower-dropin"
BASE = {"dataset": "digits", "model": "logreg", "rounds": 2, "phase-timeout": 0.5}


def _project_run(tmp_path, n: int, run_config: dict, node_config=None, drop=None):
    """The project's ServerApp over ``n`` in-process nodes: (the grid, the exception it raised, stderr)."""
    from reshuffle.flower.app import client_app, server_app

    rc = {**BASE, "out-dir": str(tmp_path / "out"), **run_config}
    lg = LoopbackGrid(client_app.app, n, drop=drop, node_config=node_config)
    for c in lg.contexts.values():
        c.run_config = dict(rc)
    with pytest.raises(server_app.ReShuffleError) as raised:
        server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=rc))
    return lg, raised.value


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("reshuffle: error: "), err
    return err


# --------------------------------------------------------------------------- the project's app
@pytest.mark.parametrize("n,run_config,message", [
    # The default: stable sets of 5 (3 SuperNodes used to fail every round and exit 0)
    (3, {}, "3 node(s) connected cannot form one stable anonymity set of set-size = 5: lower set-size (at least 3) "
            "or run at least 5 nodes (Flower's simulation: --federation-config \"num-supernodes=5\")"),
    # It used to run one group of 10
    (10, {"set-size": 20}, "10 node(s) connected cannot form one stable anonymity set of set-size = 20"),
    (4, {"stable-sets": False, "group-size": 5},
     "4 node(s) connected cannot form one anonymity group of group-size = 5"),
    (2, {"stable-sets": False}, "2 node(s) connected; a round of the real protocol needs at least 3"),
])
def test_a_federation_too_small_for_its_sets_is_refused_before_the_first_round(n, run_config, message, tmp_path,
                                                                               capsys, no_node_wait):
    from reshuffle.flower.app.server_app import RunRefused

    lg, exc = _project_run(tmp_path, n, run_config)
    assert isinstance(exc, RunRefused) and message in str(exc)
    assert message in _one_line(capsys)
    assert lg.sent == []  # nothing went out


@pytest.mark.parametrize("node_setting,why", [
    ({"reshuffle-min-group": 0}, "node_config reshuffle-min-group must be an int >= 2, got 0"),
    ({"reshuffle-collusion": -1}, "node_config reshuffle-collusion: collusion floor must be a fraction in [0, 1)"),
])
def test_a_node_refusing_its_place_in_the_only_group_ends_the_run_naming_it(node_setting, why, tmp_path, capsys):
    from reshuffle.flower.app.server_app import RunFailed

    # 5 nodes, stable sets of 5: node 1000's own config is invalid, so it refuses the claim; the 4 others
    # cannot form a set of 5, in this round or any later one
    lg, exc = _project_run(tmp_path, 5, {}, node_config=lambda i: {"partition-id": i, "num-partitions": 5,
                                                                   **(node_setting if i == 0 else {})})
    assert isinstance(exc, RunFailed)
    line = _one_line(capsys)
    assert "stable groups cannot form: 4 of 5 nodes claimed a place with a valid claim; groups of at least 5 need 5" \
        in line and f"node 1000 failed: ConfigError: {why}" in line
    # Nothing is lost: the round is recorded, with the reason, and nothing was trained
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert [r["round"] for r in m["rounds"]] == [1] and why in m["rounds"][0]["skipped"]
    assert "stable groups cannot form" in m["reshuffle"][0]["failed"]
    assert not [x for x in lg.sent if RECORD in x.content and x.content[RECORD]["stage"] == "train"]


def test_a_run_that_delivers_nothing_in_any_round_fails_naming_the_last_cause(tmp_path, capsys):
    from reshuffle.flower.app.server_app import RunFailed

    # 4 nodes, one group per round; two of them never answer: every round's roster is 2, below 3
    lg, exc = _project_run(tmp_path, 4, {"stable-sets": False}, drop=lambda node, m: node in (1000, 1001))
    assert isinstance(exc, RunFailed)
    line = _one_line(capsys)
    assert "no round delivered a model (2 round(s)); round 2: " in line
    assert "2 node(s) answered the claim message with a valid claim; a round needs at least 3" in line
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert len(m["rounds"]) == 2 and all(r["skipped"] for r in m["rounds"])


def test_a_run_whose_nodes_refuse_its_set_size_names_their_reason(tmp_path, capsys):
    from reshuffle.flower.app.server_app import RunFailed

    # set-size 3, below the nodes' default floor of 5: each node refuses the assignment; the line says so
    # (the round's own failure only counts commitments)
    _, exc = _project_run(tmp_path, 4, {"set-size": 3, "rounds": 1})
    assert isinstance(exc, RunFailed)
    line = _one_line(capsys)
    assert "no round delivered a model (1 round(s)); round 1: " in line
    assert line.rstrip().endswith("4 node(s): Refused: participant refused: WrongAssignment: group size 3 is below "
                                  "this participant's floor 5")


# --------------------------------------------------------------------------- the grid (any Flower app)
@pytest.fixture
def no_node_wait(monkeypatch):
    """No wait for nodes that may still connect: these federations are complete."""
    from reshuffle.flower import grid

    monkeypatch.setattr(grid, "NODE_WAIT", 0.0)


def test_the_grid_refuses_a_federation_smaller_than_a_group_before_any_message(no_node_wait):
    # Flower's default simulation has 2 SuperNodes: every round used to fail ("a round needs at least 3")
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 2)
    grid = ReshuffleGrid(lg)
    with pytest.raises(FederationTooSmall, match=r"^2 node\(s\) connected; stable anonymity groups of at least 5 "
                                                 r"need 5 .*num-supernodes=5"):
        grid.send_and_receive(train_messages(grid), timeout=5)
    assert lg.sent == []
    with pytest.raises(FederationTooSmall, match="a round needs at least 3"):
        ReshuffleGrid(lg, group_size=None).send_and_receive(train_messages(lg), timeout=5)
    assert lg.sent == []


def test_the_dropin_with_too_few_nodes_fails_before_training(monkeypatch, tmp_path, no_node_wait):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.chdir(tmp_path)
    from dropin import client_app, server_app

    cfg = {"num-server-rounds": 3, "fraction-train": 1.0, "local-epochs": 1, "lr": 0.1, "strategy": "multikrum",
           "num-malicious-nodes": 1}
    lg = LoopbackGrid(client_app.app, 2)
    with pytest.raises(FederationTooSmall, match="2 node"):
        server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    assert lg.sent == [] and not (tmp_path / "results.json").exists()


def _silent_in_training(rounds=None):
    """Nodes that claim and run the offline phases, then never answer the train push (rounds ``rounds``; all
    when None): every such round times out and delivers nothing."""
    def drop(node, m):
        rec = m.content[RECORD] if RECORD in m.content else None
        return rec is not None and rec["stage"] == "train" and (rounds is None or rec["T"] in rounds)
    return drop


def test_the_dropin_whose_nodes_never_answer_ends_in_one_line_naming_the_cause(monkeypatch, tmp_path):
    from functools import partial

    from reshuffle.flower.grid import NothingTrained

    # The drop-in as its README runs it, but every node goes silent once sent its model: each of its 3 rounds
    # times out. It used to end with exit 0, having trained nothing.
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.chdir(tmp_path)
    from dropin import client_app, server_app

    monkeypatch.setattr(server_app, "ReshuffleGrid", partial(ReshuffleGrid, phase_timeout=0.3, train_timeout=0.1))
    cfg = {"num-server-rounds": 3, "fraction-train": 1.0, "local-epochs": 1, "lr": 0.1, "strategy": "multikrum",
           "num-malicious-nodes": 1}
    lg = LoopbackGrid(client_app.app, 5, drop=_silent_in_training())
    with pytest.raises(NothingTrained) as raised:
        server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(), run_config=cfg))
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith("no train round delivered a reply (3 round(s) in a row); round 3: 5 node(s) at train did "
                           "not answer in time; every group failed: group 0: ")
    assert not (tmp_path / "results.json").exists()
    # local.py shows a project error's traceback as its one line
    out = local.RunOutput(colour=False)
    shown = [out.feed(x) for x in ("\x1b[91mERROR \x1b[0m:     ServerApp raised an exception\n",
                                   "Traceback (most recent call last):\n",
                                   f"reshuffle.flower.grid.NothingTrained: {line}\n",
                                   "\x1b[91mERROR \x1b[0m:     Exit Code: 700\n")]
    assert out.failed and "".join(x for x in shown if x) == f"reshuffle: error: {line}\n"


@pytest.mark.parametrize("limit", [2, 3])
def test_the_grid_ends_a_run_after_its_limit_of_empty_rounds(limit):
    from reshuffle.flower.grid import NothingTrained

    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 4, drop=_silent_in_training(), ungrouped=True)
    grid = ReshuffleGrid(lg, group_size=None, phase_timeout=0.2, train_timeout=0.05, max_empty_rounds=limit)
    for T in range(1, limit):
        assert grid.send_and_receive(train_messages(grid, T), timeout=30) == []
    with pytest.raises(NothingTrained, match=rf"^no train round delivered a reply \({limit} round\(s\) in a row\); "
                                             rf"round {limit}: 4 node\(s\) at train did not answer in time; "):
        grid.send_and_receive(train_messages(grid, limit), timeout=30)
    assert len(grid.rounds) == limit and all(r.replies == 0 for r in grid.rounds)


def test_rounds_that_fail_before_one_that_delivers_do_not_end_the_run():
    # Round 1 times out, round 2 delivers; after a delivery, empty rounds (here 3 > the limit of 2) never end it
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 4, drop=_silent_in_training({1, 3, 4, 5}), ungrouped=True)
    grid = ReshuffleGrid(lg, group_size=None, phase_timeout=0.2, train_timeout=0.05, max_empty_rounds=2)
    got = [len(grid.send_and_receive(train_messages(grid, T), timeout=30)) for T in range(1, 6)]
    assert got == [0, 4, 0, 0, 0]
    # None: the grid never ends a run (the project's ServerApp counts delivered rounds itself)
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 4, drop=_silent_in_training(), ungrouped=True)
    grid = ReshuffleGrid(lg, group_size=None, phase_timeout=0.2, train_timeout=0.05, max_empty_rounds=None)
    assert [grid.send_and_receive(train_messages(grid, T), timeout=30) for T in (1, 2)] == [[], []]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), max_size=12), st.one_of(st.none(), st.integers(1, 6)))
def test_the_run_ends_exactly_when_its_first_rounds_up_to_the_limit_all_delivered_nothing(delivered, limit):
    from reshuffle.flower.grid import NothingTrained, RoundReport

    grid = ReshuffleGrid(LoopbackGrid(toy_client_app(noisy_reply([])), 4), max_empty_rounds=limit)
    ended = None
    for T, ok in enumerate(delivered, 1):
        grid.rounds.append(RoundReport(T, 4, replies=4 if ok else 0, failed="" if ok else "x"))
        try:
            grid._check_trained()
        except NothingTrained:
            ended = T
            break
    # Invariant: it ends at round `limit` iff none of rounds 1..limit delivered; never otherwise
    want = limit if limit is not None and len(delivered) >= limit and not any(delivered[:limit]) else None
    assert ended == want


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_max_empty_rounds_is_a_positive_int_or_none(bad):
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 4)
    with pytest.raises(ConfigError, match="max_empty_rounds must be a positive int or None"):
        ReshuffleGrid(lg, max_empty_rounds=bad)


# --------------------------------------------------------------------------- the README's commands
def readme_commands() -> list[str]:
    """The drop-in README's "Run it" commands, as shown."""
    text = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Run it.*?```bash\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_commands_give_the_federation_its_size_and_only_keys_the_app_has():
    cd, export, *runs = readme_commands()
    assert cd == "cd examples/flower-dropin" and export.startswith("export FLWR_HOME=../../flower ")
    assert len(runs) == 2
    for line in runs:
        args = _split(line)
        assert args[:5] == ["python", "-m", "reshuffle.flower.app.local", "flwr", "run"]
        # The size Flower's default (2) would not give: Bulyan with f = 1 needs 7, a stable group 5
        assert int(re.search(r"num-supernodes=(\d+)", line).group(1)) >= 7
        assert local.unknown_run_config(["flwr"] + [str(EXAMPLE) if a == "." else a for a in args[4:]]) is None


def _split(line: str) -> list[str]:
    import shlex

    return shlex.split(line)


@pytest.mark.soak
def test_the_dropin_readme_commands_run_as_written(tmp_path):
    """The README's commands, verbatim but for FLWR_HOME (a copy of flower/config.toml, so that the
    SuperLink this starts is this test's) and the SuperLink's port; then the failures the README names."""
    home = tmp_path / "flwr-home"
    home.mkdir()
    shutil.copy(ROOT / "flower" / "config.toml", home / "config.toml")
    env = dict(local.flwr_env(home, ROOT))
    env["PATH"] = f"{local.BIN}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(EXAMPLE)])
    cd, export, *runs = readme_commands()
    export = export.replace("FLWR_HOME=../../flower", f"FLWR_HOME={home}")
    try:
        for i, line in enumerate(runs):
            # Execute: `cd` and `export` as shown (from the repository root), then the command
            r = subprocess.run(["bash", "-c", f"set -e; {cd}; {export}; {line}"], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=1500)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            acc = json.loads((EXAMPLE / "results.json").read_text())["accuracy"]
            assert acc["3"]["accuracy"] > 0.7 > acc["0"]["accuracy"], acc
        # Too few SuperNodes, an unknown strategy, an unknown key: one line each, and a non-zero exit
        for extra, want in ((' --federation-config "num-supernodes=3"', "3 node(s) connected; stable anonymity"),
                            (" --run-config 'strategy=\"nosuch\"'", "strategy 'nosuch': this app runs"),
                            (" --run-config 'rounds=3'", "--run-config: unknown key 'rounds'")):
            line = runs[0].split(" --federation-config")[0] + extra
            if "num-supernodes" not in extra:
                line += ' --federation-config "num-supernodes=10"'
            r = subprocess.run(["bash", "-c", f"set -e; {cd}; {export}; {line}"], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=900)
            errors = [x for x in (r.stdout + r.stderr).splitlines() if "reshuffle: error: " in x]
            assert r.returncode != 0 and len(errors) == 1 and want in errors[0], r.stdout[-3000:] + r.stderr[-3000:]
            assert "Traceback" not in r.stdout + r.stderr
    finally:
        kill_superlinks_of(home)
        for name in ("results.json", "final_model.pt"):
            (EXAMPLE / name).unlink(missing_ok=True)


@pytest.mark.soak
def test_the_projects_app_with_too_few_nodes_exits_non_zero_in_one_line(tmp_path):
    """`make flower`'s command on 3 SuperNodes (stable sets of 5)."""
    home = tmp_path / "flwr-home"
    local.write_simulation_home(home, 3)
    env = local.flwr_env(home, ROOT)
    try:
        r = subprocess.run([str(local.BIN / "python"), "-m", "reshuffle.flower.app.local", str(local.BIN / "flwr"),
                            "run", ".", "--stream", "--federation-config", "num-supernodes=3",
                            "--run-config", f'out-dir="{tmp_path / "out"}" phase-timeout=5.0'],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    finally:
        kill_superlinks_of(home)
    errors = [x for x in r.stdout.splitlines() if "reshuffle: error: " in x]
    assert r.returncode == 1 and len(errors) == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "3 node(s) connected cannot form one stable anonymity set of set-size = 5" in errors[0]
    assert "Traceback" not in r.stdout
