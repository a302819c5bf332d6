"""Parallel driver: same outcome as the single-process runner, clean failures, bytes-only views."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reshuffle
from reshuffle.adversaries import make_adversary
from reshuffle.errors import ConfigError, DecodeError, InvalidShare, Refused
from reshuffle.harness import parallel
from reshuffle.harness.api import build_round
from reshuffle.protocol.messages import MsgType, ShareKind, peek_header, peek_type
from reshuffle.harness.parallel import ParallelRunner, WorkerFailed, decode_view, encode_view
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.participant import Participant, ParticipantView
from reshuffle.wire import Parser

from tests.protocol_helpers import make_updates

# d = 3000 makes each upload (~8 rows of 3k words) larger than a pipe frame's inline limit,
# so the shared-memory slots and their growth are exercised.
D = 3000


def _segments() -> list[str]:
    mine = f"{parallel.SHM_PREFIX}{os.getpid()}_"
    return [n for n in os.listdir("/dev/shm") if n.startswith(mine)]


def _summary(r):
    return {
        "models": [m.tobytes() for m in r.models],
        "positions": r.positions,
        "online": r.online,
        "blamed": r.blamed,
        "counts": r.output.counts,
        "round_online": r.output.online,
        "errors": [(e.stage, e.sender, type(e.error).__name__, str(e.error)) for e in r.errors],
        "participant_errors": {i: [repr(e) for e in es] for i, es in r.participant_errors.items()},
        "revealed": {i: v.revealed for i, v in r.views.items()},
        "stats_shape": {ph: sorted(v) if isinstance(v, dict) else v for ph, v in r.stats.items()},
        "failure": r.failure,
    }


@pytest.mark.parametrize(
    ("kwargs", "delivered", "blamed"),
    [
        ({}, 7, []),
        ({"dropouts": {"upload": [2], "unmask": [5]}}, 6, []),
        ({"adversaries": [make_adversary("jam")]}, None, [1]),
    ],
    ids=["honest", "dropouts", "jammer-blamed"],
)
def test_same_outcome_as_single_process(kwargs, delivered, blamed):
    # Prepare
    ups = make_updates(7, d=D, seed=4)
    # Execute
    serial = reshuffle.shuffle(ups, seed=11, **kwargs)
    par = reshuffle.shuffle(ups, seed=11, workers=2, **kwargs)
    # Assert
    assert _summary(par) == _summary(serial)
    assert sorted(par.blamed) == blamed
    assert delivered is None or len(par.models) == delivered
    assert par.output.n_positions * par.params.row_words * 4 > parallel.INLINE_MAX  # uploads went by slot
    assert _segments() == []


def test_failed_round_reports_the_same_views():
    # Prepare: too many drop out at the upload for t.
    ups = make_updates(6, d=64, seed=2)
    drop = {"upload": [0, 1, 2, 3]}
    # Execute
    serial = reshuffle.shuffle(ups, seed=3, dropouts=drop, raise_on_failure=False)
    par = reshuffle.shuffle(ups, seed=3, dropouts=drop, raise_on_failure=False, workers=3)
    # Assert
    assert serial.failure and par.failure == serial.failure
    assert _summary(par) == _summary(serial)
    assert _segments() == []


class _Crashes(Participant):
    """Raises outside the protocol's error tree when asked for its upload."""

    exc: type = RuntimeError

    def handle(self, data):
        h = peek_header(data)
        if h.type is MsgType.MASK_REQUEST and h.m == self.params.upload_m:
            raise self.exc("boom at the upload")
        return super().handle(data)


class _Exits(Participant):
    def handle(self, data):
        if peek_type(data) is MsgType.MASK_REQUEST:
            os._exit(7)
        return super().handle(data)


def _runner(cls, workers=2):
    ups = make_updates(5, d=D, seed=1)
    server, parts = build_round(ups, RoundParams.default(5, D), seed=1, participant_cls=cls)
    return ParallelRunner(server, parts, workers=workers)


def test_worker_exception_stops_the_round_without_leaking_segments():
    # Prepare
    runner = _runner(_Crashes)
    # Execute / Assert
    with pytest.raises(WorkerFailed, match="RuntimeError: boom at the upload"):
        runner.run()
    assert _segments() == []
    assert all(not w.proc.is_alive() for w in runner._workers)


