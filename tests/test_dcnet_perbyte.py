"""The DC-net round's per-byte path and the PS's group pool.

The fused upload (encode, row tag, pairwise keystreams, row hashes in one pass per chunk) must give the bytes
the separate passes give, for every size, chunk and member; the pooled PS (groups side by side on threads) must
end every group in the state the serial PS leaves.
"""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reshuffle.crypto.encoding import DECODE_CHUNK, FixedPoint, RawWords
from reshuffle.crypto.prg import accumulate_streams, mask_rows
from reshuffle.errors import EncodingError
from reshuffle.harness.api import build_round
from reshuffle.harness.runner import InProcessRunner
from reshuffle.protocol import credential, dcnet
from reshuffle.protocol import messages as msg
from reshuffle.protocol.dcnet import DCParticipant, GroupPool
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.pseudonym import ROW_BYTES
from tests.protocol_helpers import make_updates


class _Nym:
    def __init__(self, raw: bytes) -> None:
        self._raw = raw

    def row_bytes(self) -> bytes:
        return self._raw


def _reference(model, p, pos, cred, nym, K, T, i, pairs, h):
    """Today's separate passes: encode and build the row, write the list, mask it, hash its rows."""
    lw, clipped, tag = dcnet.plain_model_list(model, p, pos, cred, nym, K, T)
    rows = dcnet.parties(p)
    dcnet.mask_in_place(lw.reshape(-1), T, p.upload_m, i, pairs, h, rows)
    return lw, msg.row_hashes(lw.reshape(-1).view(np.uint8).data, rows), clipped, tag


def _inputs(seed: int, g: int):
    rng = np.random.default_rng(seed)  # test data only
    cred = credential.Credential(rng.bytes(credential.R_BYTES), rng.bytes(credential.Y_BYTES))
    return rng, cred, _Nym(rng.bytes(ROW_BYTES)), rng.bytes(credential.K_BYTES), rng.bytes(32)


# --------------------------------------------------------------------------- the fused upload
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.one_of(st.just(1), st.integers(1, 300), st.sampled_from([1020, 1021, 1024, 4092, 4096, 4100])),
       g=st.integers(3, 6), i_frac=st.floats(0, 1), pos_frac=st.floats(0, 1),
       chunk=st.sampled_from([16, 32, 48, 64, 4096, 1 << 18]), scale=st.sampled_from([0.05, 50.0, 1e4]),
       b=st.sampled_from([32, 64]), seed=st.integers(0, 2**16))
def test_the_fused_upload_equals_the_separate_passes_bit_for_bit(d, g, i_frac, pos_frac, chunk, scale, b, seed):
    p = dcnet.dc_params(g, d, b=b, f=16, clip=64.0)
    rows = dcnet.parties(p)
    i, pos = min(int(i_frac * g), g - 1), min(int(pos_frac * rows), rows - 1)
    rng, cred, nym, K, h = _inputs(seed, g)
    model = (rng.normal(size=d) * scale).astype(np.float32)
    model[: min(d, 3)] = [64.0, -64.0, 2.0**-17][: min(d, 3)]  # the range's ends and a tie of the rounding
    pairs = {j: rng.bytes(32) for j in range(g) if j != i}
    got = dcnet.masked_upload(model, p, pos, cred, nym, K, 7, i, pairs, h, chunk_bytes=chunk)
    want = _reference(model, p, pos, cred, nym, K, 7, i, pairs, h)
    assert np.array_equal(got[0], want[0]) and got[0].dtype == want[0].dtype
    assert got[1:] == want[1:]


def test_the_fused_upload_of_raw_words_and_chunks_across_row_ends():
    d = 777
    p = dcnet.dc_params(5, d, payload="words")
    rng, cred, nym, K, h = _inputs(3, 5)
    model = rng.integers(0, 2**32, size=d, dtype=np.uint64).astype(np.uint32)
    pairs = {j: rng.bytes(32) for j in range(5) if j != 4}  # the last member: every sign negative
    row_bytes = p.row_words * 4
    for chunk in (16, row_bytes - row_bytes % 16, row_bytes + 16, 3 * row_bytes):
        got = dcnet.masked_upload(model, p, 1, cred, nym, K, 2, 4, pairs, h, chunk_bytes=chunk)
        want = _reference(model, p, 1, cred, nym, K, 2, 4, pairs, h)
        assert np.array_equal(got[0], want[0]) and got[1:] == want[1:]


def test_the_overlapped_row_hashes_equal_the_inline_ones():
    p = dcnet.dc_params(5, 5000)
    rng, cred, nym, K, h = _inputs(4, 5)
    model = rng.normal(size=5000).astype(np.float32)
    pairs = {j: rng.bytes(32) for j in range(1, 5)}
    a = dcnet.masked_upload(model, p, 2, cred, nym, K, 1, 0, pairs, h, chunk_bytes=4096, overlap=True)
    b = dcnet.masked_upload(model, p, 2, cred, nym, K, 1, 0, pairs, h, chunk_bytes=4096, overlap=False)
    assert np.array_equal(a[0], b[0]) and a[1:] == b[1:]


