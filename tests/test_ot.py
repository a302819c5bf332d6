"""k-out-of-n OT: correctness for every choice set, answer-once, validation."""

import itertools

import pytest

from reshuffle.crypto.ot import OTReceiver, OTRequest, OTResponse, OTSender, OTTable, h1
from reshuffle.crypto.rand import SeededRandom
from reshuffle.errors import AlreadyAnswered, ConfigError, DecodeError, InvalidElement, UnexpectedMessage


def run_ot(group, n, k, choices, T=3, seed=0):
    sender = OTSender(group, T, n, k, rng=SeededRandom(seed))
    rec = OTReceiver(group, T, n, choices=list(choices), rng=SeededRandom(seed + 1))
    req = OTRequest.decode(group, rec.request().encode(), k)
    resp = OTResponse.decode(group, sender.answer(1, req).encode(), k)
    table = OTTable.decode(group, sender.table.encode(), n)
    return sender, rec.recover(table, resp)


def test_correct_for_every_choice_set(group):
    n, k = 6, 2
    sender = OTSender(group, 1, n, k, rng=SeededRandom(5))
    for i, choices in enumerate(itertools.combinations(range(n), k)):
        rec = OTReceiver(group, 1, n, choices=list(choices), rng=SeededRandom(100 + i))
        tokens = rec.recover(sender.table, sender.answer(i, rec.request()))
        assert set(tokens) == set(choices)
        for s, tau in tokens.items():
            assert tau == sender.tokens[s]
            assert sender.token_matches(s, tau)


def test_tokens_distinct_and_unguessable_without_answer(group):
    sender, tokens = run_ot(group, 8, 3, [0, 5, 7])
    assert len(set(sender.tokens)) == 8
    # The table alone does not reveal tokens: c_l != tau_l.
    assert all(c != t for c, t in zip(sender.table.cipher, sender.tokens))


def test_answer_once(group):
    sender = OTSender(group, 1, 10, 4)
    rec = OTReceiver(group, 1, 10, k=4)
    sender.answer(7, rec.request())
    with pytest.raises(AlreadyAnswered):
        sender.answer(7, rec.request())


def test_at_most_k_elements(group):
    sender = OTSender(group, 1, 10, 2)
    rec = OTReceiver(group, 1, 10, k=3)
    with pytest.raises(DecodeError, match="at most k=2"):
        sender.answer(1, rec.request())
    with pytest.raises(DecodeError, match="expected 1..2"):
        OTRequest.decode(group, rec.request().encode(), 2)


def test_repeated_element_rejected(group):
    sender = OTSender(group, 1, 10, 3)
    a = h1(group, 1, 0)
    with pytest.raises(DecodeError, match="repeats"):
        sender.answer(1, OTRequest(1, (a, a)))


def test_wrong_round(group):
    sender = OTSender(group, 2, 10, 3)
    rec = OTReceiver(group, 1, 10, k=3)
    with pytest.raises(UnexpectedMessage, match="round 1"):
        sender.answer(1, rec.request())
    rec2 = OTReceiver(group, 2, 10, k=3)
    resp = sender.answer(2, rec2.request())
    other = OTSender(group, 3, 10, 3)
    with pytest.raises(UnexpectedMessage):
        rec2.recover(other.table, resp)


def test_request_decode_rejects_bad_elements(group):
    rec = OTReceiver(group, 1, 10, k=2)
    enc = rec.request().encode()
    ident = bytes(group.element_size)
    bad = enc[:12] + ident + enc[12 + group.element_size :]
    with pytest.raises(InvalidElement, match="A\\[0\\]"):
        OTRequest.decode(group, bad, 2)
    with pytest.raises(DecodeError):
        OTRequest.decode(group, enc[:-1], 2)
    with pytest.raises(DecodeError, match="trailing"):
        OTRequest.decode(group, enc + b"\x00", 2)


def test_table_decode_bounds(group):
    sender = OTSender(group, 1, 5, 2)
    enc = sender.table.encode()
    assert OTTable.decode(group, enc, 5).cipher == sender.table.cipher
    with pytest.raises(DecodeError):
        OTTable.decode(group, enc, 4)
    with pytest.raises(DecodeError):
        OTTable.decode(group, enc[:-3], 5)


def test_request_hides_choices(group):
    # Same choices, fresh blinds: the requests share nothing.
    r1 = OTReceiver(group, 1, 10, choices=[1, 2])
    r2 = OTReceiver(group, 1, 10, choices=[1, 2])
    assert set(r1.request().blinded).isdisjoint(r2.request().blinded)


def test_config_errors(group):
    with pytest.raises(ConfigError):
        OTSender(group, 1, 3, 4)
    with pytest.raises(ConfigError):
        OTReceiver(group, 1, 5, choices=[1, 1])
    with pytest.raises(ConfigError):
        OTReceiver(group, 1, 5, choices=[5])