def test_worker_error_of_the_project_tree_keeps_its_type():
    class _ConfigCrash(_Crashes):
        exc = ConfigError

    # Prepare
    runner = _runner(_ConfigCrash)
    # Execute / Assert
    with pytest.raises(ConfigError, match="boom at the upload") as info:
        runner.run()
    assert isinstance(info.value.__cause__, WorkerFailed)
    assert _segments() == []


def test_dead_worker_is_reported_and_cleaned_up():
    # Prepare
    runner = _runner(_Exits)
    # Execute / Assert
    with pytest.raises(WorkerFailed, match="exited with code 7"):
        runner.run()
    assert _segments() == []
    assert all(not w.proc.is_alive() for w in runner._workers)


@pytest.mark.parametrize("workers", [0, -1, True, 1.5])
def test_bad_worker_count_is_refused(workers):
    ups = make_updates(4, d=8)
    server, parts = build_round(ups, RoundParams.default(4, 8), seed=1)
    with pytest.raises(ConfigError, match="workers"):
        ParallelRunner(server, parts, workers=workers)


_ERRORS = st.sampled_from([InvalidShare, Refused, DecodeError])


@settings(max_examples=40, deadline=None)
@given(
    pid=st.integers(0, 2**32 - 1),
    slot=st.none() | st.integers(0, 2**32 - 1),
    position=st.none() | st.integers(0, 2**32 - 1),
    uploaded=st.sets(st.integers(0, 64)),
    clipped=st.integers(0, 2**64 - 1),
    errors=st.lists(st.tuples(_ERRORS, st.text(max_size=40)), max_size=4),
    revealed=st.dictionaries(
        st.integers(1, 8), st.dictionaries(st.integers(0, 500), st.sampled_from(list(ShareKind)), max_size=5),
        max_size=4),
)
def test_view_encoding_round_trips(pid, slot, position, uploaded, clipped, errors, revealed):
    # Prepare
    v = ParticipantView(slot=slot, position=position, uploaded=uploaded, clipped=clipped,
                        errors=[cls(msg) for cls, msg in errors], revealed=revealed)
    # Execute
    p = Parser(encode_view(pid, v), "view")
    got_pid, got = decode_view(p, 1000)
    p.finish()
    # Assert
    assert got_pid == pid
    assert (got.slot, got.position, got.uploaded, got.clipped, got.revealed) == (
        slot, position, uploaded, clipped, revealed)
    assert [(type(e), str(e)) for e in got.errors] == [(cls, msg) for cls, msg in errors]


def test_view_bytes_are_checked():
    good = encode_view(3, ParticipantView(slot=1, position=0, errors=[Refused("no")]))
    # A truncated view, an error type outside the protocol tree, a bad presence flag.
    bad_type = good.replace(b"Refused", b"SystemExit"[:7])
    bad_flag = good[:4] + b"\x02" + good[5:]
    for data, what in [(good[:-3], "left"), (bad_type, "not a protocol error"), (bad_flag, "presence flag")]:
        with pytest.raises(DecodeError, match=what):
            p = Parser(data, "view")
            decode_view(p, 100)
            p.finish()


def test_groups_with_workers_match_the_single_process_run():
    # Prepare: 12 participants in groups of 6.
    ups = make_updates(12, d=64, seed=8)
    # Execute
    serial = reshuffle.shuffle(ups, seed=2, group_size=6)
    par = reshuffle.shuffle(ups, seed=2, group_size=6, workers=2)
    # Assert
    assert _summary(par) == _summary(serial)
    assert par.groups == serial.groups and len(par.groups) == 2
    assert len(par.models) == 12


class _Stop(Exception):
    pass


def test_failure_mid_phase_drains_the_workers_and_keeps_their_views():
    # Prepare: an interceptor that fails on the first upload to reach the PS, while workers still mask.
    p = RoundParams.default(6, D)

    def tap(env):
        h = peek_header(env.data)
        if h.type is MsgType.MASKED_INPUT and h.m == p.upload_m:
            raise _Stop("tap failed")
        return [env]

    ups = make_updates(6, d=D, seed=6)
    server, parts = build_round(ups, p, seed=6)
    runner = ParallelRunner(server, parts, interceptors=[tap], workers=2)
    # Execute
    with pytest.raises(_Stop):
        runner.run()
    # Assert: every participant's view came back (all uploaded), nothing leaked, workers gone.
    assert all(p.upload_m in pp.view.uploaded for pp in parts.values())
    assert _segments() == []
    assert all(not w.proc.is_alive() for w in runner._workers)