def test_large_lists_hash_on_the_helper_thread_where_there_is_a_second_core(monkeypatch):
    from reshuffle.crypto import prg

    used = []
    monkeypatch.setattr(prg, "OVERLAP_MIN_BYTES", 1 << 12)
    monkeypatch.setattr(prg, "_hasher", lambda real=prg._hasher: used.append(1) or real())
    streams = [[(os.urandom(32), 1)] for _ in range(2)]
    for cores, big in ((2, True), (1, True), (2, False)):
        monkeypatch.setattr(prg, "cores_available", lambda c=cores: c)
        used.clear()
        out = np.zeros((2, 2048 if big else 256), np.uint32)
        digests = mask_rows(out, streams, chunk_bytes=1024)
        assert bool(used) == (cores == 2 and big)
        assert digests == [hashlib.sha256(out[r].tobytes()).digest() for r in range(2)]


def test_a_model_of_another_length_or_with_nan_is_refused_before_anything_is_masked():
    p = dcnet.dc_params(5, 40)
    rng, cred, nym, K, h = _inputs(5, 5)
    pairs = {j: rng.bytes(32) for j in range(1, 5)}
    with pytest.raises(EncodingError, match="d=40"):
        dcnet.masked_upload(np.zeros(41, np.float32), p, 0, cred, nym, K, 1, 0, pairs, h)
    bad = np.zeros(40, np.float32)
    bad[[3, 30]] = np.nan
    with pytest.raises(EncodingError, match="non-finite"):
        dcnet.masked_upload(bad, p, 0, cred, nym, K, 1, 0, pairs, h)


# --------------------------------------------------------------------------- the pieces
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3000), bits=st.sampled_from([16, 32, 64]), split=st.integers(1, 3000),
       seed=st.integers(0, 2**16))
def test_encode_into_by_chunks_equals_encode(n, bits, split, seed):
    codec = FixedPoint(bits, 8 if bits == 16 else 20, 64.0 if bits == 16 else 100.0)
    rng = np.random.default_rng(seed)
    w = (rng.normal(size=n) * 80).astype(np.float32)
    w[rng.integers(0, n, size=min(n, 4))] = np.float32(0.5 / 2**codec.frac_bits)  # ties round to even
    want = codec.encode(w)
    out = np.empty(n, dtype=codec.dtype)
    clipped = sum(codec.encode_into(w[a:a + split], out[a:a + split]) for a in range(0, n, split))
    assert np.array_equal(out, want.words) and clipped == want.clipped
    assert np.array_equal(codec.decode(out), (want.words.view(f"<i{bits // 8}").astype(np.float64)
                                              * codec.resolution).astype(np.float32))


def test_encode_into_of_float64_extremes_and_non_finite_values_matches_encode():
    codec = FixedPoint()
    w = np.array([1e308, 1e308, -1e308, 3.0, -0.0, 5e-324] * 5000)  # the slice's sum overflows; nothing is NaN
    out = np.empty(w.size, codec.dtype)
    want = codec.encode(w)
    assert codec.encode_into(w, out) == want.clipped and np.array_equal(out, want.words)
    w[[7, 20000]] = [np.inf, np.nan]
    with pytest.raises(EncodingError, match="2 non-finite"):
        codec.encode_into(w, out)
    with pytest.raises(EncodingError, match="2 non-finite"):
        codec.encode(w)


def test_decode_across_its_chunks_and_raw_words_encode_into():
    codec = FixedPoint()
    words = np.random.default_rng(0).integers(0, 2**32, size=DECODE_CHUNK * 2 + 5, dtype=np.uint64)
    words = words.astype(np.uint32)
    want = (words.view(np.int32).astype(np.float64) * codec.resolution).astype(np.float32)
    assert np.array_equal(codec.decode(words), want)
    raw = RawWords(32)
    out = np.empty(7, np.uint32)
    assert raw.encode_into(words[:7], out) == 0 and np.array_equal(out, words[:7])
    with pytest.raises(EncodingError):
        raw.encode_into(words[:7].astype(np.uint64), out)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 4), words=st.integers(1, 700), signs=st.lists(st.sampled_from([1, -1]), max_size=4),
       written=st.lists(st.booleans(), min_size=4, max_size=4), chunk=st.sampled_from([16, 64, 1000, 1 << 18]),
       seed=st.integers(0, 2**16))
