"""Server side of federated learning: detection and aggregation rules on unlinked models."""

from reshuffle.server.rules import (
    RULES, CosineFilter, FedAvg, FLTrust, Krum, Median, MultiKrum, Rule, TrimmedMean, make_rule,
)

__all__ = ["RULES", "CosineFilter", "FLTrust", "FedAvg", "Krum", "Median", "MultiKrum", "Rule", "TrimmedMean", "make_rule"]
