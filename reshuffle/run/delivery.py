"""How a round's models reach the PS: one :class:`Delivery` result, one channel per way.

In process (``reshuffle simulate``'s ``shuffle`` setting) the cohort's models go
through :class:`RealShuffle` (the protocol, :func:`reshuffle.shuffle`),
:class:`IdealShuffle` (its ideal functionality) or :class:`Plaintext` (client
order); on Flower they come back through ``ReshuffleGrid`` (the Flower driver's
own channel). Every in-process channel carries Dec(Enc(W_i)), the protocol's
fixed-point encoding, so a real round that recovers every model gives
bit-identical rows to the other two; each applies the real round's threshold
(fewer than max(2, t) clients alive: nothing is delivered).

Ground truth stays inside the channel: it knows which client sent each row and
hands the PS's evaluator only a label per row (attacker or not), never the
positions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence

import numpy as np

from reshuffle.crypto.encoding import FixedPoint
from reshuffle.errors import ConfigError
from reshuffle.harness.api import ShuffleResult, ideal_round, shuffle
from reshuffle.protocol import params
from reshuffle.protocol.params import RoundParams
from reshuffle.run.sampling import IDEAL, seed_of
from reshuffle.run.pseudonyms import EpochBook
from reshuffle.run.sets import INCOMPLETE

#: The phase before which nothing is sent: a client withheld from the round drops out here.
SETUP = "setup"
#: A model dropped at this phase survives (its shares are recovered); at any earlier phase it is lost.
UNMASK = "unmask"
#: The Delivery column of each row's epoch pseudonym (16 bytes; what a rule with a per-pseudonym history reads).
PSEUDONYM = "pseudonym"
#: The Delivery column of each row's stable set (its members' sorted ids), which the FL round's all-or-none
#: rule reads (:mod:`reshuffle.run.federation`).
SET = "set"


@dataclass(frozen=True)
class Delivery:
    """What one round handed to the PS, and what is known about the models that did not arrive.

    ``models`` are the rows in delivery order (the FL step sorts them by hash);
    ``labels`` says per row whether an attacker sent it (None: unknown), or is None
    when no row is labelled; ``lost`` gives each client whose model is missing the
    cause; ``blamed`` the clients the protocol named, with their evidence;
    ``dropped`` the clients that dropped out (at any phase); ``failure`` why
    nothing was delivered; ``seconds`` per phase and ``bytes``
    (``per_participant``, ``ps_total``) what the delivery cost.

    ``meta`` holds per-row columns beside the models, each as long as ``models``
    and in their order: facts a delivery attaches to a row for the PS to use.
    :data:`PSEUDONYM` holds each row's 16-byte epoch pseudonym: the one the
    protocol recovered from the row (real shuffle) or an ideal one. The FL step
    sorts rows canonically; a column travels with its row.

    ``senders`` (ground truth, for scoring only, like ``labels``) is the client
    behind each row where the channel knows it; ``groups`` maps each client of the
    round to its anonymity group, which the PS knows.
    """

    models: list[np.ndarray]
    labels: list[bool | None] | None = None
    lost: dict[int, str] = field(default_factory=dict)
    blamed: dict[int, str] = field(default_factory=dict)
    dropped: list[int] = field(default_factory=list)
    failure: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, float] = field(default_factory=dict)
    meta: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    senders: Sequence[int] | None = None
    groups: Mapping[int, int] | None = None

    def __post_init__(self) -> None:
        n = len(self.models)
        if self.labels is not None and len(self.labels) != n:
            raise ConfigError(f"{len(self.labels)} labels for {n} delivered models")
        if self.senders is not None and len(self.senders) != n:
            raise ConfigError(f"{len(self.senders)} senders for {n} delivered models")
        for name, column in self.meta.items():
            if len(column) != n:
                raise ConfigError(f"row column {name!r} has {len(column)} entries for {n} delivered models")


@dataclass(frozen=True)
class Uploads:
    """What a round's cohort hands to an in-process channel.

    ``models`` maps every client of the cohort to its model (in client order, the
    protocol's participants 0..m−1); ``dropouts`` maps a phase to the clients that
    stop answering from it on; ``withheld`` the clients that take no part at all,
    each with its cause (a setup dropout: a banned client, a model that cannot be
    encoded); ``malicious`` the attackers among them, the ground truth the channel
    turns into row labels; ``adversaries`` the protocol adversaries of a real round,
    their participants numbered within the cohort; ``groups`` the cohort's stable
    anonymity sets (client ids, covering the cohort; empty: none): each row then
    carries its set in the :data:`SET` column, and the FL round delivers a set
    with all its members' models or none.
    """

    T: int
    W_g: np.ndarray
    models: Mapping[int, np.ndarray]
    dropouts: Mapping[str, Iterable[int]] = field(default_factory=dict)
    withheld: Mapping[int, str] = field(default_factory=dict)
    malicious: frozenset[int] = frozenset()
    adversaries: Sequence = ()
    groups: Sequence[Sequence[int]] = ()

    @property
    def cohort(self) -> list[int]:
        return sorted(self.models)

    def drops(self) -> dict[str, list[int]]:
        """phase → clients that drop out at it, the withheld ones at setup."""
        out = {ph: sorted(ids) for ph, ids in self.dropouts.items()}
        if self.withheld:
            out[SETUP] = sorted(set(out.get(SETUP, ())) | set(self.withheld))
        return {ph: ids for ph, ids in out.items() if ids}

    def lost_before_unmask(self) -> dict[int, str]:
        """client → cause, for every client whose model is lost to a dropout (a drop at ``unmask`` is recovered)."""
        return {i: f"dropout at {ph}" for ph, ids in self.drops().items() if ph != UNMASK for i in ids}

    def set_column(self, rows: dict[int, int], n: int, stable: Sequence[Sequence[int]] | None = None) -> dict:
        """The :data:`SET` column of ``n`` rows (``rows``: client → row), where the cohort is in sets (``stable``,
        default ``groups``); else none.

        The PS knows it: each set runs a round of its own, and a row is in its set's part of the output."""
        stable = self.groups if stable is None else stable
        if not stable:
            return {}
        of = {i: tuple(sorted(int(x) for x in s)) for s in stable for i in s}
        col: list = [None] * n
        for i, r in rows.items():
            col[r] = of[i]
        return {SET: col}

    def labels(self, rows: dict[int, int], n: int) -> list[bool | None]:
        """Per delivered row (``rows``: client → row of ``n``), whether an attacker sent it; None: no client's."""
        out: list[bool | None] = [None] * n
        for i, r in rows.items():
            out[r] = i in self.malicious
        return out

    def delivery(self, got: list[np.ndarray], rows: dict[int, int], lost: dict[int, str], **facts) -> Delivery:
        """The Delivery of ``got`` (client → row ``rows``), with the withheld clients' own causes."""
        lost = {**lost, **self.withheld}
        dropped = sorted({i for ids in self.drops().values() for i in ids})
        senders = [-1] * len(got)
        for i, r in rows.items():
            senders[r] = i
        return Delivery(got, self.labels(rows, len(got)), lost, dropped=dropped,
                        senders=None if -1 in senders else tuple(senders), **facts)


class Channel(Protocol):
    """Carries a round's models to the PS in process; a Flower driver has its own."""

    def deliver(self, up: Uploads) -> Delivery: ...


def threshold(m: int) -> int:
    """The fewest clients alive for which a round of ``m`` delivers: max(2, t), t the default threshold for m."""
    return max(2, params.threshold(m, params.colluders(m)))


def loss_causes(r: ShuffleResult, clients: int, dropouts: Mapping[str, Iterable[int]]) -> dict[int, str]:
    """Why each participant's model is missing from a real round's output.

    A participant dropped at some phase (its model survives a drop at ``unmask``);
    in a group that failed; blamed by the protocol (with the PS's reason); with
    recorded participant errors; otherwise it held no valid position at upload
    ("no slot": its reservation did not settle within R_max, or the PS discarded
    its position).
    """
    dropped_at = {i: ph for ph, ids in dropouts.items() for i in ids}
    group_of = {i: j for j, g in enumerate(r.groups or ()) for i in g}
    out = {}
    for i in range(clients):
        if i in r.positions:
            continue
        if i in dropped_at and dropped_at[i] != UNMASK:
            out[i] = f"dropout at {dropped_at[i]}"  # its own cause first, its group's failure follows from it
        elif group_of.get(i) in r.failed_groups:
            out[i] = f"group {group_of[i]} failed: {r.failed_groups[group_of[i]]}"
        elif i in dropped_at:
            out[i] = f"dropout at {dropped_at[i]}"
        elif i in r.blamed:
            out[i] = f"blamed: {r.blamed[i]}"
        elif r.participant_errors.get(i):
            out[i] = f"participant error: {r.participant_errors[i][0]}"
        else:
            out[i] = "no slot"
    return out


@dataclass(frozen=True)
class RealShuffle:
    """The protocol, in process (:func:`reshuffle.shuffle`) among the cohort, numbered 0..m−1 in client order.

    The protocol's secrets come from OS randomness: a simulation never seeds them.
    ``groups`` are stable groups of client ids (:func:`reshuffle.harness.api.form_groups`),
    or, where the uploads carry them, the cohort's stable sets (``Uploads.groups``):
    the cohort must then be whole groups, and each group runs without a new assignment,
    delivering all its members' models or none. ``group_size`` instead draws new groups
    in every round.
    ``epochs`` keeps the epoch pseudonyms across rounds (the PS's epoch key, each
    client's pseudonym); each delivered row carries the pseudonym the PS recovered
    from it, in the :data:`PSEUDONYM` column.
    """

    group: str = "ristretto255"
    group_size: int | None = None
    groups: Sequence[Sequence[int]] | None = None
    epochs: EpochBook | None = None

    def __post_init__(self) -> None:
        if self.epochs is None:
            object.__setattr__(self, "epochs", EpochBook(self.group))

    def _local_groups(self, cohort: list[int], stable: Sequence[Sequence[int]] | None) -> list[list[int]] | None:
        """The stable groups that make up ``cohort``, in cohort indices; ConfigError unless it is whole groups."""
        if not stable:
            return None
        local = {i: j for j, i in enumerate(cohort)}
        out, covered = [], set()
        for g in stable:
            inside = [i for i in g if i in local]
            if inside and len(inside) != len(g):
                raise ConfigError(f"the cohort must be whole groups: it has {inside} of stable group {sorted(g)}")
            if inside:
                out.append([local[i] for i in g])
                covered |= set(inside)
        if covered != set(cohort):
            raise ConfigError(f"clients {sorted(set(cohort) - covered)} are in no stable group: the cohort must "
                              "be whole groups")
        return out

    def deliver(self, up: Uploads) -> Delivery:
        cohort = up.cohort
        local = {i: j for j, i in enumerate(cohort)}
        drops = {ph: [local[i] for i in ids] for ph, ids in up.drops().items()}
        stable = up.groups or self.groups
        held = self.epochs.pseudonyms(cohort)
        r = shuffle([up.models[i] for i in cohort], dropouts=drops, T=up.T, global_model=up.W_g.tobytes(),
                    group=self.group, adversaries=up.adversaries, raise_on_failure=False, group_size=self.group_size,
                    groups=self._local_groups(cohort, stable), epoch_key=self.epochs.issuer(up.T), identities=cohort,
                    pseudonyms={j: held[i] for j, i in enumerate(cohort)})
        self.epochs.keep({cohort[j]: nym for j, nym in r.held.items()})
        stats = r.stats.values()
        per_p = sum(s["participant_bytes_sent"] + s["participant_bytes_received"] for s in stats)
        ps = sum(s["ps_bytes_sent"] + s["ps_bytes_received"] for s in stats)
        lost = {cohort[j]: why for j, why in loss_causes(r, len(cohort), drops).items()}
        groups = {cohort[i]: g for g, members in enumerate(r.groups or ()) for i in members} or None
        rows = {cohort[j]: row for j, row in r.positions.items()}
        return up.delivery(r.models, rows, lost, groups=groups,
                           blamed={cohort[j]: why for j, why in r.blamed.items()}, failure=r.failure,
                           seconds={ph: s["ps_s"] + s["participant_max_s"] for ph, s in r.stats.items()},
                           bytes={"per_participant": per_p, "ps_total": ps},
                           meta={PSEUDONYM: list(r.pseudonyms), **up.set_column(rows, len(r.models), stable)})


class _Functionality:
    """A channel that delivers every live client's Dec(Enc(W)), or nothing below the real round's threshold.

    A client that drops out before ``unmask`` loses its model; one that drops at
    ``unmask`` is recovered, as in the real round. With stable sets
    (``Uploads.groups``) each set is a round of its own (a whole set always meets
    its own threshold) and each row carries its set: the FL round delivers a set
    with a member lost not at all.
    """

    def __init__(self, group: str = "ristretto255") -> None:
        self.group = group

    def _order(self, up: Uploads, alive: list[int], codec: FixedPoint) -> tuple[list[np.ndarray], dict[int, int]]:
        raise NotImplementedError

    def deliver(self, up: Uploads) -> Delivery:
        cohort = up.cohort
        lost = up.lost_before_unmask()
        alive = [i for i in cohort if i not in lost]
        t0 = time.perf_counter()
        d = up.W_g.size
        per_p = 4.0 * d
        # A stable set has at least MIN_SET members, so one live model never completes one (the shuffle needs 2).
        need = 2 if up.groups else threshold(len(cohort))
        if len(alive) < need:
            why = ("every stable set of the round lacks a member" if up.groups else
                   f"{len(alive)} of {len(cohort)} clients alive, the shuffle needs {need}")
            if up.groups:  # a live member loses its model to its incomplete set
                lost = {**lost, **{i: f"{INCOMPLETE}: {why}" for i in alive}}
            return up.delivery([], {}, lost, failure=why, seconds={"shuffle": time.perf_counter() - t0},
                               bytes={"per_participant": per_p, "ps_total": 0.0})
        got, rows = self._order(up, alive, RoundParams.default(max(len(cohort), params.smallest_round()), d,
                                                                     group=self.group).codec)
        return up.delivery(got, rows, lost, seconds={"shuffle": time.perf_counter() - t0},
                           bytes={"per_participant": per_p, "ps_total": per_p * len(alive)},
                           meta=up.set_column(rows, len(got)))


class IdealShuffle(_Functionality):
    """The ideal functionality: the live clients' Dec(Enc(W)) in a uniformly random order, seeded by ``(seed, T)``."""

    def __init__(self, seed: int, group: str = "ristretto255") -> None:
        super().__init__(group)
        self.seed = seed

    def _order(self, up, alive, codec):
        got, pos = ideal_round([up.models[i] for i in alive], seed=seed_of(self.seed, up.T, IDEAL),
                               b=codec.bits, f=codec.frac_bits, clip=codec.clip)
        return got, {alive[j]: row for j, row in pos.items()}


class Plaintext(_Functionality):
    """No shuffle: the live clients' Dec(Enc(W)) in client order (the encoding as in the real round)."""

    def _order(self, up, alive, codec):
        return [codec.roundtrip(up.models[i]) for i in alive], {i: row for row, i in enumerate(alive)}


def make_channel(shuffle_mode: str, seed: int, group: str = "ristretto255", group_size: int | None = None,
                 epochs: EpochBook | None = None) -> Channel:
    """The channel of ``reshuffle simulate``'s ``shuffle`` setting: ``real``, ``ideal`` or ``none``; ``epochs`` the
    run's pseudonym book (the real channel issues from it)."""
    if shuffle_mode == "real":
        return RealShuffle(group, group_size, epochs=epochs)
    if shuffle_mode == "ideal":
        return IdealShuffle(seed, group)
    if shuffle_mode == "none":
        return Plaintext(group)
    raise ConfigError(f"unknown shuffle {shuffle_mode!r}; choose one of real, ideal, none")
