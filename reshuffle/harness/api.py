"""One-call API: ``shuffle`` runs the real protocol in process; ``ideal_shuffle`` its ideal functionality."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from reshuffle.crypto.encoding import FixedPoint
from reshuffle.crypto.prg import ring_dtype
from reshuffle.crypto.ot import sample_distinct
from reshuffle.crypto.rand import OS_RANDOM, SeededRandom
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, CertificateAuthority, SigningKey
from reshuffle.errors import BelowThreshold, ConfigError, EncodingError
from reshuffle.protocol.driver import PS, make_ps
from reshuffle.protocol.grouped import GroupedParticipant, GroupedServer
from reshuffle.protocol import messages as msg
from reshuffle.protocol.assignment import AssignmentClient, AssignmentCollector
from reshuffle.protocol.groups import Assignment, CheckCache, Membership, check_group_size
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.participant import Participant, global_model_hash
from reshuffle.protocol.pseudonym import EpochIssuer, Pseudonym
from reshuffle.harness.parallel import make_runner
from reshuffle.harness.runner import InProcessRunner, Interceptor
from reshuffle.protocol.server import ErrorRecord, RoundOutput, Server, admit


@dataclass
class ShuffleResult:
    """Outcome of one round.

    ``models`` is what the PS recovered, in model-list order; ``online`` the
    indices of the participants whose models are in it. ``positions`` (index →
    position in ``models``) is ground truth that only this harness knows; the PS
    never sees it.
    """

    models: list[np.ndarray]
    online: list[int]
    stats: dict
    positions: dict[int, int]
    params: RoundParams
    output: RoundOutput | None = None
    errors: list[ErrorRecord] = field(default_factory=list)
    participant_errors: dict[int, list] = field(default_factory=dict)
    blamed: dict[int, str] = field(default_factory=dict)
    # Each participant's own view of its outcome (slot, position, errors): harness-only, like positions.
    views: dict = field(default_factory=dict)
    # Coordinates clipped by the fixed-point codec, summed over participants (each knows only its own).
    clipped: int = 0
    failure: str | None = None  # why the round delivered nothing (only with raise_on_failure=False)
    # Anonymity groups (group_size set): each group's members, and why a group delivered nothing.
    groups: list[tuple[int, ...]] | None = None
    failed_groups: dict[int, str] = field(default_factory=dict)
    # group_size, groups (count, sizes, per-group outcome), assignment (attempts, excluded); {} without groups.
    # ``stats`` then also has an "assign" entry shaped like a stage's.
    group_stats: dict = field(default_factory=dict)
    # Round trips the driver executed (protocol/schedule.py): round_trips, round_trips_after_training
    # (from the first step that needs a model), and the steps in order.
    round_trips: dict = field(default_factory=dict)
    # Each delivered model's epoch pseudonym ρ, in the order of ``models`` (what the PS recovered).
    pseudonyms: list[bytes] = field(default_factory=list)
    # Each participant's pseudonym to keep for the epoch's next rounds (None: it has none); harness-only.
    held: dict = field(default_factory=dict, repr=False)


def _check_updates(updates: Sequence[np.ndarray], payload: str = "fixed", b: int = 32) -> list[np.ndarray]:
    ups = [np.asarray(u) for u in updates]
    want = np.dtype(np.float32) if payload == "fixed" else ring_dtype(b)
    if len(ups) < 2:
        raise ConfigError(f"a shuffle needs at least 2 updates, got {len(ups)}")
    d = ups[0].size
    for i, u in enumerate(ups):
        if u.ndim != 1 or u.size != d:
            raise EncodingError(f"update {i} has shape {u.shape}; all must be 1-D of length {d}")
        if u.dtype != want:
            raise EncodingError(f"update {i} has dtype {u.dtype}; expected {want} for payload {payload!r}")
    return ups


class _Colluder:
    """A PS behaviour's colluding participant, as the participant side of the harness sees it."""

    def __init__(self, ps) -> None:
        self.make = ps.make_participant


