"""The Re-Shuffle round as a deployment runs it: messages, the participant and PS phase tables.

The in-process drivers (``shuffle``, ``prepare``, the runners) are in :mod:`reshuffle.harness`.
"""

from reshuffle.protocol.driver import PS, make_ps
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.participant import Participant, global_model_hash
from reshuffle.protocol.server import RoundOutput, Server

__all__ = ["PS", "Participant", "RoundOutput", "RoundParams", "Server", "global_model_hash", "make_ps"]
