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


@given(st.integers(1, 20), st.lists(st.binary(min_size=1, max_size=1), max_size=30), st.binary(max_size=8))
def test_fixed_list_splits_like_fixed_reads(size, seeds, tail):
    items = [s * size for s in seeds]
    data = b"".join(items) + tail
    one_by_one = Parser(data)
    batched = Parser(data)
    assert batched.fixed_list(size, len(items), "c") == [one_by_one.fixed(size, "c") for _ in items]
    assert batched.rest() == tail


def test_fixed_list_needs_every_item():
    with pytest.raises(DecodeError, match=r"'c\[0\.\.3\)' needs 48 bytes, 47 left"):
        Parser(bytes(47)).fixed_list(16, 3, "c")
    with pytest.raises(DecodeError, match="items of 0 bytes"):
        Parser(bytes(4)).fixed_list(0, 3, "c")
