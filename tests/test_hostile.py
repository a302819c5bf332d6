"""Malformed or hostile messages at every phase: offender excluded or honest party refuses."""

import numpy as np
import pytest

import reshuffle
from reshuffle.adversaries import ByteTamper, adversary_names, make_adversary
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
from reshuffle.protocol.messages import MsgType, peek_header, peek_type
from reshuffle.protocol.participant import Participant
from reshuffle.harness.runner import Envelope
from tests.protocol_helpers import expected_models, make_updates, multiset, rewrite_header

N = 6  # t = 4


def is_(env, sender, mtype, m=None):
    h = peek_header(env.data)
    return env.sender == sender and h is not None and h.type == mtype and (m is None or h.m == m)


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
    """A round with an in-transit interceptor (a network attacker: no participant key)."""
    ups = make_updates(N, d=10, seed=seed)
    return ups, reshuffle.shuffle(ups, seed=seed, interceptors=[interceptor])


def run_as(pid, mtype, fn, m=None, seed=1, once=True):
    """A round where participant ``pid`` itself sends ``fn(message)``, signed with its own key."""
    ups = make_updates(N, d=10, seed=seed)
    adv = ByteTamper(pids=(pid,), mtype=mtype, fn=fn, m=m, once=once)
    return ups, reshuffle.shuffle(ups, seed=seed, adversaries=[adv])


def errors_of(r, sender):
    return [type(e.error) for e in r.errors if e.sender == sender]


def assert_completes_without(ups, r, excluded):
    want = [i for i in range(N) if i not in excluded]
    assert r.online == want
    assert multiset(r.models) == expected_models(ups, want)


UPLOAD = 5  # R_max = 4 reservation iterations, then the upload


def _short_count_vector(d):
    # header | h | rows=1 | 8 bytes of words | signature (re-signed by the sender)
    return [d[:50] + (1).to_bytes(4, "big") + (8).to_bytes(4, "big") + bytes(8) + bytes(64)]


# (message type sent by P1, transformation, expected error); m=None: first one. P1 signs what it sends.
CASES = [
    ("truncated advert", MsgType.ADVERTISE, None, lambda d: [d[:-5]], DecodeError),
    ("extended advert", MsgType.ADVERTISE, None, lambda d: [d + b"\x00"], DecodeError),
    ("advert wrong round", MsgType.ADVERTISE, None, lambda d: [rewrite_header(d, T=7)], UnexpectedMessage),
    ("advert invalid element", MsgType.ADVERTISE, None,
     lambda d: [d[: 18 + 64] + bytes(32) + d[18 + 96 :]], InvalidElement),  # after H(W_g) and H(params)
    ("bundle truncated", MsgType.SHARE_BUNDLE, None, lambda d: [d[:30]], DecodeError),
    ("bundle short of a recipient", MsgType.SHARE_BUNDLE, None,
     lambda d: [(lambda b: msg.ShareBundle(1, 0, 1, b.ciphertexts[1:], b.combined).encode())(
         msg.decode(d, msg.Context(reshuffle.crypto.get_group())))], DecodeError),
    ("OT request invalid element", MsgType.OT_REQUEST, None,
     lambda d: [d[:34] + bytes(32) + d[66:]], InvalidElement),
    ("OT request garbage", MsgType.OT_REQUEST, None, lambda d: [d[:18] + b"\xff" * 9], DecodeError),
    ("reservation wrong length", MsgType.MASKED_INPUT, 1, _short_count_vector, DecodeError),
    # signed row hashes, but a count vector that differs from them (the PS hashes count vectors whole)
    ("count vector off its signed row hash", MsgType.MASKED_INPUT, 2,
     lambda d: [d[:-70] + bytes([d[-70] ^ 1]) + d[-69:]], DecodeError),
    ("upload wrong length", MsgType.MASKED_INPUT, UPLOAD, lambda d: [d[:-4]], DecodeError),
    ("masked input for wrong invocation", MsgType.MASKED_INPUT, 2, lambda d: [rewrite_header(d, m=3)], UnexpectedMessage),
    ("message type unknown", MsgType.OT_REQUEST, None, lambda d: [d[:1] + b"\x63" + d[2:]], DecodeError),
    ("wrong version", MsgType.ADVERTISE, None, lambda d: [b"\x07" + d[1:]], DecodeError),
    ("header sender spoofed", MsgType.SHARE_BUNDLE, None, lambda d: [rewrite_header(d, sender=2)], UnexpectedMessage),
]


@pytest.mark.parametrize("name,mtype,m,fn,err", CASES, ids=[c[0] for c in CASES])
def test_malformed_from_participant_excludes_only_it(name, mtype, m, fn, err):
    ups, r = run_as(1, mtype, fn, m)
    assert err in errors_of(r, 1), [str(e) for e in r.errors]
    assert_completes_without(ups, r, {1})
    assert all(e.sender == 1 for e in r.errors)


