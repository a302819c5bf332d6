"""``reshuffle_mod``: the client side of :class:`~reshuffle.flower.grid.ReshuffleGrid`, as a Flower mod.

``ClientApp(mods=[reshuffle_mod])``. Train messages carry the reserved record
(:mod:`reshuffle.flower.reserved`); the mod handles them by stage:

- ``claim``: the round opens before anyone trains. A node claims each round number
  once: a claim for a round at or below the last one it claimed is refused, so the
  PS cannot run a round twice and difference the sums. The node starts a fresh
  :class:`~reshuffle.protocol.session.SessionState` without a model, kept in
  ``context.state``, bound to the H(W_g^T) the record announces and holding the
  node's epoch pseudonym from an earlier round, and answers only with its
  participant id, certificate and a signed claim.
- ``protocol``: each core message goes to the session; the node answers with the
  participant's replies. The offline steps (setup, shares, OT, reservation) run so.
- Stable groups: once an assignment has formed this node's anonymity group, the node keeps
  it in ``context.state`` (:data:`~reshuffle.flower.reserved.GROUP`: the group's bytes and the
  round that formed it). Every later round is a round of exactly that group: the node refuses
  a new assignment, a ROUND_START whose roster or binding differs, and an online set that
  lacks a member of its group.
  Its participant's epoch pseudonym record (docs/protocol.md §7.3: the request, drawn
  before the message that carries it, then z and the group mates' commitments) is kept
  in ``context.state`` for the epoch's next rounds. Both are also kept in the node's
  state folder (:data:`NODE_STATE_DIR`, on by default), one file per federation (the CA
  key and the PS key it certifies) and participant, written before the replies leave: a
  restarted node reads them back and asks again only with the element it sent, and a
  new run of the federation cannot draw it into a new group.
- The node takes part only in rounds bound to its stable group (or the assignment that
  forms it), unless its own config opts in to ungrouped rounds (``reshuffle-ungrouped``),
  and refuses an assignment listing fewer than two groups' worth of candidates.
- ``train``: the strategy's content arrives with the first message that needs the
  model (the upload). The mod checks that the content hashes to the announced
  H(W_g^T), runs the app's handler once on it, turns the reply into ``d`` ring
  words (:mod:`reshuffle.flower.records`), hands them to the session and then
  handles the core's messages as ``protocol`` does.

A train message without the reserved record is refused: a node that runs this
mod never sends a train reply that is linked to it. Evaluate and query messages
pass through unchanged.

The round parameters are the server's to announce; the node's own bounds on them come
from its node config (:data:`NODE_SETTINGS`), never from the server, and the node refuses
a round beyond them (docs/protocol.md §11, docs/flower.md).
"""

from __future__ import annotations

import hashlib
import os
from copy import copy
from dataclasses import replace
from pathlib import Path

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.app.message.message import make_message
from flwr.clientapp.typing import ClientAppCallable

from reshuffle.crypto.domain import label
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID
from reshuffle.errors import ConfigError, DecodeError, ProtocolError, Refused, ReShuffleError
from reshuffle.flower import records, reserved
from reshuffle.flower.keys import MODE_SIMULATION, claim, node_identity, node_mode
from reshuffle.flower.reserved import (
    GROUP,
    LEDGER,
    PSEUDONYM,
    RECORD,
    STAGE_CLAIM,
    STAGE_PROTOCOL,
    STAGE_TRAIN,
    STATE,
)
from reshuffle.protocol import messages as msg_types
from reshuffle.protocol.grouped import GroupedParticipant
from reshuffle.protocol.groups import Membership
from reshuffle.protocol.params import TrustFloors
from reshuffle.protocol.participant import global_model_hash
from reshuffle.protocol.pseudonym import MAX_RECORD_BYTES, Pseudonym
from reshuffle.protocol.session import LiveSessions, SessionState
from reshuffle.wire import Parser, Writer

HASH_BYTES = 32


