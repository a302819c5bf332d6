"""``reshuffle soak``: the project's Flower app on a real SuperLink and SuperNodes, under faults.

One run on loopback (127.0.0.1, ports chosen by the OS): a ``flower-superlink``,
K ``flower-supernode`` processes with ``reshuffle ca`` key files, and ``flwr run``
of the project's app. Meanwhile, from a seeded schedule, it

- kills a random node at a random phase of a round (training, or inside the
  protocol) and restarts it once the round has ended;
- pauses a random node (SIGSTOP) for a quarter of the phase timeout, then lets it go on;
- keeps one node answering every protocol message with garbled bytes
  (its own ``node_config`` says ``fault="malformed"``);
- kills the ServerApp once, mid-run, and starts ``flwr run`` again with
  ``resume`` pointing at the run's output folder.

Per round it reports whether the round completed, how many models were
delivered, whom the protocol blamed, and how many models of honest nodes that
stayed up through the round were not delivered ("lost"). It passes when no
honest node was blamed or lost and every round was recorded; the final accuracy
is set against the same run without faults, over the in-process Grid.

Every process it starts leads its own process group (session); all of them are
stopped when it ends, whether it succeeds, fails, or is interrupted (SIGINT,
SIGTERM, or interpreter exit).
"""

from __future__ import annotations

import atexit
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from reshuffle.errors import ConfigError, ReShuffleError
from reshuffle.flower.local import BIN, flwr_env, free_port

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


class SoakError(ReShuffleError):
    """The soak could not run (a process did not start, the run did not finish in time)."""


@dataclass(frozen=True)
class SoakConfig:
    rounds: int = 10
    nodes: int = 8
    seed: int = 0
    quick: bool = False
    # Generous: each phase starts a ClientApp process per node, slow on a loaded machine.
    phase_timeout: float = 90.0
    train_timeout: float = 180.0
    workdir: str | None = None

    @classmethod
    def make(cls, quick: bool, rounds: int | None, nodes: int | None, seed: int, workdir: str | None) -> "SoakConfig":
        r = rounds if rounds is not None else (2 if quick else 10)
        n = nodes if nodes is not None else (5 if quick else 8)
        if r < 2:
            raise ConfigError(f"a soak needs at least 2 rounds (the ServerApp is killed and resumed), got {r}")
        if n < 5:
            raise ConfigError(f"a soak needs at least 5 nodes (one killed, one malformed, t = N/2 + 1 left), got {n}")
        return cls(rounds=r, nodes=n, seed=seed, quick=quick, workdir=workdir)


