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
  ``resume`` pointing at the run's output folder (the round the kill interrupted
  is lost: nodes take part in each round number once).

Per round it reports whether the round completed, how many models were
delivered, whom the protocol blamed, and how many models of honest nodes that
stayed up through the round were not delivered ("lost"). It passes when no
honest node was blamed or lost and every round was recorded; the final accuracy
is set against the same run without faults, over the in-process Grid.

The soak measures the round's own fault tolerance, so it runs one group per round
(``stable-sets=false``): in stable groups, which deliver all their members' models or
none, every kill of a node before its upload takes its whole group's round down by
design (the in-process tests of ``ReshuffleGrid``'s stable groups cover that rule).

Every process it starts leads its own process group (session) and is recorded
before an interrupt can take effect; everything they start in turn carries the
soak's tag in its environment. All of them are stopped when it ends, whether it
succeeds, fails, or is interrupted (SIGINT, SIGTERM, SIGHUP, or interpreter exit),
also when the signal comes while a process is starting. SIGINT stops it even where
it was started with SIGINT ignored, as a shell does for a command put in the
background. Progress lines on each start ("soak: starting the SuperLink", ...)
and at each round's protocol let a caller interrupt it at a known point.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import re
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from reshuffle.errors import ConfigError, ReShuffleError
from reshuffle.flower.app.local import BIN, flwr_env, free_port

ROOT = Path(__file__).resolve().parents[3]
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
        n = nodes if nodes is not None else (4 if quick else 8)
        if r < 2:
            raise ConfigError(f"a soak needs at least 2 rounds (the ServerApp is killed and resumed), got {r}")
        if n < (4 if quick else 7):
            raise ConfigError(f"a {'quick ' if quick else ''}soak needs at least {4 if quick else 7} nodes, so that "
                              f"the protocol's threshold is met with one node killed"
                              f"{'' if quick else ' and one malformed'}; got {n}")
        return cls(rounds=r, nodes=n, seed=seed, quick=quick, workdir=workdir)


# --------------------------------------------------------------------------- processes
# Every process a soak starts gets this variable (unique per soak) in its environment, and passes
# it on to whatever it starts: Flower's SuperExec, ServerApps and ClientApps inherit it, so that
# /proc finds them wherever they run (other sessions, no port or folder on their command line).
TAG_VAR = "RESHUFFLE_SOAK_TAG"


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int
    cmd: str
    tag: str  # TAG_VAR in its environment ("" when unset or unreadable)


def _environ_value(pid: str, name: str) -> str:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # another user's process, or gone
        return ""
    key = name.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode(errors="replace")
    return ""


def proc_table() -> list[Proc]:
    """Every live process (Linux /proc; zombies left out)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if fields[0] != "Z":
            out.append(Proc(int(d.name), int(fields[1]), int(fields[3]), cmd, _environ_value(d.name, TAG_VAR)))
    return out


class SignalGate:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, but not inside :meth:`held`:
    there the signal waits until the block ends.

    Processes are started and recorded inside :meth:`held`, so that an interrupt never falls between
    a child's creation and its record (it used to leave that child running). Held in Python rather
    than with ``pthread_sigmask``: a blocked mask is inherited across ``exec``, and the children would
    then ignore the SIGTERM that stops them.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self._depth = 0
        self._pending: int | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():  # handlers live in the main thread only
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        if self._depth:
            self._pending = signum
            return
        raise KeyboardInterrupt(f"signal {signum}")

    @contextlib.contextmanager
    def held(self):
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending is not None:
                signum, self._pending = self._pending, None
                raise KeyboardInterrupt(f"signal {signum}")


class Processes:
    """The processes a soak starts, and everything they start in turn.

    Each is started in its own session (its own process group), and recorded before an interrupt
    can surface (:class:`SignalGate`). Flower's SuperLink and SuperNodes start their SuperExec in
    a session of its own, which then starts the ServerApp and ClientApps. :meth:`ours` finds all of
    them (by the soak's tag in their environment, by session or by descent), and :meth:`stop_all`
    ends every one.
    """

    def __init__(self, tag: str | None = None, gate: SignalGate | None = None) -> None:
        self.tag = tag or f"{os.getpid()}-{secrets.token_hex(8)}"
        self.gate = gate or SignalGate()
        self.started: dict[str, subprocess.Popen] = {}
        self.sessions: set[int] = set()
        self.ports: set[int] = set()
        self._lock = threading.Lock()

    def start(self, name: str, cmd: list[str], env: dict, log: Path, cwd: Path = ROOT) -> subprocess.Popen:
        env = dict(env, **{TAG_VAR: self.tag})
        with self.gate.held(), open(log, "ab") as fh:
            p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
            with self._lock:
                self.started[name] = p
                self.sessions.add(p.pid)
        return p

    def ours(self, port: int | None = None) -> list[tuple[int, str]]:
        """(pid, command line) of every live process of this soak (only those naming ``port`` if given)."""
        table = proc_table()
        if port is None:
            mine = {p.pid for p in table if p.tag == self.tag or p.sid in self.sessions}
        else:
            mine = {p.pid for p in table if f"{HOST}:{port}" in p.cmd}
        grew = True
        while grew:  # and their descendants
            new = {p.pid for p in table if p.ppid in mine and p.pid not in mine}
            mine |= new
            grew = bool(new)
        return [(p.pid, p.cmd) for p in table if p.pid in mine and p.pid != os.getpid()]

    def signal(self, name: str, sig: int) -> None:
        p = self.started.get(name)
        if p is not None:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self, name: str, port: int | None = None) -> None:
        """SIGKILL ``name``'s group and, with ``port``, every process that names that port (a machine crash)."""
        self.signal(name, signal.SIGCONT)  # a paused group dies only once it runs
        self.signal(name, signal.SIGKILL)
        if port is not None:
            _kill_all(pid for pid, _ in self.ours(port))
        p = self.started.pop(name, None)
        if p is not None:
            p.wait(timeout=30)

    def stop_all(self, grace: float = 5.0, patience: float = 120.0) -> list[str]:
        """SIGTERM every group, SIGKILL what is left after ``grace`` seconds, until nothing of ours runs
        (at most ``patience`` seconds: a loaded machine is slow to end processes). Signals that arrive
        meanwhile wait until it is done. Returns the command lines still running (none, normally)."""
        with self.gate.held():
            with self._lock:
                names = list(self.started)
            for name in names:
                self.signal(name, signal.SIGCONT)
                self.signal(name, signal.SIGTERM)
            deadline = time.monotonic() + grace
            for name in names:
                try:
                    self.started[name].wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            deadline = time.monotonic() + patience
            while (left := self.ours()) and time.monotonic() < deadline:
                _kill_all(pid for pid, _ in left)
                time.sleep(0.1)
            for name in names:
                p = self.started.pop(name, None)
                if p is not None:
                    p.wait(timeout=30)  # SIGKILLed above: reaped, no zombie left
            return [cmd for _, cmd in left]


def leftovers(tag: str, folder: str | Path = "", ports=()) -> list[str]:
    """Command lines of live processes of the soak with ``tag`` (in their environment) or that name its
    folder or one of its ports, this process and its ancestors excepted: none once it ended."""
    marks = ([str(folder)] if folder else []) + [f"{HOST}:{q}" for q in ports]
    table = proc_table()
    parent = {p.pid: p.ppid for p in table}
    mine, pid = set(), os.getpid()
    while pid and pid not in mine:  # this process and its ancestors (a wrapper naming the folder, say)
        mine.add(pid)
        pid = parent.get(pid, 0)
    return [p.cmd for p in table if p.pid not in mine and (p.tag == tag or any(m in p.cmd for m in marks))]


def _kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


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
        # The tests set the tag to find, on their own, every process the soak started.
        self.procs = Processes(tag=os.environ.get(TAG_VAR) or None)
        # A node answering malformed messages, in the full soak (-1: none); with one node killed as
        # well, N - 2 must still reach the protocol's threshold t (N = 8: t = 5).
        self.malformed = -1 if cfg.quick else random.Random(cfg.seed + 1).randrange(cfg.nodes)
        self.plan = schedule(cfg, self.malformed)
        self.events: list[str] = []
        self.node_starts = dict.fromkeys(range(cfg.nodes), 0)
        self.node_ports: dict[int, int] = {}
        self.protocol_started: set[int] = set()  # rounds whose protocol was seen to start
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
        self.procs.ports.add(self.port)
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "soak"\n\n[superlink.soak]\naddress = "{HOST}:{self.port}"\ninsecure = true\n')
        self.env = flwr_env(self.home, ROOT)
        self.env["OMP_NUM_THREADS"] = "1"
        log = self.dir / "superlink.log"
        self.say("soak: starting the SuperLink")
        p = self.procs.start("superlink", [str(BIN / "flower-superlink"), "--insecure", "--host", HOST, "--port",
                                           str(self.port), "--database", str(self.dir / "link.db")], self.env, log,
                         cwd=self.dir)  # the ServerApps run here: what they write to their cwd stays in the soak folder
        if not self._wait_text(log, "Application startup complete", p, 90):
            raise SoakError("the SuperLink did not start:\n" + log.read_text(errors="replace")[-2000:])

    def _launch_node(self, i: int, node_config: str, log: Path) -> None:
        """SuperNode ``node-{i}`` on a fresh port, with ``node_config``."""
        port = self.node_ports[i] = free_port()
        self.procs.ports.add(port)
        self.procs.start(f"node-{i}", [str(BIN / "flower-supernode"), "--insecure", "--superlink",
                                       f"{HOST}:{self.port}", "--host", HOST, "--port", str(port),
                                       "--node-config", node_config], self.env, log)

    def _start_node(self, i: int) -> None:
        self.node_starts[i] += 1
        fault = ' fault="malformed"' if i == self.malformed else ""
        self._launch_node(i, f'reshuffle-participant-id={i} reshuffle-key-dir="{self.keys}" '
                             f'num-partitions={self.cfg.nodes} {SOAK_NODE}{fault}', self.dir / f"supernode-{i}.log")

    def _restart(self, nodes: set[int], T: int, suffix: str = "") -> None:
        """Start the killed ``nodes`` again (round ``T``'s event lines end with ``suffix``)."""
        for i in sorted(nodes):
            self._start_node(i)
            self.events.append(f"round {T}: node {i} restarted{suffix}")
            self.say(f"soak: {self.events[-1]}")
        nodes.clear()

    def _run_config(self, resume: bool) -> str:
        rc = (f'out-dir="{self.out}" key-dir="{self.keys}" rounds={self.cfg.rounds} dataset="digits" '
              f'model="logreg" rule="fedavg" seed={self.cfg.seed} phase-timeout={self.cfg.phase_timeout} '
              f'train-timeout={self.cfg.train_timeout} round-timeout=600.0 r-max=3 stable-sets=false')
        return rc + (f' resume="{self.out}"' if resume else "")

    def _start_run(self, resume: bool) -> Path:
        log = self.dir / ("run-resumed.log" if resume else "run.log")
        self.say(f"soak: starting flwr run{' (resume)' if resume else ''}")
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
        return [pid for pid, cmd in self.procs.ours(self.port) if "flwr-serverapp" in cmd]

    def _apply(self, f: Fault) -> None:
        f.done = True
        if f.kind == "kill":
            self.procs.kill(f"node-{f.node}", self.node_ports.get(f.node))
            self.events.append(f"round {f.round}: node {f.node} killed during {f.phase}")
        elif f.kind == "pause":
            secs = self.cfg.phase_timeout / 4
            self.procs.signal(f"node-{f.node}", signal.SIGSTOP)
            resume = threading.Timer(secs, self.procs.signal, (f"node-{f.node}", signal.SIGCONT))
            resume.daemon = True  # an interrupted soak does not wait for it
            resume.start()
            self.events.append(f"round {f.round}: node {f.node} paused {secs:.0f} s during the protocol")
        elif f.kind == "server":
            pids = self._server_pids()
            if not pids:
                raise SoakError(f"round {f.round}: no ServerApp process of this SuperLink to kill")
            _kill_all(pids)
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
                self._restart(pending_restart, ended, " after the round")
            T = ended + 1
            text = log.read_text(errors="replace") if log.exists() else ""
            # The ServerApp numbers its grid's rounds as its own (a resumed one too).
            started = f"round {T}: roster of" in text
            if started and T not in self.protocol_started:
                self.protocol_started.add(T)
                self.say(f"soak: round {T}: the protocol has started")
            for f in self.plan:
                if f.done or f.round != T:
                    continue
                due = started if f.phase == "protocol" else time.monotonic() - round_t0 >= f.delay
                if not due:
                    continue
                self._apply(f)
                if f.kind == "kill":
                    pending_restart.add(f.node)
                if f.kind == "server":
                    self._restart(pending_restart, T)
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
        self.say(f"soak: starting {self.cfg.nodes} SuperNodes")
        for i in range(self.cfg.nodes):
            self._start_node(i)
        bad = f" (node {self.malformed} answers malformed messages)" if self.malformed >= 0 else ""
        self.say(f"soak: SuperLink on {HOST}:{self.port}, {self.cfg.nodes} SuperNodes{bad}, {self.cfg.rounds} "
                 f"rounds; folder {self.dir}")
        self.say(f"soak: processes name {self.dir} or ports {sorted(self.procs.ports)}")
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
        dropin = None if self.cfg.quick else self._dropin()
        # The round the ServerApp kill interrupted is lost (a round runs once): the reference trains as many.
        completed = sum(not r.outcome.startswith("W_g kept: interrupted") for r in rounds)
        reference = fault_free_accuracy(replace(self.cfg, rounds=completed))
        final = m["final_accuracy"]
        ok = (len(rounds) == self.cfg.rounds and resumes >= 1
              and all(not r.blamed or set(r.blamed) <= {str(self.malformed)} for r in rounds)
              and all(r.honest_lost == 0 for r in rounds) and (dropin is None or dropin["ok"]))
        return {"ok": ok, "nodes": self.cfg.nodes, "rounds": [asdict(r) for r in rounds], "events": self.events,
                "malformed_node": self.malformed, "resumes": resumes, "dropin": dropin, "final_accuracy": final,
                "fault_free_accuracy": reference, "seconds": round(time.monotonic() - t0, 1),
                "folder": str(self.dir), "ports": sorted(self.procs.ports)}

    def _dropin(self) -> dict:
        """The drop-in once: examples/flower-dropin (Flower's MultiKrum over ``ReshuffleGrid``) on fresh nodes
        (simulation keys, so no key files), 2 rounds, one node killed in round 1's protocol."""
        for i in range(self.cfg.nodes):
            self.procs.kill(f"node-{i}", self.node_ports.get(i))
        for i in range(self.cfg.nodes):
            self._launch_node(i, f"partition-id={i} num-partitions={self.cfg.nodes}",
                              self.dir / f"dropin-supernode-{i}.log")
        env = dict(self.env, PYTHONPATH=os.pathsep.join([str(ROOT / "examples" / "flower-dropin"),
                                                         self.env["PYTHONPATH"]]))
        log = self.dir / "dropin.log"
        run = self.procs.start("dropin", [str(BIN / "flwr"), "run", str(ROOT / "examples" / "flower-dropin"), "soak",
                                          "--stream", "--run-config", "num-server-rounds=2"], env, log)
        victim = random.Random(self.cfg.seed + 2).randrange(self.cfg.nodes)
        if self._wait_text(log, "round 1: roster of", run, 900):
            self.procs.kill(f"node-{victim}", self.node_ports[victim])
            self.events.append(f"drop-in round 1: node {victim} killed during the protocol")
            self.say(f"soak: {self.events[-1]}")
        try:
            run.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            raise SoakError(f"the drop-in run did not finish; logs in {self.dir}") from None
        text = log.read_text(errors="replace")
        rounds = [{"round": int(T), "sent": int(s), "roster": int(r), "replies": int(n), "blamed": b}
                  for T, s, r, n, b in re.findall(
                      r"\[reshuffle\] round (\d+): (\d+) sent, (\d+) in roster, (\d+) replies, dropouts .*?, "
                      r"blamed (.*?) \(", text)]
        finished = "Strategy execution finished" in text
        ok = finished and len(rounds) == 2 and all(r["blamed"] == "none" for r in rounds) and \
            all(r["replies"] >= r["roster"] - (1 if r["round"] == 1 else 0) > 0 for r in rounds)
        return {"ok": ok, "finished": finished, "rounds": rounds}

    def _outcomes(self, m: dict) -> list[RoundOutcome]:
        """Per round: what the ServerApp recorded, and honest models lost beyond the faults' own."""
        out = []
        for rec, rep in zip(m["rounds"], m["reshuffle"]):
            T = rec["round"]
            faults = [e for e in self.events if e.startswith(f"round {T}: ")]
            killed_in_protocol = sum(f"round {T}: node" in e and "during protocol" in e for e in faults)
            # The roster's honest nodes that stayed up through the round must all be delivered.
            # the malformed node's train claim is valid: it is in the roster
            honest_in_roster = rep["roster"] - (1 if rep["roster"] and self.malformed >= 0 else 0)
            expected = max(0, honest_in_roster - killed_in_protocol)
            out.append(RoundOutcome(T, rep.get("outcome", "completed"), rec["models_received"], rep["roster"],
                                    rep["blamed"], max(0, expected - rec["models_received"]), faults))
        return out

    def close(self) -> None:
        self.procs.stop_all()


def _checkpoint_round(out: Path) -> int:
    from reshuffle.run import checkpoint

    try:
        return checkpoint.load(out, kind="flower").round
    except checkpoint.CheckpointError:
        return 0


#: The soak's nodes take part in its one round of all nodes (stable-sets=false), and train with the seeds of
#: the fault-free reference run, so that the two accuracies compare.
SOAK_NODE = "reshuffle-ungrouped=true reshuffle-seeded-training=true"


def fault_free_accuracy(cfg: SoakConfig) -> float:
    """Final accuracy of the same run without faults, over the in-process Grid (same data and seeds)."""
    from flwr.app import Context, RecordDict

    from reshuffle.flower.app import client_app, server_app
    from reshuffle.flower.app.loopback import LoopbackGrid

    rc = {"dataset": "digits", "model": "logreg", "rule": "fedavg", "rounds": cfg.rounds, "seed": cfg.seed,
          "phase-timeout": cfg.phase_timeout, "r-max": 3, "stable-sets": False}
    with tempfile.TemporaryDirectory(prefix="reshuffle-soak-ref-") as d:
        # node i trains on partition i with the simulation's seeds, as in the soak's deployment
        lg = LoopbackGrid(client_app.app, cfg.nodes, ungrouped=True, node_config=lambda i: {
            "partition-id": i, "num-partitions": cfg.nodes, "reshuffle-seeded-training": True})
        for c in lg.contexts.values():
            c.run_config = dict(rc)
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            server_app.main(lg, Context(run_id=7, node_id=1, node_config={}, state=RecordDict(),
                                        run_config={**rc, "out-dir": d}))
        return json.loads((Path(d) / "metrics.json").read_text())["final_accuracy"]


def run_soak(cfg: SoakConfig, say: Callable[[str], None] = print) -> dict:
    """Run the soak; every process it started is stopped when it returns or raises.

    SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt (also where SIGINT was ignored, as a shell
    does for a command put in the background), except while a process is being started and
    recorded, or while the processes are being stopped: there they wait until that is done.
    """
    soak = Soak(cfg, say)
    gate = soak.procs.gate
    atexit.register(soak.close)
    gate.install()
    try:
        result = soak.run()
    finally:
        try:
            soak.close()  # a signal arriving meanwhile surfaces once every process is stopped
        finally:
            atexit.unregister(soak.close)
            gate.restore()
    result["left_running"] = leftovers(soak.procs.tag, soak.dir, soak.procs.ports)
    result["ok"] = result["ok"] and not result["left_running"]
    return result
