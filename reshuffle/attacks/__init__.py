"""Poisoning attacks as small callables, selected by name.

Register your own in a few lines::

    import numpy as np
    from reshuffle.attacks import Attack, register_attack

    @register_attack("zero")
    class Zero(Attack):
        def __call__(self, observed, m, rng):
            return np.zeros((m, observed.shape[1]))

then ``reshuffle simulate --attack zero`` (after importing the module, e.g.
via ``--plugin mymodule``) or ``make_attack("zero")``.
"""

from reshuffle.attacks.base import (
    Attack, RoundView, attack_names, check_observed, check_view, make_attack, register_attack,
)
from reshuffle.attacks.backdoor import DBA, Backdoor, BadNets, ModelReplacement
from reshuffle.attacks.lab import Lab, Score
from reshuffle.attacks.adaptive import AGRTailored, ConstrainScale, MimicSpread, RuleAware, SignMatch
from reshuffle.attacks.fang import FangKrum, FangTrimmedMean
from reshuffle.attacks.framing import FrameBan, FrameClass
from reshuffle.attacks.mimic import Mimic
from reshuffle.attacks.mechanism import ClipSparse, TrimEdge
from reshuffle.attacks.objective import MaxDev, MaxProjBackdoor, NeurotoxinMaxProj, ObjectiveAttack
from reshuffle.attacks.omniscient import ALIE, IPM, MinMax, MinSum
from reshuffle.attacks.patient import (
    BudgetEdge, ConcentrationEdge, LabelMimic, Saturate, SaturateCover, Sleeper, SlowDrift,
)
from reshuffle.attacks.poisonedfl import PoisonedFL, PoisonedFLDrift
from reshuffle.attacks.simple import GaussianNoise, LabelFlip, NoAttack, Scaling, SignFlip

__all__ = [
    "AGRTailored", "ALIE", "Attack", "Backdoor", "BadNets", "BudgetEdge", "ConcentrationEdge", "LabelMimic",
    "PoisonedFL", "PoisonedFLDrift", "Saturate", "SaturateCover", "Sleeper",
    "SlowDrift", "ClipSparse", "ConstrainScale", "DBA", "FangKrum",
    "FangTrimmedMean", "FrameBan", "FrameClass", "GaussianNoise", "IPM", "Lab", "LabelFlip", "MaxDev", "MaxProjBackdoor", "MinMax", "MinSum",
    "Mimic", "MimicSpread", "ModelReplacement", "NeurotoxinMaxProj", "NoAttack", "ObjectiveAttack", "RoundView",
    "RuleAware", "Scaling", "Score", "SignFlip", "SignMatch", "TrimEdge", "attack_names", "check_observed",
    "check_view", "make_attack", "register_attack",
]
