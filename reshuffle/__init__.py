"""Re-Shuffle: anonymous raw-model upload for federated learning.

The PS recovers every participant's raw model but not who sent which, so it can
run any robust rule on them; see ``docs/protocol.md``.
"""

from reshuffle.errors import (
    BelowThreshold,
    ConfigError,
    ProtocolError,
    ReShuffleError,
)

from reshuffle.harness.api import PreparedRound, ShuffleResult, form_groups, ideal_shuffle, prepare, shuffle

__version__ = "0.1.0"

__all__ = [
    "BelowThreshold", "ConfigError", "PreparedRound", "ProtocolError", "ReShuffleError", "ShuffleResult",
    "__version__", "form_groups", "ideal_shuffle", "prepare", "shuffle",
]