@pytest.mark.parametrize("mtype,m", [(MsgType.ADVERTISE, None), (MsgType.MASKED_INPUT, 2), (MsgType.CONSENT, UPLOAD)])
def test_in_transit_tampering_fails_the_signature(mtype, m):
    # A network attacker flips one byte of P1's signed message: the PS rejects it as unsigned.
    ups, r = run(tamper(1, mtype, lambda d: [d[:30] + bytes([d[30] ^ 1]) + d[31:]], m))
    assert InvalidSignature in errors_of(r, 1), [str(e) for e in r.errors]
    assert all(e.sender == 1 for e in r.errors)
    assert multiset(r.models) == expected_models(ups, r.online)


def test_malformed_unmask_response_excludes_sender_but_keeps_its_model():
    # P1 already uploaded: its model stays (the others reveal its self mask); its shares are ignored.
    def corrupt(d):
        resp = msg.decode(d, msg.Context(reshuffle.crypto.get_group()))
        owner, kind, share = resp.shares[0]
        bad = type(share)(share.x + 1, share.y)
        return [msg.UnmaskResponse(resp.T, resp.m, resp.sender, ((owner, kind, bad),) + resp.shares[1:]).encode()]

    ups, r = run_as(1, MsgType.UNMASK_RESPONSE, corrupt, m=UPLOAD)
    assert InvalidShare in errors_of(r, 1)
    assert r.online == list(range(N))
    assert multiset(r.models) == expected_models(ups, range(N))


