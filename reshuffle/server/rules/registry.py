"""Rules and pre-aggregators by name: ``register_rule``, ``register_pre``, ``make_rule``.

A rule module registers its classes with a decorator (one
:class:`~reshuffle.registry.Registry` each for rules and pre-aggregators, as for
attacks, adversaries, models and datasets); ``--plugin module`` (or
``plugins = [...]`` in TOML) imports a user module that does the same, so a new
rule needs no edit anywhere else. ``make_rule`` passes each class only what its
``__init__`` asks for: the run's f (under the name in ``f_param``), ``seed``
(randomized rules), ``reference`` (FLTrust's g₀), plus the user's options.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, TypeVar

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.registry import Registry
from reshuffle.server.rules.base import Rule
from reshuffle.server.rules.compose import AllOf, Chain, Pipeline, PreAggregator

C = TypeVar("C", bound=type)

#: Joins rule names into an intersection: ``signguard+flame`` accepts what both accept.
JOIN = "+"
#: Chains rules: ``signguard:multi-krum`` runs Multi-Krum on what SignGuard accepted.
THEN = ":"

RULES: Registry = Registry("rule", base=Rule, reserved=JOIN + THEN)
PRES: Registry = Registry("pre", base=PreAggregator, reserved=JOIN + THEN)


def register_rule(name: str) -> Callable[[C], C]:
    """Class decorator: make a :class:`Rule` subclass selectable as ``--rule name``."""
    return RULES.register(name)


def register_pre(name: str) -> Callable[[C], C]:
    """Class decorator: make a :class:`PreAggregator` subclass selectable as ``--pre name``."""
    return PRES.register(name)


def rule_names() -> list[str]:
    return RULES.names()


def pre_names() -> list[str]:
    return PRES.names()


def _parse(name: str) -> list[list[str]]:
    """``a+b:c`` → [[a, b], [c]]: stages joined by ``:``, each an intersection of ``+``-joined rules."""
    if not isinstance(name, str):
        raise ConfigError(f"a rule name must be a string, got {name!r}")
    stages = [stage.split(JOIN) for stage in name.split(THEN)]
    parts = [p for stage in stages for p in stage]
    for part in parts:
        if part not in RULES:
            raise ConfigError(f"unknown rule {part!r}; choose one of {', '.join(rule_names())} "
                              f"(intersect with {JOIN!r}, chain with {THEN!r})")
    if len(set(parts)) != len(parts):
        raise ConfigError(f"rule {name!r} names a component twice")
    return stages


def check_rule_name(name: str) -> None:
    """Raise ConfigError unless ``name`` is a registered rule, or rules joined with ``+`` and ``:``."""
    _parse(name)


def check_pre_names(names) -> None:
    for p in names:
        if p not in PRES:
            raise ConfigError(f"unknown pre-aggregator {p!r}; choose one of {', '.join(pre_names())}")


def _build(cls: type, f: int, reference, seed: int | None, options: dict[str, Any]):
    params = inspect.signature(cls.__init__).parameters
    kwargs = dict(options)
    if cls.f_param is not None and cls.f_param in params:
        kwargs.setdefault(cls.f_param, f)
    if "seed" in params:
        kwargs.setdefault("seed", seed)
    if "reference" in params and "reference" not in kwargs:
        if reference is None:
            raise ConfigError(f"the {cls.name} rule needs a reference update (the server's root dataset)")
        kwargs["reference"] = reference
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{cls.name}: {exc}") from None


def make_pre(name: str, f: int, seed: int | None = None, **options) -> PreAggregator:
    """The pre-aggregator registered as ``name``, configured with ``options``."""
    check_pre_names([name])
    return _build(PRES.get(name), f, None, seed, options)


def make_rule(
    name: str,
    f: int,
    reference: Callable[[], np.ndarray] | None = None,
    seed: int | None = None,
    pre=(),
    pre_options: dict[str, dict[str, Any]] | None = None,
    **options,
) -> Rule:
    """The rule called ``name`` (a CLI name), assuming ``f`` attackers.

    ``reference`` is FLTrust's server update g₀ (required for ``fltrust`` only);
    ``seed`` seeds randomized rules and pre-aggregators (None: OS randomness).
    ``name`` may intersect rules with ``+`` (:class:`AllOf`) and chain stages
    with ``:`` (:class:`Chain`, ``+`` binds tighter); then ``options`` holds one
    table per component name. ``pre`` lists pre-aggregators applied in order in
    front of the rule (:class:`Pipeline`), ``pre_options`` one table each.
    """
    stages = _parse(name)
    pre = list(pre)
    check_pre_names(pre)
    parts = [p for stage in stages for p in stage]
    if len(parts) == 1:
        rule = _build(RULES.get(name), f, reference, seed, options)
    else:
        if set(options) - set(parts) or not all(isinstance(v, dict) for v in options.values()):
            raise ConfigError(f"options of the joined rule {name!r} must be one table per component ({', '.join(parts)}); "
                              f"got keys {sorted(options)}")
        built = [[_build(RULES.get(p), f, reference, seed, options.get(p, {})) for p in stage] for stage in stages]
        steps = [s[0] if len(s) == 1 else AllOf(s) for s in built]
        rule = steps[0] if len(steps) == 1 else Chain(steps, f)
    if not pre:
        return rule
    pre_options = dict(pre_options or {})
    stray = set(pre_options) - set(pre)
    if stray or not all(isinstance(v, dict) for v in pre_options.values()):
        raise ConfigError(f"pre_options must be one table per pre-aggregator in use ({', '.join(pre)}); got keys {sorted(pre_options)}")
    return Pipeline([make_pre(p, f, seed, **pre_options.get(p, {})) for p in pre], rule)
