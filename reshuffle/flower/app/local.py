"""Running ``flwr`` from this venv on one machine: free ports, the environment, leftover SuperLinks.

Shared by the Flower tests, ``reshuffle bench flower``, the soak,
``experiments/flower_groups.py``, ``make flower`` and the drop-in example's README:
``python -m reshuffle.flower.app.local flwr run ...`` runs a ``flwr`` command with
its output cleaned (no colour codes off a terminal, none of Flower's notes that
contradict the federation size it reports) and says what ``flwr run`` does not:
a run-config key the app does not have is named before the run starts (the
SuperLink refuses it without a name); a run the project refused or whose groups
could not form shows its one line, without Flower's traceback of it; and the
command exits non-zero when the run failed (``flwr run`` exits 0 whatever became
of the run).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flwr_env(home: Path, root: Path) -> dict:
    """The environment for ``flwr`` commands with ``FLWR_HOME=home`` that import the package at ``root``."""
    env = dict(os.environ)
    env.update({
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p),
        # Use this venv: no per-run `uv sync` (it would pull a CUDA torch).
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "PYTHONUNBUFFERED": "1",
        # A SuperNode's SuperExec polls for tasks every second by default; each protocol phase is a task.
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.05",
        # Every Flower process posts a telemetry event and waits up to 4 s for it on exit.
        "FLWR_TELEMETRY_ENABLED": "0",
    })
    return env


def write_simulation_home(home: Path, nodes: int) -> None:
    """A FLWR_HOME whose default connection is Flower's local simulation: ``nodes`` SuperNodes, one CPU each."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'
        f"options.num-supernodes = {nodes}\noptions.backend.client-resources.num-cpus = 1\n"
    )


def stop_processes_of(home: Path, sig: int = signal.SIGKILL) -> None:
    """``flwr run`` leaves the local SuperLink it started running; its command line names FLWR_HOME.
    Signal each such process's group (or the process alone if it leads none)."""
    out = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True)
    for pid in out.stdout.split():
        try:
            os.killpg(int(pid), sig)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(int(pid), sig)
            except ProcessLookupError:
                pass


# --- `make flower`: Flower's output without its noise ---------------------------------------------
#: Lines Flower's local simulation prints whatever the federation's size (they would contradict the
#: size it reports next) and its hint on how to change that size.
FLOWER_NOISE = ("Since flwr 1.32, default simulated SuperNodes changed from 10 to 2.",
                "To change federation size, use the following command:",
                "flwr federation simulation-config ")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def clean(line: str, colour: bool) -> str | None:
    """``line`` as ``make flower`` shows it: None for Flower's noise, colour codes stripped unless ``colour``."""
    plain = _ANSI.sub("", line)
    if any(n in plain for n in FLOWER_NOISE):
        return None
    return line if colour else plain


#: Flower's line when the ServerApp of a run fails (a deployment's, or the local simulation's).
APP_FAILED = ("ServerApp raised an exception", "Simulation raised an exception")
#: How the project's ServerApp starts the one line of a run it refuses (reshuffle.flower.app.server_app.REFUSED;
#: not imported, so that this module stays free of Flower's server side).
REFUSED = "reshuffle: error: "
#: Flower's note on a failed run's exit code (left out after a refusal's line).
EXIT_NOTE = ("Exit Code:", "An unhandled exception occurred", "For more information, visit")
#: The last line of a traceback whose exception is one of the project's (reshuffle.errors: bad settings, a
#: refusal, groups that cannot form): its message is the one line shown.
PROJECT_ERROR = re.compile(r"^(reshuffle(?:\.\w+)+): (.+)$")
#: Where a Flower log line starts (after the colour codes are stripped): it ends a traceback.
FLOWER_LOG = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) *:")