@pytest.mark.parametrize("mtype,m", [(MsgType.MASKED_INPUT, UPLOAD), (MsgType.OT_REQUEST, None),
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
    from reshuffle.harness import api

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
    out = p.handle(msg.MaskRequest(1, 1, SERVER_ID, ()).encode())
    refusal = msg.decode(out[0], msg.Context())
    assert refusal.error == "UnexpectedMessage" and "expected ROUND_START" in refusal.reason
    assert p.handle(b"\x01") == []  # aborted participants stay silent
    assert r.online == [0, 1, 2]


PS_BEHAVIOURS = adversary_names("ps")


@pytest.mark.parametrize("name", PS_BEHAVIOURS)
@pytest.mark.parametrize("seed", [1, 2])
def test_deviating_ps_learns_nothing(name, seed):
    # N = 8, c = 1, t = 5: the PS deviates; no honest upload may be exposed, no honest party named.
    ups = make_updates(8, d=6, seed=seed)
    b = make_adversary(name)
    r = reshuffle.shuffle(ups, seed=seed, adversaries=[b], raise_on_failure=False)
    v = b.holds(r, [i for i in range(8) if i not in getattr(b, "colluders", ())])
    assert v.holds, v
    # No honest participant ever revealed both kinds of share for one owner in one invocation.
    for view in r.views.values():
        for plan in view.revealed.values():
            assert len(plan) == len(set(plan))


def test_both_share_request_is_refused_by_state():
    ups = make_updates(8, d=6, seed=4)
    r = reshuffle.shuffle(ups, seed=4, adversaries=[make_adversary("both-shares")], raise_on_failure=False)
    second = [e for errs in r.participant_errors.values() for e in errs if isinstance(e, UnexpectedMessage)]
    assert second and all("UNMASK_REQUEST" in str(e) for e in second)
    assert multiset(r.models) == expected_models(ups, r.online)


def test_tagged_ot_answer_is_refused_before_anything_is_unmasked():
    ups = make_updates(8, d=6, seed=5)
    r = reshuffle.shuffle(ups, seed=5, adversaries=[make_adversary("tagged-ot", target=3)])
    from reshuffle.errors import InvalidProof

    # The target's first reservation vector left with its OT request, masked; it stops at the
    # answer's proof, so it never consents to U_1, reveals no share and uploads no model.
    assert isinstance(r.views[3].errors[0], InvalidProof)
    assert r.views[3].uploaded == {1} and r.views[3].revealed == {}
    assert 3 not in r.online and multiset(r.models) == expected_models(ups, r.online)


class SlotThief(Participant):
    """Also writes a fake model and a guessed token into another participant's position."""

    def _model_list(self, s):
        lw, nrows = super()._model_list(s)
        p = self.params
        rows = lw.reshape(-1, p.row_words)
        victim = next(i for i in range(rows.shape[0]) if i != self.view.position)
        rows[victim, : p.d] = p.codec.encode(np.full(p.d, 9.0, dtype=np.float32)).words
        rows[victim, p.d : p.d + 4] = np.frombuffer(bytes(range(16)), dtype=p.codec.dtype)
        self.victim = victim
        return lw, nrows


def test_writing_without_token_only_destroys_that_position(monkeypatch):
    from reshuffle.harness import api

    made = {}

    def factory(pid, *a, **k):
        cls = SlotThief if pid == 2 else Participant
        made[pid] = cls(pid, *a, **k)
        return made[pid]

    monkeypatch.setattr(api, "Participant", factory)
    ups = make_updates(N, d=7, seed=5)
    r = reshuffle.shuffle(ups, seed=6)
    victim_pos = made[2].victim
    decoys = r.output.decoy_positions
    assert r.output.discarded_positions == sorted({victim_pos, *decoys})
    if victim_pos in decoys:
        # It wrote into a decoy row: the blame step names it; every participant's model is delivered.
        assert set(r.blamed) == {2} and r.online == list(range(N))
    else:
        victim = next(i for i, p in made.items() if p.view.position == victim_pos)
        assert r.online == [i for i in range(N) if i != victim] and r.blamed == {}
    assert multiset(r.models) == expected_models(ups, r.online)
    # The thief's fake model is nowhere in the output.
    assert not any(np.allclose(m, 9.0) for m in r.models)


def test_lying_share_holder_is_caught_and_round_recovers():
    # P1 sends a well-formed share with a wrong value for P0's self seed: the owner's Feldman
    # commitments show which share is wrong; it is dropped and the secret rebuilt from good ones.
    def lie(d):
        resp = msg.decode(d, msg.Context(reshuffle.crypto.get_group()))
        shares = list(resp.shares)
        owner, kind, share = shares[0]
        shares[0] = (owner, kind, type(share)(share.x, (share.y + 1) % reshuffle.crypto.get_group().order))
        return [msg.UnmaskResponse(resp.T, resp.m, resp.sender, tuple(shares)).encode()]

    ups, r = run_as(1, MsgType.UNMASK_RESPONSE, lie, m=UPLOAD)
    assert [(e.sender, type(e.error)) for e in r.errors] == [(1, InvalidShare)]
    assert r.blamed == {}
    assert r.online == list(range(N))
    assert multiset(r.models) == expected_models(ups, range(N))


# -- the first reservation vector rides on the OT request (docs/protocol.md §5a) -- #
def test_a_member_asked_to_consent_before_its_ot_answer_refuses():
    # A PS withholds P2's OT answer (and so its proofs) but asks it to consent to U_1 like everyone.
    def withhold(env):
        return [] if is_(env, SERVER_ID, MsgType.OT_RESPONSE) and env.recipient == 2 else [env]

    ups, r = run(withhold)
    # P2 refuses: it never consents, never reveals a share and never uploads its model.
    assert isinstance(r.views[2].errors[0], UnexpectedMessage), r.views[2].errors
    assert r.views[2].uploaded == {1} and r.views[2].revealed == {}
    assert 2 not in r.online and multiset(r.models) == expected_models(ups, r.online)


def test_complaints_abandon_the_first_iteration_unrevealed():
    ups = make_updates(N, d=10, seed=4)
    r = reshuffle.shuffle(ups, seed=4, adversaries=[make_adversary("bad-share")])
    # The accused dealer is named; the iteration masked before the complaint step is never unmasked:
    # nobody revealed a share of invocation 1, and the slot phase ran from invocation 2.
    assert list(r.blamed) == [1]
    assert all(1 not in v.revealed for v in r.views.values())
    steps = r.round_trips["steps"]
    assert steps[:5] == ["advertise", "share", "ot", "complaints", "reserve"]
    assert 1 not in r.online and multiset(r.models) == expected_models(ups, r.online)


def test_a_ps_that_skips_u1_to_counts_of_a_second_iteration_is_refused():
    from reshuffle.harness.api import build_round
    from reshuffle.protocol.params import RoundParams
    from reshuffle.harness.runner import InProcessRunner

    ups = make_updates(N, d=10, seed=6)
    server, parts = build_round(ups, RoundParams.default(N, 10), seed=6)
    honest_close_ot = server._close_ot

    def close_ot(st):
        # Instead of U_1, counts for a second iteration, as if the first had been unmasked.
        fake = msg.MaskRequest(server.T, 2, SERVER_ID, (1,) + (0,) * (server.params.n - 1), ()).encode(server._sk)
        nxt, out = honest_close_ot(st)
        return nxt, [(i, fake if peek_type(d) is MsgType.UNMASK_REQUEST else d) for i, d in out]

    server._close_ot = close_ot
    with pytest.raises(BelowThreshold):
        InProcessRunner(server, parts).run()
    # Every member refused it and revealed nothing.
    assert all(isinstance(p.view.errors[0], UnexpectedMessage) and not p.view.revealed for p in parts.values())
