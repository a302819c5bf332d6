"""Shared helpers for the Flower tests: the in-process Grid, a toy ClientApp, process management.

:class:`~reshuffle.flower.loopback.LoopbackGrid` replaces only the transport:
strategies, mods and the protocol are the real ones. Tests that need Flower's own
engine (simulation, SuperLink, SuperNodes) use the process helpers below.
"""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from flwr.app import Context, Message, RecordDict

from reshuffle.flower import local
from reshuffle.flower.local import BIN, free_port  # noqa: F401  (used by the runs below)
from reshuffle.flower.loopback import LoopbackGrid  # noqa: F401  (re-exported for the tests)

ROOT = Path(__file__).resolve().parents[1]


def _write_result(path: Path, obj: dict) -> None:
    """Write atomically: another process (an xdist worker) may be waiting for this file."""
    import json

    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def _read_result(path: Path, timeout: float) -> dict:
    """Wait for a result file written by :func:`_write_result` (in this process or another)."""
    import json
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no result in {path} after {timeout:.0f} s")
        time.sleep(0.2)
    out = json.loads(path.read_text())
    if "error" in out:
        raise RuntimeError(f"the background run failed:\n{out['error']}")
    return out


class _Background:
    """A run in a daemon thread whose outcome goes to files in ``self.dir``, so that any
    process sharing the folder (pytest-xdist workers) can read it."""

    def __init__(self, workdir: Path) -> None:
        import threading

        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._guarded, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _guarded(self) -> None:
        import traceback

        try:
            self._run()
        except BaseException:  # reported through the result files
            for path in self._results():
                if not path.exists():
                    _write_result(path, {"error": traceback.format_exc()})

    def _run(self) -> None:
        raise NotImplementedError

    def _results(self) -> list[Path]:
        raise NotImplementedError


def flwr_env(home: Path) -> dict:
    return local.flwr_env(home, ROOT)


def kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait(timeout=30)


@contextmanager
def processes():
    """``start(cmd, env, log)`` starts a process in its own group; all are killed on exit."""
    started: list[subprocess.Popen] = []

    def start(cmd, env, log: Path, cwd: Path = ROOT) -> subprocess.Popen:
        p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                             start_new_session=True)
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in started:
            kill_group(p)


def toy_client_app(make_reply: Callable[[Message, Context], RecordDict], mods=None):
    """A ClientApp with ``reshuffle_mod`` (unless ``mods`` says otherwise) whose train handler is ``make_reply``."""
    from flwr.app import MetricRecord
    from flwr.clientapp import ClientApp

    from reshuffle.flower.mod import reshuffle_mod

    app = ClientApp(mods=[reshuffle_mod] if mods is None else mods)

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        return Message(make_reply(msg, ctx), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, ctx: Context) -> Message:
        return Message(RecordDict({"metrics": MetricRecord({"num-examples": 1, "node": ctx.node_id})}), reply_to=msg)

    return app


def forgetful_mod(msg: Message, ctx: Context, call_next):
    """``reshuffle_mod`` after dropping every live participant: what a fresh ClientApp process per message sees."""
    from reshuffle.flower import mod

    mod._LIVE.clear()
    return mod.reshuffle_mod(msg, ctx, call_next)


def _wait_for(path: Path, text: str, proc: subprocess.Popen, deadline: float) -> bool:
    import time

    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and text in path.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


