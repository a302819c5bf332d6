"""The driver contract (reshuffle/protocol/driver.py): every driver moves a round on through one PS surface.

The in-process runners and the Flower grid drive a plain round and a round in
anonymity groups alike: both PSs meet :class:`PS`, both outputs have one shape, and
no driver asks which one it holds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import reshuffle
from reshuffle.errors import ConfigError
from reshuffle.harness.api import ShuffleOptions, identities
from reshuffle.protocol import make_ps
from reshuffle.protocol.driver import members
from reshuffle.protocol.participant import global_model_hash
from reshuffle.protocol.server import RoundOutput

PACKAGE = Path(reshuffle.__file__).resolve().parent
DRIVERS = [PACKAGE / "harness" / "api.py", PACKAGE / "harness" / "runner.py", PACKAGE / "harness" / "parallel.py",
           PACKAGE / "flower" / "grid.py"]


@pytest.mark.parametrize("group_size", [None, 3])
def test_a_plain_and_a_grouped_ps_meet_the_contract_and_deliver_one_shape(group_size):
    ident = identities(6, seed=1)
    ps = make_ps(1, ident.roster, ident.ps_key, ident.ps_cert, ident.ca, global_model_hash(b""), d=4,
                 group_size=group_size)
    missing = {n for n in members() if not hasattr(type(ps), n) and n not in vars(ps)}
    assert not missing and {"start", "receive", "close_phase", "done", "output", "step", "needs_model",
                            "errors", "failed_output"} <= members()
    ups = [np.full(4, i, np.float32) for i in range(6)]
    r = reshuffle.shuffle(ups, seed=2, group_size=group_size)
    assert isinstance(r.output, RoundOutput) and len(r.models) == 6
    # One shape: a round of one group leaves the group fields empty
    assert (len(r.output.groups), len(r.output.offsets)) == ((0, 0) if group_size is None else (2, 2))
    assert r.output.failed == {}


def _isinstance_targets(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
            out |= {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "") for n in ast.walk(node.args[1])}
    return out


@pytest.mark.parametrize("path", DRIVERS, ids=lambda p: p.name)
def test_no_driver_asks_which_ps_or_output_it_holds(path):
    tree = ast.parse(path.read_text())
    asked = _isinstance_targets(tree) & {"Server", "GroupedServer", "RoundOutput", "GroupedOutput"}
    assert not asked, f"{path.name} branches on {asked}"


def test_the_one_call_api_drives_its_runner_through_public_methods_only():
    tree = ast.parse((PACKAGE / "harness" / "api.py").read_text())
    private = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, (ast.Name, ast.Attribute))
                      and (getattr(n.value, "id", None) or getattr(n.value, "attr", None)) in ("runner", "_runner")
                      and n.attr.startswith("_")})
    assert private == []


def test_shuffle_keywords_are_one_checked_options_object():
    o = ShuffleOptions.of(seed=3, T=2, adversaries=[], interceptors=[], R_max=3, group="secp256k1")
    assert (o.seed, o.T, o.adversaries, o.interceptors) == (3, 2, (), ())
    assert dict(o.params) == {"R_max": 3, "group": "secp256k1"}
    with pytest.raises(ConfigError, match=r"unknown round parameter\(s\): \['rmax'\]"):
        ShuffleOptions.of(rmax=3)
    with pytest.raises(ConfigError, match="group_collusion needs group_size"):
        ShuffleOptions.of(group_collusion=0.3)
    with pytest.raises(ConfigError, match="follow each group's size"):
        ShuffleOptions.of(group_size=4, t=3)
    # The documented keywords still work on the one-call API, and reach the round
    r = reshuffle.shuffle([np.zeros(3, np.float32)] * 4, seed=1, dropouts={"upload": [3]}, R_max=2)
    assert r.params.R_max == 2 and 3 not in r.online and len(r.models) == 3