def _claim(msg: Message, ctx: Context, rec: ConfigRecord) -> Message:
    T = reserved.uint(rec, "T")
    last = _last_round(ctx)
    if last is not None and T <= last:
        # Running a round twice would let the PS difference the two sums, or see which row a node's
        # absence removes: a node takes part in each round number once (docs/protocol.md §10).
        raise Refused(f"claim for round {T}: this node took part in round {last} already; a round runs once")
    reserved.uint(rec, "words", reserved.MAX_WORDS)
    node_trust(ctx.node_config)  # a node whose own bounds are misconfigured takes part in nothing
    mode = reserved.field(rec, "keys", str)
    global_hash = reserved.field(rec, "hash", bytes)
    if len(global_hash) != HASH_BYTES:  # type: ignore[arg-type]
        raise DecodeError(f"{RECORD!r} field 'hash' has {len(global_hash)} bytes, expected {HASH_BYTES}")
    if mode == MODE_SIMULATION and node_mode(ctx.node_config) != MODE_SIMULATION:
        raise ConfigError("the server asks for simulation keys, but this node has Re-Shuffle key files")
    ident = node_identity(ctx.node_config, ctx.run_id)
    state = SessionState.new(ident.pid, T, None, ident.key, ident.cert, ident.ca.verify_key,
                             global_hash, words=True, pseudonym=_held(ctx))  # type: ignore[arg-type]
    _store(ctx, state)
    ctx.state[LEDGER] = ConfigRecord({"last-round": T})
    proof = claim(ident, ctx.run_id, T, msg.metadata.dst_node_id)
    return Message(RecordDict({RECORD: ConfigRecord({"pid": ident.pid, "cert": ident.cert.encode(),
                                                     "claim": proof})}), reply_to=msg)


def _held(ctx: Context) -> Pseudonym | None:
    """The epoch pseudonym this node keeps in its Context (None: it holds none)."""
    if PSEUDONYM not in ctx.state:
        return None
    raw = ctx.state[PSEUDONYM].get("pseudonym")  # type: ignore[union-attr]
    if not isinstance(raw, bytes):
        raise DecodeError("this node's pseudonym record is corrupt")
    return Pseudonym.decode(raw)


def _keep(ctx: Context, p) -> None:
    """Store the participant's epoch pseudonym in the node's Context (a changed one replaces it)."""
    nym = getattr(p, "inner", p).pseudonym if p is not None else None
    if nym is not None:
        ctx.state[PSEUDONYM] = ConfigRecord({"pseudonym": nym.encode()})


def _last_round(ctx: Context) -> int | None:
    """The last round this node claimed in this run (kept in its Context, beside the session)."""
    if LEDGER not in ctx.state:
        return None
    v = ctx.state[LEDGER].get("last-round")  # type: ignore[union-attr]
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise DecodeError(f"this node's round ledger is corrupt: last round {v!r}")
    return v


def _load(ctx: Context, T: int, stage: str) -> SessionState:
    if STATE not in ctx.state:
        raise DecodeError(f"{stage} message before the claim stage: no session in this node's context")
    state = SessionState.decode(ctx.state[STATE]["session"])  # type: ignore[arg-type]
    if state.T != T:
        raise DecodeError(f"{stage} message for round {T}, this node's session is for round {state.T}")
    return state


def _store(ctx: Context, state: SessionState) -> None:
    ctx.state[STATE] = ConfigRecord({"session": state.encode()})


def _train(msg: Message, ctx: Context, call_next: ClientAppCallable, rec: ConfigRecord) -> Message:
    T, d = reserved.uint(rec, "T"), reserved.uint(rec, "words", reserved.MAX_WORDS)
    state = _load(ctx, T, "train")
    if state.has_model:
        raise DecodeError(f"a second train stage in round {T}: this node has trained already")
    content = RecordDict({k: v for k, v in msg.content.items() if k != RECORD})
    if global_model_hash(content.object_id.encode()) != state.global_hash:
        # The round's RoundStart, which every member signed, names the announced hash.
        raise Refused("the train content differs from the global model announced when the round opened")
    reply = call_next(make_message(copy(msg.metadata), content), ctx)
    if reply.has_error():
        raise ConfigError(f"the app's train handler failed: {reply.error.reason}")
    words = records.to_words(reply.content, d)
    trust = node_trust(ctx.node_config)
    p = _LIVE.take(state)
    if p is None:
        _load_node_state(ctx, state, _state_file(ctx, _ps_key(ctx, state, [])))
        p = state.participant(None, *trust, membership=_membership(ctx, state.T))
    p.provide_model(words)  # checks d against the round's parameters
    state = state.with_model(words)
    _LIVE.put(state, p)
    return _handle_all(msg, ctx, state, rec, trust)


# This process's live participants (simulation, in-process grids): the session's replay is then skipped.
_LIVE = LiveSessions(256)


NODE_MIN_GROUP = "reshuffle-min-group"  # node_config: this node refuses anonymity groups smaller than this
NODE_FEDERATION = "reshuffle-federation"  # node_config: the federation's size (default: num-partitions, if set)
#: node_config keys of the node's own bounds on the round parameters, and the TrustFloors field each sets
NODE_SETTINGS = {
    "reshuffle-collusion": "collusion",  # c >= max(1, ⌊collusion·N⌋) (default 0.2)
    "reshuffle-min-anonymity": "anonymity",  # honest members it is hidden among: N − c and |U_m| − c (default 2)
    "reshuffle-min-decoys": "decoys",  # the least decoys d_y (default: 2 from N = 10, else 1)
    "reshuffle-max-iterations": "R_max",  # a ceiling on the reservation iterations R_max (default 16)
    "reshuffle-ungrouped": "ungrouped",  # true: also take part in rounds bound to no stable group (default false)
    "reshuffle-min-draw": "draw",  # an assignment lists at least this many groups' worth of candidates (default 2)
}


