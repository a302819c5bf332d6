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


def _wait_for(path: Path, text: str, proc: subprocess.Popen, deadline: float) -> bool:
    import time

    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and text in path.read_text(errors="replace"):
            return True
        time.sleep(0.2)
    return False


class DeploymentRun:
    """A real deployment on loopback, run in a background thread so it can overlap other tests.

    A SuperLink, three SuperNodes (each naming its own ``reshuffle ca`` key files in
    its node config) and ``flwr run`` of the project's app for one round; node 2 is
    killed once the protocol has started. Every process is killed when it ends.
    :meth:`result` waits and returns (killed, run log, metrics.json or None).
    """

    NODES = 3

    def __init__(self, workdir: Path) -> None:
        import threading

        self.dir = Path(workdir)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._outcome: tuple | None = None
        self._error: BaseException | None = None

    def start(self) -> "DeploymentRun":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._outcome = self._scenario()
        except BaseException as exc:  # reported by result()
            self._error = exc

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
                         'phase-timeout=30.0'], env, log)
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

    def result(self, timeout: float = 900) -> tuple:
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        if self._outcome is None:
            raise TimeoutError("the deployment run did not finish")
        return self._outcome


kill_superlinks_of = local.stop_processes_of


class LocalSimulationRuns:
    """The ``flwr run`` local simulations of tests/test_flower_sim.py, in a background thread.

    Two runs, one after the other on one local SuperLink (``flwr run`` starts it
    once per FLWR_HOME; it is killed when both have ended): ``"probe"``, the
    drop-in example with probes (tests/flower_probe_app), and ``"project"``, the
    project's own app. Most of their time is Flower waiting (Ray start-up, actor
    start-up, polling), so conftest starts them with the session and the other
    tests overlap it. :meth:`result` waits for one run and returns
    (CompletedProcess, its output folder).
    """

    NODES, ROUNDS = 5, 3
    EXAMPLE = ROOT / "examples" / "flower-dropin"

    def __init__(self, workdir: Path) -> None:
        import threading

        self.dir = Path(workdir)
        self._done = {name: threading.Event() for name in ("probe", "project")}
        self._outcome: dict[str, tuple] = {}
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "LocalSimulationRuns":
        self._thread.start()
        return self

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

    def _flwr_run(self, env: dict, app: Path, run_config: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "flwr"), "run", str(app), "--stream", "--run-config", run_config],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    def _run(self) -> None:
        try:
            env = self._env()
            try:
                probe = self.dir / "probe"
                probe.mkdir(exist_ok=True)
                self._outcome["probe"] = (
                    self._flwr_run(env, ROOT / "tests" / "flower_probe_app", f'probe-dir="{probe}"'), probe)
                self._done["probe"].set()
                out = self.dir / "project"
                self._outcome["project"] = (
                    self._flwr_run(env, ROOT, f'out-dir="{out}" rounds=2 phase-timeout=30.0'), out)
            finally:
                kill_superlinks_of(self.dir / "flwr-home")
        except BaseException as exc:  # reported by result()
            self._error = exc
        finally:
            for done in self._done.values():
                done.set()

    def result(self, name: str, timeout: float = 1200) -> tuple[subprocess.CompletedProcess, Path]:
        self._done[name].wait(timeout)
        if name in self._outcome:
            return self._outcome[name]
        if self._error is not None:
            raise self._error
        raise TimeoutError(f"the local simulation run {name!r} did not finish")
