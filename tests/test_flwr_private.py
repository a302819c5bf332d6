"""The private Flower names the project uses are listed in one place (reshuffle/flower/flwr_private.py), completely.

A Flower release that moves a listed name fails ``test_every_listed_name_resolves_on_the_installed_flower``
with the name; a new private import anywhere in the repository, or a listed use that is gone, fails the scan.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from reshuffle.flower import flwr_private
from reshuffle.flower.flwr_private import ATTRIBUTES, PUBLIC_MODULES, USES

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = "reshuffle/flower/flwr_private.py"
HELPERS = {"set_message_id": "Metadata._message_id"}  # registry functions that stand for a private attribute


def _public(module: str, name: str) -> bool:
    return module in PUBLIC_MODULES and name in getattr(importlib.import_module(module), "__all__", ())


def _python_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    return sorted(p for p in out if (ROOT / p).is_file())


def _scan(path: str, source: str) -> tuple[dict[str, set[str]], list[str]]:
    """(private name as the registry calls it -> {path}, private imports that no entry can stand for)."""
    found: dict[str, set[str]] = defaultdict(set)
    unlisted: list[str] = []
    by_origin = {(u.module, u.name): here for here, u in USES.items()}
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.ImportFrom) and node.module == "reshuffle.flower.flwr_private":
            for a in node.names:
                if a.name in USES:
                    found[a.name].add(path)
                elif a.name in HELPERS:
                    found[HELPERS[a.name]].add(path)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "flwr":
            for a in node.names:
                if _public(node.module, a.name):
                    continue
                here = by_origin.get((node.module, a.name))
                if here is None:
                    unlisted.append(f"{path}:{node.lineno}: from {node.module} import {a.name}")
                else:
                    found[here].add(path)
        elif isinstance(node, ast.Import):
            unlisted += [f"{path}:{node.lineno}: import {a.name}" for a in node.names
                         if a.name.split(".")[0] == "flwr" and a.name not in PUBLIC_MODULES]
    if path != REGISTRY and "__dict__[\"_message_id\"]" in source:
        unlisted.append(f"{path}: sets Metadata._message_id itself (use flwr_private.set_message_id)")
    return found, unlisted


def test_every_private_flower_use_is_listed_with_its_files_and_nothing_listed_is_gone():
    found: dict[str, set[str]] = defaultdict(set)
    unlisted: list[str] = []
    for path in _python_files():
        if path == REGISTRY:
            continue
        f, u = _scan(path, (ROOT / path).read_text(encoding="utf-8"))
        for k, v in f.items():
            found[k] |= v
        unlisted += u
    assert unlisted == [], "private Flower names not listed in " + REGISTRY
    declared = {k: set(u.users) for k, u in {**USES, **ATTRIBUTES}.items()}
    assert dict(found) == declared


def test_the_scan_catches_a_private_import_that_is_not_listed():
    # The scan itself: an unlisted private name is reported, a public one is not, a listed one is counted.
    src = ("from flwr.app import Message\nfrom flwr.supercore.constant import RUN_ID_NUM_BYTES\n"
           "from flwr.supercore.run import Run\nimport flwr.server.superlink\n")
    found, unlisted = _scan("x.py", src)
    assert unlisted == ["x.py:2: from flwr.supercore.constant import RUN_ID_NUM_BYTES",
                        "x.py:4: import flwr.server.superlink"]
    assert dict(found) == {"Run": {"x.py"}}


@pytest.mark.parametrize("here", sorted(USES))
def test_every_listed_name_resolves_on_the_installed_flower_and_is_still_private(here):
    use = USES[here]
    assert getattr(flwr_private, here) is getattr(importlib.import_module(use.module), use.name)
    assert not _public(use.module, use.name), f"{use.module}.{use.name} is public now: import it from Flower"
    assert use.why and use.users


def test_the_private_message_id_is_where_the_registry_sets_it():
    from flwr.app import RecordDict

    from reshuffle.flower.app.loopback import LoopbackGrid

    lg = LoopbackGrid(lambda msg, ctx: None, 1)  # sets the run's identity, as a SuperLink does
    m = lg.create_message(RecordDict(), "query", lg.node_ids[0], "1")
    flwr_private.set_message_id(m, "abc")
    assert m.metadata.message_id == "abc"
