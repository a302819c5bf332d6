"""The Re-Shuffle round: messages, participant and PS state machines, in-process runner."""

from reshuffle.protocol.api import PreparedRound, ShuffleResult, ideal_shuffle, prepare, shuffle
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.participant import Participant, global_model_hash
from reshuffle.protocol.runner import Envelope, InProcessRunner
from reshuffle.protocol.server import RoundOutput, Server

__all__ = [
    "Envelope", "InProcessRunner", "Participant", "PreparedRound", "prepare", "RoundOutput", "RoundParams", "Server",
    "ShuffleResult", "global_model_hash", "ideal_shuffle", "shuffle",
]
