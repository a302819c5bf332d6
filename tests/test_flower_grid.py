"""ReshuffleGrid and reshuffle_mod over an in-process Grid: delivery, unlinkability, refusals, attacks.

The transport is :class:`flower_helpers.LoopbackGrid`; strategies, ClientApp,
mods and the protocol core are the real ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_helpers import LoopbackGrid, forgetful_mod, toy_client_app
from reshuffle.errors import ConfigError, DecodeError, InvalidSignature
from reshuffle.flower import records
from reshuffle.flower.grid import ReshuffleGrid
from reshuffle.flower.keys import claim, simulation_participant, verify_claim
from reshuffle.flower.reserved import RECORD

SHAPES = [(3, 2), (5,)]


def initial() -> ArrayRecord:
    return ArrayRecord([np.zeros(s, np.float32) for s in SHAPES])


def noisy_reply(produced: list):
    """Each node answers W_g plus fresh noise and its partition id as a metric; every reply is recorded."""
    def make(msg, ctx):
        rng = np.random.default_rng()
        arrs = [a + rng.normal(size=a.shape).astype(a.dtype) for a in msg.content["arrays"].to_numpy_ndarrays()]
        c = RecordDict({"arrays": ArrayRecord(arrs), "metrics": MetricRecord(
            {"num-examples": 10, "who": ctx.node_id})})
        produced.append((ctx.node_id, records.encode_content(c)))
        return c
    return make


def train_messages(grid, T: int = 1, content: RecordDict | None = None) -> list[Message]:
    content = content or RecordDict({"arrays": initial(), "config": ConfigRecord({"server-round": T})})
    return [Message(content, dst_node_id=n, message_type="train", group_id=str(T)) for n in grid.get_node_ids()]


# --------------------------------------------------------------------------- codec
@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["float32", "float64", "int64", "uint8"]),
                          st.lists(st.integers(0, 4), max_size=3)), max_size=4),
       st.dictionaries(st.text(min_size=1, max_size=8),
                       st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False),
                                 st.lists(st.floats(allow_nan=False), max_size=3)), max_size=4))
def test_reply_codec_is_bit_exact(arrays, metrics):
    # Prepare: any arrays and metrics
    rng = np.random.default_rng(0)
    ar = ArrayRecord({f"a{i}": Array(rng.integers(0, 255, size=s).astype(dt)) for i, (dt, s) in enumerate(arrays)})
    c = RecordDict({"arrays": ar, "metrics": MetricRecord(metrics)})
    # Execute: through ring words of the budgeted length
    d = records.reply_words(RecordDict({"arrays": ar}), metrics_budget=1024)
    back = records.from_words(records.to_words(c, d))
    # Assert: the same bytes, hence the same Flower object id
    assert records.encode_content(back) == records.encode_content(c)
    assert back.object_id == c.object_id


def test_reply_codec_rejects_config_records_and_bad_words():
    c = RecordDict({"arrays": initial(), "status": ConfigRecord({"code": 0})})
    with pytest.raises(ConfigError, match="'status'"):
        records.encode_content(c)
    ok = records.to_words(RecordDict({"arrays": initial()}), 200)
    with pytest.raises(DecodeError, match="padding"):
        records.from_words(np.concatenate([ok[:-1], np.array([1], "<u4")]))
    with pytest.raises(DecodeError, match="announces"):
        records.from_words(np.array([0xFFFF, 0], "<u4"))
    with pytest.raises(ConfigError, match="round allows"):
        records.to_words(RecordDict({"arrays": ArrayRecord([np.zeros(1000, np.float32)])}), 50)


# --------------------------------------------------------------------------- rounds
def test_every_reply_arrives_bit_exact_and_unlinked():
    # Prepare: 5 nodes answering noisy models, recorded as they leave the nodes
    produced: list = []
    lg = LoopbackGrid(toy_client_app(noisy_reply(produced)), 5, ungrouped=True)
    grid = ReshuffleGrid(lg, phase_timeout=10, group_size=None)
    identity_rounds = 0
    for T in range(1, 4):
        produced.clear()
        sent = train_messages(grid, T)
        # Execute
        replies = list(grid.send_and_receive(sent, timeout=60))
        # Assert: every reply, bit-exact, each on a distinct pushed claim message of the round (the ids
        # push_messages returned to the strategy)
        assert sorted(records.encode_content(r.content) for r in replies) == sorted(b for _, b in produced)
        pushed = {m.metadata.message_id: m for m in lg.sent if m.metadata.group_id == str(T)
                  and RECORD in m.content and m.content[RECORD]["stage"] == "claim"}
        assert len({r.metadata.reply_to_message_id for r in replies}) == 5
        assert all(r.metadata.reply_to_message_id in pushed for r in replies)
        assert all(r.metadata.src_node_id == pushed[r.metadata.reply_to_message_id].metadata.dst_node_id
                   for r in replies)
        producer = {b: node for node, b in produced}
        identity_rounds += all(producer[records.encode_content(r.content)] == r.metadata.src_node_id for r in replies)
        rep = grid.rounds[-1]
        assert (rep.roster, rep.replies, rep.dropouts, rep.failed) == (5, 5, {}, "")
    # A uniformly random bijection is the identity with probability 1/120 per round.
    assert identity_rounds < 3


def test_strategy_sees_raw_models_and_the_plain_result():
    # Prepare: the same deterministic replies, plain and through Re-Shuffle
    def make(msg, ctx):
        p = int(ctx.node_config["partition-id"])
        arrs = [a + p for a in msg.content["arrays"].to_numpy_ndarrays()]
        return RecordDict({"arrays": ArrayRecord(arrs), "metrics": MetricRecord({"num-examples": 10 + p})})
    plain = FedAvg().start(grid=LoopbackGrid(toy_client_app(make, mods=[]), 4), initial_arrays=initial(),
                           num_rounds=2)
    # Execute
    ours = FedAvg().start(grid=ReshuffleGrid(LoopbackGrid(toy_client_app(make), 4, ungrouped=True), group_size=None), initial_arrays=initial(),
                          num_rounds=2)
    # Assert: FedAvg weights by num-examples: (0·10 + 1·11 + 2·12 + 3·13) / 46 per round
    want = 2 * 74 / 46
    for a, b in zip(plain.arrays.to_numpy_ndarrays(), ours.arrays.to_numpy_ndarrays()):
        np.testing.assert_allclose(a, want, rtol=1e-6)
        np.testing.assert_allclose(b, a, rtol=1e-6)


def test_offline_steps_run_before_training_and_three_pushes_follow_it():
    # Prepare: nodes that note, as they train, how many pushes they had seen
    seen: dict[int, int] = {}
    trained_at: dict[int, int] = {}

    def make(msg, ctx):
        trained_at[ctx.node_id] = seen[ctx.node_id]
        return noisy_reply([])(msg, ctx)

    lg = LoopbackGrid(toy_client_app(make), 5, ungrouped=True)
    counting = lg.push_messages

    def push(messages):
        msgs = list(messages)
        for m in msgs:
            seen[m.metadata.dst_node_id] = seen.get(m.metadata.dst_node_id, 0) + 1
        return counting(msgs)
    lg.push_messages = push
    grid = ReshuffleGrid(lg, phase_timeout=10, group_size=None)
    # Execute
    replies = list(grid.send_and_receive(train_messages(grid), timeout=60))
    # Assert: every node trained in the upload's push, after the claim and every offline step
    rep = grid.rounds[-1]
    assert len(replies) == 5 and rep.steps[0] == "claim"
    upload = rep.steps.index("upload")
    assert set(trained_at.values()) == {upload + 1}
    assert all(s.startswith(("claim", "advertise", "share", "ot", "reserve")) for s in rep.steps[:upload])
    # ... and the train push is the first of the three pushes after training
    assert rep.round_trips_after_training == 3 == rep.round_trips - upload
    assert rep.steps[upload:] == ["upload", "upload-consent", "upload-reveal"]
    stages = [m.content[RECORD]["stage"] for m in lg.sent]
    assert stages.count("train") == 5 and stages.count("claim") == 5


def test_train_content_other_than_the_announced_global_model_is_refused():
    # Prepare: a PS that announces one global model at the claim, then sends node 1001 another one to train
    trained: list[int] = []

    def make(msg, ctx):
        trained.append(ctx.node_id)
        return noisy_reply([])(msg, ctx)

    lg = LoopbackGrid(toy_client_app(make), 4, ungrouped=True)
    honest = lg.push_messages

    def push(messages):
        msgs = list(messages)
        for m in msgs:
            if m.metadata.dst_node_id == 1001 and m.content[RECORD]["stage"] == "train":
                m.content["arrays"] = ArrayRecord([np.ones(s, np.float32) for s in SHAPES])
        return honest(msgs)
    lg.push_messages = push
    grid = ReshuffleGrid(lg, phase_timeout=10, group_size=None)
    # Execute
    replies = list(grid.send_and_receive(train_messages(grid), timeout=60))
    # Assert: node 1001 never ran the app's handler and dropped out; the others arrive
    assert 1001 not in trained and sorted(trained) == [1000, 1002, 1003]
    assert len(replies) == 3 and grid.rounds[-1].dropouts.get("train") == 1
    assert any("differs from the global model" in reason for _, reason in lg.errors)


def test_evaluate_and_query_pass_through_unchanged():
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 3, ungrouped=True)
    grid = ReshuffleGrid(lg, group_size=None)
    msgs = [Message(RecordDict({"config": ConfigRecord({"x": 1})}), dst_node_id=n, message_type="evaluate",
                    group_id="1") for n in grid.get_node_ids()]
    replies = list(grid.send_and_receive(msgs, timeout=10))
    assert sorted(r.content["metrics"]["node"] for r in replies) == sorted(lg.node_ids)
    assert all(r.metadata.src_node_id == r.content["metrics"]["node"] for r in replies)
    assert all(RECORD not in m.content for m in lg.sent) and grid.rounds == []


def test_config_record_in_a_train_reply_is_refused_naming_the_key():
    # Prepare: node 0 answers like a legacy FitRes, with a ConfigRecord
    def make(msg, ctx):
        c = RecordDict({"arrays": msg.content["arrays"], "metrics": MetricRecord({"num-examples": 1})})
        if ctx.node_config["partition-id"] == 0:
            c["fitres.status"] = ConfigRecord({"code": 0})
        return c
    lg = LoopbackGrid(toy_client_app(make), 4, ungrouped=True)
    grid = ReshuffleGrid(lg, group_size=None)
    replies = list(grid.send_and_receive(train_messages(grid), timeout=60))
    # Assert: that node (in the roster: it claimed before training) drops out at the train stage, with the
    # key named; the others arrive
    assert len(replies) == 3 and grid.rounds[-1].roster == 4 and grid.rounds[-1].dropouts == {"train": 1}
    assert any("'fitres.status'" in e for e in grid.rounds[-1].errors)
    node0 = lg.node_ids[0]
    err = [r for m, r in lg.errors if m.metadata.dst_node_id == node0]
    assert err and "'fitres.status'" in err[0]


def test_a_node_dropping_mid_protocol_is_a_dropout():
    # Prepare: node 2 stops answering at the protocol's third message
    seen: dict[int, int] = {}

    def drop(node, msg):
        if RECORD in msg.content and msg.content[RECORD]["stage"] == "protocol":
            seen[node] = seen.get(node, 0) + 1
            return node == 1002 and seen[node] >= 3
        return False
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 5, drop=drop, ungrouped=True)
    grid = ReshuffleGrid(lg, phase_timeout=0.3, group_size=None)
    replies = list(grid.send_and_receive(train_messages(grid), timeout=60))
    rep = grid.rounds[-1]
    assert len(replies) == 4 and rep.roster == 5 and sum(rep.dropouts.values()) >= 1
    assert 1002 not in {r.metadata.src_node_id for r in replies} or len(replies) == 4


def test_train_message_without_the_reserved_record_is_refused():
    # A server that skips Re-Shuffle would get a linked reply: the mod refuses to produce one.
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 2, ungrouped=True)
    replies = list(lg.send_and_receive(train_messages(lg), timeout=5))
    assert all(r.has_error() and "ReshuffleGrid" in r.error.reason for r in replies)


def test_reserved_key_and_per_node_content_are_refused_by_the_grid():
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 3, ungrouped=True)  # the least a round needs
    grid = ReshuffleGrid(lg, group_size=None)
    bad = RecordDict({"arrays": initial(), RECORD: ConfigRecord({"stage": "train"})})
    with pytest.raises(ConfigError, match="reserved"):
        grid.send_and_receive(train_messages(grid, content=bad), timeout=5)
    n0, n1, _ = grid.get_node_ids()
    msgs = [Message(RecordDict({"arrays": ArrayRecord([np.full(2, v, np.float32)])}), dst_node_id=n,
                    message_type="train", group_id="1") for v, n in ((0, n0), (1, n1))]
    with pytest.raises(ConfigError, match="same content"):
        grid.send_and_receive(msgs, timeout=5)
    with pytest.raises(ConfigError, match="unknown round parameter"):
        ReshuffleGrid(lg, d=5, group_size=None)


# --------------------------------------------------------------------------- keys
def test_claims_bind_key_run_round_and_node():
    me, other = simulation_participant(7, 0), simulation_participant(7, 1)
    proof = claim(me, 7, 3, 1000)
    verify_claim(me.ca, 0, me.cert, proof, 7, 3, 1000)
    for run, T, node in ((8, 3, 1000), (7, 4, 1000), (7, 3, 1001)):  # replayed elsewhere
        with pytest.raises(InvalidSignature):
            verify_claim(me.ca, 0, me.cert, proof, run, T, node)
    with pytest.raises(InvalidSignature):  # node 1's key claiming participant 0
        verify_claim(me.ca, 0, me.cert, claim(other, 7, 3, 1000), 7, 3, 1000)


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory):
    from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, CertificateAuthority

    d = tmp_path_factory.mktemp("keys")
    ca = CertificateAuthority.generate()
    ca.save(d)
    for i in range(4):
        ca.issue_files(d, i)
    ca.issue_files(d, SERVER_ID, ROLE_SERVER)
    return d


def test_a_node_cannot_claim_another_participant(key_dir):
    # Prepare: node 3 holds participant 3's key but claims participant 0 (whose certificate is public)
    from reshuffle.crypto.signatures import load_identity
    from reshuffle.flower.mod import reshuffle_mod

    _, cert0 = load_identity(key_dir, 0)

    def impostor(msg, ctx, call_next):
        reply = reshuffle_mod(msg, ctx, call_next)
        if ctx.node_config["reshuffle-participant-id"] == 3 and msg.content[RECORD]["stage"] == "claim":
            reply.content[RECORD]["pid"], reply.content[RECORD]["cert"] = 0, cert0.encode()
        return reply

    cfg = lambda i: {"reshuffle-key-dir": str(key_dir), "reshuffle-participant-id": i}  # noqa: E731
    lg = LoopbackGrid(toy_client_app(noisy_reply([]), mods=[impostor]), 4, node_config=cfg, ungrouped=True)
    grid = ReshuffleGrid(lg, key_dir=str(key_dir), group_size=None)
    # Execute
    replies = list(grid.send_and_receive(train_messages(grid), timeout=60))
    # Assert: the impostor is out, the real participant 0 is in
    rep = grid.rounds[-1]
    assert rep.roster == 3 and len(replies) == 3
    assert any("node 1003" in e and "InvalidSignature" in e for e in rep.errors)


def test_a_node_with_key_files_refuses_simulation_keys(key_dir):
    cfg = lambda i: {"reshuffle-key-dir": str(key_dir), "reshuffle-participant-id": i}  # noqa: E731
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 3, node_config=cfg, ungrouped=True)
    grid = ReshuffleGrid(lg, group_size=None)  # a server asking for simulation keys
    assert list(grid.send_and_receive(train_messages(grid), timeout=30)) == []
    assert all("simulation keys" in reason for _, reason in lg.errors)


def test_a_fresh_process_per_message_replays_the_session():
    # A SuperNode starts a new ClientApp process per message: no live participant survives.
    produced: list = []
    lg = LoopbackGrid(toy_client_app(noisy_reply(produced), mods=[forgetful_mod]), 3, ungrouped=True)
    replies = list(ReshuffleGrid(lg, group_size=None).send_and_receive(train_messages(lg), timeout=60))
    assert sorted(records.encode_content(r.content) for r in replies) == sorted(b for _, b in produced)
    assert not lg.errors


def test_grid_settings_are_validated():
    lg = LoopbackGrid(toy_client_app(noisy_reply([])), 2, ungrouped=True)
    for bad in ({"phase_timeout": 0}, {"train_timeout": 0}, {"poll_interval": -1.0}, {"metrics_budget": 10},
                {"R_max": 0}):
        with pytest.raises(ConfigError):
            ReshuffleGrid(lg, **bad, group_size=None)
    with pytest.raises(ConfigError, match="wraps a flwr Grid"):
        ReshuffleGrid(object(), group_size=None)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=40))
def test_session_state_keeps_ring_words_bit_exact(values):
    # The reply's words (any uint32, including NaN patterns as float32) survive the session's encoding.
    from reshuffle.protocol.session import SessionState

    me = simulation_participant(7, 0)
    words = np.array(values, dtype="<u4")
    st_ = SessionState.decode(SessionState.new(0, 1, words, me.key, me.cert, me.ca.verify_key, b"h" * 32).encode())
    assert st_.words and np.frombuffer(st_.model, "<u4").tobytes() == words.tobytes()
    model = st_.participant().inner._model  # a grouped participant (the default floors ask for a group)
    assert model.dtype == np.uint32 and model.tobytes() == words.tobytes()
    # Started before training: no model until with_model, which adds it once
    blank = SessionState.new(0, 1, None, me.key, me.cert, me.ca.verify_key, b"h" * 32, words=True)
    back = SessionState.decode(blank.encode())
    assert not back.has_model and back.participant().inner._model is None
    assert back.with_model(words).model == st_.model
    with pytest.raises(ConfigError, match="already has"):
        st_.with_model(words)
