"""Ideal epoch pseudonyms: what a driver hands a pseudonymous rule where the protocol issues none yet.

A pseudonym is an opaque label that one participant keeps for an epoch (the
run, or a number of rounds) and that reveals nothing of who it is. The ideal
one is a keyed hash of (epoch, client) under a key the PS never holds, so two
epochs' labels of one client are unlinkable to the PS and every client has
exactly one label per epoch.
"""

from __future__ import annotations

import hashlib
import hmac

from reshuffle.crypto.domain import label
from reshuffle.errors import ConfigError

#: Bytes of a pseudonym.
SIZE = 16


def epoch_of(round: int, rounds: int = 0) -> int:
    """The epoch of round T ≥ 1 when epochs last ``rounds`` rounds (0: one epoch, the whole run)."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ConfigError(f"an epoch lasts a non-negative int of rounds (0: the run), got {rounds!r}")
    return 0 if rounds == 0 else (max(round, 1) - 1) // rounds


def run_key(seed: int) -> bytes:
    """A simulation's pseudonym key, a function of its seed (a simulated run is reproducible; the PS never sees it)."""
    return hashlib.sha256(label("sim-pseudonym-key", seed)).digest()


def ideal_pseudonym(key: bytes, epoch: int, client: int) -> bytes:
    """HMAC-SHA256(key, label("ideal-pseudonym", epoch, client)), first :data:`SIZE` bytes.

    >>> a = ideal_pseudonym(b"k" * 32, 0, 3)
    >>> len(a), a == ideal_pseudonym(b"k" * 32, 0, 3), a == ideal_pseudonym(b"k" * 32, 1, 3)
    (16, True, False)
    """
    if not isinstance(key, bytes) or len(key) < 16:
        raise ConfigError("a pseudonym key must be at least 16 bytes")
    return hmac.new(key, label("ideal-pseudonym", epoch, client), hashlib.sha256).digest()[:SIZE]


def run_pseudonym(seed: int, client: int, epoch: int = 0) -> bytes:
    """The ideal pseudonym a simulated run of ``seed`` gives ``client`` in ``epoch`` (one epoch: the run)."""
    return ideal_pseudonym(run_key(seed), epoch, client)
