"""What every kind of evidence is built on: statements the accused signed, in one round, under the checker's
parameters (docs/protocol.md §9, "What evidence may read").

The PS assembles evidence, so a checker may read only what the accused signed (or what a hash it
signed fixes): every message is decoded, checked to be the accused's own and verified with its
roster key; all of them must belong to one round; and the accused's advertisement signs the
digest of the round parameters, so the parameters a checker is handed are the ones the accused
took part with. Each check refuses with :class:`~reshuffle.errors.Refused` (or the decoder's and
the signature's own errors), never anything else.
"""

from __future__ import annotations

from typing import TypeVar

from reshuffle.errors import Refused
from reshuffle.protocol import messages as msg
from reshuffle.protocol.params import RoundParams

M = TypeVar("M", bound=msg.Message)


def signed_by(raw: bytes, kind: type[M], pid: int, keys, ctx: msg.Context, what: str) -> M:
    """``raw`` decoded as a ``kind`` message that ``pid`` signed; Refused (or InvalidSignature) otherwise."""
    if pid not in keys:
        raise Refused(f"evidence names participant {pid}, who has no key in the roster")
    m = msg.decode_shared(raw, ctx)  # a pure function of the bytes; the signature is checked below all the same
    if not isinstance(m, kind) or m.sender != pid:
        raise Refused(f"evidence: {what} is not a {kind.TYPE.name} of participant {pid}")
    msg.verify(m, keys[pid])
    return m


def advert_of(raw: bytes, pid: int, keys, params: RoundParams, ctx: msg.Context) -> msg.Advertise:
    """The accused's signed advertisement, made under ``params`` (its signed digest of them)."""
    adv = signed_by(raw, msg.Advertise, pid, keys, ctx, "the advertisement")
    if adv.params_hash != params.digest():
        raise Refused(f"evidence: participant {pid} advertised under other round parameters than the checker's")
    return adv


def one_round(*ms: msg.Message) -> int:
    """The round T all of ``ms`` belong to; Refused if they mix rounds."""
    rounds = {m.T for m in ms}
    if len(rounds) != 1:
        raise Refused(f"evidence mixes messages of rounds {sorted(rounds)}")
    return rounds.pop()


__all__ = ["advert_of", "one_round", "signed_by"]
