"""What produced a run's results: the package version, the git commit, the plug-ins' source hashes."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import reshuffle

_PACKAGE = Path(reshuffle.__file__).resolve().parent


@functools.lru_cache(maxsize=1)
def _git() -> tuple[str | None, bool | None]:
    """(commit, uncommitted changes to tracked files) of the repository holding this package, if any."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(_PACKAGE), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


def provenance(plugins: dict[str, str]) -> dict:
    """``metrics.json``'s ``provenance``: version, git commit (None outside a repository), plug-in hashes."""
    commit, dirty = _git()
    return {"reshuffle_version": reshuffle.__version__, "git_commit": commit, "git_dirty": dirty,
            "plugins": dict(plugins)}
