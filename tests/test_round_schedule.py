"""The round's schedule as data, round trips counted from it, and the offline/online split."""

import numpy as np
import pytest

import reshuffle
from reshuffle.errors import ConfigError, EncodingError, UnexpectedMessage
from reshuffle.protocol.phases import SERVER_TABLE, SPhase
from reshuffle.protocol.schedule import RESERVE, SCHEDULE, UPLOAD, closer_of, happy_path, step_of
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


def test_maskedsum_steps_split_by_invocation():
    # The same PS state is offline for a reservation iteration and online for the upload.
    assert step_of(SPhase.MASKED, 1, 5).invocation == RESERVE and step_of(SPhase.MASKED, 1, 5).offline
    assert step_of(SPhase.MASKED, 5, 5).invocation == UPLOAD and not step_of(SPhase.MASKED, 5, 5).offline
    assert step_of(SPhase.BLAME, 5, 5).offline is False


def _iterations(steps):
    return steps.count("reserve")


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
