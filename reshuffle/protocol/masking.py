"""MaskedSum arithmetic (PROTOCOL.md §4): masks, their removal, domain strings.

Participant ``i`` uploads ``v_i + r_{i,m}`` with
``r_{i,m} = PRG(b_{i,m}) + sum_{j != i} s(i,j) PRG(DH(x_{i,m}, X_{j,m}))``,
``s(i,j) = +1 if i < j else -1``, over the mask set ``U_{m-1}``. The PS removes
the self masks of ``U_m`` and the dangling pairwise masks of the dropped
``U_{m-1} \\ U_m``. Every stream has its own domain ``(T, m, i)`` or
``(T, m, min(i,j), max(i,j))`` followed by the transcript hash ``h_m``
(PROTOCOL.md §8.1): parties with different views derive unrelated keys.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from reshuffle.crypto.channel import dh_shared
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group
from reshuffle.crypto.prg import accumulate_streams, derive_key


def self_key(group: Group, T: int, m: int, i: int, b: int, h: bytes) -> bytes:
    return derive_key(group.scalar_to_bytes(b), label("mask/self", T, m, i) + h)


def pair_key(T: int, m: int, i: int, j: int, x_i: int, X_j: Element, h: bytes) -> bytes:
    lo, hi = min(i, j), max(i, j)
    return derive_key(dh_shared(x_i, X_j), label("mask/pair", T, m, lo, hi) + h)


def pair_sign(i: int, j: int) -> int:
    return 1 if i < j else -1


def mask_in_place(
    v: np.ndarray,
    group: Group,
    T: int,
    m: int,
    i: int,
    b: int,
    x: int,
    peers: Mapping[int, Element],
    h: bytes,
) -> None:
    """``v += r_{i,m}``; ``peers`` maps each other j in the mask set to ``X_{j,m}``; ``h`` is h_m."""
    streams = [(self_key(group, T, m, i, b, h), 1)]
    streams += [(pair_key(T, m, i, j, x, X_j, h), pair_sign(i, j)) for j, X_j in peers.items() if j != i]
    accumulate_streams(v, streams)


def unmask_in_place(
    acc: np.ndarray,
    group: Group,
    T: int,
    m: int,
    online: Iterable[int],
    self_seeds: Mapping[int, int],
    dropped_secrets: Mapping[int, int],
    mask_keys: Mapping[int, Element],
    h: bytes,
) -> None:
    """Turn ``sum_{i in U_m} y_i`` into ``sum_{i in U_m} v_i`` in place.

    ``self_seeds[i] = b_{i,m}`` for i in U_m; ``dropped_secrets[j] = x_{j,m}`` for
    the dropped j; ``mask_keys[k] = X_{k,m}`` for the online k.
    """
    online = list(online)
    streams = [(self_key(group, T, m, i, self_seeds[i], h), -1) for i in online]
    for j, x_j in dropped_secrets.items():
        for k in online:
            # y_k carries s(k, j) * PRG_{kj}; remove it.
            streams.append((pair_key(T, m, j, k, x_j, mask_keys[k], h), -pair_sign(k, j)))
    accumulate_streams(acc, streams)
