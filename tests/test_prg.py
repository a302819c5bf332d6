"""PRG: deterministic, domain-separated, equal to raw AES-CTR keystream."""

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.crypto.domain import label
from reshuffle.crypto.prg import PRG, KeyDeriver, derive_key, scratch_for
from reshuffle.errors import ConfigError

SEED = bytes(range(32))


def test_deterministic_and_domain_separated():
    a = PRG(SEED, label("mask/pair", 1, 2, 0, 1)).words(1000)
    assert np.array_equal(a, PRG(SEED, label("mask/pair", 1, 2, 0, 1)).words(1000))
    for other in (label("mask/pair", 1, 2, 1, 0), label("mask/pair", 2, 2, 0, 1), label("mask/self", 1, 2, 0)):
        assert not np.array_equal(a, PRG(SEED, other).words(1000))
    assert not np.array_equal(a, PRG(bytes(32), label("mask/pair", 1, 2, 0, 1)).words(1000))


def test_equals_aes_ctr_keystream():
    dom = label("x", 1)
    key = derive_key(SEED, dom)
    raw = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(4 * 333))
    assert PRG(SEED, dom).words(333).tobytes() == raw


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_ring_widths(bits):
    w = PRG(SEED, label("w", bits), bits=bits).words(4096)
    assert w.dtype.itemsize * 8 == bits
    # Uniform bytes: the top bit is set in about half the words.
    frac = np.mean(w >> np.array(bits - 1, dtype=w.dtype))
    assert 0.45 < frac < 0.55


def test_add_into_matches_words():
    dom = label("acc", 3)
    acc = np.arange(1000, dtype=np.uint32)
    expect = acc + PRG(SEED, dom).words(1000)
    scratch = scratch_for(1000)
    PRG(SEED, dom).add_into(acc, 1, scratch)
    assert np.array_equal(acc, expect)
    PRG(SEED, dom).add_into(acc, -1, scratch)
    assert np.array_equal(acc, np.arange(1000, dtype=np.uint32))


def test_validation():
    with pytest.raises(ConfigError):
        PRG(b"short", label("x"))
    with pytest.raises(ConfigError):
        PRG(SEED, b"")
    with pytest.raises(ConfigError):
        PRG(SEED, label("x"), bits=12)
    with pytest.raises(ConfigError):
        PRG(SEED, label("x")).add_into(np.zeros(4, dtype=np.uint64))


def test_label_injective():
    assert label("a", 1, 2) != label("a", 1, 2, 0)
    assert label("a", 12) != label("a1", 2)
    with pytest.raises(ValueError):
        label("a", -1)


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 1000, 4097])
def test_words_into_matches_words(n):
    dom = label("into", n)
    out = np.full(n, 7, dtype=np.uint32)
    PRG(SEED, dom).words_into(out)
    assert np.array_equal(out, PRG(SEED, dom).words(n))
    key = derive_key(SEED, dom)
    assert out.tobytes() == Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(4 * n))
    with pytest.raises(ConfigError):
        PRG(SEED, dom).words_into(np.zeros(n, dtype=np.uint16))


@settings(max_examples=50, deadline=None)
@given(seed=st.binary(min_size=16, max_size=64), domain=st.binary(min_size=1, max_size=200))
def test_derive_key_is_hkdf_sha256(seed, domain):
    # The hand-rolled Extract/Expand must equal the library's HKDF for one 32-byte block.
    ref = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"reshuffle/v1/prg-key", info=domain).derive(seed)
    assert derive_key(seed, domain) == ref
    assert KeyDeriver(seed).key(domain) == ref


def test_key_deriver_checks_its_inputs():
    with pytest.raises(ConfigError, match="seed"):
        KeyDeriver(bytes(15))
    with pytest.raises(ConfigError, match="domain"):
        KeyDeriver(SEED).key(b"")


@settings(max_examples=30, deadline=None)
@given(T=st.integers(0, 2**64 - 1), m=st.integers(0, 40), i=st.integers(0, 2000), j=st.integers(0, 2000),
       rows=st.integers(1, 6), h=st.binary(max_size=32), b=st.integers(1, 2**250))
def test_row_keys_equal_the_per_row_derivation(T, m, i, j, rows, h, b):
    from reshuffle.crypto.group import get_group
    from reshuffle.protocol.masking import pair_row_key, pair_row_keys, self_key, self_row_keys

    g = get_group()
    b %= g.order
    K = bytes(range(32))
    assert self_row_keys(g, T, m, i, b, h, rows) == [self_key(g, T, m, i, b, h, r) for r in range(rows)]
    assert pair_row_keys(K, T, m, i, j, h, rows) == [pair_row_key(K, T, m, i, j, h, r) for r in range(rows)]
