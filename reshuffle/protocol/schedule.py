"""The round's schedule as data: every step the PS drives, in order, with its properties.

A *step* is one round trip: the PS sends the messages in ``sends`` and collects
the replies in ``awaits`` until its deadline, then its ``closer`` computes the
next step. Every driver (in-process, parallel, grouped, Flower) executes this one
table through the PS's ``start``/``receive``/``close_phase`` and counts its round
trips from it; none sequences phases itself.

Properties of a step:

- ``offline``: it does not depend on any participant's model, so it may run
  while participants train. Setup, share checks, OT, the credential and every
  reservation iteration are offline; the upload's MaskedSum and the blame step
  are not (docs/protocol.md, "Offline and online").
- ``per_iteration``: it repeats once per reservation iteration. The first iteration's
  vectors ride on the ``ot`` step (its replies carry the OT request and the first
  vector), so a round that runs r iterations runs the ``reserve`` step r − 1 times,
  or r times after complaints, which abandon the first iteration unrevealed.
- ``when``: ``always`` on the happy path, else the event that adds it.

Invocations share one PS state per kind of step (MASKED, CONSENT, UNMASK): the
invocation number m tells a reservation iteration (m <= R_max) from the upload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reshuffle.protocol.messages import MsgType
from reshuffle.protocol.phases import SERVER_TABLE, SPhase

RESERVE, UPLOAD = "reserve", "upload"


@dataclass(frozen=True)
class Step:
    """One round trip of the PS (see the module docstring)."""

    name: str
    phase: SPhase
    sends: tuple[MsgType, ...]
    closer: str
    offline: bool
    per_iteration: bool = False
    when: str = "always"
    invocation: str | None = None  # RESERVE or UPLOAD for a MaskedSum step

    @property
    def awaits(self) -> tuple[MsgType, ...]:
        return tuple(SERVER_TABLE[self.phase])


_M = (MsgType.MASK_REQUEST,)
SCHEDULE: tuple[Step, ...] = (
    Step("advertise", SPhase.ADVERTS, (MsgType.ROUND_START,), "_close_adverts", True),
    Step("share", SPhase.BUNDLES, (MsgType.ADVERTISE_LIST,), "_close_bundles", True),
    Step("ot", SPhase.OT, (MsgType.SHARE_DELIVERY,), "_close_ot", True),  # + the first reservation vector
    Step("complaints", SPhase.COMPLAINTS, (MsgType.COMPLAINTS,), "_close_complaints", True,
         when="a recipient complains about a dealer's shares"),
    Step("reserve", SPhase.MASKED, _M, "_close_masked", True, True, invocation=RESERVE),
    # Of iteration 1 the OT answers go with it (after complaints, with the MASK_REQUEST of iteration 2).
    Step("reserve-consent", SPhase.CONSENT, (MsgType.OT_RESPONSE, MsgType.UNMASK_REQUEST), "_close_consent", True,
         True, invocation=RESERVE),
    Step("reserve-reveal", SPhase.UNMASK, (MsgType.CERTIFICATE,), "_close_unmask", True, True, invocation=RESERVE),
    Step("open", SPhase.OPEN, (MsgType.OPEN_REQUEST,), "_close_open", True,
         when="an iteration fails a count check or draws an objection"),
    Step("restart", SPhase.SLOTS, (MsgType.RESTART,), "_close_slots", True,
         when="an opened iteration leaves iterations to restart the slot phase"),
    Step("upload", SPhase.MASKED, _M, "_close_masked", False, invocation=UPLOAD),
    Step("upload-consent", SPhase.CONSENT, (MsgType.UNMASK_REQUEST,), "_close_consent", False, invocation=UPLOAD),
    Step("upload-reveal", SPhase.UNMASK, (MsgType.CERTIFICATE,), "_close_unmask", False, invocation=UPLOAD),
    Step("blame", SPhase.BLAME, (MsgType.BLAME_REQUEST,), "_close_blame", False,
         when="a delivered-looking row fails its token, credential or tag"),
    Step("dispute", SPhase.DISPUTE, (MsgType.DISPUTE,), "_close_dispute", False,
         when="two openings of one pair disagree"),
)

# The group assignment (docs/protocol.md, "Anonymity groups") runs before ROUND_START; it is offline.
ASSIGN_STEP = Step("assign", SPhase.START, (MsgType.GROUP_OPEN,), "close", True,
                   when="the round runs in anonymity groups")

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
