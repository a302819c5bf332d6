"""The PS as a driver sees it: the :class:`PS` contract, and :func:`make_ps` for every driver.

A driver (the in-process runners, the parallel runner, the Flower grid) moves a
round on through the PS's surface alone: ``start`` (the first messages),
``receive`` (one message from a participant; errors are recorded, never raised),
``close_phase`` (the step's deadline passed: the next messages, or
:class:`~reshuffle.errors.BelowThreshold` when the round cannot go on), ``done``,
``step`` (the schedule step being collected, :mod:`~reshuffle.protocol.schedule`),
``needs_model`` (whether the next push to a participant needs its trained model),
``errors``, and the round's ``output`` (or ``failed_output()`` after a failure).
:class:`~reshuffle.protocol.server.Server` (one round) and
:class:`~reshuffle.protocol.grouped.GroupedServer` (a round in anonymity groups)
both meet it, and both outputs have one shape (:class:`RoundOutput`: a round of
one group leaves the group fields empty), so no driver asks which it drives.
"""

from __future__ import annotations

import functools
from typing import Callable, Mapping, Protocol

from reshuffle.crypto.rand import RandomSource
from reshuffle.crypto.signatures import Certificate, CertificateAuthority, SigningKey
from reshuffle.errors import ConfigError
from reshuffle.protocol.grouped import GroupedServer
from reshuffle.protocol.groups import Assignment
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.pseudonym import EpochIssuer
from reshuffle.protocol.schedule import Step
from reshuffle.protocol.server import ErrorRecord, RoundOutput, Server

Outbox = list[tuple[int, bytes]]


def members() -> set[str]:
    """The names of the contract: what a driver may read or call on a PS."""
    return {n for n in vars(PS) if not n.startswith("_")} | set(PS.__annotations__)


class PS(Protocol):
    """What a driver may call on the PS of a round."""

    #: The round's parameters (in groups: those of the whole roster; each group has its own).
    params: RoundParams
    #: Rejected messages and discarded shares, as they happen.
    errors: list[ErrorRecord]
    #: The round's output once ``done`` (None before, and after a failure).
    output: RoundOutput | None

    @property
    def done(self) -> bool:
        """The round has delivered its output."""

    @property
    def step(self) -> Step:
        """The schedule step now being collected."""

    @property
    def stage_name(self) -> str:
        """The user-facing stage of what is being collected (setup, ot, reserve, upload, unmask)."""

    def start(self) -> Outbox:
        """The round's first messages: (recipient, bytes) pairs."""

    def receive(self, sender: int, data: bytes) -> None:
        """Absorb one message of ``sender``; a bad message is recorded in ``errors``, never raised."""

    def close_phase(self) -> Outbox:
        """Close the step being collected; the next step's messages (BelowThreshold: the round ends)."""

    def needs_model(self, pid: int) -> bool:
        """Whether the push now going to ``pid`` needs its trained model (the first online step on)."""

    def failed_output(self) -> RoundOutput:
        """What a round that delivered nothing leaves: online sets, errors and the parties named so far."""


def make_ps(T: int, roster: dict[int, Certificate], signing_key: SigningKey, cert: Certificate,
            ca: CertificateAuthority, global_hash: bytes, *, params: RoundParams | None = None, d: int | None = None,
            overrides: dict | None = None, group_size: int | None = None, collusion: float | None = None,
            rng: RandomSource | int | None = None, make_server: Callable[..., Server] = Server,
            stable: Assignment | None = None, sample=None, pseudonyms: EpochIssuer | None = None,
            identities: Mapping[int, int] | None = None, dcnet: bool | None = None,
            make_dc_server: Callable | None = None) -> PS:
    """The PS of a round, for every driver (in process, parallel, Flower): one :class:`Server` with
    ``params`` (default: ``RoundParams.default(N, d, **overrides)``), or a :class:`GroupedServer` of groups
    of at least ``group_size`` (each group's parameters from its size and ``overrides``), or of the
    ``stable`` groups kept from an earlier round (those of ``sample``; no new assignment). ``pseudonyms``
    is the epoch key the driver keeps across the epoch's rounds and ``identities`` the identity each roster
    id is issued under (docs/protocol.md §7.3); every group's PS shares them. ``dcnet``: stable groups run the
    DC-net round (docs/protocol.md, "The DC-net round"); default: yes unless ``make_server`` is a deviating
    PS of the Shamir-shared round; ``make_dc_server`` builds each group's DC-net PS (a deviating PS's; default
    :class:`~reshuffle.protocol.dcnet.DCServer`)."""
    overrides = dict(overrides or {})
    if dcnet is None:
        dcnet = stable is not None and make_server is Server
    dc_options = {"pseudonyms": pseudonyms, "identities": identities, "make": make_dc_server}
    if pseudonyms is not None or identities is not None:
        make_server = functools.partial(make_server, pseudonyms=pseudonyms, identities=identities)
    if stable is not None:
        group_size = stable.group_size
    if group_size is None:
        if params is None:
            if d is None:
                raise ConfigError("the PS needs the round's parameters, or the model length d to derive them")
            params = RoundParams.default(len(roster), d, **overrides)
        return make_server(params, T, roster, signing_key, cert, ca, global_hash, rng)
    d = params.d if params is not None else d
    if d is None:
        raise ConfigError("a round in groups needs the model length d")
    return GroupedServer(T, roster, signing_key, cert, ca, global_hash, d, group_size, overrides, rng, make_server,
                         collusion, stable=stable, sample=sample, dcnet=dcnet, dc_options=dc_options)