def _split_adversaries(adversaries, N: int):
    """{pid: participant behaviour} and the PS behaviour (or None), checked."""
    per_pid, ps = {}, None
    for b in adversaries:
        role = getattr(b, "role", None)
        if role == "ps":
            if ps is not None:
                raise ConfigError(f"two PS behaviours: {ps!r} and {b!r}")
            ps = b
            # A PS with colluding participants builds them itself (they share its secrets).
            for pid in getattr(b, "colluders", ()):
                if not 0 <= pid < N or pid in per_pid:
                    raise ConfigError(f"{b!r} colludes with participant {pid}, not a free id of 0..{N - 1}")
                per_pid[pid] = _Colluder(b)
        elif role == "participant":
            for pid in b.pids:
                if not 0 <= pid < N:
                    raise ConfigError(f"{b!r} controls participant {pid}, the round has 0..{N - 1}")
                if pid in per_pid:
                    raise ConfigError(f"participant {pid} is controlled by {per_pid[pid]!r} and {b!r}")
                per_pid[pid] = b
        else:
            raise ConfigError(f"not an adversary behaviour: {b!r}")
    return per_pid, ps


def build_round(
    updates: Sequence[np.ndarray],
    p: RoundParams,
    *,
    seed: int | None = None,
    T: int = 1,
    global_model: bytes = b"",
    participant_cls: type[Participant] | None = None,
    adversaries: Iterable = (),
    group_size: int | None = None,
    overrides: Mapping | None = None,
    group_collusion: float | None = None,
    groups: Sequence[Sequence[int]] | None = None,
    grouped_cls: type[GroupedParticipant] = GroupedParticipant,
    epoch_key: EpochIssuer | None = None,
    identities_of: Sequence[int] | None = None,
    held: Mapping[int, Pseudonym] | None = None,
    dcnet: bool | None = None,
) -> tuple[PS, dict[int, Participant | GroupedParticipant]]:
    """A fresh CA, PS and one participant per update, ready for a runner.

    ``seed`` makes every random choice reproducible (a cryptographic PRG is
    seeded, never numpy's); without it everything comes from OS randomness.
    ``participant_cls`` lets the security games plug in deliberately broken
    participants; ``adversaries`` are behaviours of :mod:`reshuffle.adversaries`.
    With ``group_size`` the PS is a :class:`GroupedServer` (``overrides`` apply to
    every group) and each participant a :class:`GroupedParticipant` around the
    participant it would otherwise be; they share one :class:`CheckCache`. Each
    participant's floor on its group is ``group_size`` (the user's anonymity set), and it
    knows its federation: the ``len(updates)`` participants (a candidate list of all of them
    is taken even below 2g). Without ``group_size`` or ``groups`` the participants are ones
    that opted in to a round bound to no group.
    With ``groups`` (indices into ``updates``) these stable groups run with no new
    assignment: each participant holds its group as persisted state would, and its
    floor is the smallest given group. ``grouped_cls`` lets the games plug in a
    deliberately broken group wrapper.
    ``epoch_key`` is the PS's epoch key kept across an epoch's rounds (default: one
    per round), ``identities_of[i]`` the identity participant i is issued under, and
    ``held[i]`` the pseudonym participant i holds from an earlier round of the epoch.
    Stable groups run the DC-net round (docs/protocol.md, "The DC-net round"); ``dcnet=False`` runs the
    Shamir-shared round in them instead, and so does a round with ``adversaries`` of which one has no
    form in the DC-net round (its ``dc_class`` is None; ``dcnet=True`` then refuses it).
    """
    ident = identities(len(updates), seed)
    participant_cls = participant_cls or Participant
    hostile, ps_behaviour = _split_adversaries(adversaries, len(updates))
    dcnet = _dc_round(hostile, ps_behaviour, groups is not None, dcnet)
    stable = _stable(groups, len(updates)) if groups is not None else None
    if stable is not None:
        group_size = stable.group_size
    cache = CheckCache() if group_size is not None else None
    gh = global_model_hash(global_model)
    # A PS behaviour may hand some participants another global model (what they receive is its choice).
    gh_for = getattr(ps_behaviour, "global_hash_for", lambda pid, h: h)
    participants = {}
    ca = CertificateAuthority.verifier(ident.ca.verify_key)
    for i, u in enumerate(updates):  # None: the participant trains while the offline steps run
        make = hostile[i].make if i in hostile else participant_cls
        args = (i, T, u, ident.keys[i], ident.roster[i], ca, gh_for(i, gh), ident.participant_rng[i])
        participants[i] = make(*args) if group_size is None else grouped_cls(
            *args, make=make, cache=cache, min_group=group_size, federation=len(updates),
            membership=None if stable is None else Membership.of(stable, i))
        if held and held.get(i) is not None:
            getattr(participants[i], "inner", participants[i]).hold_pseudonym(held[i])
        if dcnet and i in hostile and getattr(hostile[i], "dc_class", None) is not None:
            participants[i].dc_class = hostile[i].make_dc  # its member of the DC-net round
    make_server = ps_behaviour.make if ps_behaviour is not None else Server
    names = None if identities_of is None else dict(enumerate(identities_of))
    server = make_ps(T, ident.roster, ident.ps_key, ident.ps_cert, ca, gh, params=p, overrides=overrides,
                     group_size=group_size, collusion=group_collusion, rng=ident.server_rng, make_server=make_server,
                     stable=stable, pseudonyms=epoch_key, identities=names, dcnet=dcnet,
                     make_dc_server=ps_behaviour.make_dc if dcnet and ps_behaviour is not None else None)
    return server, participants


