"""The red team: every registered behaviour against the real round, one row each.

A row holds when, in every round it played, the behaviour's own verdict held
(:meth:`reshuffle.adversaries.Behaviour.holds`): honest models delivered as
required, expected culprits named, no honest participant named, and for a
deviating PS no honest upload exposed. ``extra_s`` is the attacked round's
in-process time minus a clean round's with the same seed.

The row ``cross-round-linker`` is a passive PS over many real rounds of a synthetic
federation in stable anonymity sets (:func:`linker_row`): it holds when the linker names
no more senders than a linker that knows the true chains would by guessing within each
anonymity set, plus 10 points; its detail says how many it names, and how many it names
when clients are sampled one by one.

Each behaviour is played in both rounds: its row ``NAME`` in the Shamir-shared round
(N participants, no groups) and its row ``dcnet-NAME`` in the DC-net round of two stable
groups of 5 (:mod:`~reshuffle.adversaries.dcteam`), where group 1 is the control that must
deliver every model; a behaviour with no form there (no shares, complaints, objections or
disputes in that round) gets a row that says why and plays nothing. ``outcome`` says what
holds: refused, named with evidence, its group delivers nothing, linked nobody. The row
``dcnet-colluders`` is the DC-net round's curious PS with 2 and 3 colluders. A DC-net row's
``extra_s`` is its whole time per round.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from reshuffle.adversaries.base import adversary_names, make_adversary
from reshuffle.adversaries.crossround import Delivered, figures, synthetic_updates
from reshuffle.errors import ConfigError
from reshuffle.harness.api import form_groups, shuffle


@dataclass
class RedTeamRow:
    behaviour: str
    role: str
    rounds: int
    delivered: int
    expected: int
    culprit_right: int  # rounds in which every expected culprit was named
    wrong: int  # honest participants named, over all rounds (must be 0)
    detected_by: str
    extra_s: float
    holds: bool
    detail: str
    round: str = "shamir"  # "shamir": the Shamir-shared round; "dcnet": the DC-net round of stable groups
    outcome: str = ""  # what holds: refused, named with evidence, its group delivers nothing, linked nobody

    def as_dict(self) -> dict:
        return asdict(self)


def _updates(N: int, d: int, seed: int) -> list[np.ndarray]:
    # Model values only: nothing secret is drawn from numpy.
    rng = np.random.default_rng(seed)
    return [rng.normal(size=d).astype(np.float32) for _ in range(N)]


def run_redteam(rounds: int = 2, N: int = 8, d: int = 16, names: list[str] | None = None,
                on_row: Callable[[RedTeamRow], None] | None = None) -> list[RedTeamRow]:
    """Play each behaviour ``rounds`` times (seeds 1..rounds): among N participants in the Shamir-shared round,
    then in the DC-net round of two stable groups of 5; ``on_row`` hears of each row as it is done. A name
    ``dcnet-NAME`` plays NAME in the DC-net round alone."""
    if rounds < 1 or N < 4:
        raise ConfigError(f"the red team needs rounds >= 1 and N >= 4, got rounds={rounds}, N={N}")
    from reshuffle.adversaries import dcteam

    names = names or [*adversary_names(), LINKER, *dcteam.ROWS]
    rows = []

    def add(row: RedTeamRow) -> None:
        rows.append(row)
        if on_row is not None:
            on_row(row)

    for name in names:
        if name == LINKER:
            add(linker_row())
        elif name in dcteam.ROWS:
            (got, want, right, wrong, ok, detail), secs = dcteam.timed(name, rounds)
            add(RedTeamRow(name, "ps", rounds, got, want, right, wrong, dcteam.STOPPED_BY[name], secs, ok, detail,
                           "dcnet", "linked nobody"))
        elif name.startswith(dcteam.PREFIX) and name[len(dcteam.PREFIX):] in adversary_names():
            add(dc_row(name[len(dcteam.PREFIX):], rounds))
        else:
            add(shamir_row(name, rounds, N, d))
            add(dc_row(name, rounds))
    return rows


def shamir_row(name: str, rounds: int, N: int, d: int) -> RedTeamRow:
    """``name`` in the Shamir-shared round among N participants."""
    b0 = make_adversary(name)
    controlled = set(getattr(b0, "pids", ())) | set(getattr(b0, "colluders", ()))
    honest = [i for i in range(N) if i not in controlled]
    got = want = right = wrong = 0
    extra, ok, details = 0.0, True, []
    for seed in range(1, rounds + 1):
        ups = _updates(N, d, seed)
        t0 = time.perf_counter()
        shuffle(ups, seed=seed)
        clean = time.perf_counter() - t0
        b = make_adversary(name)
        t0 = time.perf_counter()
        r = shuffle(ups, seed=seed, adversaries=[b], raise_on_failure=False)
        extra += time.perf_counter() - t0 - clean
        v = b.holds(r, honest)
        got, want = got + v.delivered, want + v.expected
        right += v.culprits_right
        wrong += len(v.wrong)
        ok = ok and v.holds
        if v.detail:
            details.append(v.detail)
    if b0.role == "ps":
        outcome = "linked nobody"
    elif b0.culprits and right == rounds:
        outcome = "named with evidence"
    else:
        outcome = "refused or tolerated: every honest model delivered"
    return RedTeamRow(name, b0.role, rounds, got, want, right, wrong, b0.stopped_by, extra / rounds, ok,
                      "; ".join(dict.fromkeys(details)), "shamir", outcome)


def dc_row(name: str, rounds: int) -> RedTeamRow:
    """``name`` in the DC-net round of two stable groups of 5, or the row that says why it has no form there."""
    from reshuffle.adversaries import dcteam

    b0 = make_adversary(name)
    row = dcteam.PREFIX + name
    if b0.dc_class is None:
        return RedTeamRow(row, b0.role, 0, 0, 0, 0, 0, "", 0.0, True, b0.dc_absent or "not played in this round",
                          "dcnet", "no such step")
    (got, want, right, wrong, ok, detail), secs = dcteam.timed(row, rounds)
    return RedTeamRow(row, b0.role, rounds, got, want, right, wrong, "DC-net round: " + b0.dc_outcome, secs, ok,
                      detail, "dcnet", b0.dc_outcome)


#: The red team's row of the passive cross-round linker.
LINKER = "cross-round-linker"
#: How far above the bound's expected success the linker may name senders before its row fails.
LINKER_MARGIN = 0.10


def _linked_rounds(ups: np.ndarray, cohorts: list[list[int]], groups: list[list[list[int]]] | None, seed: int):
    """Real rounds of ``cohorts`` (with their stable groups, as client ids, where given): the PS's record and
    the true senders."""
    seen, senders = [], []
    for T, cohort in enumerate(cohorts):
        local = {c: j for j, c in enumerate(cohort)}
        stable = [[local[i] for i in g] for g in groups[T]] if groups else None
        r = shuffle([ups[T, i] for i in cohort], seed=seed + T, groups=stable)
        who = np.full(len(r.models), -1, np.int64)
        for j, row in r.positions.items():
            who[row] = cohort[j]
        roster = tuple(sorted(int(i) for i in who))
        if groups:
            of = {i: k for k, g in enumerate(groups[T]) for i in g}  # the PS knows each row's group
            rows_g, roster_g = tuple(of[int(i)] for i in who), tuple(of[i] for i in roster)
            seen.append(Delivered(np.stack(r.models), roster, rows_g, roster_g))
        else:
            seen.append(Delivered(np.stack(r.models), roster))
        senders.append(who)
    return seen, senders


def linker_row(clients: int = 16, per_round: int = 8, rounds: int = 12, d: int = 128, seed: int = 1,
               set_size: int = 5) -> RedTeamRow:
    """A passive PS over ``rounds`` real rounds of a synthetic federation.

    The row's verdict is on the default: stable anonymity sets of ``set_size``, formed once by the fair
    assignment, about ``per_round`` clients' worth of whole sets sampled per round. For comparison the
    detail also gives the same federation with ``per_round`` clients sampled one by one.
    """
    ups = synthetic_updates(clients, rounds, d, seed)
    sampler = np.random.default_rng(seed)  # the cohort is public: the PS draws it
    per_client = [sorted(sampler.choice(clients, size=per_round, replace=False).tolist()) for _ in range(rounds)]
    sets = form_groups(range(clients), set_size, seed=seed)
    take = max(1, round(per_round * len(sets) / clients))
    drawn = [sorted(sampler.choice(len(sets), size=take, replace=False).tolist()) for _ in range(rounds)]
    groups = [[sets[j] for j in js] for js in drawn]
    cohorts = [sorted(i for g in gs for i in g) for gs in groups]
    t0 = time.perf_counter()
    f = figures(*_linked_rounds(ups, cohorts, groups, seed))
    secs = time.perf_counter() - t0
    before = figures(*_linked_rounds(ups, per_client, None, seed))
    holds = f.linker_correct <= f.bound_expected + LINKER_MARGIN * f.models
    detail = (f"synthetic federation ({clients} clients, {rounds} real rounds, d={d}), stable sets of {set_size} "
              f"({take} of {len(sets)} sets per round): names {f.linker_correct} of {f.models} senders correctly "
              f"(chance {f.chance:.1f}; a linker with the true chains names {f.bound_named}, mean anonymity set "
              f"{f.bound_mean_set:.2f}); sampling {per_round} clients one by one instead: names "
              f"{before.linker_correct} of {before.models} (mean anonymity set {before.bound_mean_set:.2f})")
    return RedTeamRow(LINKER, "ps", rounds, f.models, f.models, rounds, 0,
                      "stable anonymity sets: a sender's set is its set's honest members", secs, holds, detail)
