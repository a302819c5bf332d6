"""Fixed-point encoding: round trip within 2^-f, clipping counted, bad input rejected."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reshuffle.crypto.encoding import FixedPoint
from reshuffle.errors import ConfigError, EncodingError

FP = FixedPoint()


@settings(max_examples=50, deadline=None)
@given(arrays(np.float32, st.integers(1, 200), elements=st.floats(-64, 64, width=32)))
def test_roundtrip_within_resolution(w):
    enc = FP.encode(w)
    assert enc.clipped == 0
    back = FP.decode(enc.words)
    assert back.dtype == np.float32
    # Error: half a quantum from rounding plus float32 rounding of the result.
    assert np.all(np.abs(back.astype(np.float64) - w) <= FP.resolution / 2 + np.abs(w) * 2**-23)


@settings(max_examples=30, deadline=None)
@given(arrays(np.float32, 50, elements=st.floats(-1e6, 1e6, width=32)))
def test_clipped_counted_never_wrapped(w):
    enc = FP.encode(w)
    assert enc.clipped == int(np.sum(np.abs(w.astype(np.float64)) > FP.clip))
    back = FP.decode(enc.words)
    assert np.all(np.abs(back) <= FP.clip)
    assert np.all(np.sign(back[np.abs(w) > 1]) == np.sign(w[np.abs(w) > 1]))


def test_known_values():
    fp = FixedPoint(bits=16, frac_bits=8, clip=100.0)
    enc = fp.encode(np.array([1.0, -1.0, 0.5, -128.0], dtype=np.float32))
    assert enc.words.tolist() == [256, 65536 - 256, 128, 65536 - 25600]
    assert enc.clipped == 1


def test_rejects_bad_input():
    with pytest.raises(EncodingError, match="non-finite"):
        FP.encode(np.array([1.0, np.nan], dtype=np.float32))
    with pytest.raises(EncodingError, match="1-D"):
        FP.encode(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(EncodingError, match="float"):
        FP.encode(np.zeros(3, dtype=np.int32))
    with pytest.raises(EncodingError, match="dtype"):
        FP.decode(np.zeros(3, dtype=np.uint64))


def test_config_validation():
    with pytest.raises(ConfigError, match="does not fit"):
        FixedPoint(bits=32, frac_bits=24, clip=128.0)
    with pytest.raises(ConfigError):
        FixedPoint(bits=24)
    with pytest.raises(ConfigError):
        FixedPoint(clip=-1.0)
