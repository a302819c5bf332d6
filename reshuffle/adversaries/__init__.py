"""Protocol adversaries: deviating participants and PS as plug-ins (see :mod:`.base`)."""

from reshuffle.adversaries import forger as _forger  # noqa: F401  (registers)
from reshuffle.adversaries import participants as _participants  # noqa: F401  (registers)
from reshuffle.adversaries import ps as _ps  # noqa: F401  (registers)
from reshuffle.adversaries import reorder as _reorder  # noqa: F401  (registers)
from reshuffle.adversaries import trust as _trust  # noqa: F401  (registers)
from reshuffle.adversaries.base import (
    Behaviour,
    ParticipantBehaviour,
    PSBehaviour,
    Verdict,
    adversary_names,
    make_adversary,
    register_adversary,
)
from reshuffle.adversaries.participants import ByteTamper

__all__ = [
    "Behaviour", "ByteTamper", "PSBehaviour", "ParticipantBehaviour", "Verdict", "adversary_names",
    "make_adversary", "register_adversary",
]
