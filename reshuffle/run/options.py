"""Options of the plug-ins a run names, checked against their constructors before anything runs.

``rule_options``, ``pre_options``, ``attack_options`` and ``adversary_options`` are
matched with the ``__init__`` signature of the class registered under the run's
name; an option the class does not take is a ConfigError naming it and the valid
ones (not Python's ``unexpected keyword argument`` once the run has started).
"""

from __future__ import annotations

import inspect
from typing import Any

from reshuffle.errors import ConfigError

#: Parameters the run passes itself (never from a user's table).
_INJECTED = {"self", "reference"}


#: A rule's and a pre-aggregator's parameters that the run sets from its own settings (``make_rule`` passes
#: them), with what they are: never options of theirs.
RUN_SET = {"f": "the attackers it assumes per round", "seed": "the seed of its randomness"}


def _valid(cls: type, run_set=()) -> list[str] | None:
    """The options ``cls.__init__`` takes, but those in ``run_set``; None when it takes any (``**kwargs``)."""
    params = inspect.signature(cls.__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    skip = _INJECTED | set(run_set)
    return [p.name for p in params if p.name not in skip and p.kind is not inspect.Parameter.VAR_POSITIONAL]


def check_table(table: str, what: str, cls: type, options: Any, run_set: dict[str, str] | None = None) -> None:
    """Refuse ``options`` (a table) that ``cls`` does not take, naming the option and the valid ones.

    ``run_set`` names parameters the run sets itself (a rule's ``f`` and ``seed``): one given as an option
    is refused with the setting to use instead.
    """
    if not isinstance(options, dict):
        raise ConfigError(f"{table} for {what} must be a table, got {type(options).__name__}")
    for key, meaning in (run_set or {}).items():
        if key in options:
            v = options[key]
            raise ConfigError(f"{table}: {key} is a setting of the run ({meaning}), not an option of {what}: "
                              f"set {key} = {v!r} at the top level (--{key} {v!r})")
    valid = _valid(cls, run_set or {})
    if valid is None:
        return
    for key in options:
        if key not in valid:
            raise ConfigError(f"{table}: {what} has no option {key!r}; valid: {', '.join(valid) or 'none'}")


def check_rule_options(rule: str, options: dict[str, Any], table: str = "rule_options", shown: str = "") -> None:
    """``options`` of the rule ``rule`` (one table per component when it joins rules with + or :)."""
    from reshuffle.server.rules import DEFAULT_RULE, JOIN, THEN
    from reshuffle.server.rules.registry import RULES

    if not isinstance(options, dict):
        raise ConfigError(f"{table} must be a table, got {type(options).__name__}")
    parts = [p for stage in rule.split(THEN) for p in stage.split(JOIN)]
    if len(parts) > 1:
        stray = sorted(set(options) - set(parts))
        if stray:
            raise ConfigError(f"{table} of the joined rule {rule!r} holds one table per component "
                              f"({', '.join(parts)}); {', '.join(map(repr, stray))} is none of them")
        for p in parts:
            check_rule_options(p, options.get(p, {}), f"{table}.{p}")
        return
    if rule == "default":  # its options go to the rule it names
        check_rule_options(DEFAULT_RULE, options, table, f"rule 'default' ({DEFAULT_RULE})")
        return
    check_table(table, shown or f"rule {rule!r}", RULES.get(rule), options, RUN_SET)


def check_pre_options(pre: list[str], options: dict[str, Any]) -> None:
    from reshuffle.server.rules.registry import PRES

    if not isinstance(options, dict):
        raise ConfigError(f"pre_options must be a table, got {type(options).__name__}")
    stray = sorted(set(options) - set(pre))
    if stray:
        raise ConfigError(f"pre_options holds one table per pre-aggregator in use ({', '.join(pre) or 'none'}); "
                          f"{', '.join(map(repr, stray))} is none of them")
    for p in pre:
        check_table(f"pre_options.{p}", f"pre-aggregator {p!r}", PRES.get(p), options.get(p, {}),
                    RUN_SET)


def check_attack_options(attack: str, options: dict[str, Any]) -> None:
    from reshuffle.attacks.base import ATTACKS

    check_table("attack_options", f"attack {attack!r}", ATTACKS.get(attack), options)


def check_adversary_options(adversary: str, options: dict[str, Any]) -> None:
    if adversary == "none":
        if options:
            raise ConfigError(f"adversary_options {sorted(options)} without an adversary")
        return
    from reshuffle.adversaries.base import ADVERSARIES

    check_table("adversary_options", f"adversary {adversary!r}", ADVERSARIES.get(adversary), options)