def node_trust(node_config) -> tuple[int | None, TrustFloors]:
    """(its floor on the group size, its :class:`TrustFloors`) from the node's own config; ConfigError names
    the key of a bad value."""
    min_group = None
    if NODE_MIN_GROUP in node_config:
        min_group = node_config[NODE_MIN_GROUP]
        if not isinstance(min_group, int) or isinstance(min_group, bool) or min_group < 2:
            raise ConfigError(f"node_config {NODE_MIN_GROUP} must be an int >= 2, got {min_group!r}")
    fields = {}
    for key, name in NODE_SETTINGS.items():
        if key in node_config:
            v = node_config[key]
            fields[name] = float(v) if name == "collusion" and isinstance(v, int) and not isinstance(v, bool) else v
    # What this node knows of its federation: its own setting, else the simulation engine's partition count.
    fed = node_config.get(NODE_FEDERATION, node_config.get("num-partitions"))
    if fed is not None and "federation" not in fields:
        fields["federation"] = fed
    try:
        return min_group, TrustFloors(**fields)
    except ConfigError as exc:
        raise ConfigError(f"node_config {', '.join(_bad_keys(node_config, fields))}: {exc}") from None


def _bad_keys(node_config, fields: dict) -> list[str]:
    """The node_config keys to name for a refused TrustFloors: those whose value alone is refused, else all
    that were given (a combination of values is refused)."""
    key_of = {name: key for key, name in NODE_SETTINGS.items()}
    key_of["federation"] = NODE_FEDERATION if NODE_FEDERATION in node_config else "num-partitions"

    def refused(name: str) -> bool:
        try:
            TrustFloors(**{name: fields[name]})
        except ConfigError:
            return True
        return False

    alone = [key_of[name] for name in fields if refused(name)]
    return alone or [key_of[name] for name in fields]


NODE_STATE_DIR = "reshuffle-state-dir"  # node_config: where the node keeps its group and pseudonym ("" = nowhere)
_STATE_VERSION = 1


def _state_dir(ctx: Context) -> Path | None:
    """This node's state folder: ``reshuffle-state-dir``, by default ``$FLWR_HOME/reshuffle-state`` (or
    ``~/.flwr/reshuffle-state``); None where the node's own config sets it to ""."""
    folder = ctx.node_config.get(NODE_STATE_DIR)
    if folder is None:
        home = os.environ.get("FLWR_HOME")
        return (Path(home) if home else Path.home() / ".flwr") / "reshuffle-state"
    if not isinstance(folder, str):
        raise ConfigError(f"node_config {NODE_STATE_DIR} must be a folder path (\"\" for none), got {folder!r}")
    return Path(folder) if folder else None


# A round's first message, each with the PS certificate: the assignment, a round, a stable group's DC-net round.
_OPENERS = (msg_types.MsgType.GROUP_OPEN, msg_types.MsgType.ROUND_START, msg_types.MsgType.DC_START)


def _ps_key(ctx: Context, state: SessionState, data: list[bytes]) -> bytes | None:
    """The PS key of this round (its certificate, checked against the CA), from the round's first message."""
    first = state.inbox[0] if state.inbox else (data[0] if data else None)
    if first is None or msg_types.peek_type(first) not in _OPENERS:
        return None
    try:
        cert = msg_types.decode(first, msg_types.Context()).server_cert
        node_identity(ctx.node_config, ctx.run_id).ca.verify(cert, SERVER_ID, ROLE_SERVER)
    except ProtocolError:
        return None  # the participant refuses the message itself
    return cert.key.to_bytes()


def _state_file(ctx: Context, ps_key: bytes | None) -> Path | None:
    """Where this node keeps its group and pseudonym: one file per federation (the CA key and the PS key
    it certifies) and participant, so nodes that share a folder never load each other's, and a new
    federation under the same CA starts afresh. None without a folder or before the PS is known."""
    folder = _state_dir(ctx)
    if folder is None or ps_key is None:
        return None
    ident = node_identity(ctx.node_config, ctx.run_id)
    key = hashlib.sha256(label("flower/node-state", ident.pid) + ident.ca.verify_key.to_bytes() + ps_key)
    return folder / f"state-{key.hexdigest()[:32]}.bin"


