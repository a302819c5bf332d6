"""Re-Shuffle on Flower: a drop-in for any Message-API app, and the project's own apps.

``ReshuffleGrid`` (server side) wraps the Grid a ServerApp receives; ``reshuffle_mod``
(client side) goes into ``ClientApp(mods=[...])``. Every train reply then reaches
the strategy raw and bit-exact, unlinked from its sender. See ``docs/flower.md``.
"""

from reshuffle.flower.grid import ReshuffleGrid, RoundReport
from reshuffle.flower.mod import reshuffle_mod

__all__ = ["ReshuffleGrid", "RoundReport", "reshuffle_mod"]
