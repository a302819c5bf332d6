"""Parser/Writer: exact inverses, bounds checked, trailing bytes rejected."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reshuffle.errors import DecodeError
from reshuffle.wire import Parser, Writer


@given(st.integers(0, 255), st.integers(0, 2**32 - 1), st.binary(max_size=64), st.lists(st.integers(0, 2**32 - 1), max_size=8))
def test_roundtrip(a, b, blob, lst):
    data = Writer().u8(a).u32(b).var(blob).u32_list(lst).bytes()
    p = Parser(data)
    assert (p.u8("a"), p.u32("b"), p.var("blob"), p.u32_list("l", 8)) == (a, b, blob, lst)
    p.finish()


@given(st.binary(max_size=40))
def test_fuzzed_input_only_decode_errors(data):
    p = Parser(data)
    try:
        p.u16("x")
        p.var("v", max_len=16)
        p.u32_list("l", 4)
        p.finish()
    except DecodeError:
        pass


def test_errors_name_the_field():
    with pytest.raises(DecodeError, match="'len'"):
        Parser(b"\x00").u32("len")
    with pytest.raises(DecodeError, match="exceeds"):
        Parser(Writer().var(b"abc").bytes()).var("v", max_len=2)
    with pytest.raises(DecodeError, match="trailing"):
        Parser(b"\x00\x01").finish()
    with pytest.raises(DecodeError, match="expected bytes"):
        Parser("text")