def test_mask_rows_equals_a_fill_then_accumulate_streams_then_sha256(rows, words, signs, written, chunk, seed):
    rng = np.random.default_rng(seed)
    plain = rng.integers(0, 2**32, size=(rows, words), dtype=np.uint64).astype(np.uint32)
    streams = [[(os.urandom(32), s) for s in signs] for _ in range(rows)]
    want = np.zeros((rows, words), np.uint32)
    for r in range(rows):
        if written[r]:
            want[r] = plain[r]
        accumulate_streams(want[r], streams[r])

    def fill(r, w0, part):
        if not written[r]:
            return False
        part[:] = plain[r, w0:w0 + part.size]
        return True

    got = np.zeros((rows, words), np.uint32)
    digests = mask_rows(got, streams, fill, chunk_bytes=chunk)
    assert np.array_equal(got, want)
    assert digests == [hashlib.sha256(want[r].tobytes()).digest() for r in range(rows)]


def test_the_row_writer_wants_its_chunks_in_order():
    p = dcnet.dc_params(5, 64)
    rng, cred, nym, K, h = _inputs(6, 5)
    w = credential.RowWriter(np.zeros(64, np.float32), p.codec, dcnet.ZERO_TOKEN, cred, nym, K, 1, 0)
    row = np.zeros(p.row_words, np.uint32)
    w.write(0, row[:16])
    with pytest.raises(ValueError, match="out of order"):
        w.write(32, row[32:48])


# --------------------------------------------------------------------------- the pool
def test_the_pool_keeps_each_groups_order_and_hands_back_the_first_error():
    pool = GroupPool(2)
    seen: dict[int, list[int]] = {j: [] for j in range(4)}
    for k in range(200):
        pool.submit(k % 4, seen[k % 4].append, k)
    pool.wait()
    assert all(seen[j] == list(range(j, 200, 4)) for j in range(4))

    def boom(j):
        raise RuntimeError(f"group {j}")

    pool.submit(3, boom, 3)
    pool.submit(1, boom, 1)
    with pytest.raises(RuntimeError, match="group 1"):
        pool.wait()
    out = pool.run({0: lambda: threading.current_thread().name, 2: lambda: boom(2)})
    assert out[0][0].startswith("reshuffle-group") and isinstance(out[2][1], RuntimeError)
    pool.close()
    with pytest.raises(Exception):
        GroupPool(1)


def test_the_pools_backlog_is_bounded_so_queued_uploads_cannot_pile_up():
    pool = GroupPool(2, backlog=3)
    gate = threading.Event()
    for k in range(3):  # two run (one per group), one waits behind its group's first
        pool.submit(k % 2, gate.wait, 10)
    # A fourth submit would block now: every slot is taken until a call finishes.
    assert not pool._slots.acquire(blocking=False)
    gate.set()
    pool.wait()
    assert all(pool._slots.acquire(blocking=False) for _ in range(3))  # every slot came back
    pool.close()


def _state(ps, out):
    """Everything a round leaves that the pool could disturb: outputs, errors, sums, blame, per group."""
    groups = {}
    for j, s in sorted(ps.servers.items()):
        groups[j] = (None if s._sum is None else s._sum.tobytes(), [str(e) for e in s.errors],
                     sorted(s.culprits), s.phase, dict(s.openings).keys())
    return ([m.tobytes() for m in out.models], list(out.valid_positions), list(out.pseudonyms),
            dict(out.rejected_rows), sorted(out.blamed), list(out.suspects), dict(out.failed or {}),
            [str(e) for e in out.errors], groups)


class _Jammer(DCParticipant):
    def _deviate(self, lw):
        lw = lw.copy()
        lw[:, :4] += np.uint32(7)
        return lw


@pytest.mark.parametrize("case", ["clean", "jammer", "silent"])
def test_pooled_and_serial_groups_leave_identical_rounds(case, monkeypatch):
    submitted = []
    submit = GroupPool.submit
    monkeypatch.setattr(GroupPool, "submit", lambda self, j, fn, *a: (submitted.append(j), submit(self, j, fn, *a)))
    N, d = 15, 40
    groups = [list(range(0, 5)), list(range(5, 10)), list(range(10, 15))]
    states = []
    for workers in (1, 2):
        ups = make_updates(N, d=d, seed=21)
        dropouts = {"upload": [7]} if case == "silent" else None
        ps, parts = build_round(ups, RoundParams.default(N, d), seed=21, groups=groups)
        if case == "jammer":
            parts[3].dc_class = _Jammer
        ps.workers = workers
        out = InProcessRunner(ps, parts, dropouts).run()
        assert ps._pool is None  # closed with the round
        assert bool(submitted) == (workers == 2)  # the pooled run handed the groups' uploads to the pool
        states.append(_state(ps, out))
    assert states[0] == states[1]
    if case == "jammer":
        assert sorted(states[0][4]) == [3]
    if case == "silent":
        assert list(states[0][6]) == [1] and len(states[0][0]) == 10
