"""Epoch pseudonyms as the FL round hands them to a pseudonymous rule: ideal ones, and the real ones' book.

A pseudonym is an opaque 16-byte label that one participant keeps for an epoch
(the run, or a number of rounds) and that reveals nothing of who it is. The
ideal one is a keyed hash of (epoch, client) under a key the PS never holds, so
two epochs' labels of one client are unlinkable to the PS and every client has
exactly one label per epoch. The real one is issued by the protocol
(:mod:`reshuffle.protocol.pseudonym`); :class:`EpochBook` keeps, across a
simulated run's rounds, the PS's epoch key and each client's pseudonym.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Mapping

from reshuffle.crypto.domain import label
from reshuffle.errors import ConfigError, ProtocolError
from reshuffle.protocol.pseudonym import EpochIssuer, Pseudonym

#: Bytes of a pseudonym.
SIZE = 16


@dataclass(frozen=True)
class EpochSchedule:
    """Which epoch a round is in: epochs of ``rounds`` rounds (0: one epoch, the whole run) from round ``first``.

    The one place a run turns round numbers into epochs: the pseudonym book rotates its key at
    :meth:`start`, and the federation's state (:mod:`reshuffle.run.federation`) names the epoch of a round.

    >>> s = EpochSchedule(rounds=3)
    >>> [s.epoch_of(T) for T in range(1, 8)], s.start(5), EpochSchedule(0, first=4).start(9)
    ([0, 0, 0, 1, 1, 1, 2], 4, 4)
    """

    rounds: int = 0
    first: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 0:
            raise ConfigError(f"an epoch lasts a non-negative int of rounds (0: the run), got {self.rounds!r}")
        if isinstance(self.first, bool) or not isinstance(self.first, int) or self.first < 1:
            raise ConfigError(f"an epoch schedule starts at a round number of at least 1, got {self.first!r}")

    def epoch_of(self, T: int) -> int:
        """The index of round T's epoch (0 for the epoch that opens at ``first``; rounds before it count as 0)."""
        return 0 if self.rounds == 0 else max(T - self.first, 0) // self.rounds

    def start(self, T: int) -> int:
        """The round that opens round T's epoch."""
        return self.first + self.epoch_of(T) * self.rounds


def run_base(now: float | None = None) -> int:
    """An epoch base above every earlier run's: the run's start in milliseconds, times 2^20 (room for 2^20
    rounds; below 2^63 until the year 2248).

    A node keeps its pseudonym on disk with its group; a new run of the same federation numbers its
    epochs above the ones it holds, so the node drops its pseudonym and asks for one of the new epoch
    (an epoch number seen again under another key is refused as a changed key)."""
    import time

    return int(1000 * (time.time() if now is None else now)) << 20


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


