"""The round's schedule as data, round trips counted from it, and the offline/online split."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reshuffle
from reshuffle.crypto.ot import sample_distinct
from reshuffle.crypto.rand import SeededRandom
from reshuffle.errors import BelowThreshold, ConfigError, EncodingError, Refused, UnexpectedMessage
from reshuffle.protocol import opening
from reshuffle.harness.api import build_round
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.reservation import Reservation, settled_slots
from reshuffle.harness.runner import InProcessRunner
from reshuffle.protocol.phases import SPhase
from reshuffle.protocol.schedule import RESERVE, SCHEDULE, SERVER_TABLE, UPLOAD, closer_of, happy_path, step_of
from reshuffle.protocol.server import Server
from tests.protocol_helpers import expected_models, make_updates, multiset


def test_every_collecting_state_has_one_step_and_a_closer():
    # Prepare: the PS states that collect something.
    collecting = {ph for ph, table in SERVER_TABLE.items() if table}
    # Assert: the schedule covers exactly those, each closer exists on the PS.
    assert {s.phase for s in SCHEDULE} == collecting
    for ph in collecting:
        assert callable(getattr(Server, closer_of(ph)))
    with pytest.raises(KeyError):
        closer_of(SPhase.DONE)


def test_the_catalogue_and_the_participant_table_agree():
    # Every message a step sends is accepted in some participant state, every message a participant
    # accepts is sent by some step; every collected message has its handler on the PS.
    from reshuffle.protocol.phases import PARTICIPANT_TABLE
    from reshuffle.protocol.schedule import ASSIGN_STEP, ONLINE_STAGES, STAGES, stage_of

    from reshuffle.protocol.participant import Participant
    from reshuffle.protocol.schedule import PS_SENDS

    sent = {t for s in SCHEDULE for t in s.sends}
    accepted = {t for table in PARTICIPANT_TABLE.values() for t in table}
    assert sent == accepted == PS_SENDS, (sent ^ accepted)
    for table in PARTICIPANT_TABLE.values():
        assert all(callable(getattr(Participant, name)) for name in table.values())
    for table in SERVER_TABLE.values():
        assert all(callable(getattr(Server, name)) for name in table.values())
    # The phases: every step's, in round order; the online ones are the upload's and what follows.
    assert STAGES == ("setup", "ot", "reserve", "upload", "unmask") and ONLINE_STAGES == ("upload", "unmask")
    for s in SCHEDULE:
        for t in s.sends + s.collects:
            m = 5 if s.invocation == UPLOAD else 1
            assert stage_of(t, m, 5) == s.stage or s.invocation is None, (s.name, t)
    assert ASSIGN_STEP not in SCHEDULE


@pytest.mark.parametrize("R_max", [1, 2, 5])
def test_the_inbox_bound_counts_each_message_of_a_round(R_max):
    # A member receives each invocation's request, U_m and certificate (R_max + 1 invocations), one open
    # request, restart and slot answer per opened iteration (at most R_max), everything else at most once.
    from reshuffle.protocol.messages import MsgType as T
    from reshuffle.protocol.schedule import PS_SENDS, inbox_bound, max_inbox

    per_invocation = {T.MASK_REQUEST, T.UNMASK_REQUEST, T.CERTIFICATE}
    per_opening = {T.OPEN_REQUEST, T.RESTART, T.SLOT_RESPONSE}
    want = {t: R_max + 1 if t in per_invocation else R_max if t in per_opening else 1 for t in PS_SENDS}
    assert inbox_bound(R_max) == want
    assert max_inbox(R_max) == sum(want.values())


def test_maskedsum_steps_split_by_invocation():
    # The same PS state is offline for a reservation iteration and online for the upload.
    assert step_of(SPhase.MASKED, 1, 5).invocation == RESERVE and step_of(SPhase.MASKED, 1, 5).offline
    assert step_of(SPhase.MASKED, 5, 5).invocation == UPLOAD and not step_of(SPhase.MASKED, 5, 5).offline
    assert step_of(SPhase.BLAME, 5, 5).offline is False


def _iterations(steps):
    return steps.count("reserve-consent")  # the first iteration's vectors ride on the ot step


@pytest.mark.parametrize("workers", [None, 2])
def test_executed_trips_follow_the_happy_path_table(workers):
    # Execute
    r = reshuffle.shuffle(make_updates(6, d=8, seed=1), seed=2, workers=workers)
    trips = r.round_trips
    # Assert: what ran is the table's happy path, and only the upload's three steps need the models.
    assert trips["steps"] == [s.name for s in happy_path(_iterations(trips["steps"]))]
    assert trips["round_trips"] == len(trips["steps"])
    assert trips["round_trips_after_training"] == 3
    assert trips["steps"][-3:] == ["upload", "upload-consent", "upload-reveal"]


@pytest.mark.parametrize("workers", [None, 2])
def test_prepare_runs_offline_without_models_then_upload_delivers(workers):
    # Prepare
    N = 7
    ups = make_updates(N, d=10, seed=3)
    # Execute: the offline part runs with no model at all.
    pr = reshuffle.prepare(N, 10, seed=4, workers=workers)
    offline = pr.round_trips
    r = pr.upload(ups)
    # Assert
    assert offline == r.round_trips["round_trips"] - 3 and offline >= 6
    assert multiset(r.models) == expected_models(ups, range(N))
    assert r.online == list(range(N))
    # The same seed gives the same round as shuffle() with the models known from the start.
    same = reshuffle.shuffle(ups, seed=4, workers=workers)
    assert multiset(same.models) == multiset(r.models) and same.positions == r.positions


def test_upload_is_checked_and_runs_once():
    pr = reshuffle.prepare(4, 6, seed=1)
    with pytest.raises(ConfigError, match="4 models of length 6"):
        pr.upload(make_updates(3, d=6))
    with pytest.raises(ConfigError, match="4 models of length 6"):
        pr.upload(make_updates(4, d=5))
    bad = make_updates(4, d=6)
    bad[2][0] = np.nan
    with pytest.raises(EncodingError, match="NaN"):
        pr.upload(bad)
    pr2 = reshuffle.prepare(4, 6, seed=1)
    pr2.upload(make_updates(4, d=6))
    with pytest.raises(ConfigError, match="already"):
        pr2.upload(make_updates(4, d=6))


@pytest.mark.parametrize("bad", [(-1, 4), (3, 0), (True, 4)])
def test_prepare_rejects_bad_sizes(bad):
    with pytest.raises(ConfigError):
        reshuffle.prepare(*bad)


def test_participant_without_a_model_drops_out_of_the_upload_only():
    # Prepare: participant 2 is still training when the upload is asked for.
    N = 6
    ups = make_updates(N, d=8, seed=5)
    pr = reshuffle.prepare(N, 8, seed=6)
    pr._runner.provide_models({i: u for i, u in enumerate(ups) if i != 2})
    # Execute
    r = pr._finish()
    # Assert: the others' models arrive; participant 2 refused the upload and is not online.
    assert r.online == [0, 1, 3, 4, 5]
    assert multiset(r.models) == expected_models(ups, [0, 1, 3, 4, 5])
    assert any(isinstance(e, UnexpectedMessage) and "no model yet" in str(e) for e in r.participant_errors[2])


def test_grouped_prepare_then_upload():
    N = 10
    ups = make_updates(N, d=6, seed=7)
    pr = reshuffle.prepare(N, 6, seed=8, group_size=5)
    r = pr.upload(ups)
    assert multiset(r.models) == expected_models(ups, range(N))
    assert r.round_trips["round_trips_after_training"] == 3
    assert r.round_trips["steps"][0] == "assign"


# ---------------------------------------------------------------- the reservation ends once everyone settled
class _EarlyUpload(Server):
    """Jumps to the upload right after iteration 1, whatever the counts."""

    def _open_invocation(self, m, mask_set, counts, excluded=()):
        if 1 < m <= self.params.R_max:
            m = self.params.upload_m
        return super()._open_invocation(m, mask_set, counts, excluded)


class _ExtraIteration(Server):
    """Runs another iteration although the counts settled every party."""

    def _open_invocation(self, m, mask_set, counts, excluded=()):
        if m == self.params.upload_m and self.slots.last < self.params.R_max:
            m = self.slots.last + 1
        return super()._open_invocation(m, mask_set, counts, excluded)


def _run_with(server_cls, n, seed):
    ups = make_updates(8, d=6, seed=seed)
    server, parts = build_round(ups, RoundParams.default(8, 6, n=n), seed=seed)
    server.__class__ = server_cls
    with pytest.raises(BelowThreshold):
        InProcessRunner(server, parts).run()
    return parts


def test_members_refuse_an_upload_while_parties_may_still_pick():
    # n = 8 slots for 10 parties: someone is always unsettled after iteration 1.
    parts = _run_with(_EarlyUpload, 8, 1)
    for pp in parts.values():
        assert any(isinstance(e, Refused) and "skips iterations" in str(e) for e in pp.view.errors)
        assert pp.params.upload_m not in pp.view.uploaded


def test_members_refuse_an_iteration_after_everyone_settled():
    parts = _run_with(_ExtraIteration, None, 2)
    for pp in parts.values():
        assert any(isinstance(e, Refused) and "every party has settled" in str(e) for e in pp.view.errors)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12), st.integers(0, 2), st.integers(0, 2**32 - 1))
def test_reservation_ends_only_when_no_honest_party_can_still_settle(members, decoys, seed):
    # Honest parties (decoys included) pick by the rule; the reservation stops where slots_done says.
    n, k = 4 * (members + decoys), 8
    rng = SeededRandom(seed.to_bytes(4, "big"), b"test")
    parties = [Reservation.start(sample_distinct(n, min(k, n), rng)) for _ in range(members + decoys)]
    history = []
    for _ in range(8):
        counts = np.zeros(n, dtype=np.int64)
        parties = [p_.choose(rng) for p_ in parties]
        for p_ in parties:
            if p_.pick is not None:
                counts[p_.pick] += 1
        history.append(tuple(int(c) for c in counts))
        parties = [p_.observe(counts) for p_ in parties]
        if opening.slots_done(members, decoys, len(settled_slots(history)), 0):
            # Assert: every party holds a slot, so no further iteration could change anything.
            assert all(p_.slot is not None for p_ in parties)
            return
    # Not done: someone is unsettled.
    assert any(p_.slot is None for p_ in parties)


# -- slots sized for one reservation iteration (docs/protocol.md §11) -- #
@settings(max_examples=60, deadline=None)
@given(picks=st.integers(2, 400), d=st.integers(1, 1 << 20), b=st.sampled_from([32, 64]))
def test_default_slots_is_the_least_n_for_one_iteration_within_the_table_budget(picks, d, b):
    from reshuffle.crypto.ot import TOKEN_BYTES
    from reshuffle.protocol.params import MAX_SLOTS, ONE_ITERATION, SLOT_BUDGET, default_slots, p_one_iteration

    # Execute
    n = default_slots(picks, d, b)
    # Assert: never fewer than 4 slots a party, never more than the wire allows.
    assert 4 * picks <= n <= max(4 * picks, MAX_SLOTS)
    if n > 4 * picks:
        # Above the floor, the OT table stays within its share of one upload ...
        assert n * TOKEN_BYTES * SLOT_BUDGET <= picks * d * b // 8
        # ... and n is the least count that reaches the target, unless the budget stopped it first.
        if p_one_iteration(picks, n) >= ONE_ITERATION:
            assert p_one_iteration(picks, n - 1) < ONE_ITERATION
        else:
            assert (n + 1) * TOKEN_BYTES * SLOT_BUDGET > picks * d * b // 8 or n == MAX_SLOTS


def test_one_iteration_chance_in_closed_form_matches_a_simulated_reservation():
    from reshuffle.bench.round import reservation_monte_carlo

    # Execute: the default parameters for a LeNet-sized model, 400 seeded reservations.
    mc = reservation_monte_carlo(20, 400, d=61_706, seed=3)
    # Assert: the closed form is the target, and the simulated rate agrees within 4 standard errors.
    assert mc["one_iteration_closed_form"] >= 0.9
    assert abs(mc["iterations"]["1"] - mc["one_iteration_closed_form"]) < 4 * (0.9 * 0.1 / 400) ** 0.5
    assert mc["participant_without_slot"] == 0


def test_small_models_keep_four_slots_a_party():
    # A 64-word model cannot pay for a large OT table: n stays at 4·(N + d_y), as the tests' rounds use.
    p = RoundParams.default(20, 64)
    assert p.n == 4 * (20 + p.decoys)
    # A LeNet-sized one buys n = 2,200 at N = 20: one iteration with chance 0.9.
    assert RoundParams.default(20, 61_706).n == 2200
