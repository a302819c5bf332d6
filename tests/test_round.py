"""The full round: rawness, unlinkability, ideal functionality, dropouts."""

import numpy as np
import pytest

import reshuffle
from reshuffle.errors import BelowThreshold, ConfigError, EncodingError
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.schedule import STAGES
from tests.protocol_helpers import expected_models, make_updates, multiset


@pytest.mark.parametrize("N", [3, 10, 32])  # every participant checks every dealer: cost ~ N^2 (26 s at N = 50)
def test_rawness_exact_multiset(N):
    ups = make_updates(N, d=24, seed=N)
    r = reshuffle.shuffle(ups, seed=N)
    assert r.online == list(range(N))
    assert multiset(r.models) == expected_models(ups, range(N))
    assert r.errors == [] and r.participant_errors == {}
    # One position per settled participant plus the decoys' (§8), which stay empty and are never delivered.
    assert r.output.n_positions == N + r.params.decoys
    assert r.output.discarded_positions == r.output.decoy_positions
    assert set(r.output.rejected_rows.values()) == {"empty"}


def test_positions_map_each_participant_to_its_own_model():
    ups = make_updates(8, d=10, seed=3)
    r = reshuffle.shuffle(ups, seed=5)
    codec = r.params.codec
    for i, pos in r.positions.items():
        assert np.array_equal(r.models[pos], codec.roundtrip(ups[i]))


def test_each_participants_state_knows_its_own_row():
    # The position the blame step protects (never open one's own row) is read from the state, not the diary.
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner
    from reshuffle.protocol.participant import ParticipantView

    ups = make_updates(6, d=4, seed=7)
    server, parts = build_round(ups, RoundParams.default(6, 4), seed=8)
    assert all(pp.state.position is None for pp in parts.values())
    out = InProcessRunner(server, parts).run()
    got = {i: pp.state.position for i, pp in parts.items()}
    assert got == {i: pp.view.position for i, pp in parts.items()}
    assert sorted(got.values()) == sorted(out.valid_positions)
    parts[0].view = ParticipantView()  # a wiped diary changes nothing the protocol reads
    assert parts[0].state.position == got[0]


def test_clipping_reported_by_codec_not_wrapped():
    ups = make_updates(4, d=8, seed=1, scale=100.0)  # beyond the ±64 range
    r = reshuffle.shuffle(ups, seed=1)
    assert all(np.all(np.abs(m) <= 64.0) for m in r.models)
    assert multiset(r.models) == expected_models(ups, range(4))


def test_ideal_and_real_give_same_multiset():
    ups = make_updates(12, d=20, seed=9)
    real = reshuffle.shuffle(ups, seed=1)
    ideal = reshuffle.ideal_shuffle(ups, seed=1)
    assert multiset(real.models) == multiset(ideal)


def test_ideal_shuffle_permutes():
    ups = make_updates(6, d=4, seed=2)
    orders = {tuple(m.tobytes() for m in reshuffle.ideal_shuffle(ups, seed=s)) for s in range(20)}
    assert len(orders) > 5


@pytest.mark.parametrize("phase", STAGES)
def test_dropouts_up_to_tolerance(phase):
    N = 7  # c = 1, t = 5: up to 2 may drop
    ups = make_updates(N, d=12, seed=4)
    t = RoundParams.default(N, 12).t
    assert t == 5
    for drops in range(1, N - t + 1):
        dropped = list(range(N - drops, N))
        r = reshuffle.shuffle(ups, seed=drops, dropouts={phase: dropped})
        # Dropping after the upload still leaves the model in: its masks are removed by the others.
        want = list(range(N)) if phase == "unmask" else list(range(N - drops))
        assert r.online == want
        assert multiset(r.models) == expected_models(ups, want)


@pytest.mark.parametrize("phase", STAGES)
def test_below_threshold_fails_clearly(phase):
    N = 7
    ups = make_updates(N, d=6, seed=4)
    with pytest.raises(BelowThreshold, match="threshold t=5"):
        reshuffle.shuffle(ups, seed=1, dropouts={phase: [0, 1, 2]})


