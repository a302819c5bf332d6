"""Runs that cannot work are refused before round 1, with the smallest change that makes them work.

A rule declares the fewest rows it accepts (``Rule.min_rows``: Krum's n > 2f + 2,
Bulyan's n ≥ 4f + 3, ...). A round delivers at most its cohort's rows, so a rule
that needs more refuses every round: such a run is refused up front. A majority
of attackers is possible but outside every rule's assumptions: it warns once.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server import Rule, make_rule
from reshuffle.run.config import SimConfig


def _needs(cfg: SimConfig, f: int) -> int:
    return make_rule(cfg.rule, f, reference=lambda: None, seed=cfg.seed, pre=cfg.pre, pre_options=cfg.pre_options,
                     **cfg.rule_options).min_rows()


def _why(rule: Rule, n: int) -> str:
    """The rule's own words for refusing n rows."""
    try:
        rule.decide(np.zeros((n, 1)), round=0)
    except ConfigError as exc:
        return str(exc)
    return f"it needs at least {rule.min_rows()} rows"


def _attackers(k: int) -> str:
    return f"{k} attacker{'' if k == 1 else 's'}"


def _more_rows(cfg: SimConfig) -> str | None:
    """The fewest more clients (per round) after which the rule accepts a round's rows, if any."""
    if cfg.cohort_size == cfg.clients:
        for n in range(cfg.clients + 1, 100 * cfg.clients + 1):
            if _needs(cfg, replace(cfg, clients=n).rule_f) <= n:
                return f"--clients {n}"
        return None
    for k in range(cfg.cohort_size + 1, cfg.clients + 1):
        if _needs(cfg, replace(cfg, clients_per_round=k, fraction=1.0).rule_f) <= k:
            return (f"--clients-per-round {k}" if cfg.clients_per_round is not None
                    else f"--fraction {k / cfg.clients:g}")
    return None


def _fixes(cfg: SimConfig, f: int, m: int) -> list[str]:
    """The smallest changes, each alone, after which a round's m rows satisfy the rule."""
    out = []
    fewer = next((g for g in range(f - 1, -1, -1) if _needs(cfg, g) <= m), None)
    if fewer is not None:
        if cfg.f is None and cfg.attack != "none":
            out.append(f"--malicious {fewer / m:.3g} ({_attackers(fewer)} per round)")
        out.append(f"--f {fewer} (the rule assumes {_attackers(fewer)})")
    more = _more_rows(cfg)
    if more:
        out.append(more)
    return out


def check_feasible(cfg: SimConfig, rule: Rule) -> None:
    """Raise ConfigError when no round of ``cfg`` can satisfy ``rule``; warn once for a majority of attackers."""
    m, f = cfg.cohort_size, cfg.rule_f
    if rule.min_rows() > m:
        fixes = _fixes(cfg, f, m)
        how = f" Smallest changes that make it possible: {' or '.join(fixes)}." if fixes else ""
        rows = f"a round delivers at most its {m} clients' rows" if m == cfg.clients else \
            f"a round delivers at most the {m} sampled clients' rows"
        raise ConfigError(f"rule {cfg.rule!r} with f = {f} refuses {m} rows ({_why(rule, m)}), and {rows}: "
                          f"every round would keep the global model.{how}")
    if cfg.attack != "none" and cfg.n_malicious > cfg.clients / 2:
        warnings.warn(f"{cfg.n_malicious} of {cfg.clients} clients are attackers, a majority: outside the "
                      "assumptions of every rule", UserWarning, stacklevel=3)
