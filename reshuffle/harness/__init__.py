"""In-process drivers of the round: ``shuffle``, ``prepare``, the sequential and parallel runners.

They only carry bytes between :class:`~reshuffle.protocol.Participant` and
:class:`~reshuffle.protocol.Server`; a deployment (Flower) replaces them, never the protocol.
"""

from reshuffle.harness.api import (
    PreparedRound, ShuffleOptions, ShuffleResult, form_groups, ideal_shuffle, prepare, shuffle,
)
from reshuffle.harness.runner import Envelope, InProcessRunner

__all__ = ["Envelope", "InProcessRunner", "PreparedRound", "ShuffleOptions", "ShuffleResult", "form_groups", "ideal_shuffle", "prepare",
           "shuffle"]
