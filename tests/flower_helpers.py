"""Shared helpers for the Flower tests: the in-process Grid, a toy ClientApp, process management.

:class:`~reshuffle.flower.app.loopback.LoopbackGrid` replaces only the transport:
strategies, mods and the protocol are the real ones. The local simulations
(Flower's own engine) run in the background with the session (:class:`LocalSimulationRuns`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

from flwr.app import Context, Message, RecordDict

from reshuffle.flower.app import local
from reshuffle.flower.app.local import BIN
from reshuffle.flower.app.loopback import LoopbackGrid  # noqa: F401  (re-exported for the tests)

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
    # Nobody is made to drop: the phase timeout only bounds a slow phase, and round 1's claim waits on
    # every node's start-up (Ray actors), which took over 60 s on a loaded 2-core machine. The tests
    # assert what the protocol guarantees, whoever the roster holds.
    PHASE_TIMEOUT = 300.0
    RUN_TIMEOUT = 1800  # one `flwr run`; only a hung run reaches it
    EXAMPLE = ROOT / "examples" / "flower-dropin"
    NAMES = ("probe", "project")

    def _results(self) -> list[Path]:
        return [self.dir / f"{name}.json" for name in self.NAMES]

    def _env(self) -> dict:
        home = self.dir / "flwr-home"
        local.write_simulation_home(home, self.NODES)
        env = flwr_env(home)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(self.EXAMPLE), env.get("PYTHONPATH", "")])
        return env

    def _flwr_run(self, env: dict, name: str, app: Path, run_config: str) -> None:
        out = self.dir / name
        out.mkdir(exist_ok=True)
        r = subprocess.run([str(BIN / "flwr"), "run", str(app), "--stream", "--run-config",
                            run_config.format(out=out)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=self.RUN_TIMEOUT)
        _write_result(self.dir / f"{name}.json",
                      {"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "out": str(out)})

    def _run(self) -> None:
        env = self._env()
        try:
            self._flwr_run(env, "probe", ROOT / "tests" / "flower_probe_app",
                           f'probe-dir="{{out}}" probe-phase-timeout={self.PHASE_TIMEOUT}')
            self._flwr_run(env, "project", ROOT, f'out-dir="{{out}}" rounds=2 phase-timeout={self.PHASE_TIMEOUT}')
        finally:
            kill_superlinks_of(self.dir / "flwr-home")

    @classmethod
    def load(cls, workdir: Path, name: str, timeout: float = 2 * RUN_TIMEOUT + 60
             ) -> tuple[subprocess.CompletedProcess, Path]:
        out = _read_result(Path(workdir) / f"{name}.json", timeout)
        return subprocess.CompletedProcess([], out["returncode"], out["stdout"], out["stderr"]), Path(out["out"])
