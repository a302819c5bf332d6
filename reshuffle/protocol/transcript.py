"""The transcript hash h_m and the consistency step (docs/protocol.md §6.2–6.3).

Both sides absorb the same PS broadcasts in the same order: RoundStart, the
advertisement list, U_0 with the OT table, and per invocation the published
counts and the certified U_m. ``h_m`` is the hash when the mask request of
invocation m arrives; it keys every PRG stream of that invocation, so a
participant shown a forked view masks with keys no honest partner uses and any
sum it is in comes out uniformly random.

Before revealing anything for invocation m a participant signs
``(T, m, U_m, h_m)`` (at most once per (T, m)) and needs t valid signatures of
distinct U_m members on the identical statement (:func:`check_certificate`).
Two certified statements would share 2t − N > c signers, one of them honest.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Mapping

from reshuffle.crypto.domain import label
from reshuffle.crypto.signatures import VerifyKey
from reshuffle.errors import InvalidSignature, Refused
from reshuffle.protocol.messages import consent_statement
from reshuffle.wire import Writer

CONSENT_CONTEXT = "consent"


class Transcript:
    """A running hash over PS broadcasts; ``h`` is the current value."""

    __slots__ = ("h",)

    def __init__(self, T: int) -> None:
        self.h = hashlib.sha256(label("transcript/start", T)).digest()

    @classmethod
    def at(cls, h: bytes) -> "Transcript":
        """A transcript that continues from the hash ``h`` (a participant keeps only h between messages)."""
        tx = cls.__new__(cls)
        tx.h = h
        return tx

    def absorb(self, tag: str, data: bytes) -> bytes:
        self.h = hashlib.sha256(
            label("transcript/" + tag, len(data)) + self.h + bytes(data)
        ).digest()
        return self.h

    # The pieces both sides (and a third party checking count evidence) absorb, encoded in one place.
    def absorb_counts(self, m: int, counts, excluded=()) -> bytes:
        """Invocation m's mask request: the counts of iteration m-1 and the dealers excluded (m = 1)."""
        return self.absorb("counts", Writer().u32(m).u32_list(counts).u32_list(excluded).bytes())

    def absorb_certified(self, m: int, online) -> bytes:
        return self.absorb("certified", Writer().u32(m).u32_list(online).bytes())

    def absorb_open(self, r: int, reason: str) -> bytes:
        return self.absorb("open", Writer().u32(r).var(reason.encode()).bytes())


def check_certificate(
    T: int,
    m: int,
    online: Iterable[int],
    h: bytes,
    signatures: Iterable[tuple[int, bytes]],
    keys: Mapping[int, VerifyKey],
    t: int,
    *,
    every: bool = False,
) -> list[int]:
    """Signers whose signature on ``(T, m, U_m, h)`` verifies; Refused if fewer than t distinct U_m members.

    The check stops at the first t valid signatures (t members certifying one view is the whole
    claim; the honest PS relays every consent it got, so checking past t only costs verifications);
    ``every=True`` checks them all.
    """
    members = set(online)
    stmt = consent_statement(T, m, sorted(members), h)
    good: list[int] = []
    for pid, sig in signatures:
        if len(good) >= t and not every:
            break
        if pid not in members or pid in good:
            continue
        try:
            keys[pid].verify(CONSENT_CONTEXT, stmt, sig)
        except (InvalidSignature, KeyError):
            continue
        good.append(pid)
    if len(good) < t:
        raise Refused(
            f"certificate for U_{m} has {len(good)} valid signatures on this participant's view, threshold t={t}"
        )
    return sorted(good)


__all__ = ["CONSENT_CONTEXT", "Transcript", "check_certificate"]
