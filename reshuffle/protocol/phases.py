"""Phase names and the order of a round, in one place.

User-facing phase names (dropout injection, statistics) are
``setup, ot, reserve, upload, unmask``; :func:`phase_of` maps every message to
one of them, so the runner, the stats and the tests agree.
"""

from __future__ import annotations

import enum

from reshuffle.protocol.messages import MsgType

PHASES = ("setup", "ot", "reserve", "upload", "unmask")


def phase_of(mtype: MsgType, m: int, upload_m: int) -> str:
    if mtype in (MsgType.ROUND_START, MsgType.ADVERTISE, MsgType.ADVERTISE_LIST, MsgType.SHARE_BUNDLE):
        return "setup"
    if mtype in (MsgType.SHARE_DELIVERY, MsgType.OT_REQUEST, MsgType.OT_RESPONSE, MsgType.COMPLAINTS,
                 MsgType.COMPLAINT_ANSWER):
        return "ot"
    if mtype in (MsgType.MASK_REQUEST, MsgType.MASKED_INPUT, MsgType.OBJECTION):
        return "upload" if m == upload_m else "reserve"
    if mtype in (MsgType.OPEN_REQUEST, MsgType.OPEN_REVEAL, MsgType.RESTART, MsgType.SLOT_REQUEST,
                 MsgType.SLOT_RESPONSE):
        return "reserve"  # §8.2: opening a failed iteration and restarting the slot phase
    if mtype in (MsgType.BLAME_REQUEST, MsgType.OPENING, MsgType.DISPUTE, MsgType.DISPUTE_ANSWER):
        return "unmask"  # the blame step follows the upload's unmasking
    if mtype in (MsgType.UNMASK_REQUEST, MsgType.CONSENT, MsgType.CERTIFICATE, MsgType.UNMASK_RESPONSE):
        return "unmask" if m == upload_m else "reserve"
    return "other"


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


# Which message each participant state accepts, and the state after it.
PARTICIPANT_TABLE: dict[PPhase, dict[MsgType, str]] = {
    PPhase.AWAIT_START: {MsgType.ROUND_START: "_on_round_start"},
    PPhase.AWAIT_ADVERTS: {MsgType.ADVERTISE_LIST: "_on_advertise_list"},
    PPhase.AWAIT_SHARES: {MsgType.SHARE_DELIVERY: "_on_share_delivery"},
    PPhase.AWAIT_OT: {MsgType.OT_RESPONSE: "_on_ot_response", MsgType.COMPLAINTS: "_on_complaints"},
    PPhase.ANSWERED: {MsgType.OT_RESPONSE: "_on_ot_response"},
    PPhase.AWAIT_FIRST: {MsgType.UNMASK_REQUEST: "_on_unmask_request", MsgType.MASK_REQUEST: "_on_first_abandoned"},
    PPhase.AWAIT_MASK: {MsgType.MASK_REQUEST: "_on_mask_request", MsgType.OPEN_REQUEST: "_on_open_request"},
    PPhase.AWAIT_LIST: {MsgType.UNMASK_REQUEST: "_on_unmask_request", MsgType.OPEN_REQUEST: "_on_open_request"},
    PPhase.UPLOADED: {MsgType.UNMASK_REQUEST: "_on_unmask_request"},
    PPhase.OBJECTED: {MsgType.OPEN_REQUEST: "_on_open_request"},
    PPhase.AWAIT_RESTART: {MsgType.RESTART: "_on_restart"},
    PPhase.ENDED: {},
    PPhase.AWAIT_SLOTS: {MsgType.SLOT_RESPONSE: "_on_slot_response"},
    PPhase.AWAIT_CERT: {MsgType.CERTIFICATE: "_on_certificate"},
    PPhase.DONE: {MsgType.BLAME_REQUEST: "_on_blame_request"},
    PPhase.OPENED: {MsgType.DISPUTE: "_on_dispute"},
    PPhase.DONE_BLAME: {},
    PPhase.ABORTED: {},
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


SERVER_TABLE: dict[SPhase, dict[MsgType, str]] = {
    SPhase.START: {},
    SPhase.ADVERTS: {MsgType.ADVERTISE: "_on_advertise"},
    SPhase.BUNDLES: {MsgType.SHARE_BUNDLE: "_on_share_bundle"},
    SPhase.OT: {MsgType.OT_REQUEST: "_on_ot_request", MsgType.MASKED_INPUT: "_on_masked_input"},
    SPhase.COMPLAINTS: {MsgType.COMPLAINT_ANSWER: "_on_complaint_answer"},
    SPhase.MASKED: {MsgType.MASKED_INPUT: "_on_masked_input", MsgType.OBJECTION: "_on_objection"},
    SPhase.OPEN: {MsgType.OPEN_REVEAL: "_on_open_reveal"},
    SPhase.SLOTS: {MsgType.SLOT_REQUEST: "_on_slot_request"},
    SPhase.CONSENT: {MsgType.CONSENT: "_on_consent"},
    SPhase.UNMASK: {MsgType.UNMASK_RESPONSE: "_on_unmask_response"},
    SPhase.BLAME: {MsgType.OPENING: "_on_opening"},
    SPhase.DISPUTE: {MsgType.DISPUTE_ANSWER: "_on_dispute_answer"},
    SPhase.DONE: {},
}


def expected_names(table: dict[MsgType, str]) -> str:
    return ", ".join(t.name for t in table) or "nothing (round over)"
