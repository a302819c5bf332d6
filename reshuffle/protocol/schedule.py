"""The round's schedule as data, the one catalogue of its steps.

A *step* is one round trip: the PS sends the messages in ``sends`` and collects
the replies in ``collects`` until its deadline, then its ``closer`` computes the
next step. Every driver (in-process, parallel, grouped, Flower) executes this one
table through the PS's ``start``/``receive``/``close_phase`` and counts its round
trips from it; none sequences phases itself. Derived from it, and nowhere else:

- :data:`SERVER_TABLE`, what the PS accepts in each state and the handler of each
  message (``_on_<message type>``);
- :data:`PS_SENDS`, the messages a participant accepts (checked at import against
  the participant's table, :data:`~reshuffle.protocol.phases.PARTICIPANT_TABLE`), and
  :func:`max_inbox`, the most of them one participant receives in a round;
- :func:`stage_of` and :data:`STAGES`, the user-facing stages (``setup, ot, reserve,
  upload, unmask``) of every message, which dropout injection, the statistics and
  the tests share, and :data:`ONLINE_STAGES`, those of the steps that need a model.

Properties of a step:

- ``stage``: its user-facing stage ("phase" names a party's states: :mod:`~reshuffle.protocol.phases`).
- ``offline``: it does not depend on any participant's model, so it may run
  while participants train. Setup, share checks, OT, the credential, the epoch
  pseudonym (asked for in the OT request and answered with the OT answers, in a
  participant's first round of an epoch: no step of its own, docs/protocol.md
  §7.3) and every reservation iteration are offline; the upload's MaskedSum and
  the blame step are not (docs/protocol.md, "Offline and online").
- ``per_iteration``: it repeats once per reservation iteration. The first iteration's
  vectors ride on the ``ot`` step (its replies carry the OT request and the first
  vector), so a round that runs r iterations runs the ``reserve`` step r − 1 times,
  or r times after complaints, which abandon the first iteration unrevealed.
- ``per_opening``: it runs once per opened iteration (at most R_max times: every
  opening ends a reservation iteration).
- ``once``: of its messages, those a participant receives once per round however often
  the step runs (the OT answers ride on the first iteration only).
- ``when``: ``always`` on the happy path, else the event that adds it.

Invocations share one PS state per kind of step (MASKED, CONSENT, UNMASK): the
invocation number m tells a reservation iteration (m <= R_max) from the upload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reshuffle.protocol.messages import MsgType
from reshuffle.protocol.phases import PARTICIPANT_TABLE, SPhase, handler_name

RESERVE, UPLOAD = "reserve", "upload"


@dataclass(frozen=True)
class Step:
    """One round trip of the PS (see the module docstring)."""

    name: str
    phase: SPhase
    stage: str
    sends: tuple[MsgType, ...]
    collects: tuple[MsgType, ...]
    closer: str
    offline: bool
    per_iteration: bool = False
    when: str = "always"
    invocation: str | None = None  # RESERVE or UPLOAD for a MaskedSum step
    per_opening: bool = False
    once: tuple[MsgType, ...] = ()

    @property
    def awaits(self) -> tuple[MsgType, ...]:
        return self.collects


T = MsgType
_VECTOR = (T.MASKED_INPUT, T.OBJECTION)
SCHEDULE: tuple[Step, ...] = (
    Step("advertise", SPhase.ADVERTS, "setup", (T.ROUND_START,), (T.ADVERTISE,), "_close_adverts", True),
    Step("share", SPhase.BUNDLES, "setup", (T.ADVERTISE_LIST,), (T.SHARE_BUNDLE,), "_close_bundles", True),
    # The first reservation vector rides on the OT request (§5a); so do the credential and pseudonym requests.
    Step("ot", SPhase.OT, "ot", (T.SHARE_DELIVERY,), (T.OT_REQUEST, T.MASKED_INPUT), "_close_ot", True),
    Step("complaints", SPhase.COMPLAINTS, "ot", (T.COMPLAINTS,), (T.COMPLAINT_ANSWER,), "_close_complaints", True,
         when="a recipient complains about a dealer's shares"),
    # After a restart the first request goes with the slot phase's OT answers.
    Step("reserve", SPhase.MASKED, "reserve", (T.SLOT_RESPONSE, T.MASK_REQUEST), _VECTOR, "_close_masked", True,
         True, invocation=RESERVE),
    # Of iteration 1 the OT answers go with it (after complaints, with the MASK_REQUEST of iteration 2).
    Step("reserve-consent", SPhase.CONSENT, "reserve", (T.OT_RESPONSE, T.UNMASK_REQUEST), (T.CONSENT,),
         "_close_consent", True, True, invocation=RESERVE, once=(T.OT_RESPONSE,)),
    Step("reserve-reveal", SPhase.UNMASK, "reserve", (T.CERTIFICATE,), (T.UNMASK_RESPONSE,), "_close_unmask", True,
         True, invocation=RESERVE),
    Step("open", SPhase.OPEN, "reserve", (T.OPEN_REQUEST,), (T.OPEN_REVEAL,), "_close_open", True,
         when="an iteration fails a count check or draws an objection", per_opening=True),
    Step("restart", SPhase.SLOTS, "reserve", (T.RESTART,), (T.SLOT_REQUEST,), "_close_slots", True,
         when="an opened iteration leaves iterations to restart the slot phase", per_opening=True),
    Step("upload", SPhase.MASKED, "upload", (T.MASK_REQUEST,), _VECTOR, "_close_masked", False, invocation=UPLOAD),
    Step("upload-consent", SPhase.CONSENT, "unmask", (T.UNMASK_REQUEST,), (T.CONSENT,), "_close_consent", False,
         invocation=UPLOAD),
    Step("upload-reveal", SPhase.UNMASK, "unmask", (T.CERTIFICATE,), (T.UNMASK_RESPONSE,), "_close_unmask", False,
         invocation=UPLOAD),
    Step("blame", SPhase.BLAME, "unmask", (T.BLAME_REQUEST,), (T.OPENING,), "_close_blame", False,
         when="a delivered-looking row fails its token, credential or tag"),
    Step("dispute", SPhase.DISPUTE, "unmask", (T.DISPUTE,), (T.DISPUTE_ANSWER,), "_close_dispute", False,
         when="two openings of one pair disagree"),
)

# The group assignment (docs/protocol.md, "Anonymity groups") runs before ROUND_START; it is offline.
ASSIGN_STEP = Step("assign", SPhase.START, "assign", (T.GROUP_OPEN,), (), "close", True,
                   when="the round runs in anonymity groups")


def _server_table() -> dict[SPhase, dict[MsgType, str]]:
    table: dict[SPhase, dict[MsgType, str]] = {ph: {} for ph in SPhase}
    for s in SCHEDULE:
        table[s.phase].update({t: handler_name(t) for t in s.collects})
    return table


#: What the PS accepts in each state, and the handler of each message.
SERVER_TABLE: dict[SPhase, dict[MsgType, str]] = _server_table()

#: Every message the PS sends to participants in a round (the group assignment's aside).
PS_SENDS: frozenset[MsgType] = frozenset(t for s in SCHEDULE for t in s.sends)

_accepted = {t for table in PARTICIPANT_TABLE.values() for t in table}
if _accepted != PS_SENDS:
    raise AssertionError(f"participants accept {sorted(t.name for t in _accepted - PS_SENDS)}, which no step sends, "
                         f"and no state accepts {sorted(t.name for t in PS_SENDS - _accepted)}")


def runs(step: Step, R_max: int) -> int:
    """The most times ``step`` runs in a round of ``R_max`` reservation iterations."""
    return R_max if step.per_iteration or step.per_opening else 1


def inbox_bound(R_max: int) -> dict[MsgType, int]:
    """The most copies of each PS message one participant receives in a round of ``R_max`` iterations:
    each step sends a member each of its messages at most once per run (``once`` ones once per round)."""
    out = {t: 0 for t in sorted(PS_SENDS)}
    for s in SCHEDULE:
        for t in s.sends:
            out[t] += 1 if t in s.once else runs(s, R_max)
    return out


def max_inbox(R_max: int) -> int:
    """The most PS messages one participant receives in a round of ``R_max`` iterations (group
    assignment aside): a longer inbox is a corrupt or hostile state."""
    return sum(inbox_bound(R_max).values())


#: The user-facing stages, in round order.
STAGES: tuple[str, ...] = tuple(dict.fromkeys(s.stage for s in SCHEDULE))
#: The stages of the steps that need the participants' models.
ONLINE_STAGES: tuple[str, ...] = tuple(dict.fromkeys(s.stage for s in SCHEDULE if not s.offline))


def _stages() -> tuple[dict[MsgType, str], dict[tuple[MsgType, str], str]]:
    """Each message's phase: from the first step that sends or collects it; a MaskedSum message's by kind."""
    plain: dict[MsgType, str] = {}
    by_kind: dict[tuple[MsgType, str], str] = {}
    for s in SCHEDULE:
        for t in s.sends + s.collects:
            if s.invocation is not None:
                by_kind.setdefault((t, s.invocation), s.stage)
            else:
                plain.setdefault(t, s.stage)
    return plain, by_kind


_PLAIN, _BY_KIND = _stages()
# The DC-net round of a stable group (protocol/dcnet.py) has steps of its own; its messages share these stages.
_PLAIN.update({MsgType.DC_START: "setup", MsgType.DC_KEY: "setup", MsgType.DC_KEYS: "ot",
               MsgType.DC_COUNTS: "reserve", MsgType.DC_UPLOAD_REQUEST: "upload", MsgType.DC_BLAME: "unmask",
               MsgType.DC_OPENING: "unmask", MsgType.DC_EXCLUDE: "setup"})


def stage_of(mtype: MsgType, m: int, upload_m: int) -> str:
    """The user-facing stage of a message of invocation ``m``; ``other`` for one no step carries."""
    kind = UPLOAD if m >= upload_m else RESERVE
    return _BY_KIND.get((mtype, kind)) or _PLAIN.get(mtype, "other")

_BY_KEY: dict[tuple[SPhase, str | None], Step] = {(s.phase, s.invocation): s for s in SCHEDULE}
if len(_BY_KEY) != len(SCHEDULE):
    raise AssertionError("two schedule steps share a PS state and invocation kind")


def step_of(phase: SPhase, m: int, upload_m: int) -> Step:
    """The step in which the PS collects in ``phase`` during invocation ``m``."""
    kind = None
    if (phase, RESERVE) in _BY_KEY:
        kind = UPLOAD if m >= upload_m else RESERVE
    try:
        return _BY_KEY[(phase, kind)]
    except KeyError:
        raise KeyError(f"no schedule step collects in PS state '{phase.value}'") from None


def closer_of(phase: SPhase) -> str:
    """The PS method that closes ``phase`` (one per state, whatever the invocation)."""
    names = {s.closer for s in SCHEDULE if s.phase is phase}
    if len(names) != 1:
        raise KeyError(f"PS state '{phase.value}' has no schedule step to close")
    return names.pop()


def happy_path(R: int) -> list[Step]:
    """The steps of a round whose reservation runs ``R`` iterations and nothing goes wrong:
    6 + 3R − 1 round trips (the first iteration's vectors ride on the ``ot`` step)."""
    steps = [s for s in SCHEDULE if s.when == "always"]
    block = [s for s in steps if s.per_iteration]  # contiguous in the table: one iteration
    at = steps.index(block[0])
    return steps[:at] + block[1:] + block * (R - 1) + steps[at + len(block):]


@dataclass
class RoundTrips:
    """The round trips a driver executed: one per PS push that reached anyone, with its step.

    ``model_at`` is the index of the first trip that needed the participants' models
    (the first online step); trips before it could overlap local training.
    """

    steps: list[str] = field(default_factory=list)
    offline: list[bool] = field(default_factory=list)

    def record(self, step: Step) -> None:
        self.steps.append(step.name)
        self.offline.append(step.offline)

    @property
    def total(self) -> int:
        return len(self.steps)

    @property
    def model_at(self) -> int:
        return next((i for i, off in enumerate(self.offline) if not off), len(self.offline))

    @property
    def after_training(self) -> int:
        """Trips from the first one that needs a model on (the online part of the round)."""
        return self.total - self.model_at

    def as_dict(self) -> dict:
        return {"round_trips": self.total, "round_trips_after_training": self.after_training,
                "steps": list(self.steps)}
