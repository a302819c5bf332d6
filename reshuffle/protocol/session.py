"""A participant whose whole state is bytes, for drivers that keep no objects between messages.

Flower, for one, may run each message of a ClientApp in a fresh process and
hands it only its ``Context``. :class:`SessionState` is what such a driver
stores there: the participant's inputs, namely its identity, model, H(W_g^T), a
32-byte secret seed for its randomness and every message received so far. The
model is empty while the node has not trained yet: the offline steps run
without it, and :meth:`SessionState.with_model` adds it before the upload.
:func:`handle` rebuilds the :class:`Participant` by replaying the inbox through
the same seeded PRG (the state machine is deterministic given its randomness),
then handles the new message. Replaying costs the earlier phases' work again;
for the 8 messages of a round that is cheap next to training.

Where the driver's process lives on between messages (a simulation, an
in-process grid), :class:`LiveSessions` keeps the participant that the replay
would rebuild, keyed by a digest of the state it is in, so the replay is skipped;
it is bounded, and a state it does not hold is replayed. The session's state is
always the bytes: the memo only saves work.

The seed determines every secret of the round (keys, shares, masks): it must
stay on the node, like the signing key kept beside it, and is drawn from OS
randomness for every round. ``pseudonym`` is the encoded epoch pseudonym record the
node holds from an earlier round (docs/protocol.md §7.3: pending or with z, with its
group mates' commitments), handed to the participant before ROUND_START; empty if it
holds none.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from reshuffle.crypto.domain import label
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.signatures import Certificate, CertificateAuthority, SigningKey, VerifyKey
from reshuffle.errors import ConfigError, DecodeError
from reshuffle.protocol.params import TrustFloors
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.pseudonym import MAX_RECORD_BYTES, Pseudonym
from reshuffle.protocol.schedule import max_inbox
from reshuffle.wire import Parser, Writer

_VERSION = 3
_DTYPES = {0: "<f4", 1: "<u4"}  # model kind: float32 model, or ring words (payload "words")
_MAX_R = 64  # RoundParams bounds R_max


_MAX_INBOX = max_inbox(_MAX_R)  # before RoundStart is known; more is a corrupt state
_SEED_LABEL = b"session"


def _model_bytes(model: np.ndarray, words: bool) -> bytes:
    return np.ascontiguousarray(model, dtype=_DTYPES[int(words)]).tobytes()


@dataclass(frozen=True)
class SessionState:
    """Everything a participant needs to resume; ``encode``/``decode`` are exact inverses."""

    pid: int
    T: int
    # W_i^T, little-endian float32 or (``words``) uint32 ring words; empty before training
    model: bytes = field(repr=False)
    signing_key: bytes = field(repr=False)  # PEM
    cert: bytes
    ca_key: bytes
    global_hash: bytes
    seed: bytes = field(repr=False)
    inbox: tuple[bytes, ...] = ()
    words: bool = False
    pseudonym: bytes = field(default=b"", repr=False)  # Pseudonym.encode() of the record it holds, or empty

    @classmethod
    def new(
        cls, pid: int, T: int, model: np.ndarray | None, signing_key: SigningKey, cert: Certificate,
        ca_key: VerifyKey, global_hash: bytes, seed: bytes | None = None, *, words: bool | None = None,
        pseudonym: Pseudonym | None = None,
    ) -> "SessionState":
        """A fresh round; ``seed`` defaults to 32 bytes of OS randomness; a uint32 model is ring words.

        ``model=None`` starts the round before training (``words`` then says the model's kind);
        ``pseudonym`` is the one the node holds from an earlier round of the epoch.
        """
        seed = secrets.token_bytes(32) if seed is None else seed
        if len(seed) != 32:
            raise DecodeError(f"session seed must be 32 bytes, got {len(seed)}")
        if model is None:
            if words is None:
                raise ConfigError("a session without a model needs words=True or False")
            raw = b""
        else:
            words = np.asarray(model).dtype == np.uint32
            raw = _model_bytes(model, words)
        return cls(pid, T, raw, signing_key.to_pem(), cert.encode(), ca_key.to_bytes(), global_hash, seed,
                   words=bool(words), pseudonym=b"" if pseudonym is None else pseudonym.encode())

    @property
    def has_model(self) -> bool:
        return bool(self.model)

    def with_model(self, model: np.ndarray) -> "SessionState":
        """This state with W_i^T added once training ended (once only, of the session's kind)."""
        if self.has_model:
            raise ConfigError(f"participant {self.pid} already has its model for round {self.T}")
        if (np.asarray(model).dtype == np.uint32) != self.words:
            raise ConfigError(f"session expects {'ring words' if self.words else 'a float32 model'}, "
                              f"got {np.asarray(model).dtype}")
        raw = _model_bytes(model, self.words)
        if not raw:
            raise ConfigError("a model has at least one coordinate")
        return replace(self, model=raw)

    def encode(self) -> bytes:
        w = Writer().u8(_VERSION).u8(int(self.words)).u32(self.pid).u64(self.T)
        w.var(self.model).var(self.signing_key).var(self.cert).var(self.ca_key).var(self.global_hash)
        w.fixed(self.seed, 32).u32(len(self.inbox))
        for m in self.inbox:
            w.var(m)
        return w.var(self.pseudonym).bytes()

    @classmethod
    def decode(cls, data: bytes) -> "SessionState":
        p = Parser(data, "participant session")
        if (v := p.u8("version")) != _VERSION:
            raise DecodeError(f"participant session version {v}, expected {_VERSION}")
        if (kind := p.u8("model kind")) not in _DTYPES:
            raise DecodeError(f"participant session model kind {kind}, expected one of {sorted(_DTYPES)}")
        pid, T = p.u32("pid"), p.u64("T")
        fields = [p.var(name) for name in ("model", "signing_key", "cert", "ca_key", "global_hash")]
        seed = p.fixed(32, "seed")
        n = p.u32("inbox length")
        if n > _MAX_INBOX:
            raise DecodeError(f"participant session holds {n} messages, at most {_MAX_INBOX}")
        inbox = tuple(p.var("inbox message") for _ in range(n))
        nym = p.var("pseudonym", MAX_RECORD_BYTES)
        p.finish()
        if nym:
            Pseudonym.decode(nym)  # checked now: a corrupt one fails here, not in the middle of a round
        if len(fields[0]) % 4:
            raise DecodeError("session model is not a whole number of float32 values")
        return cls(pid, T, *fields, seed, inbox, words=bool(kind), pseudonym=nym)

    def participant(self, first: bytes | None = None, min_group: int | None = None,
                    floors: TrustFloors | None = None, membership=None) -> Participant:
        """A participant in the state right after the inbox (replayed), with its own ``floors`` on the
        round parameters (default :class:`TrustFloors`()).

        The participant is a :class:`~reshuffle.protocol.grouped.GroupedParticipant`, refusing
        groups smaller than ``min_group`` (default: the least group its floors take part in) and
        every round bound to no group, unless its floors opt out (``ungrouped``): it is then a
        grouped participant only for a round whose first PS message (the inbox's, else ``first``,
        the message about to be handled) is GROUP_OPEN or binds a group. With
        ``membership`` (its stable group, from an earlier round) it is always a grouped
        participant of that group: it refuses a new assignment and any other roster.
        """
        from reshuffle.protocol.grouped import GroupedParticipant
        from reshuffle.protocol.groups import MAX_ATTEMPTS
        from reshuffle.protocol.messages import MsgType, peek_type

        ca = CertificateAuthority.verifier(VerifyKey.from_bytes(self.ca_key))
        opening = self.inbox[0] if self.inbox else first
        # A participant whose floors ask for a stable group (the default) is always a grouped one: it
        # refuses a round bound to no group, so a PS that never forms groups gets nothing from it.
        grouped = membership is not None or not (floors or TrustFloors()).ungrouped \
            or (opening is not None and peek_type(opening) is MsgType.GROUP_OPEN) \
            or (opening is not None and _binds_group(opening))
        model = np.frombuffer(self.model, dtype=_DTYPES[int(self.words)]).astype(
            np.uint32 if self.words else np.float32) if self.has_model else None
        args = (
            self.pid, self.T, model,
            SigningKey.from_pem(self.signing_key), Certificate.decode(self.cert), ca, self.global_hash,
            SeededRandom(self.seed, _SEED_LABEL),
        )
        if grouped:
            p = GroupedParticipant(*args, min_group=min_group, floors=floors, membership=membership)
        else:
            p = Participant(*args, floors=floors)
        if self.pseudonym:
            getattr(p, "inner", p).hold_pseudonym(Pseudonym.decode(self.pseudonym))
        for m in self.inbox:
            p.handle(m)
        extra = 4 * MAX_ATTEMPTS if grouped else 0  # open, list, certificate, reveals per attempt
        if p.params is not None and len(self.inbox) > max_inbox(p.params.R_max) + extra:
            raise DecodeError(
                f"participant session holds {len(self.inbox)} messages, a round with R_max={p.params.R_max} "
                f"has at most {max_inbox(p.params.R_max)}"
            )
        return p


def _binds_group(data: bytes) -> bool:
    """A ROUND_START that binds a stable group's assignment: a node that holds no group refuses it (as a
    grouped participant with no assignment does), since it cannot check the roster against its group."""
    from reshuffle.errors import ProtocolError
    from reshuffle.protocol import messages as msg

    if msg.peek_type(data) is not msg.MsgType.ROUND_START:
        return False
    try:
        return bool(msg.decode(data, msg.Context()).params.assignment)
    except ProtocolError:
        return False  # the participant refuses it itself


def handle(state: SessionState, data: bytes, floors: TrustFloors | None = None) -> tuple[SessionState, list[bytes]]:
    """Process one message from the PS with the participant's ``floors``: (the new state, the replies)."""
    replies = state.participant(data, floors=floors).handle(data)
    return replace(state, inbox=state.inbox + (bytes(data),)), replies


class LiveSessions:
    """Participants kept alive between messages, keyed by a digest of the session state they are in.

    A memo of :func:`handle`'s replay for drivers whose process lives on: :meth:`advance`
    gives the same new state and replies as ``handle`` (with the participant's floors and
    stable group), reusing the participant that is exactly in ``state`` when one is held.
    At most ``size`` are held, the least recently stored dropped first; a fresh process holds
    none and replays. The key hashes the 32-byte seed (fresh for every session, so it stands
    for the keys) and every inbox message; the model joins participant and state together.
    """

    def __init__(self, size: int = 256) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"live sessions are bounded by a non-negative int, got {size!r}")
        self.size = size
        self._held: OrderedDict[bytes, Participant] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    @staticmethod
    def key(state: SessionState) -> bytes:
        h = hashlib.sha256(label("session/live", state.pid, state.T) + state.seed)
        for m in state.inbox:
            h.update(hashlib.sha256(m).digest())
        return h.digest()

    def take(self, state: SessionState) -> Participant | None:
        """The participant held in exactly ``state`` (no longer held), or None."""
        return self._held.pop(self.key(state), None)

    def put(self, state: SessionState, p) -> None:
        """Hold ``p`` as the participant in ``state``."""
        self._held[self.key(state)] = p
        while len(self._held) > self.size:
            self._held.popitem(last=False)

    def clear(self) -> None:
        self._held.clear()

    def advance(self, state: SessionState, data: bytes, min_group: int | None = None,
                floors: TrustFloors | None = None, membership=None):
        """(the new state, the replies, the participant) after ``data``: :func:`handle`, replay skipped if held."""
        p = self.take(state)
        if p is None:
            p = state.participant(data, min_group, floors, membership=membership)
        # handle's contract: the participant after the inbox handles the message, which joins the inbox.
        replies = p.handle(data)
        new = replace(state, inbox=state.inbox + (bytes(data),))
        self.put(new, p)
        return new, replies, p
