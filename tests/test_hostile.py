"""Malformed or hostile messages at every phase: offender excluded or honest party refuses."""

import numpy as np
import pytest

import reshuffle
from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.errors import (
    AlreadyAnswered,
    BelowThreshold,
    DecodeError,
    InvalidElement,
    InvalidShare,
    InvalidSignature,
    Refused,
    UnexpectedMessage,
)
from reshuffle.protocol import messages as msg
from reshuffle.protocol.messages import MsgType, peek_type
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.runner import Envelope
from reshuffle.protocol.server import Server
from tests.protocol_helpers import expected_models, make_updates, multiset, rewrite_header

N = 6  # t = 4


def is_(env, sender, mtype, m=None):
    return (
        env.sender == sender
        and peek_type(env.data) == mtype
        and (m is None or int.from_bytes(env.data[10:14], "big") == m)
    )


def tamper(sender, mtype, fn, m=None, once=True):
    """Interceptor applying ``fn(data) -> list[bytes]`` to matching messages."""
    state = {"done": False}

    def f(env):
        if is_(env, sender, mtype, m) and not (once and state["done"]):
            state["done"] = True
            return [Envelope(env.sender, env.recipient, d) for d in fn(env.data)]
        return [env]

    return f


def run(interceptor, seed=1):
    ups = make_updates(N, d=10, seed=seed)
    return ups, reshuffle.shuffle(ups, seed=seed, interceptors=[interceptor])


def errors_of(r, sender):
    return [type(e.error) for e in r.errors if e.sender == sender]


def assert_completes_without(ups, r, excluded):
    want = [i for i in range(N) if i not in excluded]
    assert r.online == want
    assert multiset(r.models) == expected_models(ups, want)


# (message type sent by P1, transformation, expected error); m=None: first one.
CASES = [
    ("truncated advert", MsgType.ADVERTISE, None, lambda d: [d[:-5]], DecodeError),
    ("extended advert", MsgType.ADVERTISE, None, lambda d: [d + b"\x00"], DecodeError),
    ("bad advert signature", MsgType.ADVERTISE, None, lambda d: [d[:-1] + bytes([d[-1] ^ 1])], InvalidSignature),
    ("advert wrong round", MsgType.ADVERTISE, None, lambda d: [rewrite_header(d, T=7)], UnexpectedMessage),
    ("advert invalid element", MsgType.ADVERTISE, None,
     lambda d: [d[: 18 + 32] + bytes(32) + d[18 + 64 :]], InvalidElement),
    ("bundle truncated", MsgType.SHARE_BUNDLE, None, lambda d: [d[:30]], DecodeError),
    ("bundle short of a recipient", MsgType.SHARE_BUNDLE, None,
     lambda d: [msg.ShareBundle(1, 0, 1, msg.decode(d, msg.Context()).ciphertexts[1:]).encode()], DecodeError),
    ("OT request invalid element", MsgType.OT_REQUEST, None,
     lambda d: [d[:34] + bytes(32) + d[66:]], InvalidElement),
    ("OT request garbage", MsgType.OT_REQUEST, None, lambda d: [d[:18] + b"\xff" * 9], DecodeError),
    ("reservation wrong length", MsgType.MASKED_INPUT, 1, lambda d: [d[:18] + (8).to_bytes(4, "big") + bytes(8)], DecodeError),
    ("upload wrong length", MsgType.MASKED_INPUT, 4, lambda d: [d[:-4]], DecodeError),
    ("masked input for wrong invocation", MsgType.MASKED_INPUT, 2, lambda d: [rewrite_header(d, m=3)], UnexpectedMessage),
    ("message type unknown", MsgType.OT_REQUEST, None, lambda d: [d[:1] + b"\x63" + d[2:]], DecodeError),
    ("wrong version", MsgType.ADVERTISE, None, lambda d: [b"\x07" + d[1:]], DecodeError),
    ("header sender spoofed", MsgType.SHARE_BUNDLE, None, lambda d: [rewrite_header(d, sender=2)], UnexpectedMessage),
]


@pytest.mark.parametrize("name,mtype,m,fn,err", CASES, ids=[c[0] for c in CASES])
def test_malformed_from_participant_excludes_only_it(name, mtype, m, fn, err):
    ups, r = run(tamper(1, mtype, fn, m))
    assert err in errors_of(r, 1), [str(e) for e in r.errors]
    assert_completes_without(ups, r, {1})
    assert all(e.sender == 1 for e in r.errors)


