"""Stable anonymity sets: the clients partitioned once per run, sampled whole, delivered all or none.

A PS that runs every round knows each round's roster. If the roster changes
(cohort sampling, dropouts) and the models of one client link across rounds by
their content, the pattern of rounds a client took part in names it
(docs/security/linking.md). Members that are always delivered together have the
same pattern, so the roster cannot tell them apart: the run partitions its
clients once into sets of at least ``set_size``, keeps the partition across
rounds, resume and restart (it is part of the checkpoint), samples whole sets,
and a set delivers all its members' models or none.

:func:`form_sets` draws the partition with the protocol's fair assignment
(:func:`reshuffle.harness.api.form_groups`, the real commit-reveal among the
clients, its PRG seeded from the run's seed), in every shuffle mode, so a run's
real, ideal and plaintext forms share one partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from reshuffle.errors import ConfigError
from reshuffle.harness.api import form_groups
from reshuffle.protocol.groups import MIN_GROUP
from reshuffle.protocol.params import MAX_PARTICIPANTS
from reshuffle.run.sampling import STABLE_SETS, seed_of

#: The smallest set a participant accepts: the protocol's smallest group (two honest members and a colluder).
MIN_SET = MIN_GROUP
#: Checkpoint state key of the partition, and the cause prefix of a model its incomplete set takes down.
SETS_STATE = "stable_sets"
INCOMPLETE = "stable set incomplete"


def check_set_size(k: object) -> int:
    """``k`` as an int in [MIN_SET, MAX_PARTICIPANTS]; a one-line ConfigError otherwise."""
    if not isinstance(k, int) or isinstance(k, bool) or k < MIN_SET:
        raise ConfigError(f"set_size must be an int of at least {MIN_SET} (the smallest anonymity set a participant "
                          f"accepts), got {k!r}")
    if k > MAX_PARTICIPANTS:
        raise ConfigError(f"set_size must be at most {MAX_PARTICIPANTS} (the most participants a round of the "
                          f"protocol holds), got {k}")
    return k


def form_sets(ids: Iterable[int], k: int, seed: int) -> tuple[tuple[int, ...], ...]:
    """Partition ``ids`` into sets of at least ``k`` (nearly equal sizes) with the protocol's fair assignment.

    ``seed`` is the run's seed; the assignment's own is ``seed_of(seed, STABLE_SETS)``
    (a stream of its own). The assignment's group count ⌊n/k⌋ gives every set k to
    2k − 1 members. Each set is sorted; the sets are ordered by their least member,
    so a set's index depends on the partition alone.
    """
    ids = sorted(set(int(i) for i in ids))
    check_set_size(k)
    if len(ids) < k:
        raise ConfigError(f"{len(ids)} clients cannot form one stable anonymity set of set_size={k}: "
                          f"lower set_size (at least {MIN_SET}) or add clients")
    groups = form_groups(ids, k, seed=seed_of(seed, STABLE_SETS))
    return tuple(sorted((tuple(sorted(int(i) for i in s)) for s in groups), key=lambda s: s[0]))


@dataclass(frozen=True)
class StableSets:
    """A run's partition of its clients into stable anonymity sets (index → sorted members)."""

    sets: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        seen: set[int] = set()
        for s in self.sets:
            if len(s) < MIN_SET:
                raise ConfigError(f"a stable set of {len(s)} members is below the smallest, {MIN_SET}")
            if seen & set(s):
                raise ConfigError(f"clients {sorted(seen & set(s))} are in two stable sets")
            seen |= set(s)
        object.__setattr__(self, "_of", {i: j for j, s in enumerate(self.sets) for i in s})

    @classmethod
    def form(cls, clients: int, k: int, seed: int) -> "StableSets":
        """The partition of clients 0..clients−1 (:func:`form_sets`), checked to cover each exactly once."""
        out = cls(form_sets(range(clients), k, seed))
        if out.members() != list(range(clients)):
            raise ConfigError(f"the assignment returned sets covering {out.members()}, not clients 0..{clients - 1}")
        return out

    def of(self, client: int) -> int:
        """The index of ``client``'s set."""
        return self._of[client]  # type: ignore[attr-defined]

    def members(self) -> list[int]:
        return sorted(self._of)  # type: ignore[attr-defined]

    def within(self, cohort: Iterable[int]) -> tuple[tuple[int, ...], ...]:
        """The sets of ``cohort`` (which must be a union of whole sets), in index order."""
        cohort = set(cohort)
        idx = sorted({self.of(i) for i in cohort})
        out = tuple(self.sets[j] for j in idx)
        if sum(len(s) for s in out) != len(cohort):
            raise ConfigError("a cohort of stable sets must hold every member of each set it draws")
        return out

    def as_data(self) -> list[list[int]]:
        """JSON form, for a checkpoint."""
        return [list(s) for s in self.sets]

    @classmethod
    def from_data(cls, data: object, clients: int) -> "StableSets":
        """The partition a checkpoint holds; it must cover clients 0..clients−1 exactly."""
        try:
            sets = tuple(tuple(int(i) for i in s) for s in data)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise ConfigError(f"stable sets in the checkpoint are not lists of client ids: {data!r}") from None
        out = cls(sets)
        if out.members() != list(range(clients)):
            raise ConfigError(f"the checkpoint's stable sets cover clients {out.members()}, not 0..{clients - 1}")
        return out


def check_simulation(cfg) -> None:
    """Refuse the settings of a simulation (a :class:`~reshuffle.run.config.SimConfig`) its stable sets cannot hold."""
    if not cfg.stable_sets:
        return
    if cfg.group_size is not None:
        raise ConfigError("group_size draws new groups every round, and the stable sets are the groups: "
                          "use set_size, or stable_sets=false")
    # The clients first: with fewer clients than set_size that is the reason, whatever else set_size exceeds.
    if isinstance(cfg.set_size, int) and cfg.clients < cfg.set_size:
        raise ConfigError(f"{cfg.clients} clients cannot form one stable anonymity set of set_size={cfg.set_size}: "
                          f"lower set_size (at least {MIN_SET}) or add clients")
    check_set_size(cfg.set_size)


def all_or_none(sets: Sequence[Sequence[int]], lost: Mapping[int, str]) -> dict[int, str]:
    """The members a set's missing member takes down with it: client → cause, for every set with a lost member.

    ``lost`` maps each client whose model is missing to its cause. A set delivers
    all its members' models or none, so the other members of such a set are lost
    too (honest members do not let a set with a missing member be recovered).
    """
    out: dict[int, str] = {}
    for s in sets:
        gone = [i for i in s if i in lost]
        if gone:
            why = f"{INCOMPLETE}: client {gone[0]} {lost[gone[0]]}"
            out.update({i: why for i in s if i not in lost})
    return out


def set_losses(sets: StableSets, records: Sequence) -> dict:
    """metrics.json's ``stable_sets``: the partition, and the models and rounds the all-or-none rule cost.

    ``models_lost`` counts the models lost only because another member of their
    set was missing; ``rounds_lost`` the rounds in which that left nothing
    delivered.
    """
    lost = [sum(1 for why in r.lost.values() if why.startswith(INCOMPLETE)) for r in records]
    return {"sets": sets.as_data(), "sizes": sorted({len(s) for s in sets.sets}), "models_lost": sum(lost),
            "rounds_lost": [r.round for r, n in zip(records, lost) if n and r.models_received == 0]}
