"""The PS picks the epoch's first rounds: the attacks the many-rounds games play, each against the members'
floors and against a weak instance without them (the games' rows run them with more trials)."""

from __future__ import annotations

from fractions import Fraction

from reshuffle.games.rounds import _expected_inverse_honest, draw_trial, issuance_trial, reissue_trial
from reshuffle.protocol.params import TrustFloors


def test_the_worst_list_the_floors_take_is_2g_padded_with_every_colluder():
    # E[1/h_T] of a uniform draw: the whole federation of 20 (c = 4) against 2g = 10 padded with all four.
    assert _expected_inverse_honest(20, 5, 4) == Fraction(1, 4)
    assert _expected_inverse_honest(10, 5, 4) == Fraction(1, 3)
    assert _expected_inverse_honest(5, 5, 4) == 1  # exactly g: the target alone with its colluders


def test_a_ps_that_lists_the_targets_group_gets_a_uniform_draw_of_2g_at_best():
    # Default floors: the list of exactly g and the redraw below 2g are refused; the padded list is drawn.
    for _ in range(3):
        p, h, out = draw_trial(20, 5, 4, TrustFloors())
        assert out.refused[0] == "exactly g" and out.group is not None and len(out.group) == 5
        assert out.refused == ["exactly g"] or out.refused == ["exactly g", "padded, redrawn"]
        assert p == 1 / h and h == len([i for i in out.group if i >= 4])


def test_the_control_members_without_the_candidate_floor_take_the_target_alone_with_its_colluders():
    for _ in range(3):
        p, h, out = draw_trial(20, 5, 4, TrustFloors(draw=1))
        assert out.group == (0, 1, 2, 3, 4) and (p, h) == (1.0, 1) and not out.refused


def test_a_colluders_drop_in_the_first_round_silences_nobody_and_a_restart_names_nobody():
    # The Shamir-shared round here (the games alternate it with the DC-net round).
    assert issuance_trial(5, 1, dcnet=False) == 0
    assert issuance_trial(5, 1, dcnet=False, stage="ot") == 0  # they ask again, and are issued
    assert reissue_trial(5, 1, dcnet=False) == 0.25  # uniform among the 4 honest members


def test_the_controls_a_pseudonym_kept_too_late_silences_four_and_a_lost_one_names_the_target():
    assert issuance_trial(5, 1, dcnet=False, kept_after_failure=False) == 4
    assert reissue_trial(5, 1, dcnet=False, keeps_state=False) == 1.0