def _dc_round(hostile: dict, ps, stable: bool, dcnet: bool | None) -> bool | None:
    """Whether stable groups run the DC-net round with these behaviours: by default yes when each one plays
    there (``dc_class``), else the Shamir-shared round; ConfigError when asked for one that has no meaning there."""
    played = {id(b): b for b in [*hostile.values(), ps] if b is not None and not isinstance(b, _Colluder)}
    if not played:
        return dcnet
    absent = [b for b in played.values() if getattr(b, "dc_class", None) is None]
    if dcnet and stable and absent:
        b = absent[0]
        raise ConfigError(f"{b.name!r} does not play in the DC-net round: {b.dc_absent or 'no DC-net form'}")
    return dcnet if dcnet is not None else (stable and not absent) or False


def _stable(groups: Sequence[Sequence[int]], N: int) -> Assignment:
    """The stable partition ``groups`` of cohort indices 0..N−1, checked: every index in exactly one group."""
    if isinstance(groups, (str, bytes)) or not all(isinstance(g, Sequence) and not isinstance(g, (str, bytes))
                                                   for g in groups):
        raise ConfigError(f"groups must be a sequence of sequences of cohort indices, got {groups!r}")
    for g in groups:
        for i in g:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < N:
                raise ConfigError(f"groups: {i!r} is not a cohort index 0..{N - 1}")
    a = Assignment.given(groups)
    covered = sorted(i for g in a.groups for i in g)
    if covered != list(range(N)):
        missing = sorted(set(range(N)) - set(covered))
        raise ConfigError(f"groups must cover the cohort 0..{N - 1} exactly once; missing {missing}")
    return a


def form_groups(ids: Sequence[int], group_size: int, seed: int | None = None) -> list[list[int]]:
    """Run the real commit-reveal assignment once, in process, among ``ids``; the stable partition.

    Every participant (one per id, with a fresh certified key) commits, acknowledges
    the list, reveals under the certificate and recomputes the partition itself;
    each group has ``group_size`` to 2·``group_size`` − 1 members. ``seed`` makes it
    reproducible (a cryptographic PRG is seeded; None: OS randomness). Returns the
    groups as sorted lists of ids, in the assignment's order.
    """
    ids = list(ids)
    if any(isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0 for i in ids):
        raise ConfigError(f"ids must be non-negative ints, got {ids!r}")
    ids = [int(i) for i in ids]
    if len(set(ids)) != len(ids):
        raise ConfigError("ids must be distinct")
    g = check_group_size(group_size)
    if len(ids) < g:
        raise ConfigError(f"{len(ids)} participants cannot form a group of {g}")
    rng = SeededRandom(seed, b"form-groups") if seed is not None else OS_RANDOM
    ca = CertificateAuthority.from_seed(rng.bytes(32))
    ps_key = SigningKey.from_seed(rng.bytes(32))
    ps_cert = ca.issue(SERVER_ID, ps_key.verify_key, ROLE_SERVER)
    keys = {i: SigningKey.from_seed(rng.bytes(32)) for i in ids}
    roster = {i: ca.issue(i, keys[i].verify_key) for i in sorted(ids)}
    verifier = CertificateAuthority.verifier(ca.verify_key)
    cache = CheckCache()
    clients = {i: AssignmentClient(i, 0, keys[i], roster[i], verifier,
                                   SeededRandom(rng.bytes(32), b"participant") if seed is not None else OS_RANDOM,
                                   cache, g, federation=len(roster)) for i in roster}
    ps = AssignmentCollector(0, roster, ps_key, ps_cert, g)
    out = ps.start()
    while out:  # the last outbox (the reveals) goes out after the PS has fixed the partition
        for pid, data in out:
            for r in clients[pid].handle(cache.decode(data)):
                ps.receive(pid, admit(pid, r.encode(keys[pid]), roster, set(), 0, msg.Context()))
        out = ps.close() if ps.assignment is None else []
    a = ps.assignment
    for pid in (i for grp in a.groups for i in grp):
        if clients[pid].assignment is None or clients[pid].assignment.digest != a.digest:
            raise BelowThreshold(f"participant {pid} computed another partition than the PS")
    return [list(grp) for grp in a.groups]


