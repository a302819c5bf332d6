"""The explorers over the epoch's start: the group assignment, and issuance in the epoch's first round.

Each check is shown against a weak instance first (a member without one floor, or one that keeps its
pseudonym too late): the explorer must find the break there, and nothing on the members as they ship.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.adversaries.assignexplore import AssignExploreConfig, explore_assignment
from reshuffle.adversaries.dcexplore import DCExploreConfig, explore_dc
from reshuffle.adversaries.explorer import ExploreConfig, explore
from reshuffle.adversaries.weak import (
    DCKeepsPseudonymOnlyAfterUpload,
    KeepsPseudonymOnlyWhenDone,
    TakesUngroupedRounds,
)
from reshuffle.errors import ConfigError
from reshuffle.protocol.params import TrustFloors


def _checks(violations) -> set[str]:
    return {v.split(":")[0] for v in violations}


# --------------------------------------------------------------------------- the assignment
def test_no_schedule_of_the_assignment_breaks_a_members_floors():
    r = explore_assignment()
    assert r.complete and not r.violations, r.violations
    assert {"GROUP_OPEN", "GROUP_COMMITS", "GROUP_CERT", "GROUP_REVEALS", "ROUND_START"} <= set(r.kinds)
    # Every honest member assigned on some path, groups started, and a redraw (9 -> 8 candidates) taken.
    assert r.assigned > 0 and r.rounds_started > 0 and r.kinds["GROUP_OPEN"] > 1


def test_it_finds_the_list_of_one_group_on_members_without_the_candidate_floor():
    # Without the floor the exact list of g (the target, participant 1, with its colluder) is drawn: the
    # PS's own choice of the target's group.
    r = explore_assignment(AssignExploreConfig(floors=TrustFloors(group=4, draw=1), budget=120))
    found = [v for v in r.violations if v.startswith("no draw the PS chose: member 1 ")]
    assert found and "drawn from 4 candidates" in found[0], r.violations
    assert "schedule: GROUP_OPEN g=4 exactly g → GROUP_COMMITS 1 all → GROUP_CERT 1 → GROUP_REVEALS 1" in found[0]


def test_it_finds_a_group_below_the_floor_on_members_with_a_lower_one():
    r = explore_assignment(AssignExploreConfig(floors=TrustFloors(group=3), budget=120, N=8))
    below = [v for v in r.violations if v.startswith("no group below the floor")]
    assert below and "GROUP_OPEN g=3 all" in below[0]


def test_it_finds_the_round_of_no_group_on_members_that_take_one():
    r = explore_assignment(AssignExploreConfig(N=8), TakesUngroupedRounds)
    rounds = [v for v in r.violations if v.startswith("no round without a group")]
    assert len(rounds) == 7 and all(v.endswith("schedule: ROUND_START of no group") for v in rounds)


def test_the_assignment_explorer_refuses_federations_it_cannot_play():
    for bad in ({"N": 5}, {"N": 7}, {"colluders": ()}, {"colluders": (0, 1, 2, 3)}, {"budget": 0}):
        with pytest.raises(ConfigError):
            explore_assignment(AssignExploreConfig(**bad))


@settings(max_examples=15, deadline=None)
@given(st.sets(st.integers(1, 13), min_size=4, max_size=13), st.integers(5, 6))
def test_no_member_with_default_floors_is_drawn_from_a_list_below_2g(others, g):
    # Whatever list the PS sends (always with the target, participant 0), a group forms only from 2g or more.
    from reshuffle.games.rounds import listed_assignment
    from reshuffle.harness.api import identities

    listed = sorted({0, *others})
    a, _ = listed_assignment(1, listed, g, TrustFloors(), identities(14))
    assert (a is None) == (len(listed) < 2 * g)
    if a is not None:
        assert min(len(grp) for grp in a.groups) >= g


# --------------------------------------------------------------------------- issuance in the epoch's first round
# The shipped participant under the protocol's rule: tests/test_explorer.py's complete searches run these
# checks too (no honest member silenced, never asks twice) and find nothing.
def test_a_ps_that_records_at_the_ot_answer_silences_nobody():
    # Issuance is idempotent and the member keeps its request from the moment it draws it: whenever the PS
    # records (here at the answer, the rule that once locked groups out), a round it stops leaves every
    # recorded member holding the request that gets it the same pseudonym next time.
    r = explore(ExploreConfig(announce=False, forge=False, issuance="answer", budget=150))
    assert not [v for v in r.violations if v.check in ("no honest member silenced", "never asks twice")]
    assert r.states > 1


def test_it_finds_a_member_that_keeps_its_pseudonym_too_late():
    r = explore(ExploreConfig(announce=False, forge=False, budget=200), KeepsPseudonymOnlyWhenDone)
    checks = {v.check for v in r.violations}
    assert {"no honest member silenced", "never asks twice"} <= checks, r.violations
    with pytest.raises(ConfigError):
        explore(ExploreConfig(issuance="upload"))


def test_the_dcnet_explorer_finds_a_member_that_keeps_its_pseudonym_too_late():
    # (tests/test_dcexplore.py runs the shipped member through the same checks and finds nothing.)
    r = explore_dc(DCExploreConfig(budget=120, depth=9), DCKeepsPseudonymOnlyAfterUpload)
    assert "no honest member silenced" in _checks(r.violations), r.violations