# --------------------------------------------------------------------------- processes
class Processes:
    """Processes started in their own sessions; :meth:`stop_all` ends every one and its children."""

    def __init__(self) -> None:
        self.started: dict[str, subprocess.Popen] = {}
        self.sessions: set[int] = set()  # every session ever started, to check that none is left
        self._lock = threading.Lock()

    def start(self, name: str, cmd: list[str], env: dict, log: Path, cwd: Path = ROOT) -> subprocess.Popen:
        with open(log, "ab") as fh:
            p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        with self._lock:
            self.started[name] = p
            self.sessions.add(p.pid)
        return p

    def signal(self, name: str, sig: int) -> None:
        p = self.started.get(name)
        if p is not None:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self, name: str) -> None:
        self.signal(name, signal.SIGCONT)  # a paused group dies only once it runs
        self.signal(name, signal.SIGKILL)
        p = self.started.pop(name, None)
        if p is not None:
            p.wait(timeout=30)

    def stop_all(self) -> None:
        with self._lock:
            names = list(self.started)
        for name in names:
            self.signal(name, signal.SIGCONT)
            self.signal(name, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for name in names:
            p = self.started.get(name)
            if p is not None:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for sid in list(self.sessions):  # the groups' children too, and anything that outlived its leader
            for pid in session_members(sid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for name in names:
            p = self.started.pop(name, None)
            if p is not None:
                p.wait(timeout=30)


def session_members(sid: int) -> list[int]:
    """Pids of live processes in session ``sid`` (Linux /proc; zombies excluded)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if fields[0] != "Z" and int(fields[3]) == sid:
            out.append(int(d.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# --------------------------------------------------------------------------- the schedule
@dataclass
class Fault:
    round: int
    kind: str  # "kill" (node killed, restarted after the round), "pause", "server" (ServerApp killed)
    node: int = -1
    phase: str = ""  # "train" or "protocol"
    delay: float = 0.0  # "train": seconds after the round began
    done: bool = False


def schedule(cfg: SoakConfig, malformed: int) -> list[Fault]:
    """A seeded fault plan: node kills and pauses, and one ServerApp kill mid-run."""
    rng = random.Random(cfg.seed)
    honest = [i for i in range(cfg.nodes) if i != malformed]
    server_round = 2 if cfg.quick else rng.randrange(2, cfg.rounds + 1)
    plan = [Fault(server_round, "server", phase="protocol")]
    for T in range(1, cfg.rounds + 1):
        if cfg.quick and T != 1:
            continue
        phase = rng.choice(["train", "protocol"])
        plan.append(Fault(T, "kill", rng.choice(honest), phase, delay=rng.uniform(1.0, 4.0)))
        if not cfg.quick and rng.random() < 0.5:
            plan.append(Fault(T, "pause", rng.choice(honest), "protocol"))
    return plan


# --------------------------------------------------------------------------- the soak
@dataclass
class RoundOutcome:
    round: int
    outcome: str
    models_delivered: int
    roster: int
    blamed: dict
    honest_lost: int
    faults: list[str] = field(default_factory=list)


class Soak:
    def __init__(self, cfg: SoakConfig, say: Callable[[str], None] = print) -> None:
        self.cfg, self.say = cfg, say
        self.dir = Path(cfg.workdir) if cfg.workdir else Path(tempfile.mkdtemp(prefix="reshuffle-soak-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.procs = Processes()
        self.malformed = random.Random(cfg.seed + 1).randrange(cfg.nodes)
        self.plan = schedule(cfg, self.malformed)
        self.events: list[str] = []
        self.node_starts = dict.fromkeys(range(cfg.nodes), 0)
        self.out = self.dir / "out"
        self.keys = self.dir / "keys"
        self.home = self.dir / "flwr-home"

    # --- set-up -----------------------------------------------------------------------
    def _keys(self) -> None:
        from reshuffle.crypto.signatures import ROLE_SERVER, CertificateAuthority

        ca = CertificateAuthority.generate()
        ca.save(self.keys)
        for pid in range(self.cfg.nodes):
            ca.issue_files(self.keys, pid)
        ca.issue_files(self.keys, 0xFFFFFFFF, ROLE_SERVER)

    def _start_link(self) -> None:
        self.port = free_port()
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "soak"\n\n[superlink.soak]\naddress = "{HOST}:{self.port}"\ninsecure = true\n')
        self.env = flwr_env(self.home, ROOT)
        self.env["OMP_NUM_THREADS"] = "1"
        log = self.dir / "superlink.log"
        p = self.procs.start("superlink", [str(BIN / "flower-superlink"), "--insecure", "--host", HOST, "--port",
                                           str(self.port), "--database", str(self.dir / "link.db")], self.env, log)
        if not self._wait_text(log, "Application startup complete", p, 90):
            raise SoakError("the SuperLink did not start:\n" + log.read_text(errors="replace")[-2000:])

    def _start_node(self, i: int) -> None:
        self.node_starts[i] += 1
        fault = ' fault="malformed"' if i == self.malformed else ""
        cfg = f'reshuffle-participant-id={i} reshuffle-key-dir="{self.keys}" num-partitions={self.cfg.nodes}{fault}'
        self.procs.start(f"node-{i}", [str(BIN / "flower-supernode"), "--insecure", "--superlink",
                                       f"{HOST}:{self.port}", "--host", HOST, "--port", str(free_port()),
                                       "--node-config", cfg], self.env, self.dir / f"supernode-{i}.log")

    def _run_config(self, resume: bool) -> str:
        rc = (f'out-dir="{self.out}" key-dir="{self.keys}" rounds={self.cfg.rounds} dataset="digits" '
              f'model="logreg" rule="fedavg" seed={self.cfg.seed} phase-timeout={self.cfg.phase_timeout} '
              f'train-timeout={self.cfg.train_timeout} round-timeout=600.0 r-max=3')
        return rc + (f' resume="{self.out}"' if resume else "")

    def _start_run(self, resume: bool) -> Path:
        log = self.dir / ("run-resumed.log" if resume else "run.log")
        self.procs.start("run", [str(BIN / "flwr"), "run", ".", "soak", "--stream", "--run-config",
                                 self._run_config(resume)], self.env, log)
        return log

    @staticmethod
    def _wait_text(path: Path, text: str, proc: subprocess.Popen | None, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (proc is None or proc.poll() is None):
            if path.exists() and text in path.read_text(errors="replace"):
                return True
            time.sleep(0.1)
        return False

    # --- faults -------------------------------------------------------------------------
    def _server_pids(self) -> list[int]:
        link = self.procs.started.get("superlink")
        return [] if link is None else [p for p in session_members(link.pid) if "flwr-serverapp" in _cmdline(p)]

    def _apply(self, f: Fault, log_name: str) -> None:
        f.done = True
        if f.kind == "kill":
            self.procs.kill(f"node-{f.node}")
            self.events.append(f"round {f.round}: node {f.node} killed during {f.phase} ({log_name})")
        elif f.kind == "pause":
            secs = self.cfg.phase_timeout / 4
            self.procs.signal(f"node-{f.node}", signal.SIGSTOP)
            threading.Timer(secs, self.procs.signal, (f"node-{f.node}", signal.SIGCONT)).start()
            self.events.append(f"round {f.round}: node {f.node} paused {secs:.0f} s during the protocol")
        elif f.kind == "server":
            pids = self._server_pids()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            self.procs.kill("run")
            self.events.append(f"round {f.round}: ServerApp killed during the protocol ({len(pids)} process)")
        self.say(f"soak: {self.events[-1]}")

    def _drive(self, log: Path, first: int) -> bool:
        """Apply the plan's faults as the run reaches them; True when the run ended, False if the
        ServerApp was killed. A round has ended when its checkpoint is on disk; a round's protocol has
        started when the grid logs its roster. Nodes killed in a round are restarted when it ends."""
        run = self.procs.started["run"]
        ended = first - 1
        round_t0 = time.monotonic()
        pending_restart: set[int] = set()
        deadline = time.monotonic() + 600 * (self.cfg.rounds - first + 1)
        while time.monotonic() < deadline:
            done = _checkpoint_round(self.out)
            if done > ended:
                ended, round_t0 = done, time.monotonic()
                for i in sorted(pending_restart):
                    self._start_node(i)
                    self.events.append(f"round {ended}: node {i} restarted after the round")
                    self.say(f"soak: {self.events[-1]}")
                pending_restart.clear()
            T = ended + 1
            text = log.read_text(errors="replace") if log.exists() else ""
            started = f"round {T}: roster of" in text
            for f in self.plan:
                if f.done or f.round != T:
                    continue
                due = started if f.phase == "protocol" else time.monotonic() - round_t0 >= f.delay
                if not due:
                    continue
                self._apply(f, log.name)
                if f.kind == "kill":
                    pending_restart.add(f.node)
                if f.kind == "server":
                    for i in sorted(pending_restart):
                        self._start_node(i)
                        self.events.append(f"round {T}: node {i} restarted")
                    return False
            if run.poll() is not None:
                return True
            time.sleep(0.2)
        raise SoakError(f"the run did not finish in time; logs in {self.dir}")

    # --- the whole soak ----------------------------------------------------------------------
    def run(self) -> dict:
        t0 = time.monotonic()
        self._keys()
        self._start_link()
        for i in range(self.cfg.nodes):
            self._start_node(i)
        self.say(f"soak: SuperLink on {HOST}:{self.port}, {self.cfg.nodes} SuperNodes (node {self.malformed} "
                 f"answers malformed messages), {self.cfg.rounds} rounds; folder {self.dir}")
        finished = self._drive(self._start_run(False), 1)
        resumes = 0
        while not finished:
            resumes += 1
            last = _checkpoint_round(self.out)
            self.say(f"soak: resuming the run after round {last}")
            finished = self._drive(self._start_run(True), last + 1)
        metrics_path = self.out / "metrics.json"
        if not metrics_path.is_file():
            raise SoakError(f"the run wrote no metrics.json; logs in {self.dir}")
        m = json.loads(metrics_path.read_text())
        rounds = self._outcomes(m)
        reference = fault_free_accuracy(self.cfg)
        final = m["final_accuracy"]
        ok = (len(rounds) == self.cfg.rounds and resumes >= 1
              and all(not r.blamed or set(r.blamed) <= {str(self.malformed)} for r in rounds)
              and all(r.honest_lost == 0 for r in rounds))
        return {"ok": ok, "nodes": self.cfg.nodes, "rounds": [asdict(r) for r in rounds], "events": self.events,
                "malformed_node": self.malformed, "resumes": resumes, "final_accuracy": final,
                "fault_free_accuracy": reference, "seconds": round(time.monotonic() - t0, 1),
                "folder": str(self.dir), "sessions": sorted(self.procs.sessions)}

    def _outcomes(self, m: dict) -> list[RoundOutcome]:
        """Per round: what the ServerApp recorded, and honest models lost beyond the faults' own."""
        out = []
        for rec, rep in zip(m["rounds"], m["reshuffle"]):
            T = rec["round"]
            faults = [e for e in self.events if e.startswith(f"round {T}: ")]
            killed_in_protocol = sum(f"round {T}: node" in e and "during protocol" in e for e in faults)
            # The roster's honest nodes that stayed up through the round must all be delivered.
            honest_in_roster = rep["roster"] - (1 if rep["roster"] else 0)  # the malformed node claims honestly
            expected = max(0, honest_in_roster - killed_in_protocol)
            out.append(RoundOutcome(T, rep.get("outcome", "completed"), rec["models_received"], rep["roster"],
                                    rep["blamed"], max(0, expected - rec["models_received"]), faults))
        return out

    def close(self) -> None:
        self.procs.stop_all()


def _checkpoint_round(out: Path) -> int:
    from reshuffle.sim import checkpoint

    try:
        return checkpoint.load(out, kind="flower").round
    except checkpoint.CheckpointError:
        return 0


def fault_free_accuracy(cfg: SoakConfig) -> float:
    """Final accuracy of the same run without faults, over the in-process Grid (same data and seeds)."""
    from flwr.app import Context, RecordDict

    from reshuffle.flower import client_app, server_app
    from reshuffle.flower.loopback import LoopbackGrid

    rc = {"dataset": "digits", "model": "logreg", "rule": "fedavg", "rounds": cfg.rounds, "seed": cfg.seed,
          "phase-timeout": cfg.phase_timeout, "r-max": 3}
    with tempfile.TemporaryDirectory(prefix="reshuffle-soak-ref-") as d:
        lg = LoopbackGrid(client_app.app, cfg.nodes)  # node i trains on partition i, as in the deployment
        for c in lg.contexts.values():
            c.run_config = dict(rc)
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(),
                                        run_config={**rc, "out-dir": d}))
        return json.loads((Path(d) / "metrics.json").read_text())["final_accuracy"]


def run_soak(cfg: SoakConfig, say: Callable[[str], None] = print) -> dict:
    """Run the soak; every process it started is stopped when it returns or raises (signals included)."""
    soak = Soak(cfg, say)
    atexit.register(soak.close)
    previous = {}

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        return soak.run()
    finally:
        soak.close()
        atexit.unregister(soak.close)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main_json(result: dict) -> str:
    return json.dumps(result, indent=2)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(0 if run_soak(SoakConfig.make(True, None, None, 0, None))["ok"] else 1)