@dataclass(frozen=True)
class Identities:
    """A fresh CA, the PS's certified key, each participant's certified key, and their randomness."""

    ca: CertificateAuthority
    ps_key: SigningKey = field(repr=False)
    ps_cert: object
    keys: tuple[SigningKey, ...] = field(repr=False)
    roster: dict
    participant_rng: tuple = field(repr=False)
    server_rng: object = field(repr=False)


def identities(N: int, seed: int | None = None) -> Identities:
    """Keys and certificates for a round of N participants (reproducible with ``seed``: a cryptographic
    PRG is seeded, never numpy's; without it everything comes from OS randomness)."""
    rng = SeededRandom(seed, b"shuffle") if seed is not None else OS_RANDOM
    ca = CertificateAuthority.from_seed(rng.bytes(32))
    ps_key = SigningKey.from_seed(rng.bytes(32))
    ps_cert = ca.issue(SERVER_ID, ps_key.verify_key, ROLE_SERVER)
    keys, roster, prngs = [], {}, []
    for i in range(N):
        sk = SigningKey.from_seed(rng.bytes(32))
        keys.append(sk)
        roster[i] = ca.issue(i, sk.verify_key)
        prngs.append(SeededRandom(rng.bytes(32), b"participant") if seed is not None else None)
    srng = SeededRandom(rng.bytes(32), b"server") if seed is not None else None
    return Identities(ca, ps_key, ps_cert, tuple(keys), roster, tuple(prngs), srng)


ASSIGN = "assign"  # the group assignment's entry in ShuffleResult.stats
PARAM_NAMES = {"n", "k", "t", "c", "R_max", "decoys", "b", "f", "clip", "group", "payload"}
PER_GROUP = {"n", "k", "t", "c"}  # follow each group's size