def test_malformed_unmask_response_excludes_sender_but_keeps_its_model():
    # P1 already uploaded: its model stays (the others reveal its self mask); its shares are ignored.
    def corrupt(d):
        resp = msg.decode(d, msg.Context(reshuffle.crypto.get_group()))
        owner, kind, share = resp.shares[0]
        bad = type(share)(share.x + 1, share.y)
        return [msg.UnmaskResponse(resp.T, resp.m, resp.sender, ((owner, kind, bad),) + resp.shares[1:]).encode()]

    ups, r = run(tamper(1, MsgType.UNMASK_RESPONSE, corrupt, m=4))
    assert InvalidShare in errors_of(r, 1)
    assert r.online == list(range(N))
    assert multiset(r.models) == expected_models(ups, range(N))


@pytest.mark.parametrize("mtype,m", [(MsgType.MASKED_INPUT, 4), (MsgType.OT_REQUEST, None),
                                     (MsgType.ADVERTISE, None), (MsgType.UNMASK_RESPONSE, 2)])
def test_duplicates_and_replays_are_ignored_not_punished(mtype, m):
    ups, r = run(tamper(2, mtype, lambda d: [d, d], m))
    assert AlreadyAnswered in errors_of(r, 2)
    assert r.online == list(range(N))
    assert multiset(r.models) == expected_models(ups, range(N))


def test_replay_from_previous_invocation_rejected():
    saved = {}

    def f(env):
        if is_(env, 3, MsgType.MASKED_INPUT, 1):
            saved["d"] = env.data
        if is_(env, 3, MsgType.MASKED_INPUT, 2):
            return [Envelope(3, env.recipient, saved["d"]), env]
        return [env]

    ups, r = run(f)
    assert UnexpectedMessage in errors_of(r, 3)
    assert_completes_without(ups, r, {3})


def test_unknown_sender_is_recorded_and_ignored():
    def f(env):
        if is_(env, 0, MsgType.ADVERTISE):
            return [env, Envelope(999, env.recipient, rewrite_header(env.data, sender=999))]
        return [env]

    ups, r = run(f)
    assert errors_of(r, 999) == [UnexpectedMessage]
    assert r.online == list(range(N))


def test_second_ot_request_gets_no_second_answer():
    ups, r = run(tamper(4, MsgType.OT_REQUEST, lambda d: [d, d]))
    assert errors_of(r, 4) == [AlreadyAnswered]
    assert "already received its OT answer" in str(r.errors[0].error)


def test_participant_refuses_tampered_server_signature():
    def flip_sig(d):
        return [d[:-1] + bytes([d[-1] ^ 1])]

    def f(env):
        if env.sender == SERVER_ID and env.recipient == 0 and peek_type(env.data) == MsgType.UNMASK_REQUEST:
            return [Envelope(env.sender, 0, flip_sig(env.data)[0])]
        return [env]

    ups, r = run(f)
    assert InvalidSignature in [type(e) for e in r.participant_errors[0]]
    # P0 refused (and is excluded), but it had uploaded: the round completes with its model.
    assert Refused in errors_of(r, 0)
    assert multiset(r.models) == expected_models(ups, r.online)
    assert len(r.online) >= N - 1


def test_participant_refuses_wrong_global_model():
    ups = make_updates(N, d=5)
    from reshuffle.protocol import api

    orig = api.Participant

    class Other(orig):
        def __init__(self, pid, *a, **k):
            super().__init__(pid, *a, **k)
            if pid == 5:
                self._hash = b"\x00" * 32

    api.Participant = Other
    try:
        r = reshuffle.shuffle(ups, seed=3)
    finally:
        api.Participant = orig
    assert Refused in [type(e) for e in r.participant_errors[5]]
    assert 5 not in r.online and Refused in errors_of(r, 5)


def test_participant_phase_guard_names_expected_message():
    ups = make_updates(2, d=3)
    r = reshuffle.shuffle(ups + make_updates(1, d=3), seed=1)  # a normal round for keys
    from reshuffle.crypto.signatures import CertificateAuthority, SigningKey

    ca = CertificateAuthority.generate()
    sk = SigningKey.generate()
    p = Participant(0, 1, ups[0], sk, ca.issue(0, sk.verify_key), ca, b"\x00" * 32)
    out = p.handle(msg.MaskRequest(1, 1, SERVER_ID, (), bytes(64)).encode())
    refusal = msg.decode(out[0], msg.Context())
    assert refusal.error == "UnexpectedMessage" and "expected ROUND_START" in refusal.reason
    assert p.handle(b"\x01") == []  # aborted participants stay silent
    assert r.online == [0, 1, 2]


