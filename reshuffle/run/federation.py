"""What a federation keeps from round to round, in one place: its stable sets, its epochs, its pseudonyms.

:class:`Federation` is held by the FL round of every driver
(:class:`reshuffle.run.round.FLRound`) and saved in the run's checkpoint with it,
so a resumed ``reshuffle simulate`` and a resumed Flower ServerApp continue with
the same sets, epoch schedule and pseudonyms as a run that never stopped. It holds:

- the stable anonymity sets (:mod:`reshuffle.run.sets`): a simulation's partition
  of its clients, formed once per run; or, on Flower, the groups the nodes formed
  by the commit-reveal assignment (one :class:`~reshuffle.protocol.groups.Assignment`
  per formation, and the node each member answers from), which the grid forms and
  runs and this object keeps;
- the epoch pseudonyms (:class:`~reshuffle.run.pseudonyms.EpochBook`): the PS's
  epoch key, the epoch schedule (:class:`~reshuffle.run.pseudonyms.EpochSchedule`),
  and, where the driver plays the clients, each client's pseudonym. The deployed
  rule reads each row's pseudonym from the delivery; rule-aware attackers read
  :meth:`Federation.pseudonym_of`, the same names;
- the all-or-none rule (:meth:`Federation.receive`): a set delivers all its
  members' models or none. A channel marks each row with its set (the
  :data:`~reshuffle.run.delivery.SET` column: the PS knows which group's round a row came from); a set that delivered
  fewer rows than it has members delivers none, and its members' models are lost
  with the cause ``stable set incomplete: ...``. In the real protocol the set's
  honest members already refuse to unmask for a member missing before ``unmask``,
  so the rule finds nothing more to drop there; the ideal and plain channels and
  the Flower grid rely on it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Sequence

from reshuffle.errors import ConfigError, ProtocolError
from reshuffle.protocol.groups import Assignment
from reshuffle.run.delivery import PSEUDONYM, SET, Delivery
from reshuffle.run.pseudonyms import EpochBook, run_pseudonym
from reshuffle.run.sampling import Sampler
from reshuffle.run.sets import INCOMPLETE, SETS_STATE, StableSets, all_or_none

#: Checkpoint data key of the federation's state, and the version of its form.
STATE = "federation"
VERSION = 1
#: Why a round that delivered rows keeps none after the all-or-none rule.
NO_WHOLE_SET = "every stable set of the round lacks a member"


def _set_caused(cause: str) -> bool:
    """Whether a model was lost to its set (the all-or-none rule, or its group's round failing), not to a cause of
    its client's own."""
    return cause.startswith(INCOMPLETE) or _GROUP_FAILED.match(cause) is not None


_GROUP_FAILED = re.compile(r"group \d+ failed: ")


class Federation:
    """The state a run carries across rounds beside W_g: stable sets, epoch schedule and pseudonyms.

    Parameters
    ----------
    sets : a simulation's partition of its clients (None: no sets, or sets the nodes form, as on Flower).
    book : the epoch pseudonym book (default: one epoch, the run).
    seed : a simulated run's seed: rows whose channel recovered no pseudonym carry the ideal one of their
        sender (None: no ideal names, as on Flower, where no one knows a row's sender).
    group_size : on Flower, the size of the groups the nodes form (None: no groups).
    resume_epochs : a resumed run continues the saved epoch, its key and its pseudonyms (a simulation, which
        plays its clients and keeps what they hold). False: it opens a new epoch numbered above the saved one
        (a Flower ServerApp, whose nodes may have restarted without theirs: under the saved issuance record
        they could not ask again until the epoch ends).
    """

    def __init__(self, *, sets: StableSets | None = None, book: EpochBook | None = None, seed: int | None = None,
                 group_size: int | None = None, resume_epochs: bool = True) -> None:
        self.sets, self.seed, self.group_size = sets, seed, group_size
        self.resume_epochs = resume_epochs
        self.book = book if book is not None else EpochBook()
        #: Flower's groups: one Assignment per formation (the first round's, then each newcomers'), and the
        #: node each member (participant id) answered from.
        self.assignments: list[Assignment] = []
        self.nodes: dict[int, int] = {}

    def __repr__(self) -> str:
        return (f"Federation(sets={len(self.members())}, assignments={len(self.assignments)}, "
                f"book={self.book!r})")

    # --- stable sets --------------------------------------------------------------------
    def members(self) -> tuple[tuple[int, ...], ...]:
        """Every stable set, as sorted ids of the population a driver samples (clients, or Flower nodes)."""
        if self.sets is not None:
            return self.sets.sets
        return tuple(tuple(sorted(self.nodes[pid] for pid in grp if pid in self.nodes))
                     for a in self.assignments for grp in a.groups)

    def cohort(self, sampler: Sampler, T: int, population: Sequence[int]) -> list[int]:
        """Round T's cohort out of ``population``.

        A simulation's sets are drawn by its sampler (a :class:`~reshuffle.run.sampling.SetSampler`). Flower's
        groups: every node while none are formed (the round forms them), then the nodes of the whole groups
        the sampler draws among the groups, and every node in no group (enough of them form a new group).
        """
        if self.sets is not None or self.group_size is None:
            return sampler.cohort(T, population)
        if not self.assignments:
            return sorted(population)
        groups = self.members()
        drawn = sampler.cohort(T, list(range(len(groups))))
        known = set(self.nodes.values())
        return sorted([n for j in drawn for n in groups[j]] + [n for n in population if n not in known])

    def adopt(self, assignment: Assignment, nodes: Mapping[int, int]) -> bool:
        """Keep the groups a new assignment formed, and the node each of its members answered from (``nodes``:
        participant id → node); False if this assignment is kept already."""
        if any(a.digest == assignment.digest for a in self.assignments):
            return False
        self.assignments.append(assignment)
        members = {pid for grp in assignment.groups for pid in grp}
        self.nodes.update({pid: node for pid, node in nodes.items() if pid in members})
        return True

    def group_state(self) -> dict | None:
        """Flower's groups as plain data (:meth:`restore_groups` reads it); None before any formed."""
        if not self.assignments:
            return None
        return {"epochs": [a.encode().hex() for a in self.assignments],
                "nodes": {str(pid): node for pid, node in sorted(self.nodes.items())}}

    def restore_groups(self, state: Mapping) -> None:
        """Keep the groups of ``state`` (:meth:`group_state`); ConfigError if it is malformed."""
        try:
            assignments = [Assignment.decode(bytes.fromhex(h)) for h in state["epochs"]]
            nodes = {int(pid): int(node) for pid, node in dict(state["nodes"]).items()}
        except (KeyError, TypeError, ValueError, ProtocolError) as exc:
            raise ConfigError(f"stable groups state is malformed: {exc}") from None
        pids = [pid for a in assignments for grp in a.groups for pid in grp]
        if not assignments or len(pids) != len(set(pids)):
            raise ConfigError("stable groups state is malformed: no epoch, or a participant in two epochs")
        self.assignments, self.nodes, self.group_size = assignments, nodes, assignments[0].group_size

    # --- pseudonyms ---------------------------------------------------------------------
    def pseudonym_of(self, client: int, T: int) -> bytes:
        """The epoch pseudonym a row of ``client`` carries to the rule in round T: the one it holds for T's
        epoch (the real channel's issuance), else the ideal one. A client that holds none yet gets a name no
        history holds, as its row's new pseudonym is."""
        held = self.book.current(client, T)
        return held.name if held is not None else run_pseudonym(self.seed or 0, client)

    # --- a round's delivery -------------------------------------------------------------
    def receive(self, delivery: Delivery, cohort: Sequence[int] | None = None) -> Delivery:
        """``delivery`` as the FL step takes it: the all-or-none rule applied, ``groups`` mapping each client of
        ``cohort`` to its set (where the run has sets), and each row's ideal pseudonym where the channel
        recovered none (a simulation's). Applying it twice changes nothing."""
        d = delivery
        if SET in d.meta:
            d = self._all_or_none(d, cohort or ())
        sets = self.members()
        if cohort is not None and sets:
            of = {i: j for j, s in enumerate(sets) for i in s}
            d = dataclasses.replace(d, groups={i: of[i] for i in cohort if i in of})
        if PSEUDONYM not in d.meta and d.senders is not None and self.seed is not None:
            names = [run_pseudonym(self.seed, int(i)) for i in d.senders]
            d = dataclasses.replace(d, meta={**d.meta, PSEUDONYM: names})
        return d

    def _all_or_none(self, d: Delivery, cohort: Sequence[int]) -> Delivery:
        sets = self.members()
        index = {tuple(s): j for j, s in enumerate(sets)}
        rows: dict[int, list[int]] = {}
        for r, s in enumerate(d.meta[SET]):
            if s is None:
                continue  # a row its channel could not place in a set (the protocol placed it; it stays)
            j = index.get(tuple(int(i) for i in s))
            if j is None:
                raise ConfigError(f"a delivered row names the set {list(s)}, which is not a stable set of this run")
            rows.setdefault(j, []).append(r)
        of = {i: j for j, s in enumerate(sets) for i in s}
        lost = dict(d.lost)
        # The cause names a member that is missing for a cause of its own; the others lost it to their set.
        own = {i: why for i, why in lost.items() if not _set_caused(why)}
        drop: list[int] = []
        # The sets drawn: those of the cohort, of a row, or of a model lost.
        for j in sorted(set(rows) | {of[i] for i in (*lost, *cohort) if i in of}):
            got = len(rows.get(j, ()))
            if got == len(sets[j]):
                continue
            causes = all_or_none([sets[j]], own) or {i: f"{INCOMPLETE}: {got} of {len(sets[j])} models delivered"
                                                     for i in sets[j] if i not in lost}
            lost.update(causes)
            drop += rows.get(j, [])
        if not drop and lost == d.lost:
            return d
        keep = [r for r in range(len(d.models)) if r not in set(drop)]
        failure = d.failure
        if d.models and not keep and failure is None:
            failure = NO_WHOLE_SET
        pick = lambda col: None if col is None else [col[r] for r in keep]  # noqa: E731
        return dataclasses.replace(d, models=pick(d.models), labels=pick(d.labels), senders=pick(d.senders),
                                   meta={k: pick(v) for k, v in d.meta.items()}, lost=lost, failure=failure)

    # --- checkpoint ---------------------------------------------------------------------
    def state(self) -> dict:
        """JSON data for the run's checkpoint: the sets, Flower's groups and the pseudonym book."""
        return {"version": VERSION, "sets": None if self.sets is None else self.sets.as_data(),
                "groups": self.group_state(), "pseudonyms": self.book.state()}

    def restore(self, data: Mapping) -> None:
        """Continue from a checkpoint's round data: its :data:`STATE` entry, or the keys a checkpoint of an
        earlier version kept the same state under (``stable_sets``, ``groups``, ``pseudonyms``)."""
        saved = data.get(STATE)
        if saved is None:
            saved = {"sets": data.get(SETS_STATE), "groups": data.get("groups"), "pseudonyms": data.get("pseudonyms")}
        elif not isinstance(saved, Mapping) or saved.get("version") != VERSION:
            version = saved.get("version") if isinstance(saved, Mapping) else None
            raise ConfigError(f"the checkpoint's federation state is of version {version!r}; this version of "
                              f"Re-Shuffle reads version {VERSION}: start the run again")
        if self.sets is not None:
            if saved.get("sets") is None:
                raise ConfigError("the checkpoint holds no stable anonymity sets; it was saved by a run without them")
            self.sets = StableSets.from_data(saved["sets"], len(self.sets.members()))
        if saved.get("groups") is not None:
            if not isinstance(saved["groups"], Mapping):
                raise ConfigError(f"stable groups saved as {type(saved['groups']).__name__}")
            self.restore_groups(saved["groups"])
        if saved.get("pseudonyms") is not None and self.resume_epochs:
            self.book.restore(saved["pseudonyms"])
        elif isinstance(saved.get("pseudonyms"), Mapping):
            # A new epoch above the saved one's number: a fresh book opens its first at the next round, and its
            # base must exceed the saved base (a clock set back would otherwise number an epoch again).
            base = saved["pseudonyms"].get("base")
            if isinstance(base, int) and not isinstance(base, bool) and self.book.base <= base:
                raise ConfigError(f"the checkpoint's epochs are numbered from {base}, above this run's "
                                  f"{self.book.base}: is the clock set back?")
