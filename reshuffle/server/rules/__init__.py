"""Detection and aggregation rules on the PS's (n, d) array of unlinked updates.

Register your own rule in a few lines::

    import numpy as np
    from reshuffle.server.rules import Rule, register_rule

    @register_rule("shortest-half")
    class ShortestHalf(Rule):
        def select(self, U):
            norms = np.linalg.norm(U, axis=1)
            return sorted(np.argsort(norms)[: (len(U) + 1) // 2].tolist())

then ``reshuffle simulate --plugin mymodule --rule shortest-half`` or
``make_rule("shortest-half", f)``.
"""

from reshuffle.server.rules.base import (
    Decision, Rule, check_updates, clip_factors, cosine_to, decide_in_context, pairwise_sq_distances, round_rng,
)
from reshuffle.server.rules.compose import AllOf, Chain, Composite, Mixed, Pipeline, PreAggregator, with_f
from reshuffle.server.rules.registry import (
    JOIN, THEN, check_pre_names, check_rule_name, make_pre, make_rule, pre_names, register_pre, register_rule,
    rule_names,
)
from reshuffle.server.rules.coordinate import FedAvg, Median, TrimmedMean
from reshuffle.server.rules.krum import Bulyan, Krum, MultiKrum, krum_scores
from reshuffle.server.rules.cosine import CosineFilter, FLTrust
from reshuffle.server.rules.clipping import CenteredClipping
from reshuffle.server.rules.geomed import GeometricMedian
from reshuffle.server.rules.dnc import DnC
from reshuffle.server.rules.flame import FLAME
from reshuffle.server.rules.cone import ConeClip
from reshuffle.server.rules.bounded import ClipTrim, NormBound, RobustLR
from reshuffle.server.rules.default import DEFAULT_RULE, Default
from reshuffle.server.rules.signguard import SignGuard, SignOutliers
from reshuffle.server.rules.pre import NNM, Bucketing, Clip
from reshuffle.server.rules.history import FLDetector, FoolsGold, History, HistoryRule, InfluenceBudget, Kinship
from reshuffle.server.rules.inspect import AlignIns, FreqFed
from reshuffle.server.rules.hammer import HammerAnvil, HammerSignals
from reshuffle.server.rules.signals import Concentration, LabelGroups, Persistence

#: The built-in rule names (plugins add to :func:`rule_names`, not to this tuple).
RULES = tuple(rule_names())
#: The built-in pre-aggregator names.
PRES = tuple(pre_names())

__all__ = [
    "AlignIns", "AllOf", "Bucketing", "Composite", "decide_in_context", "FLDetector", "FoolsGold", "FreqFed",
    "Concentration", "HammerAnvil", "HammerSignals", "History", "LabelGroups", "Persistence", "HistoryRule", "InfluenceBudget", "Kinship", "Bulyan", "CenteredClipping", "Chain", "ClipTrim", "ConeClip", "DEFAULT_RULE", "Default",
    "check_pre_names", "check_rule_name", "check_updates", "Clip", "clip_factors", "cosine_to", "CosineFilter",
    "Decision", "DnC", "FedAvg", "FLAME", "FLTrust", "GeometricMedian", "JOIN", "Krum", "krum_scores", "make_pre",
    "make_rule", "Median", "Mixed", "MultiKrum", "NNM", "NormBound", "pairwise_sq_distances", "Pipeline",
    "pre_names", "PreAggregator", "PRES", "register_pre", "register_rule", "RobustLR", "round_rng", "Rule",
    "rule_names", "RULES", "SignGuard", "SignOutliers", "THEN", "TrimmedMean", "with_f",
]
