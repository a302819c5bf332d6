"""Protocol adversaries as plug-ins (participants and PS that deviate).

A behaviour is an object the caller builds and hands to
``reshuffle.shuffle(..., adversaries=[...])``. A :class:`ParticipantBehaviour`
controls some participant ids and builds their (deviating) state machines; a
:class:`PSBehaviour` builds the PS. Behaviours subclass or wrap the honest state
machines: they import the protocol, never the other way round. The registry
(:func:`register_adversary`) is only for the CLI, the simulator and the red team.

Each behaviour states what must hold when it plays (:meth:`Behaviour.holds`):
which honest models are delivered, who is blamed, which check stops it. Nothing
there reads the participants' secrets: only the round's public output and each
honest participant's own view.

A deviating state machine overrides only the protected hooks listed here
(:data:`PARTICIPANT_HOOKS`, :data:`SERVER_HOOKS`), each documented where the
honest class defines it: its message handlers (named by the state tables and
the schedule) and a few named steps. :func:`unlisted_overrides` names any other
method a subclass defines, so that a renamed hook fails a test instead of
silently turning a deviation back into honest behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import FunctionType
from typing import TYPE_CHECKING, ClassVar

from reshuffle.errors import ConfigError
from reshuffle.protocol.phases import PARTICIPANT_TABLE
from reshuffle.protocol.schedule import SCHEDULE, SERVER_TABLE
from reshuffle.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    from reshuffle.harness.api import ShuffleResult
    from reshuffle.protocol.participant import Participant
    from reshuffle.protocol.server import Server


@dataclass
class Verdict:
    """Whether a behaviour's guarantees held in one round, and why."""

    holds: bool
    delivered: int  # honest models delivered
    expected: int  # honest models that had to be delivered
    culprits_right: bool  # every expected culprit named
    wrong: list[int] = field(default_factory=list)  # honest participants named (must stay empty)
    detected_by: str = ""
    detail: str = ""


class Behaviour:
    """Base of every adversary: a name, a description and the check that stops it."""

    name: ClassVar[str] = "behaviour"
    role: ClassVar[str] = "participant"
    #: the protocol check that is expected to stop it (docs/protocol.md section)
    stopped_by: ClassVar[str] = ""
    #: True when the PS deviates: then the round may fail, but no honest model may be exposed
    #: and the test is on the honest participants' views.
    culprits: tuple[int, ...] = ()
    #: The DC-net round of stable groups (protocol/dcnet.py): the deviating member's
    #: :class:`~reshuffle.protocol.dcnet.DCParticipant` or PS's :class:`~reshuffle.protocol.dcnet.DCServer`
    #: subclass that plays this behaviour there, what holds against it (``dc_outcome``: "refused",
    #: "named with evidence", "linked nobody", ...), or, where None, why it has no meaning there (``dc_absent``).
    dc_class: ClassVar[type | None] = None
    dc_outcome: ClassVar[str] = ""
    dc_absent: ClassVar[str] = ""

    def holds(self, result: "ShuffleResult", honest: list[int]) -> Verdict:
        raise NotImplementedError

    def dc_holds(self, result: "ShuffleResult", honest: list[int], server=None) -> Verdict | None:
        """Its own verdict of a DC-net round of :data:`reshuffle.adversaries.dcteam.TWO` (``server``: its grouped
        PS, to check evidence with the roster's keys); None: the generic one of its ``dc_outcome``
        (:func:`reshuffle.adversaries.dcteam.judge`)."""
        return None

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


class ParticipantBehaviour(Behaviour):
    """Controls ``pids`` (default: participant 1); ``participant_class`` is its state machine."""

    role: ClassVar[str] = "participant"
    participant_class: ClassVar[type]

    def __init__(self, pids: tuple[int, ...] | list[int] = (1,)) -> None:
        pids = tuple(pids)
        if not pids or any(not isinstance(p, int) or p < 0 for p in pids):
            raise ConfigError(f"{self.name}: pids must be non-negative participant ids, got {pids!r}")
        self.pids = pids

    def make(self, pid: int, *args, **kwargs) -> "Participant":
        p = self.participant_class(pid, *args, **kwargs)
        p.behaviour = self
        return p

    def make_dc(self, *args, **kwargs):
        """Its member of the DC-net round (``dc_class``, which must be set)."""
        p = self.dc_class(*args, **kwargs)
        p.behaviour = self
        return p