class InconsistentServer(Server):
    """A PS that sends participant 0 a U_m with an extra member and asks everyone twice."""

    def _close_masked(self):
        out = super()._close_masked()
        Um = list(self.online[self.m])
        extra = []
        for rcpt, data in out:
            if rcpt == 0 and self.m == 1:
                bogus = tuple(sorted(set(Um) | {max(self._roster)}))
                if set(bogus) != set(Um):
                    data = msg.UnmaskRequest(self.T, self.m, SERVER_ID, bogus, self._sign_list(self.m, bogus)).encode()
            extra.append((rcpt, data))
            if self.m == 2 and rcpt == 1:
                # Ask again with one member declared dropped: that would yield both share kinds.
                fewer = tuple(Um[1:])
                extra.append((rcpt, msg.UnmaskRequest(self.T, self.m, SERVER_ID, fewer, self._sign_list(self.m, fewer)).encode()))
        return extra


def test_inconsistent_lists_and_second_unmask_are_refused(monkeypatch):
    from reshuffle.protocol import api

    monkeypatch.setattr(api, "Server", InconsistentServer)
    seen = {}
    orig_init = Participant.__init__

    def spy(self, pid, *a, **k):
        orig_init(self, pid, *a, **k)
        seen[pid] = self

    monkeypatch.setattr(Participant, "__init__", spy)
    # Participant 7 drops at setup, so the bogus list (with 7) is not a subset of U_0.
    # N = 8, t = 5: the round survives losing P0 and P1 to the PS's misbehaviour.
    ups = make_updates(8, d=6)
    r = reshuffle.shuffle(ups, seed=4, dropouts={"setup": [7]})
    assert Refused in [type(e) for e in r.participant_errors[0]]
    second = [e for e in r.participant_errors[1] if isinstance(e, UnexpectedMessage)]
    assert second and "UNMASK_REQUEST" in str(second[0])
    # No honest participant ever revealed both kinds of share for one owner in one invocation.
    for p in seen.values():
        for m, plan in p._revealed.items():
            assert len(plan) == len(set(plan))
    assert multiset(r.models) == expected_models(ups, r.online)
    assert r.online == [2, 3, 4, 5, 6]  # P0, P1 refused during the reservation and were excluded


def test_malicious_ps_with_too_few_left_fails_clearly(monkeypatch):
    from reshuffle.protocol import api

    monkeypatch.setattr(api, "Server", InconsistentServer)
    with pytest.raises(BelowThreshold):
        reshuffle.shuffle(make_updates(N, d=6), seed=4, dropouts={"setup": [5]})


class SlotThief(Participant):
    """Also writes a fake model and a guessed token into another participant's position."""

    def _model_list(self):
        lw = super()._model_list()
        p = self.params
        rows = lw.reshape(-1, p.row_words)
        victim = next(i for i in range(rows.shape[0]) if i != self.view.position)
        rows[victim, : p.d] = p.codec.encode(np.full(p.d, 9.0, dtype=np.float32)).words
        rows[victim, p.d :] = np.frombuffer(bytes(range(16)), dtype=p.codec.dtype)
        self.victim = victim
        return lw


def test_writing_without_token_only_destroys_that_position(monkeypatch):
    from reshuffle.protocol import api

    made = {}

    def factory(pid, *a, **k):
        cls = SlotThief if pid == 2 else Participant
        made[pid] = cls(pid, *a, **k)
        return made[pid]

    monkeypatch.setattr(api, "Participant", factory)
    ups = make_updates(N, d=7, seed=5)
    r = reshuffle.shuffle(ups, seed=6)
    victim_pos = made[2].victim
    assert r.output.discarded_positions == [victim_pos]
    victim = next(i for i, p in made.items() if p.view.position == victim_pos)
    assert r.online == [i for i in range(N) if i != victim]
    assert multiset(r.models) == expected_models(ups, r.online)
    # The thief's fake model is nowhere in the output.
    assert not any(np.allclose(m, 9.0) for m in r.models)


def test_lying_share_holder_is_caught_by_commitment_and_round_recovers():
    # P1 sends a well-formed share with a wrong value for P0's self seed.
    def lie(d):
        resp = msg.decode(d, msg.Context(reshuffle.crypto.get_group()))
        shares = list(resp.shares)
        owner, kind, share = shares[0]
        shares[0] = (owner, kind, type(share)(share.x, (share.y + 1) % reshuffle.crypto.get_group().order))
        return [msg.UnmaskResponse(resp.T, resp.m, resp.sender, tuple(shares)).encode()]

    ups, r = run(tamper(1, MsgType.UNMASK_RESPONSE, lie, m=4))
    assert [type(e.error) for e in r.errors] == [InvalidShare]
    assert "some shares were wrong" in str(r.errors[0].error)
    assert r.online == list(range(N))
    assert multiset(r.models) == expected_models(ups, range(N))
