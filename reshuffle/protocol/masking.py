"""MaskedSum arithmetic (docs/protocol.md §6, §6.2–6.3, §9): masks, their removal, domain strings.

Participant ``i`` uploads ``v_i + r_{i,m}`` with
``r_{i,m} = PRG(b_{i,m}) + sum_{j != i} s(i,j) PRG(K_{ij,m})``, ``K_{ij,m} =
DH(x_{i,m}, X_{j,m})``, ``s(i,j) = +1 if i < j else -1``, over the mask set
``U_{m-1}``. The PS removes the self masks of ``U_m`` and the dangling pairwise
masks of the dropped ``U_{m-1} \\ U_m``.

Every stream is keyed per row ρ of the vector (one row for a count vector, one
per position for the model list): ``HKDF(seed, label(T, m, i[, j], ρ) ‖ h_m)``.
The transcript hash h_m makes parties with different views derive unrelated
keys (§6.2–6.3); the row index lets a participant open its keys of one decoy row
without saying anything about any other row (§9).
"""

from __future__ import annotations

import struct
from typing import Iterable, Mapping

import numpy as np

from reshuffle.crypto.channel import dh_shared
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group
from reshuffle.crypto.prg import CHUNK_BYTES, KeyDeriver, accumulate_streams, derive_key

_ROW = struct.Struct(">Q")


def _row_domains(name: str, fields: tuple[int, ...], rows: int, h: bytes) -> list[bytes]:
    """``label(name, *fields, row) || h`` for row = 0..rows-1; the row is label's last u64."""
    head = label(name, *fields, 0)[: -_ROW.size]
    return [head + _ROW.pack(row) + h for row in range(rows)]


def self_row_keys(group: Group, T: int, m: int, i: int, b: int, h: bytes, rows: int) -> list[bytes]:
    """``self_key(..., row)`` for every row, extracting the seed once."""
    kd = KeyDeriver(group.scalar_to_bytes(b))
    return [kd.key(dom) for dom in _row_domains("mask/self", (T, m, i), rows, h)]


def pair_row_keys(K: bytes, T: int, m: int, i: int, j: int, h: bytes, rows: int) -> list[bytes]:
    """``pair_row_key(K, ..., row)`` for every row, extracting ``K`` once."""
    kd = KeyDeriver(K)
    return [kd.key(dom) for dom in _row_domains("mask/pair", (T, m, min(i, j), max(i, j)), rows, h)]


def self_key(group: Group, T: int, m: int, i: int, b: int, h: bytes, row: int = 0) -> bytes:
    return derive_key(group.scalar_to_bytes(b), label("mask/self", T, m, i, row) + h)


def pair_secret(x_i: int, X_j: Element) -> bytes:
    """``K_ij``: the DH secret of a pair for one invocation (computed once, keyed per row)."""
    return dh_shared(x_i, X_j)


def pair_row_key(K: bytes, T: int, m: int, i: int, j: int, h: bytes, row: int = 0) -> bytes:
    """``k_{ij,ρ} = PRF(K_ij, T, m, ρ)`` bound to h_m; symmetric in (i, j)."""
    lo, hi = min(i, j), max(i, j)
    return derive_key(K, label("mask/pair", T, m, lo, hi, row) + h)


def pair_key(T: int, m: int, i: int, j: int, x_i: int, X_j: Element, h: bytes, row: int = 0) -> bytes:
    return pair_row_key(pair_secret(x_i, X_j), T, m, i, j, h, row)


def pair_sign(i: int, j: int) -> int:
    return 1 if i < j else -1


def _rows_view(v: np.ndarray, rows: int) -> np.ndarray:
    if rows < 1 or v.size % rows:
        raise ValueError(f"a vector of {v.size} words does not split into {rows} rows")
    return v.reshape(rows, -1)


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
    rows: int = 1,
) -> None:
    """``v += r_{i,m}``; ``peers`` maps each other j in the mask set to ``X_{j,m}``; ``h`` is h_m."""
    K = {j: pair_secret(x, X_j) for j, X_j in peers.items() if j != i}
    parts = _rows_view(v, rows)
    keyed = [(self_row_keys(group, T, m, i, b, h, rows), 1)]
    keyed += [(pair_row_keys(K_j, T, m, i, j, h, rows), pair_sign(i, j)) for j, K_j in K.items()]
    scratch = bytearray(CHUNK_BYTES + 15)
    for row, part in enumerate(parts):
        accumulate_streams(part, [(keys[row], sign) for keys, sign in keyed], scratch=scratch)


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
    rows: int = 1,
) -> None:
    """Turn ``sum_{i in U_m} y_i`` into ``sum_{i in U_m} v_i`` in place.

    ``self_seeds[i] = b_{i,m}`` for i in U_m; ``dropped_secrets[j] = x_{j,m}`` for
    the dropped j; ``mask_keys[k] = X_{k,m}`` for the online k.
    """
    online = list(online)
    parts = _rows_view(acc, rows)
    K = {(j, k): pair_secret(x_j, mask_keys[k]) for j, x_j in dropped_secrets.items() for k in online}
    keyed = [(self_row_keys(group, T, m, i, self_seeds[i], h, rows), -1) for i in online]
    # y_k carries s(k, j) * PRG(k_{kj,row}) for each dropped j; remove it.
    keyed += [(pair_row_keys(K_jk, T, m, j, k, h, rows), -pair_sign(k, j)) for (j, k), K_jk in K.items()]
    scratch = bytearray(CHUNK_BYTES + 15)
    for row, part in enumerate(parts):
        accumulate_streams(part, [(keys[row], sign) for keys, sign in keyed], scratch=scratch)


def row_mask(
    group: Group, T: int, m: int, i: int, b: int, pair_keys: Mapping[int, bytes], h: bytes, row: int, length: int,
    dtype: np.dtype,
) -> np.ndarray:
    """``r_{i,m}`` restricted to one row, from b_i and i's per-row pairwise keys ``{j: k_{ij,row}}`` (§9)."""
    out = np.zeros(length, dtype=dtype)
    streams = [(self_key(group, T, m, i, b, h, row), 1)]
    streams += [(k, pair_sign(i, j)) for j, k in pair_keys.items()]
    accumulate_streams(out, streams)
    return out
