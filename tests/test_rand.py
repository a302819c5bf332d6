"""SeededRandom: one AES-CTR keystream whatever the read sizes, and copies that branch it."""

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.crypto.rand import SeededRandom


def _reference(r: SeededRandom, total: int) -> bytes:
    # The stream is AES-256-CTR under the derived key from counter block 0.
    return Cipher(algorithms.AES(r._key), modes.CTR(bytes(16))).encryptor().update(bytes(total))


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=1, max_size=8), st.lists(st.integers(0, 9000), max_size=12))
def test_reads_of_any_sizes_are_one_ctr_stream(seed, sizes):
    r = SeededRandom(seed, b"t")
    got = b"".join(r.bytes(n) for n in sizes)
    assert got == _reference(SeededRandom(seed, b"t"), sum(sizes))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=6), st.lists(st.integers(0, 5000), min_size=1, max_size=6))
def test_a_copy_continues_the_stream_and_advances_on_its_own(before, after):
    r = SeededRandom(7)
    for n in before:
        r.bytes(n)
    c = r.copy()
    mine = [r.bytes(n) for n in after]
    assert [c.bytes(n) for n in after] == mine  # the same continuation, independently
    assert r.bytes(16) == c.bytes(16)
