"""``reshuffle_mod``: the client side of :class:`~reshuffle.flower.grid.ReshuffleGrid`, as a Flower mod.

``ClientApp(mods=[reshuffle_mod])``. Train messages carry the reserved record
(:mod:`reshuffle.flower.reserved`); the mod handles them by stage:

- ``train``: the app's own handler runs once, on the strategy's content with the
  reserved record removed. Its reply becomes ``d`` ring words
  (:mod:`reshuffle.flower.records`) inside a fresh
  :class:`~reshuffle.protocol.session.SessionState` kept in ``context.state``;
  the node answers only with its participant id, certificate and a signed claim.
- ``protocol``: each core message goes to the session; the node answers with the
  participant's replies.

A train message without the reserved record is refused: a node that runs this
mod never sends a train reply that is linked to it. Evaluate and query messages
pass through unchanged.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from copy import copy
from dataclasses import replace

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.app.message.message import make_message
from flwr.clientapp.typing import ClientAppCallable

from reshuffle.crypto.domain import label
from reshuffle.errors import ConfigError, DecodeError, ProtocolError, ReShuffleError
from reshuffle.flower import records, reserved
from reshuffle.flower.keys import MODE_SIMULATION, claim, node_identity, node_mode
from reshuffle.flower.reserved import RECORD, STAGE_PROTOCOL, STAGE_TRAIN, STATE
from reshuffle.protocol.participant import Participant, global_model_hash
from reshuffle.protocol.session import SessionState


def _train(msg: Message, ctx: Context, call_next: ClientAppCallable, rec: ConfigRecord) -> Message:
    T, d = reserved.uint(rec, "T"), reserved.uint(rec, "words", reserved.MAX_WORDS)
    mode = reserved.field(rec, "keys", str)
    if mode == MODE_SIMULATION and node_mode(ctx.node_config) != MODE_SIMULATION:
        raise ConfigError("the server asks for simulation keys, but this node has Re-Shuffle key files")
    ident = node_identity(ctx.node_config, ctx.run_id)
    content = RecordDict({k: v for k, v in msg.content.items() if k != RECORD})
    reply = call_next(make_message(copy(msg.metadata), content), ctx)
    if reply.has_error():
        raise ConfigError(f"the app's train handler failed: {reply.error.reason}")
    words = records.to_words(reply.content, d)
    state = SessionState.new(ident.pid, T, words, ident.key, ident.cert, ident.ca.verify_key,
                             global_model_hash(content.object_id.encode()))
    ctx.state[STATE] = ConfigRecord({"session": state.encode()})
    proof = claim(ident, ctx.run_id, T, msg.metadata.dst_node_id)
    return Message(RecordDict({RECORD: ConfigRecord({"pid": ident.pid, "cert": ident.cert.encode(),
                                                     "claim": proof})}), reply_to=msg)


# Participants kept alive between messages when this process lives on (simulation,
# in-process grids), keyed by a digest of the state they are in: the session's replay
# is then skipped. A fresh process (a SuperNode's ClientApp) finds nothing and replays.
_LIVE: OrderedDict[bytes, Participant] = OrderedDict()
_LIVE_MAX = 256


def _state_key(state: SessionState) -> bytes:
    # The 32-byte seed is fresh for every session, so it stands for the model and keys;
    # the inbox pins the position. Hashing the whole encoded state would rehash the model.
    h = hashlib.sha256(label("flower/live-session", state.pid, state.T) + state.seed)
    for m in state.inbox:
        h.update(hashlib.sha256(m).digest())
    return h.digest()


NODE_MIN_GROUP = "reshuffle-min-group"  # node_config: this node refuses anonymity groups smaller than this


def _min_group(node_config) -> int | None:
    if NODE_MIN_GROUP not in node_config:
        return None
    v = node_config[NODE_MIN_GROUP]
    if not isinstance(v, int) or isinstance(v, bool) or v < 2:
        raise ConfigError(f"node_config {NODE_MIN_GROUP} must be an int >= 2, got {v!r}")
    return v


def _advance(state: SessionState, data: bytes, min_group: int | None = None) -> tuple[SessionState, list[bytes]]:
    """``session.handle(state, data)``, reusing a live participant in exactly ``state`` if there is one."""
    p = _LIVE.pop(_state_key(state), None)
    if p is None:
        # A grouped participant if the round opens with the group assignment.
        p = state.participant(data, min_group)
    # session.handle's contract: the participant after the inbox handles the message, which joins the inbox.
    replies = p.handle(data)
    new = replace(state, inbox=state.inbox + (bytes(data),))
    _LIVE[_state_key(new)] = p
    while len(_LIVE) > _LIVE_MAX:
        _LIVE.popitem(last=False)
    return new, replies


def _protocol(msg: Message, ctx: Context, rec: ConfigRecord) -> Message:
    T = reserved.uint(rec, "T")
    if STATE not in ctx.state:
        raise DecodeError("protocol message before the train stage: no session in this node's context")
    state = SessionState.decode(ctx.state[STATE]["session"])  # type: ignore[arg-type]
    if state.T != T:
        raise DecodeError(f"protocol message for round {T}, this node's session is for round {state.T}")
    replies: list[bytes] = []
    min_group = _min_group(ctx.node_config)
    for data in reserved.data_list(rec):
        try:
            state, out = _advance(state, data, min_group)
        except ReShuffleError:
            out = []
        replies.extend(out)
    ctx.state[STATE] = ConfigRecord({"session": state.encode()})
    return Message(RecordDict({RECORD: ConfigRecord({"data": replies})}), reply_to=msg)


def reshuffle_mod(msg: Message, ctx: Context, call_next: ClientAppCallable) -> Message:
    """Run the Re-Shuffle client for train messages; pass every other message through."""
    if not reserved.is_train(msg.metadata.message_type):
        return call_next(msg, ctx)
    try:
        rec = reserved.record_of(msg.content)
        stage = reserved.field(rec, "stage", str)
    except ProtocolError as exc:
        raise ConfigError(
            f"train message without a valid Re-Shuffle record ({exc}): this node answers train messages "
            "only through ReshuffleGrid, never with a reply linked to it"
        ) from None
    if stage == STAGE_TRAIN:
        return _train(msg, ctx, call_next, rec)
    if stage == STAGE_PROTOCOL:
        return _protocol(msg, ctx, rec)
    raise DecodeError(f"unknown Re-Shuffle stage {stage!r}")
