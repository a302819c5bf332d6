"""The passive PS as a cross-round linker: model content plus each round's roster names the sender.

A PS that deviates in nothing holds, for every round, the delivered models (unlinked from
their senders: the point of the shuffle) and the round's roster (it runs the round, so it
knows whose models were delivered; with anonymity groups, which group each model came from
and each group's roster). :class:`CrossRoundLinker` does what such a PS can do with them:

1. **Content.** Per round, subtract the mean of the delivered models (this removes W_g and
   the round's common direction) and normalise each row; a client's data pushes its updates
   in a direction of its own, so its rows of different rounds are each other's nearest.
   Large models are first reduced by a count sketch (inner products kept in expectation).
2. **Assignment.** The sender of every row must be a roster member of its round (of its
   group), one row each. For each row and each other round the linker scores how well its
   best match there stands out; a roster member's score is the sum over the rounds it took
   part in, and a Hungarian assignment per round gives every row a member. Coordinate
   ascent then maximises the cohesion of every member's rows (the sum of centred cosines
   between the rows assigned to it), one round's assignment at a time.
3. **Naming.** Members whose presence (and group) pattern is the same are interchangeable:
   the linker names a row's sender only when its member's pattern is unique among the honest
   members, and otherwise reports the set.

:func:`anonymity_bound` is the bound: the anonymity set of each honest participant as a
linker that knows the true chains sees it, the honest members whose presence and group in
every round so far equal the participant's. :func:`figures` scores a run of rounds with
ground truth the linker never reads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from reshuffle.errors import ConfigError

#: Sketch width used when models are wider than it.
SKETCH_DIM = 8192
#: Sweeps of coordinate ascent at most (each reassigns every round once).
MAX_SWEEPS = 20
_FORBIDDEN = -1e9  # score of a row-member pair in different groups


@dataclass(frozen=True)
class Delivered:
    """What the PS holds about one round.

    ``rows``: the delivered models (or updates: centring removes W_g), one per row, in the
    PS's order. ``roster``: the ids of the members whose models were delivered (as a set:
    its order says nothing about the rows). ``row_groups`` and ``roster_groups``: the group
    each row came from and each roster member's group (None: one group). ``known``: rows
    whose sender the PS knows (its colluders'), row → member id.
    """

    rows: np.ndarray
    roster: tuple[int, ...]
    row_groups: tuple[int, ...] | None = None
    roster_groups: tuple[int, ...] | None = None
    known: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rows = np.asarray(self.rows)
        if rows.ndim != 2 or rows.shape[0] != len(self.roster):
            raise ConfigError(f"a round's rows must be one per roster member: {rows.shape} rows, "
                              f"{len(self.roster)} members")
        if not self.roster:
            raise ConfigError("a round the linker reads delivers at least one row")
        if len(set(self.roster)) != len(self.roster):
            raise ConfigError(f"roster names a member twice: {sorted(self.roster)}")
        if (self.row_groups is None) != (self.roster_groups is None):
            raise ConfigError("give the group of every row and of every roster member, or neither")
        if self.row_groups is not None:
            if len(self.row_groups) != len(self.roster) or len(self.roster_groups) != len(self.roster):
                raise ConfigError("one group label per row and per roster member")
            if sorted(self.row_groups) != sorted(self.roster_groups):
                raise ConfigError("each group must deliver exactly as many rows as it has roster members")
        for r, who in self.known.items():
            if not 0 <= r < len(self.roster) or who not in self.roster:
                raise ConfigError(f"known row {r} -> member {who} is not a row and member of this round")

    def groups_of_rows(self) -> np.ndarray:
        return np.zeros(len(self.roster), np.int64) if self.row_groups is None else np.asarray(self.row_groups)

    def groups_of_roster(self) -> np.ndarray:
        return np.zeros(len(self.roster), np.int64) if self.roster_groups is None else np.asarray(self.roster_groups)


class CountSketch:
    """A linear map R^d → R^k (one bucket and one sign per coordinate): inner products kept in expectation.

    The seed is the attacker's own choice; nothing here is secret.
    """

    def __init__(self, d: int, k: int = SKETCH_DIM, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.d, self.k = d, k
        self.bucket = rng.integers(0, k, size=d)
        self.sign = rng.choice(np.array([-1.0, 1.0], np.float32), size=d)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.d:
            raise ConfigError(f"sketch of width {self.d} got rows of shape {X.shape}")
        if self.d <= self.k:
            return X.copy()
        signed = X * self.sign
        return np.stack([np.bincount(self.bucket, weights=row, minlength=self.k) for row in signed]).astype(np.float32)


def centred(rows: np.ndarray) -> np.ndarray:
    """Rows minus their mean, each scaled to unit norm (a zero row stays zero)."""
    Z = np.asarray(rows, dtype=np.float64)
    Z = Z - Z.mean(axis=0, keepdims=True)
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    return np.divide(Z, norms, out=np.zeros_like(Z), where=norms > 0)


def patterns(rounds: Sequence[Delivered]) -> tuple[np.ndarray, np.ndarray]:
    """(member ids, pattern matrix): pattern[i, r] = 1 + the group of member i in round r, 0 when absent."""
    ids = np.array(sorted({i for d in rounds for i in d.roster}), dtype=np.int64)
    where = {int(i): k for k, i in enumerate(ids)}
    P = np.zeros((len(ids), len(rounds)), np.int64)
    for r, d in enumerate(rounds):
        P[[where[i] for i in d.roster], r] = d.groups_of_roster() + 1
    return ids, P


def _classes(P: np.ndarray, honest: np.ndarray) -> np.ndarray:
    """Per member, how many honest members share its pattern (0 for a dishonest member)."""
    _, inv, counts = np.unique(P[honest], axis=0, return_inverse=True, return_counts=True)
    out = np.zeros(len(P), np.int64)
    out[np.flatnonzero(honest)] = counts[inv.ravel()]
    return out


def anonymity_bound(rounds: Sequence[Delivered], colluders: Sequence[int] = ()) -> dict[int, int]:
    """Honest member → size of its anonymity set as a linker that knows the true chains sees it.

    The true chain of a member is its delivered rows, so the set is the honest members whose
    pattern (present or not, and in which group, in every round of ``rounds``) equals its own.
    Members with no delivered row are not listed.
    """
    if not rounds:
        return {}
    ids, P = patterns(rounds)
    honest = ~np.isin(ids, np.asarray(list(colluders), np.int64))
    sizes = _classes(P, honest)
    return {int(i): int(s) for i, s, h in zip(ids, sizes, honest) if h}


@dataclass
class Linkage:
    """The linker's result: per round, the member each row is assigned to; per row, its candidate set size."""

    assigned: list[np.ndarray]  # per round: member id per row
    set_size: list[np.ndarray]  # per round: honest members interchangeable with the assigned one (1: named)
    cohesion: float

    def named(self, r: int) -> np.ndarray:
        """Rows of round r whose sender the linker names (its set is one member)."""
        return self.set_size[r] == 1


class CrossRoundLinker:
    """Links rows across rounds and names their senders from the rosters (module docstring).

    ``sketch_dim``: rows wider than this are count-sketched first. ``threshold``: the
    match strength (in standard deviations above a row's mean similarity to another round)
    that counts as "the same sender is there".
    """

    def __init__(self, sketch_dim: int = SKETCH_DIM, threshold: float = 3.0, max_sweeps: int = MAX_SWEEPS,
                 seed: int = 0) -> None:
        if sketch_dim < 16 or threshold <= 0 or max_sweeps < 0:
            raise ConfigError(f"linker needs sketch_dim >= 16, threshold > 0, max_sweeps >= 0; got "
                              f"{sketch_dim}, {threshold}, {max_sweeps}")
        self.sketch_dim, self.threshold, self.max_sweeps, self.seed = sketch_dim, threshold, max_sweeps, seed
        self._sketch: CountSketch | None = None

    def reduce(self, rows: np.ndarray) -> np.ndarray:
        """A round's rows centred, normalised and (when wide) sketched: what the linker keeps of a round."""
        rows = np.asarray(rows)
        if self._sketch is None or self._sketch.d != rows.shape[1]:
            self._sketch = CountSketch(rows.shape[1], self.sketch_dim, self.seed)
        return centred(self._sketch(rows)).astype(np.float32)

    def link(self, rounds: Sequence[Delivered], reduced: Sequence[np.ndarray] | None = None,
             colluders: Sequence[int] = ()) -> Linkage:
        """Assign every honest row of ``rounds`` to a roster member; ``reduced``: the rounds' :meth:`reduce` rows."""
        Z = [self.reduce(d.rows) for d in rounds] if reduced is None else [np.asarray(z) for z in reduced]
        ids, P = patterns(rounds)
        where = {int(i): k for k, i in enumerate(ids)}
        colluding = set(colluders) | {w for d in rounds for w in d.known.values()}
        honest = ~np.isin(ids, np.asarray(sorted(colluding), np.int64))
        # Rows and members the linker assigns: the known rows are set aside with their senders.
        free_rows, free_members = [], []
        for d in rounds:
            known_rows = set(d.known)
            free_rows.append(np.array([a for a in range(len(d.roster)) if a not in known_rows], np.int64))
            taken = set(d.known.values())
            free_members.append(np.array([where[i] for i in d.roster if i not in taken], np.int64))
        assign = self._initial(rounds, Z, P, free_rows, free_members)
        assign, cohesion = self._ascend(rounds, Z, P, free_rows, free_members, assign)
        sizes = _classes(P, honest)
        assigned, set_size = [], []
        for r, d in enumerate(rounds):
            who = np.full(len(d.roster), -1, np.int64)
            who[free_rows[r]] = assign[r]
            for a, w in d.known.items():
                who[a] = where[w]
            assigned.append(ids[who])
            set_size.append(sizes[who])
        return Linkage(assigned, set_size, cohesion)

    # -- the steps -------------------------------------------------------------------------------------

    def _strength(self, Z: Sequence[np.ndarray]) -> np.ndarray:
        """S[a, s]: how far row a's best match in round s stands above its mean similarity there (in SDs)."""
        X = np.concatenate(Z)
        G = X @ X.T
        sizes = np.array([len(z) for z in Z])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        best = np.maximum.reduceat(G, starts, axis=1)
        mean = np.add.reduceat(G, starts, axis=1) / sizes
        sq = np.add.reduceat(G * G, starts, axis=1) / sizes
        sd = np.sqrt(np.maximum(sq - mean * mean, 1e-12))
        S = (best - mean) / sd
        own = np.repeat(np.arange(len(Z)), sizes)
        S[np.arange(len(X)), own] = 0.0  # a row's own round says nothing
        S[:, sizes < 2] = 0.0  # a round of one row has no contrast
        return S

    def _initial(self, rounds, Z, P, free_rows, free_members) -> list[np.ndarray]:
        """Per round, member index per free row: Hungarian on the presence score (step 2)."""
        S = np.minimum(self._strength(Z), 3 * self.threshold) - self.threshold
        present = (P > 0).astype(np.float64)  # members × rounds
        out, at = [], 0
        for r, d in enumerate(rounds):
            rows = free_rows[r] + at
            members = free_members[r]
            score = S[rows] @ present[members].T  # Σ over each member's rounds of the row's match strength there
            out.append(self._assign(score, d, free_rows[r], members, P[:, r]))
            at += len(d.roster)
        return out

    def _assign(self, score: np.ndarray, d: Delivered, rows: np.ndarray, members: np.ndarray,
                pattern_r: np.ndarray) -> np.ndarray:
        if d.row_groups is not None:
            same = d.groups_of_rows()[rows][:, None] + 1 == pattern_r[members][None, :]
            score = np.where(same, score, _FORBIDDEN)
        r_idx, c_idx = linear_sum_assignment(score, maximize=True)
        out = np.empty(len(rows), np.int64)
        out[r_idx] = members[c_idx]
        return out

    def _ascend(self, rounds, Z, P, free_rows, free_members, assign):
        """Coordinate ascent on the cohesion Σ_member Σ_{pairs of its rows} <z_a, z_b>, one round at a time."""
        n_members, dim = len(P), (Z[0].shape[1] if Z else 0)
        total = np.zeros((n_members, dim))
        for r in range(len(rounds)):
            total[assign[r]] += Z[r][free_rows[r]]  # a round assigns each member at most once
        slot = np.zeros(n_members, np.int64)
        for _ in range(self.max_sweeps):
            changed = False
            for r, d in enumerate(rounds):
                z, members = Z[r][free_rows[r]], free_members[r]
                slot[members] = np.arange(len(members))
                others = total[members]
                others[slot[assign[r]]] -= z  # each member's rows of the other rounds
                new = self._assign(z @ others.T, d, free_rows[r], members, P[:, r])
                if not np.array_equal(new, assign[r]):
                    changed = True
                    total[assign[r]] -= z
                    total[new] += z
                    assign[r] = new
            if not changed:
                break
        cohesion = 0.0
        for r in range(len(rounds)):
            own = total[assign[r]]
            cohesion += float(np.sum(Z[r][free_rows[r]] * own) - len(assign[r]))
        return assign, cohesion / 2


@dataclass
class Figures:
    """One round's two figures over the rounds so far (model-weighted, honest senders only).

    The bound: a linker that knows the true chains names ``bound_named`` of ``models`` rows
    (their sender's set is one member), sees sets of ``bound_mean_set`` members on average
    per participant, and guessing within each set names ``bound_expected`` rows correctly
    in expectation. The linker: names ``linker_named`` rows, ``linker_correct`` of them
    correctly, with candidate sets of ``linker_mean_set`` members on average. ``chance``: the
    rows named correctly in expectation by a linker that ignores content (a uniformly random
    assignment of each round's rows to its roster, per group). ``nearest_same``: rows whose
    most similar row of another round is their sender's.
    """

    round: int
    models: int
    participants: int
    bound_named: int
    bound_expected: float
    bound_mean_set: float
    bound_named_participants: int
    linker_named: int
    linker_correct: int
    linker_mean_set: float
    chance: float
    nearest_same: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def nearest_same(Z: Sequence[np.ndarray], senders: Sequence[np.ndarray]) -> float | None:
    """Fraction of rows whose most similar row (centred cosine) of another round has the same sender."""
    if len(Z) < 2:
        return None
    X = np.concatenate(Z)
    who = np.concatenate(senders)
    rnd = np.repeat(np.arange(len(Z)), [len(z) for z in Z])
    G = X @ X.T
    G[rnd[:, None] == rnd[None, :]] = -np.inf
    return float(np.mean(who[np.argmax(G, axis=1)] == who))


def figures(rounds: Sequence[Delivered], senders: Sequence[np.ndarray], linker: CrossRoundLinker | None = None,
            reduced: Sequence[np.ndarray] | None = None, colluders: Sequence[int] = ()) -> Figures:
    """Both figures after the last of ``rounds``; ``senders[r]``: the true member of each row (ground truth,
    read only to score)."""
    if len(senders) != len(rounds) or any(len(s) != len(d.roster) for s, d in zip(senders, rounds)):
        raise ConfigError("one true sender per delivered row of every round")
    linker = linker or CrossRoundLinker()
    Z = [linker.reduce(d.rows) for d in rounds] if reduced is None else list(reduced)
    known = set(colluders) | {w for d in rounds for w in d.known.values()}
    bound = anonymity_bound(rounds, sorted(known))
    out = linker.link(rounds, Z, colluders)
    models = named = correct = 0
    expected = set_total = chance = 0.0
    bound_named = 0
    for r, d in enumerate(rounds):
        who = np.asarray(senders[r])
        keep = ~np.isin(who, np.asarray(sorted(known), np.int64))
        sizes = np.array([bound.get(int(i), 0) for i in who[keep]])
        models += int(keep.sum())
        bound_named += int(np.sum(sizes == 1))
        expected += float(np.sum(1.0 / sizes)) if sizes.size else 0.0
        hit = out.named(r)[keep]
        named += int(hit.sum())
        correct += int(np.sum(hit & (out.assigned[r][keep] == who[keep])))
        set_total += float(np.sum(out.set_size[r][keep]))
        groups = d.groups_of_rows()[keep]
        _, inv, per_group = np.unique(groups, return_inverse=True, return_counts=True)
        chance += float(np.sum((sizes == 1) / per_group[inv.ravel()])) if sizes.size else 0.0
    parts = list(bound.values())
    return Figures(
        round=len(rounds), models=models, participants=len(parts), bound_named=bound_named,
        bound_expected=round(expected, 3), bound_mean_set=round(float(np.mean(parts)), 3) if parts else 0.0,
        bound_named_participants=int(sum(1 for s in parts if s == 1)), linker_named=named, linker_correct=correct,
        linker_mean_set=round(set_total / models, 3) if models else 0.0, chance=round(chance, 3),
        nearest_same=nearest_same(Z, senders),
    )


def synthetic_updates(clients: int, rounds: int, d: int, seed: int, signal: float = 0.8) -> np.ndarray:
    """A federation's updates without training: (rounds, clients, d) float32.

    Client i's update in round t is a direction common to the round plus ``signal`` times a
    direction of its own (its data) plus fresh noise of unit scale: the structure that makes
    real clients' updates each other's nearest across rounds. For the red team and tests; the
    measured figures come from simulated runs.
    """
    rng = np.random.default_rng(seed)
    own = rng.normal(size=(clients, d)) / np.sqrt(d)
    common = rng.normal(size=(rounds, 1, d)) / np.sqrt(d)
    noise = rng.normal(size=(rounds, clients, d)) / np.sqrt(d)
    return (common + signal * own[None] + noise).astype(np.float32)
