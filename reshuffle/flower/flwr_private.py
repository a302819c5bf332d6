"""Every name the project takes from Flower outside Flower's public API, with the reason for each use.

Flower's public API is the modules of its API reference (:data:`PUBLIC_MODULES`), and in each only
the names of its ``__all__``; anything else may move in any release. Each private name is listed in
:data:`USES` with the files that use it and why; the project imports it from here
(``from reshuffle.flower.flwr_private import make_message``), so a Flower release that moves one
breaks here, and ``tests/test_flwr_private.py`` names it. The same test scans the repository:
a private Flower import that is not listed here, or a listed use that no longer exists, fails it.

``reshuffle/flower/mod.py`` still imports its two names from Flower directly (they are listed
all the same, with the mod as their user). Names resolve on first use (PEP 562): a module that
takes one name does not import the others' modules (``flwr.cli``, for the tests' two).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

#: Flower's public modules (its API reference): a name in one of these modules' ``__all__`` is public.
PUBLIC_MODULES = frozenset({
    "flwr", "flwr.app", "flwr.clientapp", "flwr.clientapp.mod", "flwr.serverapp", "flwr.serverapp.strategy",
    "flwr.client", "flwr.client.mod", "flwr.server", "flwr.server.strategy", "flwr.server.workflow",
    "flwr.common", "flwr.simulation",
})


@dataclass(frozen=True)
class Use:
    """One private Flower name: where it lives, the files that use it, and why no public name does."""

    module: str
    name: str
    users: tuple[str, ...]
    why: str
    alias: str = ""  # the name it has here, when Flower's starts with an underscore

    @property
    def here(self) -> str:
        return self.alias or self.name


USES = {u.here: u for u in (
    Use("flwr.app.message.message", "make_message",
        ("reshuffle/flower/mod.py", "reshuffle/flower/app/loopback.py"),
        "a Message with given metadata: the mod hands the train handler the message it received with new content, "
        "and the in-process Grid delivers a copy as Flower's serialization does; Message() only builds a new "
        "message or a reply"),
    Use("flwr.clientapp.typing", "ClientAppCallable",
        ("reshuffle/flower/mod.py",),
        "the type of a mod's call_next (a type annotation only)"),
    Use("flwr.supercore.run", "Run",
        ("reshuffle/flower/app/loopback.py",),
        "the in-process Grid's run (Grid.run), which a Grid must have and Flower creates for its own"),
    Use("flwr.supercore.task_identity", "TaskIdentity",
        ("reshuffle/flower/app/loopback.py",),
        "the in-process Grid stands in for the SuperLink: Flower's Message reads the run and node ids from here"),
    Use("flwr.supercore.logger", "FLOWER_LOGGER",
        ("reshuffle/bench/flower.py",),
        "the benchmark quiets Flower's per-message INFO lines, which would cost more than the rounds it times"),
    Use("flwr.common.config", "parse_config_args",
        ("reshuffle/flower/app/local.py",),
        "`flwr run --run-config` parsed exactly as flwr parses it, to name an unknown key before the SuperLink "
        "refuses it without a name"),
    Use("flwr.common.config", "get_fused_config_from_dir",
        ("reshuffle/flower/app/local.py",),
        "the app's run config with the overrides, checked as the SuperLink checks it"),
    Use("flwr.cli.flower_config", "read_superlink_connection",
        ("tests/test_frictions.py",),
        "the SuperLink connection `flwr run` reads from FLWR_HOME: the test checks flower/config.toml as flwr does"),
    Use("flwr.cli.run.run", "_parse_federation_config_overrides",
        ("tests/test_frictions.py",),
        "the federation size `make flower` passes, parsed as `flwr run` parses it",
        alias="parse_federation_config_overrides"),
)}

#: Private attributes of public Flower objects (no public setter), with the files that set them and why.
ATTRIBUTES = {
    "Metadata._message_id": Use("flwr.app", "Metadata._message_id", ("reshuffle/flower/app/loopback.py",),
                                "the in-process Grid numbers the messages it pushes, as the SuperLink does"),
}


def __getattr__(attr: str) -> Any:
    use = USES.get(attr)
    if use is None:
        raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
    value = getattr(importlib.import_module(use.module), use.name)
    globals()[attr] = value  # resolved once
    return value


def set_message_id(message, message_id: str) -> None:
    """Give ``message`` the id a SuperLink would (``Metadata._message_id``; see :data:`ATTRIBUTES`)."""
    fields = message.metadata.__dict__
    if "_message_id" not in fields:
        raise AttributeError("flwr's Metadata no longer keeps its id in _message_id (reshuffle/flower/flwr_private.py)")
    fields["_message_id"] = message_id
