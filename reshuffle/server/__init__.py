"""Server side of federated learning: detection and aggregation rules on unlinked models."""

from reshuffle.server.rules import (
    PRES, RULES, AllOf, Bucketing, Bulyan, CenteredClipping, Chain, Clip, CosineFilter, Decision, DnC, FedAvg,
    FLAME, FLTrust, GeometricMedian, Krum, Median, MultiKrum, NNM, Pipeline, PreAggregator, Rule, SignGuard,
    SignOutliers, TrimmedMean, check_pre_names, check_rule_name, make_pre, make_rule, pre_names, register_pre,
    register_rule, rule_names,
)

__all__ = [
    "AllOf", "Bucketing", "Bulyan", "CenteredClipping", "Chain", "check_pre_names", "check_rule_name", "Clip",
    "CosineFilter", "Decision", "DnC", "FedAvg", "FLAME", "FLTrust", "GeometricMedian", "Krum", "make_pre",
    "make_rule", "Median", "MultiKrum", "NNM", "Pipeline", "pre_names", "PreAggregator", "PRES",
    "register_pre", "register_rule", "Rule", "rule_names", "RULES", "SignGuard", "SignOutliers", "TrimmedMean",
]