class RunOutput:
    """``flwr run --stream``'s output as ``make flower`` shows it, and whether the run failed.

    A refused run shows its one ``reshuffle: error: ...`` line. A ServerApp that
    failed with one of the project's errors shows that error's message as one
    such line; Flower's traceback of either is left out. Any other failure keeps
    Flower's traceback. Call :meth:`close` at the end of the stream.
    """

    def __init__(self, colour: bool) -> None:
        self.colour = colour
        self.refused: str | None = None
        self.failed = False
        self._skipping = False
        self._note = False
        self._held: list[str] | None = None  # a failed app's traceback, until its exception line says whose

    def feed(self, line: str) -> str | None:
        """The text to show for ``line`` (None: none)."""
        out = clean(line, self.colour)
        if out is None:
            return None
        plain = _ANSI.sub("", line)
        if self._held is not None:
            if not (FLOWER_LOG.match(plain) or any(n in plain for n in EXIT_NOTE)):
                self._held.append(out)
                return None
            return self._release() + (self.feed(line) or "")
        if self._skipping:
            # Flower's traceback of the refusal ends with the exception's own line, which repeats the message
            if (self.refused and self.refused in plain) or "RunRefused: " in plain:
                self._skipping = False
                self._note = True
            return None
        if self._note:
            # Flower's note on the failed run's exit code, after the traceback: the refusal's line said it all
            if not plain.strip() or any(n in plain for n in EXIT_NOTE):
                return None
            self._note = False
        if REFUSED in plain and self.refused is None:
            self.refused = plain.split(REFUSED, 1)[1].strip()
            return REFUSED + self.refused + "\n"
        if any(m in plain for m in APP_FAILED):
            self.failed = True
            self._skipping = self.refused is not None
            if not self._skipping:
                self._held = [out]
            return None
        return out

    def _release(self) -> str:
        """What a held traceback shows: the project error's one line, or all of it."""
        held, self._held = self._held or [], None
        last = next((_ANSI.sub("", x).strip() for x in reversed(held) if x.strip()), "")
        m = PROJECT_ERROR.match(last)
        if m is None:
            return "".join(held)
        self.refused = m.group(2)
        self._note = True
        return REFUSED + self.refused + "\n"

    def close(self) -> str:
        """What is still held when the stream ends."""
        return self._release() if self._held is not None else ""


def app_and_overrides(args: list[str]) -> tuple[Path, list[str]] | None:
    """(the app folder, the --run-config values) of a ``flwr run`` command line; None for any other command."""
    names = [Path(a).name for a in args[:2]]
    if "flwr" not in names or "run" not in args:
        return None
    rest = args[args.index("run") + 1:]
    valued = {"--run-config", "-c", "--federation-config", "--federation", "--format"}
    app, overrides, i = None, [], 0
    while i < len(rest):
        a = rest[i]
        key = a.split("=", 1)[0]
        if key in valued:
            value = a.split("=", 1)[1] if "=" in a else (rest[i + 1] if i + 1 < len(rest) else "")
            i += 1 if "=" in a else 2
            if key in ("--run-config", "-c"):
                overrides.append(value)
            continue
        if app is None and not a.startswith("-"):
            app = a
        i += 1
    return Path(app or "."), overrides


def unknown_run_config(args: list[str]) -> str | None:
    """Why ``flwr run``'s --run-config does not fit its app (a key the app's pyproject.toml does not have), or None.

    The overrides are parsed and fused with the app's config as the SuperLink does; its refusal
    ("Invalid run configuration.") names no key.
    """
    parsed = app_and_overrides(args)
    if parsed is None or not parsed[1] or not (parsed[0] / "pyproject.toml").is_file():
        return None
    from reshuffle.flower.flwr_private import get_fused_config_from_dir, parse_config_args

    app, overrides = parsed
    try:
        get_fused_config_from_dir(app, parse_config_args(overrides))
    except Exception as exc:  # noqa: BLE001 (anything but an unknown key is flwr's to report)
        key = re.search(r"Key '([^']+)' is not present", str(exc))
        if key is None:
            return None
        import tomllib

        with (app / "pyproject.toml").open("rb") as fh:
            known = sorted(tomllib.load(fh).get("tool", {}).get("flwr", {}).get("app", {}).get("config", {}))
        return (f"--run-config: unknown key {key.group(1)!r}; the app ({app / 'pyproject.toml'}, "
                f"[tool.flwr.app.config]) has: {', '.join(known)}")
    return None


def run_filtered(cmd: list[str]) -> int:
    """Run ``cmd`` (a ``flwr`` command) with its output passed through :class:`RunOutput`; its exit status,
    or 1 when the run it started failed (``flwr run`` itself exits 0 whatever became of the run), or 2
    when its --run-config names a key its app does not have (then nothing is started)."""
    why = unknown_run_config(cmd)
    if why is not None:
        print(f"{REFUSED}{why}", file=sys.stderr, flush=True)
        return 2
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               # Ray warns about a default it will change; it does not apply here (no GPUs).
               RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO="0")
    stream = RunOutput(sys.stdout.isatty())
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            errors="replace")
    try:
        for line in proc.stdout:
            out = stream.feed(line)
            if out is not None:
                sys.stdout.write(out)
                sys.stdout.flush()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
    sys.stdout.write(stream.close())
    sys.stdout.flush()
    status = proc.wait()
    return status or int(stream.failed)


if __name__ == "__main__":  # python -m reshuffle.flower.app.local flwr run . --stream ...
    sys.exit(run_filtered(sys.argv[1:]))
