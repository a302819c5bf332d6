"""The states of the round's two parties, and what a participant accepts in each.

The PS's states and what each collects are derived from the round's schedule
(:mod:`~reshuffle.protocol.schedule`, the one catalogue of steps); a participant's
states are finer (one per point of its own progress) and listed here with the
message each accepts (:data:`PARTICIPANT_TABLE`); the schedule checks at import that
they accept exactly the messages its steps send. Both parties name a message's
handler by one rule (:func:`handler_name`). "Phase" names these states; the
user-facing word for a part of the round is "stage" (:data:`~reshuffle.protocol.schedule.STAGES`).
"""

from __future__ import annotations

import enum

from reshuffle.protocol.messages import MsgType


class PPhase(enum.Enum):
    """Participant states (docs/protocol.md §5)."""

    AWAIT_START = "await ROUND_START (§5.0)"
    AWAIT_ADVERTS = "await ADVERTISE_LIST (§5.1)"
    AWAIT_SHARES = "await SHARE_DELIVERY (§5.1–5.2)"
    AWAIT_OT = "await OT_RESPONSE (§5.2), or COMPLAINTS about its shares (§6.4)"
    ANSWERED = "answered the complaints about its shares: await OT_RESPONSE (§5.2, §6.4)"
    AWAIT_FIRST = "await UNMASK_REQUEST of iteration 1, or MASK_REQUEST 2 that abandons it after complaints (§5a)"
    AWAIT_MASK = "await MASK_REQUEST (§6.1), or OPEN_REQUEST of the last iteration (§8.2)"
    AWAIT_LIST = ("sent a count vector: await UNMASK_REQUEST with U_m (§6.2–6.3), or OPEN_REQUEST of the last "
                  "iteration (§8.2)")
    UPLOADED = "sent its model list: await UNMASK_REQUEST with U_M (§6.2–6.3); nothing of its slot phase opens (§8.2)"
    OBJECTED = "objected to the counts: await OPEN_REQUEST (§8.2)"
    AWAIT_RESTART = "revealed x of a failed iteration: await RESTART (§8.2)"
    ENDED = "revealed x of the iteration after which the reservation ended: the round is over (§8.2)"
    AWAIT_SLOTS = "await SLOT_RESPONSE of the restarted slot phase (§8.2)"
    AWAIT_CERT = "await CERTIFICATE of U_m (§6.2–6.3, then §6.3)"
    DONE = "done (may be asked to open decoy rows, §9)"
    OPENED = "opened (may be shown a dispute, §9)"
    DONE_BLAME = "answered a dispute"
    ABORTED = "aborted"


def handler_name(t: MsgType) -> str:
    """The handler of a message on the party that receives it: ``_on_<message type>``."""
    return "_on_" + t.name.lower()


# Which messages each participant state accepts (each a message some step of the schedule sends).
_ACCEPTS: dict[PPhase, tuple[MsgType, ...]] = {
    PPhase.AWAIT_START: (MsgType.ROUND_START,),
    PPhase.AWAIT_ADVERTS: (MsgType.ADVERTISE_LIST,),
    PPhase.AWAIT_SHARES: (MsgType.SHARE_DELIVERY,),
    PPhase.AWAIT_OT: (MsgType.OT_RESPONSE, MsgType.COMPLAINTS),
    PPhase.ANSWERED: (MsgType.OT_RESPONSE,),
    PPhase.AWAIT_FIRST: (MsgType.UNMASK_REQUEST, MsgType.MASK_REQUEST),
    PPhase.AWAIT_MASK: (MsgType.MASK_REQUEST, MsgType.OPEN_REQUEST),
    PPhase.AWAIT_LIST: (MsgType.UNMASK_REQUEST, MsgType.OPEN_REQUEST),
    PPhase.UPLOADED: (MsgType.UNMASK_REQUEST,),
    PPhase.OBJECTED: (MsgType.OPEN_REQUEST,),
    PPhase.AWAIT_RESTART: (MsgType.RESTART,),
    PPhase.ENDED: (),
    PPhase.AWAIT_SLOTS: (MsgType.SLOT_RESPONSE,),
    PPhase.AWAIT_CERT: (MsgType.CERTIFICATE,),
    PPhase.DONE: (MsgType.BLAME_REQUEST,),
    PPhase.OPENED: (MsgType.DISPUTE,),
    PPhase.DONE_BLAME: (),
    PPhase.ABORTED: (),
}
# The one state that handles a message otherwise: MASK_REQUEST 2 while U_1 is awaited abandons iteration 1 (§5a).
_OWN_HANDLER = {(PPhase.AWAIT_FIRST, MsgType.MASK_REQUEST): "_on_first_abandoned"}

#: Which message each participant state accepts, and its handler (:func:`handler_name` unless noted above).
PARTICIPANT_TABLE: dict[PPhase, dict[MsgType, str]] = {
    ph: {t: _OWN_HANDLER.get((ph, t), handler_name(t)) for t in accepts} for ph, accepts in _ACCEPTS.items()
}


class SPhase(enum.Enum):
    """PS states: what it is collecting."""

    START = "not started"
    ADVERTS = "collect ADVERTISE (§5.1)"
    BUNDLES = "collect SHARE_BUNDLE (§5.1)"
    OT = "collect OT_REQUEST with the first reservation vector (§5.2, §5a)"
    COMPLAINTS = "collect COMPLAINT_ANSWER (§6.4)"
    MASKED = "collect MASKED_INPUT (§6.1) or OBJECTION (§8.2)"
    OPEN = "collect OPEN_REVEAL of a failed iteration (§8.2)"
    SLOTS = "collect SLOT_REQUEST of the restarted slot phase (§8.2)"
    CONSENT = "collect CONSENT on U_m (§6.2–6.3)"
    UNMASK = "collect UNMASK_RESPONSE (§6.3)"
    BLAME = "collect OPENING of decoy rows (§9)"
    DISPUTE = "collect DISPUTE_ANSWER (§9)"
    DONE = "done"


def expected_names(table: dict[MsgType, str]) -> str:
    return ", ".join(t.name for t in table) or "nothing (round over)"
