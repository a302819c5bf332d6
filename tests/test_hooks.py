"""The protocol's extension points: every hook a deviation overrides is listed, and every listed hook exists.

A deviating participant or PS is the honest class with some methods overridden. If a
hook were renamed, its old name in a subclass would never be called and the red-team
behaviour would silently play honestly; these tests fail instead.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import pkgutil
import re

import pytest

import reshuffle.adversaries
import reshuffle.games
from reshuffle.adversaries.base import PARTICIPANT_HOOKS, SERVER_HOOKS, unlisted_overrides
from reshuffle.protocol.dcnet import DCParticipant, DCServer
from reshuffle.errors import ConfigError
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.server import Server

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _subclasses(cls):
    for s in cls.__subclasses__():
        yield s
        yield from _subclasses(s)


def _deviations() -> list[type]:
    """Every subclass of the honest participant or PS defined in the adversaries and the games."""
    for pkg in (reshuffle.adversaries, reshuffle.games):
        for mod in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    return sorted({c for base in (Participant, Server, DCParticipant, DCServer) for c in _subclasses(base)
                   if c.__module__.startswith(("reshuffle.adversaries", "reshuffle.games"))},
                  key=lambda c: (c.__module__, c.__qualname__))


@pytest.mark.parametrize("cls, hooks", [(Participant, PARTICIPANT_HOOKS), (Server, SERVER_HOOKS)])
def test_every_listed_hook_exists_and_says_what_it_may_change(cls, hooks):
    assert len(set(hooks)) == len(hooks)
    for name in hooks:
        assert hasattr(cls, name), f"{cls.__name__}.{name} is listed as a hook but does not exist"
        value = getattr(cls, name)
        if callable(value) and not name.startswith(("_on_", "_close_")):
            # The handlers share one contract, stated in the class docstring; each named hook has its own.
            assert inspect.getdoc(value), f"{cls.__name__}.{name} has no docstring"
    assert "hook" in (cls.__doc__ or "").lower()


def test_every_override_in_the_adversaries_and_games_is_a_listed_hook():
    classes = _deviations()
    assert [f"{c.__module__}.{c.__qualname__}: {unlisted_overrides(c)}" for c in classes if unlisted_overrides(c)] == []
    # The scan sees the deviations it must see (a scan that found none would pass vacuously).
    overridden = {name for c in classes for name in vars(c)}
    assert {"_seal", "_reservation_vector", "_model_list", "TABLE", "_open_invocation", "_check_view",
            "_on_ot_request", "_close_masked", "handle"} <= overridden
    # And the DC-net round's: its members' named hooks and handlers, its PS's closers.
    assert {"_deviate", "_vector", "_opening", "_on_upload_request", "start", "_close_keys", "_close_vectors",
            "_close_upload", "_on_keys"} <= overridden
    assert len(classes) >= 25


def _protocol_classes(tree: ast.Module, known: set[str]) -> list[ast.ClassDef]:
    """Classes of a test module (nested ones too) that derive from the honest participant or PS, read from
    source: a base named like a known subclass, or like such a class of the same module."""
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    found: list[ast.ClassDef] = []
    names = set(known)
    grew = True
    while grew:
        grew = False
        for c in classes:
            if c not in found and any(ast.unparse(b).split(".")[-1] in names for b in c.bases):
                found.append(c)
                names.add(c.name)
                grew = True
    return found


def test_every_override_in_the_tests_is_a_listed_hook():
    known = {"Participant", "Server"} | {c.__name__ for c in _deviations()}
    hooks = set(PARTICIPANT_HOOKS) | set(SERVER_HOOKS)
    unlisted, seen = [], 0
    for path in sorted((ROOT / "tests").glob("*.py")):
        for c in _protocol_classes(ast.parse(path.read_text()), known):
            seen += 1
            for node in c.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("__"):
                    if node.name not in hooks:
                        unlisted.append(f"{path.name}: {c.name}.{node.name}")
        # A handler or closer patched onto one object (``server._close_open = spy``) is a hook too.
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and re.match(r"_(on|close)_", target.attr) \
                            and target.attr not in hooks:
                        unlisted.append(f"{path.name}: line {node.lineno} patches {target.attr}")
    assert unlisted == []
    assert seen >= 15


def test_a_renamed_hook_is_named():
    # Built with type(): the scan of the tests' source above must not see these on purpose stale classes.
    stale = type("Stale", (Participant,), {
        "_seal_message": lambda self, m: [],  # the hook is _seal: this would never be called
        "_reservation_vector": lambda self, s: Participant._reservation_vector(self, s),
    })
    stale_table = type("StaleTable", (Server,), {"STATE_TABLE": {}, "_round": 0})
    assert unlisted_overrides(stale) == ["Stale._seal_message"]
    assert unlisted_overrides(stale_table) == ["StaleTable.STATE_TABLE"]
    assert unlisted_overrides(type("Deeper", (stale,), {"_seal": lambda self, m: []})) == ["Stale._seal_message"]
    stale_dc = type("StaleDC", (DCParticipant,), {"_model_list": lambda self, s: None})  # the hook is _deviate
    assert unlisted_overrides(stale_dc) == ["StaleDC._model_list"]
    assert unlisted_overrides(type("DCPS", (DCServer,), {"_close_keys": lambda self, got: []})) == []
    with pytest.raises(ConfigError, match="neither"):
        unlisted_overrides(type("Mine", (), {}))


def test_the_docs_list_the_named_hooks():
    # docs/protocol.md's table of extension points names each named hook of both classes.
    text = (ROOT / "docs" / "protocol.md").read_text()
    section = text[text.index("## 5c. Extension points"):]
    section = section[: section.index("\n## ", 1)]
    documented = set(re.findall(r"^\| `(\w+)`", section, flags=re.M))
    named = {h for h in PARTICIPANT_HOOKS + SERVER_HOOKS if not h.startswith(("_on_", "_close_"))}
    assert documented == named
