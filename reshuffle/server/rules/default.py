"""``--rule default``: the rule with the best worst case in the framing grid.

The choice is measured, not assumed: ``reshuffle grid --config
experiments/configs/framing-grid.toml`` runs every attack, framing and the
attackers who know each rule and its history included, against each candidate
on Fashion-MNIST (both Dirichlet(0.3) splits with the MLP, Flower's with
LeNet-5; three seeds; 10 and 30 rounds). ``DEFAULT_RULE`` is its summary's
choice: the rule whose largest miss of the goal over every cell is the
smallest (docs/results.md, "The framing grid"; ``tests/test_results_framing.py``
holds the two together). Options given to ``default`` go to that rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reshuffle.server.rules.base import Decision, Rule, decide_in_context
from reshuffle.server.rules.registry import make_rule, register_rule

#: The rule behind ``default`` (a registered name; ``+``/``:`` compositions allowed).
DEFAULT_RULE = "hammer-signals"


@register_rule("default")
class Default(Rule):
    """The rule named by :data:`DEFAULT_RULE`, built with the run's f and seed."""

    f_param = "f"

    def __init__(self, f: int = 0, seed: int | None = None, **options: Any) -> None:
        self.rule = DEFAULT_RULE
        self.inner = make_rule(DEFAULT_RULE, f, seed=seed, **options)
        self.randomized = self.inner.randomized
        self.detects = self.inner.detects
        self.context = self.inner.context

    def decide(self, updates: np.ndarray, *, round: int = 0, **context: Any) -> Decision:
        return decide_in_context(self.inner, updates, round, **context)

    def commit(self) -> None:
        self.inner.commit()

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return self.inner.state()

    def restore(self, arrays: dict[str, np.ndarray], data: dict[str, Any]) -> None:
        self.inner.restore(arrays, data)

    def min_rows(self) -> int:
        return self.inner.min_rows()