@dataclass(frozen=True)
class ShuffleOptions:
    """How :func:`shuffle` and :func:`prepare` run a round (their keyword arguments, checked once).

    ``dropouts`` maps a stage to the participants that stop answering from it on;
    ``seed`` makes every random choice reproducible (a cryptographic PRG is seeded,
    never numpy's; None: OS randomness); ``T`` is the round number and
    ``global_model`` the bytes of W_g^T whose hash every message binds;
    ``interceptors`` may tamper with any message; ``adversaries`` are deviating
    participants or PS (:mod:`reshuffle.adversaries`); with ``raise_on_failure``
    False a round that cannot complete returns a result with ``failure`` set
    instead of raising; ``group_size`` and ``group_collusion`` split the round into
    anonymity groups; ``groups`` (cohort indices) runs these stable groups instead, with no
    new assignment; ``workers`` > 1 runs the participants in that many processes;
    ``params`` override RoundParams defaults (``n, k, t, c, R_max, decoys, b, f,
    clip, group, payload``). ``epoch_key``, ``identities`` and ``pseudonyms`` carry
    epoch pseudonyms across rounds (:func:`build_round`'s ``epoch_key``,
    ``identities_of`` and ``held``). ``dcnet=False`` runs stable groups in the Shamir-shared round instead of
    the DC-net round.
    """

    dropouts: Mapping[str, Iterable[int]] | None = None
    seed: int | None = None
    T: int = 1
    global_model: bytes = b""
    interceptors: tuple[Interceptor, ...] = ()
    adversaries: tuple = ()
    raise_on_failure: bool = True
    group_size: int | None = None
    group_collusion: float | None = None
    workers: int | None = None
    groups: tuple[tuple[int, ...], ...] | None = None
    epoch_key: EpochIssuer | None = None
    identities: Sequence[int] | None = None
    pseudonyms: Mapping[int, Pseudonym] | None = None
    dcnet: bool | None = None
    params: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, **kwargs) -> "ShuffleOptions":
        """The options from :func:`shuffle`'s keywords: this class's fields, the rest RoundParams overrides."""
        mine = {f for f in cls.__dataclass_fields__ if f != "params"}
        opts = {k: v for k, v in kwargs.items() if k in mine}
        for k in ("interceptors", "adversaries"):
            if k in opts:
                opts[k] = tuple(opts[k])
        if opts.get("groups") is not None:
            g = opts["groups"]
            if isinstance(g, (str, bytes)) or not all(
                    isinstance(x, Sequence) and not isinstance(x, (str, bytes)) for x in g):
                raise ConfigError(f"groups must be a sequence of sequences of cohort indices, got {g!r}")
            opts["groups"] = tuple(tuple(x) for x in g)
        return cls(**opts, params={k: v for k, v in kwargs.items() if k not in mine}).checked()

    def checked(self) -> "ShuffleOptions":
        unknown = set(self.params) - PARAM_NAMES
        if unknown:
            raise ConfigError(f"unknown round parameter(s): {sorted(unknown)}")
        if self.groups is not None and self.group_size is not None:
            raise ConfigError("groups (stable groups) and group_size (a new assignment) exclude each other")
        if self.group_size is not None or self.groups is not None:
            if self.group_size is not None:
                check_group_size(self.group_size)
            fixed = set(self.params) & PER_GROUP
            if fixed:
                raise ConfigError(f"{sorted(fixed)} follow each group's size and cannot be set with group_size"
                                  " (group_collusion sets each group's c)")
        elif self.group_collusion is not None:
            raise ConfigError("group_collusion needs group_size or groups")
        return self


def shuffle(updates: Sequence[np.ndarray], **options) -> ShuffleResult:
    """Run one real Re-Shuffle round among ``len(updates)`` participants.

    Keywords are :class:`ShuffleOptions`' fields (``dropouts``, ``seed``, ``T``,
    ``global_model``, ``interceptors``, ``adversaries``, ``raise_on_failure``,
    ``group_size``, ``group_collusion``, ``workers``) and RoundParams overrides
    (``n, k, t, c, R_max, decoys, b, f, clip, group, payload``).

    A round that cannot complete raises :class:`BelowThreshold`; with
    ``raise_on_failure=False`` it returns a result with no models and ``failure``
    set instead (the red team reads the participants' views of a failed round).
    ``workers`` > 1 runs the participants in that many processes (same result).

    ``group_size`` g splits the participants into ⌊N/g⌋ anonymity groups of g to 2g − 1 by
    a commit-reveal no single party controls; each group runs a complete round
    with its own n, k, t, c (so these cannot be overridden), and the delivered
    rows of all groups are pooled. A group that fails delivers nothing
    (``failed_groups``) while the others deliver; only when every group fails is
    it a failure of the round. ``group_collusion`` is the fraction of each group
    assumed to collude with the PS (c_j = ⌊f·N_j⌋, default 0.2 as for one round):
    raise it when colluders may be many (docs/protocol.md, "Anonymity groups").
    ``groups`` (a partition of the cohort indices 0..N−1, e.g. :func:`form_groups`'
    mapped onto this round's cohort) runs exactly these stable groups with no new
    assignment; each delivers all its members' models or none (a member that drops
    before its upload fails its group). ``group_stats`` then reports ``group_size``,
    ``groups`` (count, sizes, per-group outcome) and the assignment's attempts;
    ``stats`` gains an ``assign`` entry shaped like a stage's.
    """
    opts = ShuffleOptions.of(**options)
    ups = _check_updates(updates, opts.params.get("payload", "fixed"), opts.params.get("b", 32))
    return _prepare(ups, len(ups), ups[0].size, opts)._finish()


