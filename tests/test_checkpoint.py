"""Checkpoints: the file format, atomic saves, and resumed simulations equal to uninterrupted ones."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.cli import main
from reshuffle.run import checkpoint
from reshuffle.run.checkpoint import Checkpoint, CheckpointError
from reshuffle.run.config import SimConfig
from reshuffle.sim.simulator import Simulation

ROOT = Path(__file__).resolve().parents[1]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
arrays = st.dictionaries(
    st.text("abcdefgh_", min_size=1, max_size=6),
    st.tuples(st.sampled_from(["<f4", "<f8", "<i8", "|u1"]), st.lists(st.integers(0, 4), max_size=3)).map(
        lambda t: np.arange(int(np.prod(t[1])), dtype=t[0]).reshape(t[1])),
    max_size=3,
)


def _equal(a: Checkpoint, b: Checkpoint) -> bool:
    return ((a.kind, a.round, a.config, a.state) == (b.kind, b.round, b.config, b.state)
            and a.arrays.keys() == b.arrays.keys()
            and all(a.arrays[k].dtype == b.arrays[k].dtype and a.arrays[k].tobytes() == b.arrays[k].tobytes()
                    for k in a.arrays))


# --------------------------------------------------------------------------- the file
@settings(max_examples=30, deadline=None)
@given(arrays, st.dictionaries(st.text(max_size=6), json_values, max_size=4), st.integers(0, 10**6))
def test_save_then_load_gives_the_same_checkpoint(tmp_path_factory, arrs, state, rnd):
    folder = tmp_path_factory.mktemp("ck")
    ck = Checkpoint("simulate", rnd, {"seed": 3, "rule": "krum"}, arrs, state)
    checkpoint.save(folder, ck)
    got = checkpoint.load(folder, kind="simulate")
    assert _equal(got, ck) and list(got.arrays) == list(ck.arrays)
    assert [p.name for p in folder.iterdir()] == [checkpoint.FILE]  # no temporary file left behind


def _saved(tmp_path) -> tuple[Path, bytes, Checkpoint]:
    ck = Checkpoint("simulate", 4, {"seed": 1}, {"global_model": np.linspace(-1, 1, 50, dtype=np.float32)},
                    {"rounds": [{"round": r, "accuracy": 0.5} for r in range(1, 5)]})
    path = checkpoint.save(tmp_path, ck)
    return path, path.read_bytes(), ck


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_damaged_checkpoint_is_refused_or_unchanged(tmp_path_factory, data):
    # Any flipped byte: either the checkpoint is refused, or (a byte no reader uses) it loads unchanged.
    folder = tmp_path_factory.mktemp("ck")
    path, raw, ck = _saved(folder)
    at = data.draw(st.integers(0, len(raw) - 1))
    path.write_bytes(raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1:])
    try:
        got = checkpoint.load(folder)
    except CheckpointError:
        return
    assert _equal(got, ck)


def test_a_truncated_checkpoint_is_refused_at_every_length(tmp_path):
    path, raw, _ = _saved(tmp_path)
    for n in range(0, len(raw), 97):
        path.write_bytes(raw[:n])
        with pytest.raises(CheckpointError, match="damaged or truncated|not a Re-Shuffle checkpoint"):
            checkpoint.load(tmp_path)


def test_a_save_that_fails_midway_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    _, _, old = _saved(tmp_path)

    def crash(fh, **members):  # half a file, then the process "dies"
        fh.write(b"PK\x03\x04 half")
        raise KeyboardInterrupt
    monkeypatch.setattr(checkpoint.np, "savez", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(tmp_path, Checkpoint("simulate", 5, {"seed": 1}, {}, {}))
    assert _equal(checkpoint.load(tmp_path), old)
    assert [p.name for p in tmp_path.iterdir()] == [checkpoint.FILE]


def test_refusals_name_what_is_wrong(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        checkpoint.load(tmp_path)
    ck = Checkpoint("flower", 2, {"lr": 0.1, "seed": 0}, {}, {})
    checkpoint.save(tmp_path, ck)
    with pytest.raises(CheckpointError, match="'flower' run, not of a 'simulate'"):
        checkpoint.load(tmp_path, kind="simulate")
    with pytest.raises(CheckpointError, match="lr: 0.1 in the checkpoint, 0.5 now"):
        checkpoint.check_config(ck, {"lr": 0.5, "seed": 0}, "this run")
    checkpoint.check_config(ck, {"seed": 0, "lr": 0.1}, "this run")  # key order does not matter
    with pytest.raises(Exception, match="numeric numpy array"):
        checkpoint.save(tmp_path, Checkpoint("flower", 2, {}, {"x": np.array([object()])}, {}))


# --------------------------------------------------------------------------- simulations
CFG = dict(dataset="digits", model="logreg", clients=6, rounds=4, local_epochs=1, lr=0.1, seed=5)


def _comparable(m: dict, real: bool = False) -> dict:
    """metrics.json without what differs between two runs of the same computation: times, the output folder,
    and with the real protocol its bytes (its reservation draws OS randomness, and with it its length)."""
    m = json.loads(json.dumps(m))
    m["config"].pop("out", None)
    for r in m["rounds"]:
        r.pop("seconds")
        if real:
            r.pop("bytes")
    return m


def _resumed(cfg: SimConfig, stop_after: int, folder: Path) -> tuple[Simulation, list]:
    """Run ``stop_after`` rounds, checkpoint, drop the Simulation; then a fresh one resumes from the file."""
    first = Simulation(cfg)
    recs = [first.step() for _ in range(stop_after)]
    checkpoint.save(folder, checkpoint.simulation_checkpoint(first, recs))
    del first
    cfg2, ck = checkpoint.load_simulation(folder)
    second = Simulation(cfg2)
    done = checkpoint.restore_simulation(second, ck)
    return second, second.run(records=done)


@pytest.mark.parametrize("shuffle,extra", [
    ("ideal", dict(attack="sign-flip", malicious=0.17, rule="multi-krum", dropout=0.17)),
    ("none", dict(attack="alie", malicious=0.34, rule="fltrust")),
    # real: the protocol's secrets are OS-random, but the models it recovers are ordered canonically;
    # the adversary is named in round 1 and stays banned after the resume
    ("real", dict(adversary="bad-share", rule="fedavg")),
])
def test_a_resumed_simulation_equals_an_uninterrupted_one(tmp_path, shuffle, extra):
    cfg = SimConfig(**CFG, shuffle=shuffle, **extra)
    whole = Simulation(cfg)
    want = whole.run()
    sim, got = _resumed(cfg, 1 + random.Random(shuffle).randrange(cfg.rounds - 1), tmp_path)
    assert sim.W_g.tobytes() == whole.W_g.tobytes()
    real = shuffle == "real"
    assert _comparable(sim.result(got), real) == _comparable(whole.result(want), real)
    if shuffle == "real":
        assert want[0].blamed and all(r.lost.get(0, "").startswith("banned") for r in got[1:])


def test_every_attribute_carried_across_rounds_is_in_the_checkpoint(tmp_path):
    # A Simulation restored after round 2 must hold the same data as the one that ran rounds 1-2;
    # an attribute added later that carries state across rounds, and is not saved, fails here.
    cfg = SimConfig(**CFG, attack="sign-flip", malicious=0.17, rule="multi-krum", shuffle="ideal")
    ran = Simulation(cfg)
    recs = [ran.step(), ran.step()]
    checkpoint.save(tmp_path, checkpoint.simulation_checkpoint(ran, recs))
    fresh = Simulation(checkpoint.load_simulation(tmp_path)[0])
    checkpoint.restore_simulation(fresh, checkpoint.load(tmp_path))
    per_round = {"choices"}  # set afresh by every step
    plain = (int, float, str, bool, type(None), dict, list, tuple, np.ndarray)
    parts = ("", "rounds", "attackers", "training", "evaluator", "channel")
    compared = []
    for part in parts:
        old, new = (ran, fresh) if not part else (getattr(ran, part), getattr(fresh, part))
        for name, v in vars(old).items():
            if name not in per_round and isinstance(v, plain):
                compared.append(f"{part}.{name}")
                assert _same(v, vars(new)[name]), f"{part}.{name}"
    assert {"rounds.W_g", "rounds.round", "rounds.banned", "attackers.malicious"} <= set(compared)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def test_resume_refuses_another_configuration_and_a_foreign_checkpoint(tmp_path):
    cfg = SimConfig(**CFG, shuffle="none")
    sim = Simulation(cfg)
    checkpoint.save(tmp_path, checkpoint.simulation_checkpoint(sim, [sim.step()]))
    ck = checkpoint.load(tmp_path)
    with pytest.raises(CheckpointError, match="lr: 0.1 in the checkpoint, 0.2 now"):
        checkpoint.restore_simulation(Simulation(SimConfig(**dict(CFG, lr=0.2), shuffle="none")), ck)
    # A checkpoint whose settings this version reads differently (here: a setting it does not know)
    meta = dict(kind="simulate", round=1, config=dict(ck.config, momentum=0.9), arrays=ck.arrays, state=ck.state)
    checkpoint.save(tmp_path, Checkpoint(**meta))
    with pytest.raises(CheckpointError, match="unknown setting 'momentum'"):
        checkpoint.load_simulation(tmp_path)


# --------------------------------------------------------------------------- the command line
def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "reshuffle.cli", "simulate", *args]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                OMP_NUM_THREADS="1")


def _wait_for_round(folder: Path, at_least: int, proc: subprocess.Popen, timeout: float = 300) -> int:
    """Block until the run's checkpoint reaches ``at_least`` (the event the test kills on); return its round."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (folder / checkpoint.FILE).is_file():
            rnd = checkpoint.load(folder).round
            if rnd >= at_least:
                return rnd
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(0.02)
    raise TimeoutError(f"no checkpoint of round {at_least} in {folder}")