class EpochBook:
    """What a simulated federation keeps between rounds for real pseudonyms: the PS's epoch key with its
    issuance record, and each client's pseudonym (the simulator plays both sides; neither sees the other's).

    Parameters
    ----------
    group : the protocol's group.
    rounds : rounds per epoch (0: one epoch, the run or the driver's life).
    base : added to every epoch number (a deployment passes :func:`run_base`, so that a new run's epochs
        are numbered above an earlier run's, whose pseudonyms its nodes may keep on disk).
    """

    def __init__(self, group: str = "ristretto255", rounds: int = 0, base: int = 0) -> None:
        EpochSchedule(rounds)  # checks rounds
        if isinstance(base, bool) or not isinstance(base, int) or not 0 <= base < 2**63:
            raise ConfigError(f"an epoch base is an int in [0, 2^63), got {base!r}")
        self.group, self.rounds, self.base = group, rounds, base
        #: The book's epochs: every ``rounds`` rounds from the first round it serves (None before one).
        self.schedule: EpochSchedule | None = None
        self._issuer: EpochIssuer | None = None
        self.held: dict[int, Pseudonym] = {}

    def __repr__(self) -> str:
        return f"EpochBook(group={self.group!r}, rounds={self.rounds}, clients={len(self.held)})"

    def epoch(self, T: int) -> int:
        """The protocol's epoch number of round T: the base plus the round that opens T's epoch."""
        if isinstance(T, bool) or not isinstance(T, int) or T < 1:
            raise ConfigError(f"round numbers start at 1, got {T!r}")
        if self.schedule is None or T < self.schedule.first:
            return self.base + T  # the round a fresh book would open its first epoch with
        return self.base + self.schedule.start(T)

    def issuer(self, T: int) -> EpochIssuer:
        """The PS's epoch key of round T: the current one, or a fresh one when T opens an epoch.

        An epoch is numbered by the round that opens it (:class:`EpochSchedule` from the first round
        this book serves). A book started afresh (a resumed Flower ServerApp without its checkpoint's
        book) opens a new epoch whose number exceeds every earlier one, since round numbers only go up;
        members then drop their old pseudonyms and ask for new ones.
        """
        if self.schedule is None or T < self.schedule.first:
            self.epoch(T)  # checks T
            self.schedule = EpochSchedule(self.rounds, T)
        number = self.epoch(T)
        if self._issuer is None or self._issuer.epoch != number:
            self._issuer = EpochIssuer(self.group, number)
        return self._issuer

    def current(self, client: int, T: int) -> Pseudonym | None:
        """The pseudonym ``client`` holds for round T's epoch (None: none, or one of an older epoch, which its
        participant drops and replaces in round T)."""
        nym = self.held.get(client)
        return nym if nym is not None and nym.epoch == self.epoch(T) else None

    def pseudonyms(self, clients) -> dict[int, Pseudonym | None]:
        """Each client's pseudonym to hand its participant (None: it has none yet)."""
        return {i: self.held.get(i) for i in clients}

    def keep(self, held: Mapping[int, Pseudonym | None]) -> None:
        """Store what each client's participant holds after a round (a participant that got none keeps
        nothing new)."""
        self.held.update({i: nym for i, nym in held.items() if nym is not None})

    def state(self) -> dict:
        """JSON data for a checkpoint (hex of the explicit encodings; no pickle)."""
        return {"group": self.group, "rounds": self.rounds, "base": self.base,
                "first": None if self.schedule is None else self.schedule.first,
                "issuer": None if self._issuer is None else self._issuer.encode().hex(),
                "held": {str(i): nym.encode().hex() for i, nym in sorted(self.held.items())}}

    def restore(self, data: Mapping) -> None:
        """Continue from :meth:`state`'s data, the same book: its base, schedule, key and names (ConfigError if
        it is for another group or epoch length, or does not decode)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"checkpoint pseudonyms are not a JSON object: {type(data).__name__}")
        if data.get("group") != self.group or data.get("rounds") != self.rounds:
            raise ConfigError(f"checkpoint pseudonyms are for group {data.get('group')!r} with epochs of "
                              f"{data.get('rounds')!r} rounds, this run uses {self.group!r} and {self.rounds}")
        try:
            raw = data.get("issuer")
            issuer = None if raw is None else EpochIssuer.decode(bytes.fromhex(raw))
            held = {int(i): Pseudonym.decode(bytes.fromhex(h)) for i, h in data.get("held", {}).items()}
        except (ProtocolError, ValueError, TypeError, AttributeError) as exc:
            raise ConfigError(f"checkpoint pseudonyms do not decode: {exc}") from None
        base = data.get("base", 0)
        if isinstance(base, bool) or not isinstance(base, int) or not 0 <= base < 2**63:
            raise ConfigError(f"checkpoint pseudonyms: epoch base {base!r}")
        first = data.get("first")
        if first is None and issuer is not None:
            first = issuer.epoch - base  # saved before the schedule was: its current epoch opened there
        schedule = None if first is None else EpochSchedule(self.rounds, first)
        self._issuer, self.held, self.base, self.schedule = issuer, held, base, schedule
