"""The package's layering: imports run down the layers, never up, and never in a circle.

Every ``import`` and ``from ... import`` in ``reshuffle/`` is read with ``ast``
(function-level and ``TYPE_CHECKING`` imports included: a type is a dependency
too). A module belongs to a *unit*: its subpackage (``reshuffle.server.rules.krum``
is in ``server``), a top-level module (``reshuffle.errors``), or ``reshuffle``
itself for the package's ``__init__``. Units sit in the ranks below, derived
from what the code imports; a unit may import its own unit and units of a lower
rank only, so units that share a rank stay independent of each other.

    0  errors                     the exceptions
    1  wire, registry             binary encoding; the table of named plug-ins
    2  crypto, clients, server    building blocks; datasets, models, local training; rules on unlinked
                                  models (they import nothing of the protocol: a row is a row)
    3  protocol, privacy          the round as a deployment runs it; client-side DP (clipping, noise, accounting)
    4  harness                    the in-process drivers (``shuffle``, the runners)
    5  reshuffle, adversaries     the package API (``reshuffle.shuffle``); deviating parties and the
                                  explorer of PS schedules
    6  attacks, games             poisoning (omniscient attacks run the rules); security games
                                  (the anonymity game's adversary searches schedules with the explorer)
    7  run                        one FL run for every driver: settings, the round over a delivery,
                                  cohort sampling, records, outputs, checkpoints
    8  sim, flower                the simulator; the Flower drop-in and apps (neither imports the other)
    9  evaluation, soak           the decision grid; the fault soak
    10 bench                      benchmarks and the detection probe
    11 cli                        the ``reshuffle`` command

A new subpackage gets a rank here before it can pass.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

PACKAGE = Path(__file__).resolve().parent.parent / "reshuffle"

RANKS: dict[str, int] = {
    "errors": 0,
    "wire": 1, "registry": 1,
    "crypto": 2, "clients": 2, "server": 2,
    "protocol": 3, "privacy": 3,
    "harness": 4,
    "reshuffle": 5, "adversaries": 5,
    "attacks": 6, "games": 6,
    "run": 7,
    "sim": 8, "flower": 8,
    "evaluation": 9, "soak": 9,
    "bench": 10,
    "cli": 11,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def imports_of(name: str, source: str, is_package: bool) -> set[str]:
    """The ``reshuffle`` modules that ``source`` (module ``name``) imports.

    ``from a.b import c`` counts as importing ``a.b.c`` when that is a module, else
    ``a.b``; relative imports are resolved against ``name``. The implicit import of
    parent packages is not counted (every module would then depend on ``reshuffle``).
    """
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "reshuffle")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "reshuffle":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
    return found


def _graph() -> dict[str, set[str]]:
    return {m: imports_of(m, p.read_text(encoding="utf-8"), p.name == "__init__.py") for m, p in MODULES.items()}


GRAPH = _graph()


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "reshuffle"


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one node, or a self-loop (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1 or v in graph.get(v, ()):
                        found.append(frozenset(comp))
    return found


def test_every_unit_has_a_rank():
    missing = sorted({unit(m) for m in MODULES} - set(RANKS))
    assert not missing, f"give these a rank in tests/test_layers.py (RANKS and the docstring): {missing}"


def test_imports_never_run_up_or_across_the_layers():
    bad = []
    for module, targets in GRAPH.items():
        for target in targets:
            a, b = unit(module), unit(target)
            if a != b and RANKS.get(b, 99) >= RANKS.get(a, -1):
                bad.append(f"{module} (rank {RANKS.get(a)}) imports {target} (rank {RANKS.get(b)})")
    assert not bad, "imports against the layering:\n" + "\n".join(sorted(bad))


def test_every_import_names_a_module_of_the_package():
    unknown = sorted(f"{m} -> {t}" for m, ts in GRAPH.items() for t in ts if t not in MODULES)
    assert not unknown, unknown


def test_no_import_cycle_between_units():
    units: dict[str, set[str]] = defaultdict(set)
    for module, targets in GRAPH.items():
        units[unit(module)].update(unit(t) for t in targets if unit(t) != unit(module))
    assert cycles(units) == []


def test_no_import_cycle_between_modules():
    assert cycles(GRAPH) == []


# The checks above are only as good as the import reader and the cycle finder; these pin both down.

def test_imports_of_resolves_absolute_relative_and_submodule_imports():
    source = (
        "import numpy\n"
        "import reshuffle.crypto.prg\n"
        "from reshuffle.server import rules\n"
        "from reshuffle.server.rules import make_rule\n"
        "from . import base\n"
        "from ..clients import train\n"
        "def f():\n"
        "    from reshuffle import errors\n"
    )
    assert imports_of("reshuffle.attacks.simple", source, is_package=False) == {
        "reshuffle.crypto.prg", "reshuffle.server.rules", "reshuffle.attacks.base", "reshuffle.clients.train",
        "reshuffle.errors",
    }
    # In a package's __init__, "." is the package itself.
    assert imports_of("reshuffle.attacks", "from .base import Attack\n", is_package=True) == {"reshuffle.attacks.base"}


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [frozenset("ab")]),
        ({"a": {"a"}}, [frozenset("a")]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}}, [frozenset("abc"), frozenset("de")]),
    ],
)
def test_cycles_finds_exactly_the_strongly_connected_components(graph, expected):
    assert sorted(map(sorted, cycles(graph))) == sorted(map(sorted, expected))



@given(st.dictionaries(st.integers(0, 7), st.sets(st.integers(0, 7), max_size=3), max_size=8))
def test_cycles_agree_with_reachability(graph):
    # Two nodes share a reported component exactly when each reaches the other.
    def reach(v):
        seen, frontier = set(), [v]
        while frontier:
            for w in graph.get(frontier.pop(), ()):
                if w not in seen:
                    seen.add(w)
                    frontier.append(w)
        return seen

    comps = cycles(graph)
    nodes = set(graph) | {w for ws in graph.values() for w in ws}
    for v in nodes:
        on_cycle = v in reach(v)
        mine = [c for c in comps if v in c]
        assert len(mine) == (1 if on_cycle else 0)
        if on_cycle:
            assert mine[0] == {w for w in reach(v) if v in reach(w)}
