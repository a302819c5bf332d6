"""Participant sessions: state as bytes, resumed by replay, give the same round."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.crypto.rand import SeededRandom
from reshuffle.errors import ConfigError, DecodeError
from reshuffle.protocol import session
from reshuffle.harness.api import build_round
from reshuffle.protocol.params import RoundParams
from reshuffle.harness.runner import InProcessRunner
from reshuffle.protocol.params import TrustFloors
from reshuffle.protocol.session import SessionState


#: These rounds are one round of all N: the participants opt in to a round bound to no group.
OPT_OUT = TrustFloors(ungrouped=True)


class Resumed:
    """A participant that keeps nothing but bytes between messages (as a Flower node would)."""

    def __init__(self, p, seed):
        st_ = SessionState.new(p.pid, p.T, p._model, p._sk, p._cert, p._ca.verify_key, p._hash, seed)
        self.blob = st_.encode()

    def handle(self, data):
        st_, replies = session.handle(SessionState.decode(self.blob), data, OPT_OUT)
        self.blob = st_.encode()
        return replies


def test_a_round_of_resumed_sessions_recovers_every_model():
    ups = [np.full(5, i / 10, np.float32) for i in range(6)]
    p = RoundParams.default(6, 5)
    server, parts = build_round(ups, p, seed=11)
    resumed = {i: Resumed(pp, bytes([i]) * 32) for i, pp in parts.items()}
    out = InProcessRunner(server, resumed, {"upload": [2]}).run()
    got = sorted(float(m[0]) for m in out.models)
    assert got == pytest.approx([0.0, 0.1, 0.3, 0.4, 0.5], abs=1e-6)
    # every blob holds the full inbox of its participant's round
    assert all(len(SessionState.decode(r.blob).inbox) >= 4 for i, r in resumed.items() if i != 2)


def test_replay_is_deterministic():
    ups = [np.zeros(3, np.float32) for _ in range(4)]
    server, parts = build_round(ups, RoundParams.default(4, 3), seed=5)
    a, b = Resumed(parts[0], b"\x01" * 32), Resumed(parts[0], b"\x01" * 32)
    start = dict(server.start())[0]
    assert a.handle(start) == b.handle(start)
    c = Resumed(parts[0], b"\x02" * 32)
    assert c.handle(start) != a.handle(start)  # fresh seed, fresh keys


def _state():
    from reshuffle.crypto.signatures import CertificateAuthority, SigningKey

    ca = CertificateAuthority.from_seed(b"c" * 32)
    sk = SigningKey.from_seed(b"k" * 32)
    return SessionState.new(3, 7, np.arange(4, dtype=np.float32), sk, ca.issue(3, sk.verify_key), ca.verify_key,
                            b"h" * 32, b"s" * 32)


def test_state_roundtrip_and_bounds():
    s = _state()
    s2 = session.replace(s, inbox=(b"x", b"yz"))
    assert SessionState.decode(s2.encode()) == s2
    with pytest.raises(DecodeError, match="trailing|left"):
        SessionState.decode(s2.encode() + b"\x00")
    with pytest.raises(DecodeError, match="seed must be 32"):
        SessionState.new(1, 1, np.zeros(1, np.float32), None, None, None, b"", b"short")


@given(st.integers(0, 400))
@settings(max_examples=60, deadline=None)
def test_truncated_state_is_rejected(cut):
    blob = session.replace(_state(), inbox=(b"abc",)).encode()
    if cut >= len(blob):
        return
    with pytest.raises(DecodeError):
        SessionState.decode(blob[:cut])


def test_seeded_random_is_what_sessions_use():
    # Two sources from the same seed and label agree: the replay premise.
    assert SeededRandom(b"q" * 32, b"session").bytes(64) == SeededRandom(b"q" * 32, b"session").bytes(64)


def test_inbox_bound_scales_with_R_max():
    # Prepare: a real round's inbox for R_max = 1, padded with extra copies of the last message.
    ups = [np.full(4, i / 10, np.float32) for i in range(4)]
    p = RoundParams.default(4, 4, R_max=1)
    server, parts = build_round(ups, p, seed=5)
    resumed = {i: Resumed(pp, bytes([i]) * 32) for i, pp in parts.items()}
    InProcessRunner(server, resumed).run()
    st_ = SessionState.decode(resumed[0].blob)
    # no complaints, no blame step, no slot-phase restart (3 messages per restart, R_max of them),
    # and no MASK_REQUEST for the first iteration, whose vector answers the share delivery
    assert len(st_.inbox) == session.max_inbox(1) - 3 - 3 * 1 - 1
    # Execute / Assert: one message more than a round with R_max = 1 can have is a corrupt state.
    from dataclasses import replace

    with pytest.raises(DecodeError, match="R_max=1"):
        replace(st_, inbox=st_.inbox + st_.inbox[-1:] * (session.max_inbox(1) - len(st_.inbox) + 1)).participant(
            floors=OPT_OUT)
    assert session.max_inbox(4) > session.max_inbox(1)


class Live(Resumed):
    """The same bytes-only participant, its replay skipped by a memo of live participants."""

    def __init__(self, p, seed, memo):
        super().__init__(p, seed)
        self.memo = memo

    def handle(self, data):
        st_, replies, _ = self.memo.advance(SessionState.decode(self.blob), data, floors=OPT_OUT)
        self.blob = st_.encode()
        return replies


@pytest.mark.parametrize("size", [0, 1, 256])
def test_live_sessions_give_the_replay_s_round_within_their_bound(size):
    # A memo of any size (0: every message replayed) gives the same round as the bytes alone.
    ups = [np.full(5, i / 10, np.float32) for i in range(6)]
    server, parts = build_round(ups, RoundParams.default(6, 5), seed=11)
    memo = session.LiveSessions(size)
    live = {i: Live(pp, bytes([i]) * 32, memo) for i, pp in parts.items()}
    out = InProcessRunner(server, live, {"upload": [2]}).run()
    assert sorted(float(m[0]) for m in out.models) == pytest.approx([0.0, 0.1, 0.3, 0.4, 0.5], abs=1e-6)
    assert len(memo) == min(size, 6)  # one live participant per session at most, never more than the bound
    # A held participant is exactly the one the next message finds; a state it does not hold is replayed.
    state = SessionState.decode(live[0].blob)
    if size == 0:
        assert memo.take(state) is None
    elif size >= 6:
        assert memo.take(state) is not None and memo.take(state) is None


def test_live_sessions_refuse_a_bad_bound():
    with pytest.raises(ConfigError, match="non-negative int"):
        session.LiveSessions(-1)