def _read_state(path: Path, pid: int) -> tuple[bytes, bytes]:
    """(membership bytes, pseudonym bytes or b"") kept in ``path``; ConfigError in one line if it is not this
    node's own (another participant's group) or does not decode."""
    try:
        p = Parser(path.read_bytes(), "node state")
        if (v := p.u8("version")) != _STATE_VERSION:
            raise DecodeError(f"version {v}, expected {_STATE_VERSION}")
        group, nym = p.var("membership", 1 << 20), p.var("pseudonym", MAX_RECORD_BYTES)
        p.finish()
        membership = Membership.decode(group)
        if nym:
            Pseudonym.decode(nym)
    except ProtocolError as exc:
        raise ConfigError(f"node state {path} does not decode ({exc}): move it away to start afresh") from None
    if membership.pid != pid:
        raise ConfigError(f"node state {path} holds participant {membership.pid}'s group; this node is participant "
                          f"{pid}: it takes part with no group but its own")
    return group, nym


def _write_state(path: Path, group: bytes, nym: bytes) -> None:
    data = Writer().u8(_STATE_VERSION).var(group).var(nym).bytes()
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # whole or absent: a crash leaves no half-written state


def _load_node_state(ctx: Context, state: SessionState, path: Path | None) -> SessionState:
    """Bring the group and pseudonym kept in ``path`` into the Context (a restarted node: its Context was
    wiped, its folder kept), and the pseudonym into a session that has handled nothing yet."""
    if GROUP in ctx.state or path is None or not path.exists():
        return state
    group, nym = _read_state(path, state.pid)
    # Kept as formed before this run's first round: every later message finds the group in the Context.
    ctx.state[GROUP] = ConfigRecord({"membership": group, "formed": 0})
    if nym and PSEUDONYM not in ctx.state:
        ctx.state[PSEUDONYM] = ConfigRecord({"pseudonym": nym})
        if not state.inbox and not state.pseudonym:
            state = replace(state, pseudonym=nym)  # before its first message: the replay sees it too
    return state


def _membership(ctx: Context, T: int) -> Membership | None:
    """This node's stable group for a session of round T: None before one was formed, and in the round
    that formed it (that round's session replays the assignment itself). A group kept in the node's state
    folder by an earlier run of the same federation is its group in every run: a new run's assignment is
    refused, so no PS can intersect two runs' groups."""
    if GROUP not in ctx.state:
        return None
    rec = ctx.state[GROUP]
    formed = rec.get("formed")  # type: ignore[union-attr]
    if not isinstance(formed, int) or isinstance(formed, bool) or formed < 0:
        raise DecodeError(f"this node's stable group record is corrupt: formed in round {formed!r}")
    return None if formed == T else Membership.decode(rec["membership"])  # type: ignore[arg-type, index]


def _keep_group(ctx: Context, T: int, p) -> None:
    """Store the group the assignment of round T formed for this node, once (it is kept for every later round)."""
    if GROUP in ctx.state or not isinstance(p, GroupedParticipant) or p.membership is None:
        return
    ctx.state[GROUP] = ConfigRecord({"membership": p.membership.encode(), "formed": T})


def _save_node_state(ctx: Context, path: Path | None) -> None:
    """Write the group and the pseudonym the Context holds to the state file (a group first: no file without)."""
    if path is None or GROUP not in ctx.state:
        return
    nym = ctx.state[PSEUDONYM]["pseudonym"] if PSEUDONYM in ctx.state else b""  # type: ignore[index]
    _write_state(path, ctx.state[GROUP]["membership"], nym)  # type: ignore[arg-type, index]


def _protocol(msg: Message, ctx: Context, rec: ConfigRecord) -> Message:
    state = _load(ctx, reserved.uint(rec, "T"), "protocol")
    return _handle_all(msg, ctx, state, rec, node_trust(ctx.node_config))


def _handle_all(msg: Message, ctx: Context, state: SessionState, rec: ConfigRecord,
                trust: tuple[int | None, TrustFloors]) -> Message:
    replies: list[bytes] = []
    items = reserved.data_list(rec)
    path = _state_file(ctx, _ps_key(ctx, state, items))
    state = _load_node_state(ctx, state, path)
    membership = _membership(ctx, state.T)
    p = None
    for data in items:
        try:
            state, out, p = _LIVE.advance(state, data, *trust, membership=membership)
        except ReShuffleError:
            out = []
        replies.extend(out)
    if p is not None:  # what the push's last handled message left: the group formed, the pseudonym kept
        _keep_group(ctx, state.T, p)
        _keep(ctx, p)
        _save_node_state(ctx, path)
    _store(ctx, state)
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
    if stage == STAGE_CLAIM:
        return _claim(msg, ctx, rec)
    if stage == STAGE_TRAIN:
        return _train(msg, ctx, call_next, rec)
    if stage == STAGE_PROTOCOL:
        return _protocol(msg, ctx, rec)
    raise DecodeError(f"unknown Re-Shuffle stage {stage!r}")
