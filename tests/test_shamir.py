"""Shamir: any t shares reconstruct, t-1 shares are uniform, bad shares are rejected."""

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.crypto.group import get_group
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.shamir import Shamir, Share
from reshuffle.errors import BelowThreshold, ConfigError, DecodeError, InvalidShare

Q = get_group().order


@settings(max_examples=30, deadline=None)
@given(
    data=st.data(),
    n=st.integers(min_value=1, max_value=12),
    secret=st.integers(min_value=0, max_value=Q - 1),
)
def test_any_t_of_n_reconstruct(data, n, secret):
    t = data.draw(st.integers(min_value=1, max_value=n))
    sh = Shamir(Q, t)
    shares = sh.split(secret, range(1, n + 1), rng=SeededRandom(n * 1000 + t))
    subset = data.draw(st.permutations(shares))[: data.draw(st.integers(t, n))]
    assert sh.reconstruct(subset) == secret


def test_t_minus_1_shares_uniform_exact_enumeration():
    # Tiny field q = 7, t = 3: for every secret, the pair of shares at x = 1, 2
    # takes each of the 49 values exactly q times over all 49 polynomials.
    q, t = 7, 3
    sh = Shamir(q, t)
    for secret in range(q):
        counts = Counter()
        for c1, c2 in itertools.product(range(q), repeat=2):
            s = sh.shares_from_coefficients([secret, c1, c2], [1, 2])
            counts[(s[0].y, s[1].y)] += 1
        assert len(counts) == q * q
        assert set(counts.values()) == {1}


def test_t_shares_determine_secret_exact():
    # Contrast: with t = 3 shares the secret is a function of the shares.
    q, t = 7, 3
    sh = Shamir(q, t)
    seen = {}
    for secret, c1, c2 in itertools.product(range(q), repeat=3):
        key = tuple(s.y for s in sh.shares_from_coefficients([secret, c1, c2], [1, 2, 3]))
        assert seen.setdefault(key, secret) == secret


def test_below_threshold():
    sh = Shamir(Q, 5)
    shares = sh.split(123, range(1, 10))
    with pytest.raises(BelowThreshold, match="t=5"):
        sh.reconstruct(shares[:4])


def test_duplicate_index_rejected():
    sh = Shamir(Q, 2)
    shares = sh.split(9, [1, 2, 3])
    with pytest.raises(InvalidShare, match="duplicate"):
        sh.reconstruct([shares[0], shares[0], shares[1]])


@pytest.mark.parametrize("bad", [Share(0, 1), Share(Q, 1), Share(1, Q), Share(-1, 0)])
def test_malformed_share_rejected(bad):
    sh = Shamir(Q, 1)
    with pytest.raises(InvalidShare):
        sh.reconstruct([bad])


def test_inconsistent_extra_share_detected():
    sh = Shamir(Q, 3)
    shares = sh.split(77, range(1, 6))
    shares[4] = Share(shares[4].x, (shares[4].y + 1) % Q)
    with pytest.raises(InvalidShare, match="inconsistent"):
        sh.reconstruct(shares)
    assert sh.reconstruct(shares, check=False) == 77  # first t are honest


def test_share_codec():
    s = Shamir(Q, 2).split(5, [3, 4])[0]
    assert Share.decode(s.encode(), Q) == s
    with pytest.raises(DecodeError):
        Share.decode(s.encode()[:-1], Q)
    with pytest.raises(DecodeError, match="trailing"):
        Share.decode(s.encode() + b"\x00", Q)
    with pytest.raises(InvalidShare):
        Share.decode((0).to_bytes(4, "big") + bytes(32), Q)
    with pytest.raises(InvalidShare):
        Share.decode((1).to_bytes(4, "big") + Q.to_bytes(32, "big"), Q)


def test_split_config_errors():
    sh = Shamir(Q, 3)
    with pytest.raises(ConfigError):
        sh.split(1, [1, 2])
    with pytest.raises(ConfigError):
        sh.split(1, [1, 1, 2])
    with pytest.raises(ConfigError):
        sh.split(Q, [1, 2, 3])
    with pytest.raises(ConfigError):
        Shamir(Q, 0)
    with pytest.raises(ConfigError):
        Shamir(Q, True)