class PSBehaviour(Behaviour):
    """A deviating PS; ``server_class`` is its state machine."""

    role: ClassVar[str] = "ps"
    server_class: ClassVar[type]

    def make(self, *args, **kwargs) -> "Server":
        s = self.server_class(*args, **kwargs)
        s.behaviour = self
        return s

    def make_dc(self, *args, **kwargs):
        """The PS of one stable group's DC-net round (``dc_class``, which must be set)."""
        s = self.dc_class(*args, **kwargs)
        s.behaviour = self
        self.dc_servers = [*getattr(self, "dc_servers", []), s]
        return s


# --------------------------------------------------------------------------------------- extension points
def _handlers(*tables) -> tuple[str, ...]:
    return tuple(sorted({name for table in tables for handlers in table.values() for name in handlers.values()}))


#: What a deviating :class:`~reshuffle.protocol.participant.Participant` may override: the entry point,
#: the state table, the named hooks, and every message handler the table names (``_on_<message type>``,
#: ``_on_first_abandoned``).
PARTICIPANT_HOOKS: tuple[str, ...] = (
    "handle", "TABLE", "_seal", "_check_floors", "_colluders", "_check_fresh", "_reservation_vector",
    "_model_list", "_reveal", "pseudonym",
) + _handlers(PARTICIPANT_TABLE)

#: What a deviating :class:`~reshuffle.protocol.server.Server` may override: the driver's entry points,
#: the named hooks, every message handler (``_on_<message type>``) and every step's closer.
SERVER_HOOKS: tuple[str, ...] = (
    "start", "receive", "_new_slot_phase", "_invocation", "_open_invocation", "_check_view", "_publish",
    "_check_rows",
) + _handlers(SERVER_TABLE) + tuple(sorted({s.closer for s in SCHEDULE}))


def _dc_hooks() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a deviating DC-net member and PS may override (``dc_class``): the entry points, the named hooks
    (``_vector``, ``_deviate``, ``_opening``, ``pseudonym``), every handler of the member's state table, and the PS's
    per-step checks and closers."""
    from reshuffle.protocol.dcnet import STEPS, DCParticipant

    member = ("handle", "TABLE", "_vector", "_deviate", "_opening", "pseudonym") + tuple(sorted(
        {h for row in DCParticipant.TABLE.values() for h in row.values()}))
    server = ("start", "receive", "close_phase") + tuple(sorted(
        {st.closer for st in STEPS.values()} | {"_on_" + ph.name.lower() for ph in STEPS}))
    return member, server


def unlisted_overrides(cls: type) -> list[str]:
    """Methods (and upper-case class attributes) that ``cls``, a subclass of the honest participant or
    PS (of either round), defines beyond the hooks of :data:`PARTICIPANT_HOOKS`, :data:`SERVER_HOOKS` or
    their DC-net round's (:func:`_dc_hooks`): an override of a renamed or removed hook, which the honest
    code would never call."""
    from reshuffle.protocol.dcnet import DCParticipant, DCServer
    from reshuffle.protocol.participant import Participant
    from reshuffle.protocol.server import Server

    if issubclass(cls, Participant):
        hooks, base = PARTICIPANT_HOOKS, Participant
    elif issubclass(cls, Server):
        hooks, base = SERVER_HOOKS, Server
    elif issubclass(cls, DCParticipant):
        hooks, base = _dc_hooks()[0], DCParticipant
    elif issubclass(cls, DCServer):
        hooks, base = _dc_hooks()[1], DCServer
    else:
        raise ConfigError(f"{cls.__name__} derives from neither a participant nor a PS")
    out = []
    for k in cls.__mro__[: cls.__mro__.index(base)]:
        for name, value in vars(k).items():
            if name.startswith("__") or name in hooks:
                continue
            if isinstance(value, (FunctionType, staticmethod, classmethod, property)) or name.isupper():
                out.append(f"{k.__qualname__}.{name}")
    return out


ADVERSARIES: Registry = Registry("adversary")


def register_adversary(name: str):
    """Class decorator: make a behaviour selectable by ``name`` (CLI, simulator, red team)."""
    return ADVERSARIES.register(name)


def adversary_names(role: str | None = None) -> list[str]:
    return ADVERSARIES.names(None if role is None else lambda c: c.role == role)


def make_adversary(name: str, **options) -> Behaviour:
    """The behaviour registered as ``name``, configured with ``options``."""
    return ADVERSARIES.make(name, **options)