def prepare(N: int, d: int, **options) -> "PreparedRound":
    """Run the offline part of a round for ``N`` participants with models of ``d`` words.

    Setup, share checks, OT, the credential and the reservation need no model
    (docs/protocol.md, "Offline and online"), so they run here, while
    participants train; :meth:`PreparedRound.upload` then finishes the round
    with the trained models in three round trips (upload, consent, reveal).
    Keywords are those of :func:`shuffle`; ``shuffle(updates)`` is
    ``prepare(len(updates), d).upload(updates)`` with the models known from the start.
    """
    for name, v in (("N", N), ("d", d)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (2 if name == "N" else 1):
            raise ConfigError(f"{name} must be an integer >= {2 if name == 'N' else 1}, got {v!r}")
    return _prepare([None] * N, N, d, ShuffleOptions.of(**options))


def _prepare(models, N: int, d: int, o: ShuffleOptions) -> "PreparedRound":
    p = RoundParams.default(N, d, **o.params)
    server, participants = build_round(models, p, seed=o.seed, T=o.T, global_model=o.global_model,
                                       adversaries=o.adversaries, group_size=o.group_size, overrides=dict(o.params),
                                       group_collusion=o.group_collusion, groups=o.groups, epoch_key=o.epoch_key,
                                       identities_of=o.identities, held=o.pseudonyms, dcnet=o.dcnet)
    runner = make_runner(server, participants, o.dropouts, o.interceptors, o.workers)
    grouped = o.group_size if o.groups is None else server.group_size
    pr = PreparedRound(p, N, server, participants, runner, grouped, o.raise_on_failure)
    pr._step(pause_online=True)
    return pr


class PreparedRound:
    """A round whose offline steps have run (:func:`prepare`); :meth:`upload` finishes it."""

    def __init__(self, p: RoundParams, N: int, server: PS, participants, runner: InProcessRunner,
                 group_size: int | None, raise_on_failure: bool) -> None:
        self.params, self.N = p, N
        self._server, self._participants, self._runner = server, participants, runner
        self._group_size, self._raise = group_size, raise_on_failure
        self.failure: str | None = None
        self._done = False
        self._uploaded = False

    @property
    def round_trips(self) -> int:
        """Round trips run so far (all offline until :meth:`upload`)."""
        return self._runner.trips.total

    def _step(self, pause_online: bool) -> None:
        if self._done:
            return
        try:
            self._done = self._runner.advance(pause_online)
        except BelowThreshold as exc:
            if self._raise:
                raise
            self.failure, self._done = str(exc), True

    def upload(self, updates: Sequence[np.ndarray]) -> ShuffleResult:
        """Hand each participant its trained model (``updates[i]`` to participant i) and run the
        online steps. Raises :class:`ConfigError` if called twice or with the wrong number of models."""
        if self._uploaded:
            raise ConfigError("upload() was already called for this round")
        ups = _check_updates(updates, self.params.payload, self.params.b)
        if len(ups) != self.N or ups[0].size != self.params.d:
            raise ConfigError(f"upload needs {self.N} models of length {self.params.d}, got {len(ups)} of "
                              f"length {ups[0].size}")
        self._uploaded = True
        if not self._done:
            self._runner.provide_models(dict(enumerate(ups)))
        return self._finish()

    def _finish(self) -> ShuffleResult:
        self._uploaded = True
        self._step(pause_online=False)
        server, participants, runner, p = self._server, self._participants, self._runner, self.params
        group_size, N = self._group_size, self.N
        out = server.output if self.failure is None else server.failed_output()
        stats = runner.stats.as_dict(N)
        group_stats = {}
        if group_size is not None:
            stats[ASSIGN], group_stats = _group_stats(server, runner, N)
            stats["setup"]["ps_s"] = max(0.0, stats["setup"]["ps_s"] - server.assign_s)
        group_of = {i: j for j, members in enumerate(out.groups) for i in members}
        pos_to_model = {pos: k for k, pos in enumerate(out.valid_positions)}
        positions = {}
        for i, pp in participants.items():
            pos = pp.view.position
            if pos is None or (out.groups and group_of.get(i) not in out.offsets):
                continue
            pos += out.offsets.get(group_of.get(i), 0)  # a group's rows follow the earlier groups' rows
            if pos in pos_to_model and p.upload_m in pp.view.uploaded and i in out.online.get(p.upload_m, ()):
                positions[i] = pos_to_model[pos]
        return ShuffleResult(
            models=out.models,
            online=sorted(positions),
            stats=stats,
            positions=positions,
            params=out.group_params.get(0, p),
            output=out,
            errors=list(out.errors),
            participant_errors={i: pp.view.errors for i, pp in participants.items() if pp.view.errors},
            blamed=dict(out.blamed),
            views={i: pp.view for i, pp in participants.items()},
            clipped=sum(pp.view.clipped for pp in participants.values()),
            failure=self.failure,
            groups=list(out.groups) if group_size is not None else None,
            failed_groups=dict(out.failed),
            group_stats=group_stats,
            round_trips=runner.trips.as_dict(),
            pseudonyms=list(out.pseudonyms),
            held={i: getattr(pp, "inner", pp).pseudonym for i, pp in participants.items()},
        )


def _group_stats(server: GroupedServer, runner: InProcessRunner, N: int) -> tuple[dict, dict]:
    """The assignment as one more stage entry of ``stats``, and ``group_stats``.

    The runner books assignment messages outside the round's stages ("other") and
    the PS's assignment time under "setup"; both are moved to "assign" here.
    """
    a = server.assignment
    log = server.assignment_log
    st = runner.stats
    n = max(N, 1)
    assign = {
        "ps_s": server.assign_s,
        "participant_s": st.participant_s.get("other", 0.0) / n,
        "participant_max_s": max((v.get("other", 0.0) for v in st.per_participant_s.values()), default=0.0),
        "participant_cpu_s": st.participant_cpu_s.get("other", 0.0) / n,
        "participant_bytes_sent": st.participant_sent.get("other", 0) / n,
        "participant_bytes_received": st.participant_recv.get("other", 0) / n,
        "ps_bytes_sent": st.participant_recv.get("other", 0),
        "ps_bytes_received": st.participant_sent.get("other", 0),
    }
    outcome = {}
    for j, s in sorted(server.servers.items()):
        delivered = 0 if j in server.failed or s.output is None else len(s.output.models)
        outcome[j] = {"size": len(a.groups[j]), "c": s.params.c, "t": s.params.t, "delivered": delivered,
                      "failed": server.failed.get(j)}
    groups = {
        "group_size": server.group_size,
        "groups": {"count": len(a.groups) if a else 0, "sizes": [len(g) for g in a.groups] if a else [],
                   "outcome": outcome},
        "assignment": {"attempts": len(log), "excluded": [pid for e in log for pid in e["missing_reveals"]]},
    }
    return assign, groups


def ideal_round(
    updates: Sequence[np.ndarray], seed: int | None = None, b: int = 32, f: int = 24, clip: float = 64.0
) -> tuple[list[np.ndarray], dict[int, int]]:
    """The ideal functionality with its ground truth: (models, index → row).

    Models are ``Dec(Enc(u_i))`` in a uniformly random order; the positions are
    for evaluators only, as in :class:`ShuffleResult`.
    """
    ups = _check_updates(updates)
    codec = FixedPoint(b, f, clip)
    src = SeededRandom(seed, b"ideal") if seed is not None else OS_RANDOM
    order = sample_distinct(len(ups), len(ups), src)
    return [codec.roundtrip(ups[i]) for i in order], {i: row for row, i in enumerate(order)}


def ideal_shuffle(
    updates: Sequence[np.ndarray], seed: int | None = None, b: int = 32, f: int = 24, clip: float = 64.0
) -> list[np.ndarray]:
    """The ideal functionality: a uniformly random permutation of ``Dec(Enc(u_i))``."""
    return ideal_round(updates, seed, b, f, clip)[0]