class DeploymentRun(_Background):
    """A real deployment on loopback, run in a background thread so it can overlap other tests.

    A SuperLink, three SuperNodes (each naming its own ``reshuffle ca`` key files in
    its node config) and ``flwr run`` of the project's app for one round (``r-max=3``);
    node 2 is killed once the protocol has started. Every process is killed when it
    ends. :meth:`load` waits and returns (killed, run log, metrics.json or None).
    """

    NODES = 3

    def _results(self) -> list[Path]:
        return [self.dir / "result.json"]

    def _run(self) -> None:
        import time

        t0 = time.monotonic()
        killed, text, metrics = self._scenario()
        _write_result(self.dir / "result.json", {"killed": killed, "text": text, "metrics": metrics,
                                                 "seconds": time.monotonic() - t0})

    @staticmethod
    def load(workdir: Path, timeout: float = 900) -> tuple:
        out = _read_result(Path(workdir) / "result.json", timeout)
        return out["killed"], out["text"], out["metrics"]

    def _scenario(self) -> tuple:
        import json
        import time

        d, keys, home = self.dir, self.dir / "keys", self.dir / "flwr-home"
        home.mkdir(parents=True, exist_ok=True)
        for args in (["ca", "init", "--dir", str(keys)],
                     ["ca", "issue", "--dir", str(keys), "--ids", f"0-{self.NODES - 1}", "--server"]):
            subprocess.run([str(BIN / "reshuffle"), *args], check=True, capture_output=True, timeout=60)
        port = free_port()
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
        )
        env = flwr_env(home)
        out, log = d / "out", d / "run.log"
        with processes() as start:
            link = start([str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port),
                          "--database", str(d / "link.db")], env, d / "superlink.log")
            if not _wait_for(d / "superlink.log", "Application startup complete", link, time.monotonic() + 60):
                raise RuntimeError("SuperLink did not start:\n" + (d / "superlink.log").read_text()[-2000:])
            nodes = [start([str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
                            "--host", "127.0.0.1", "--port", str(free_port()), "--node-config",
                            f'reshuffle-participant-id={i} reshuffle-key-dir="{keys}" num-partitions={self.NODES}'],
                           env, d / f"supernode-{i}.log")
                     for i in range(self.NODES)]
            run = start([str(BIN / "flwr"), "run", ".", "deploy", "--stream", "--run-config",
                         f'out-dir="{out}" key-dir="{keys}" rounds=1 model="logreg" rule="fedavg" '
                         'phase-timeout=60.0 r-max=3'], env, log)
            # Kill the last node once the protocol has started (it is then in the roster).
            killed = _wait_for(log, f"round 1: roster of {self.NODES} participants", run, time.monotonic() + 600)
            if killed:
                kill_group(nodes[-1])
            try:
                run.wait(timeout=600)
            except subprocess.TimeoutExpired:
                pass
        metrics = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").is_file() else None
        return killed, log.read_text(errors="replace"), metrics


kill_superlinks_of = local.stop_processes_of


class LocalSimulationRuns(_Background):
    """The ``flwr run`` local simulations of tests/test_flower_sim.py, in a background thread.

    Two runs, one after the other on one local SuperLink (``flwr run`` starts it
    once per FLWR_HOME; it is killed when both have ended): ``"probe"``, the
    drop-in example with probes (tests/flower_probe_app), and ``"project"``, the
    project's own app. Most of their time is Flower waiting (Ray start-up, actor
    start-up, polling), so conftest starts them with the session and the other
    tests overlap it. :meth:`load` waits for one run and returns
    (CompletedProcess, its output folder).
    """

    NODES, ROUNDS = 5, 3
    EXAMPLE = ROOT / "examples" / "flower-dropin"
    NAMES = ("probe", "project")

    def _results(self) -> list[Path]:
        return [self.dir / f"{name}.json" for name in self.NAMES]

    def _env(self) -> dict:
        home = self.dir / "flwr-home"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'
            f"options.num-supernodes = {self.NODES}\noptions.backend.client-resources.num-cpus = 1\n"
        )
        env = flwr_env(home)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(self.EXAMPLE), env.get("PYTHONPATH", "")])
        return env

    def _flwr_run(self, env: dict, name: str, app: Path, run_config: str) -> None:
        out = self.dir / name
        out.mkdir(exist_ok=True)
        r = subprocess.run([str(BIN / "flwr"), "run", str(app), "--stream", "--run-config",
                            run_config.format(out=out)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        _write_result(self.dir / f"{name}.json",
                      {"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "out": str(out)})

    def _run(self) -> None:
        env = self._env()
        try:
            self._flwr_run(env, "probe", ROOT / "tests" / "flower_probe_app", 'probe-dir="{out}"')
            self._flwr_run(env, "project", ROOT, 'out-dir="{out}" rounds=2 phase-timeout=120.0')
        finally:
            kill_superlinks_of(self.dir / "flwr-home")

    @classmethod
    def load(cls, workdir: Path, name: str, timeout: float = 1200) -> tuple[subprocess.CompletedProcess, Path]:
        out = _read_result(Path(workdir) / f"{name}.json", timeout)
        return subprocess.CompletedProcess([], out["returncode"], out["stdout"], out["stderr"]), Path(out["out"])
