"""Plug-ins (``--plugin``): import them, and name the code a run used by its files' hashes.

A plug-in is a module that registers attacks, rules or pre-aggregators when
imported. ``load_plugins`` imports each and records the SHA-256 of its source
(the module's file, or every ``.py`` file of a package); ``metrics.json`` and the
checkpoint carry these hashes, and a resumed run refuses a plug-in whose files
changed (:func:`check_recorded`). A module that cannot be imported is a one-line
ConfigError naming the file and line, never a traceback.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path

from reshuffle.errors import ConfigError

#: module name → SHA-256 (hex) of the source it was imported from, for every plug-in loaded here.
LOADED: dict[str, str] = {}


def _find(name: str):
    """The module's spec, looking in the current folder too (``--plugin myrules`` beside myrules.py)."""
    try:
        # A top-level name is looked up without running anything; a dotted one imports its parents.
        if importlib.util.find_spec(name.split(".")[0]) is None and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:  # a parent package that is missing or fails
        raise ConfigError(f"cannot import plugin {name!r}: {exc}") from None
    except SyntaxError as exc:  # a parent package's __init__.py
        raise ConfigError(f"plugin {name!r}: {_where(exc)}") from None
    if spec is None or spec.origin is None or not Path(spec.origin).is_file():
        raise ConfigError(f"cannot import plugin {name!r}: no module named {name!r} on the path or in {Path.cwd()}")
    return spec


def _sources(spec) -> list[Path]:
    """The files a module is made of: its file, or every .py file of its package."""
    origin = Path(spec.origin)
    if spec.submodule_search_locations is None:
        return [origin]
    return sorted(origin.parent.rglob("*.py"))


def source_hash(name: str) -> str:
    """SHA-256 (hex) of the plug-in ``name``'s source files, found as an import would (without importing it)."""
    spec = _find(name)
    files = _sources(spec)
    root = Path(spec.origin).parent
    h = hashlib.sha256(b"reshuffle/plugin-source/v1\0")
    for f in files:
        data = f.read_bytes()
        rel = f.name if len(files) == 1 else f.relative_to(root).as_posix()
        h.update(f"{rel}\0{len(data)}\0".encode() + data)
    return h.hexdigest()


def _where(exc: SyntaxError) -> str:
    return f"syntax error in {exc.filename}, line {exc.lineno}: {exc.msg}"


def load_plugins(modules: list[str]) -> dict[str, str]:
    """Import user modules that register attacks, rules or pre-aggregators; return name → source hash.

    A name is imported as a module; one not found on the path is looked up in the
    current folder too, as ``python -m`` would.
    """
    for name in modules:
        if name in LOADED and name in sys.modules:
            continue
        digest = source_hash(name)
        try:
            importlib.import_module(name)
        except SyntaxError as exc:
            raise ConfigError(f"plugin {name!r}: {_where(exc)}") from None
        except Exception as exc:  # the module raised while it ran: say where, in one line
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            raise ConfigError(f"plugin {name!r} failed on import: {type(exc).__name__}: {exc} "
                              f"({frame.filename}, line {frame.lineno})") from None
        LOADED[name] = digest
    return {name: LOADED[name] for name in modules}


def check_recorded(recorded: dict[str, str], given: list[str], where: str) -> None:
    """Refuse plug-ins that differ from those a run recorded: missing, extra, or with changed files.

    Only the names in ``given`` (the user's command line) are looked up, never
    those in ``recorded`` (a checkpoint's, which may come from anyone).
    """
    problems = []
    missing = [n for n in recorded if n not in given]
    extra = [n for n in given if n not in recorded]
    if missing:
        problems.append("missing: " + ", ".join(f"--plugin {n}" for n in missing)
                        + " (the run used it; pass it again)")
    if extra:
        problems.append("extra: " + ", ".join(extra) + " (the run did not use it)")
    for name in given:
        if name in recorded and source_hash(name) != recorded[name]:
            problems.append(f"changed: {name} (its files' SHA-256 is {source_hash(name)[:16]}…, "
                            f"the run recorded {recorded[name][:16]}…)")
    if problems:
        raise ConfigError(f"{where}: the plug-ins differ from the run's; " + "; ".join(problems))