def test_dropouts_spread_over_phases():
    N = 9  # c = 1, t = 6
    ups = make_updates(N, d=8, seed=7)
    r = reshuffle.shuffle(ups, seed=3, dropouts={"ot": [1], "reserve": [2], "unmask": [4]})
    assert r.online == [0, 3, 4, 5, 6, 7, 8]
    assert multiset(r.models) == expected_models(ups, r.online)


def test_bad_arguments():
    ups = make_updates(3, d=4)
    with pytest.raises(ConfigError, match="unknown dropout stage"):
        reshuffle.shuffle(ups, dropouts={"lunch": [0]})
    with pytest.raises(ConfigError, match="unknown round parameter"):
        reshuffle.shuffle(ups, colour=3)
    with pytest.raises(ConfigError, match="threshold"):
        reshuffle.shuffle(ups, t=1)
    with pytest.raises(EncodingError, match="float32"):
        reshuffle.shuffle([u.astype(np.float64) for u in ups])
    with pytest.raises(EncodingError, match="length"):
        reshuffle.shuffle([ups[0], ups[1][:2]])
    with pytest.raises(ConfigError, match="at least 2"):
        reshuffle.shuffle(ups[:1])


def test_other_parameters_and_group():
    ups = make_updates(5, d=9, seed=11)
    r = reshuffle.shuffle(ups, seed=2, group="secp256k1", b=64, f=32, clip=1000.0, n=10, k=4, R_max=4)
    assert multiset(r.models) == expected_models(ups, r.online, r.params.codec)
    assert len(r.online) >= 4  # with n = 2N a rare participant may stay unsettled


def test_stats_per_phase():
    r = reshuffle.shuffle(make_updates(5, d=100), seed=1)
    for ph in STAGES:
        assert r.stats[ph]["ps_s"] >= 0
    up = r.stats["upload"]
    # Each participant uploads the whole list: 5 positions × (100 + 4) words × 4 bytes, plus header.
    assert up["participant_bytes_sent"] >= 5 * 104 * 4
    assert up["ps_bytes_received"] == 5 * up["participant_bytes_sent"]


def test_words_payload_is_bit_exact():
    # Arbitrary ring words (e.g. serialized bytes) come back unchanged, as a multiset.
    rng = np.random.default_rng(7)
    ups = [rng.integers(0, 2**32, size=33, dtype=np.uint64).astype("<u4") for _ in range(4)]
    res = reshuffle.shuffle(ups, payload="words", seed=3)
    assert sorted(m.tobytes() for m in res.models) == sorted(u.tobytes() for u in ups)
    with pytest.raises(EncodingError):
        reshuffle.shuffle([u.astype(np.float32) for u in ups], payload="words", seed=3)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_model_is_refused_at_the_client_before_masking(bad):
    from reshuffle.crypto.signatures import CertificateAuthority, SigningKey
    from reshuffle.protocol.participant import Participant

    ca, sk = CertificateAuthority.generate(), SigningKey.generate()
    model = np.ones(5, np.float32)
    model[3] = bad
    with pytest.raises(EncodingError, match="NaN/Inf"):
        Participant(0, 1, model, sk, ca.issue(0, sk.verify_key), ca, bytes(32))


def test_clipped_coordinates_are_reported():
    ups = make_updates(4, d=6, seed=1)
    ups[2] = ups[2].copy()
    ups[2][:2] = 100.0  # beyond clip = 64
    r = reshuffle.shuffle(ups, seed=2)
    assert r.clipped == 2 and r.views[2].clipped == 2


def test_words_payload_follows_the_ring_width():
    ups = [(np.arange(9, dtype="<u2") * (i + 3)).astype("<u2") for i in range(4)]
    res = reshuffle.shuffle(ups, payload="words", b=16, f=8, seed=2)
    assert sorted(m.tobytes() for m in res.models) == sorted(u.tobytes() for u in ups)
    with pytest.raises(EncodingError, match="uint16"):
        reshuffle.shuffle([u.astype("<u4") for u in ups], payload="words", b=16, f=8, seed=2)
