"""Detection and aggregation rules on the PS's (n, d) array of unlinked updates."""

from __future__ import annotations

from typing import Callable

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import Rule, check_updates, cosine_to, pairwise_sq_distances
from reshuffle.server.rules.coordinate import FedAvg, Median, TrimmedMean
from reshuffle.server.rules.cosine import CosineFilter, FLTrust
from reshuffle.server.rules.krum import Krum, MultiKrum, krum_scores

RULES = ("fedavg", "krum", "multi-krum", "cosine", "fltrust", "median", "trimmed-mean")


def make_rule(name: str, f: int, reference: Callable[[], np.ndarray] | None = None, **options) -> Rule:
    """The rule called ``name`` (a CLI name), assuming ``f`` attackers.

    ``reference`` is FLTrust's server update g₀ (required for ``fltrust`` only).
    """
    if name == "fedavg":
        return FedAvg(**options)
    if name == "krum":
        return Krum(f, **options)
    if name == "multi-krum":
        return MultiKrum(f, **options)
    if name == "cosine":
        return CosineFilter(**options)
    if name == "fltrust":
        if reference is None:
            raise ConfigError("the fltrust rule needs a reference update (the server's root dataset)")
        return FLTrust(reference, **options)
    if name == "median":
        return Median(**options)
    if name == "trimmed-mean":
        return TrimmedMean(f, **options)
    raise ConfigError(f"unknown rule {name!r}; choose one of {', '.join(RULES)}")


__all__ = [
    "CosineFilter", "FLTrust", "FedAvg", "Krum", "Median", "MultiKrum", "RULES", "Rule", "TrimmedMean",
    "check_updates", "cosine_to", "krum_scores", "make_rule", "pairwise_sq_distances",
]