def test_sigkill_then_resume_gives_the_uninterrupted_result(tmp_path):
    args = ["--dataset", "digits", "--model", "mlp", "--clients", "6", "--rounds", "12", "--local-epochs", "2",
            "--shuffle", "ideal", "--attack", "sign-flip", "--malicious", "0.17", "--rule", "multi-krum",
            "--dropout", "0.17", "--seed", "3", "--quiet", "--threads", "1"]
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    kill_at = random.randrange(1, 8)

    def start(*extra: str) -> subprocess.Popen:
        return subprocess.Popen(_cli(*args, *extra), env=_env(), cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    # Execute: a run killed with SIGKILL once its checkpoint reaches round kill_at, then resumed;
    # beside it, the same run uninterrupted
    uninterrupted, proc = start("--out", str(whole)), start("--out", str(killed))
    try:
        _wait_for_round(killed, kill_at, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    stopped = checkpoint.load(killed).round
    assert kill_at <= stopped < 12, f"killed after round {stopped}"
    resume = subprocess.run(_cli("--resume", str(killed), "--quiet", "--threads", "1"), env=_env(), cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert resume.returncode == 0, resume.stderr
    assert f"after round {stopped} of 12" in resume.stdout
    _, err = uninterrupted.communicate(timeout=300)
    assert uninterrupted.returncode == 0, err
    # Assert: the same final model, bit for bit, and the same metrics but for the times
    a, b = checkpoint.load(killed), checkpoint.load(whole)
    assert a.round == b.round == 12
    assert a.arrays["global_model"].tobytes() == b.arrays["global_model"].tobytes()
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (killed, whole))
    assert _comparable(ma) == _comparable(mb) and len(ma["rounds"]) == 12
    assert ma["final_accuracy"] > 0.8


def test_resume_on_the_command_line_takes_nothing_else(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["simulate", "--dataset", "digits", "--model", "logreg", "--clients", "4", "--set-size", "4",
                 "--rounds", "2", "--shuffle", "none", "--out", str(out), "--quiet"]) == 0
    for extra in (["--seed", "3"], ["--out", str(tmp_path)], ["--pre", "clip"], ["--config", "x.toml"],
                  ["--overwrite"]):
        assert main(["simulate", "--resume", str(out), *extra]) == 2
        assert f"leave out {extra[0]}" in capsys.readouterr().err
    raw = (out / checkpoint.FILE).read_bytes()
    (out / checkpoint.FILE).write_bytes(raw[: len(raw) // 2])
    assert main(["simulate", "--resume", str(out), "--quiet"]) == 2
    assert "damaged or truncated" in capsys.readouterr().err
    assert main(["simulate", "--resume", str(tmp_path / "nothing")]) == 2
    assert "no checkpoint in" in capsys.readouterr().err
