"""The PS with colluders as a linking attacker of the DC-net round (docs/security/dcnet.md).

A PS holds every member's signed count vectors and upload, and h of every step;
each colluder hands it its epoch secret y_c, so the coalition knows every pair
key with a colluder. For a set A of honest members the sum of A's uploads keeps
the masks of the pairs (i ∈ A, j ∉ A): the coalition removes those with j a
colluder, and cannot remove one with j honest. :func:`readable_sums` computes,
with the real keys and the real arithmetic, the plaintext of every set A it can
unmask; :func:`links` reports the members it reads alone (their rows, checked
against the truth by the caller). ``partners`` is the key graph of the scheme
(every other member in the real round; a weak scheme may use fewer).
"""

from __future__ import annotations

from itertools import combinations
from typing import Callable, Mapping

import numpy as np

from reshuffle.protocol import credential
from reshuffle.protocol import messages as msg
from reshuffle.protocol.dcnet import DCServer, pair_secret, pair_sign, parties, row_keys
from reshuffle.crypto.prg import accumulate_streams


def _complete(i: int, members) -> list[int]:
    return [j for j in members if j != i]


def _unmask(vectors: Mapping[int, msg.MaskedInput], A, coalition: Mapping[int, int], keys, T: int, m: int,
            h: bytes, dtype, partners: Callable) -> np.ndarray | None:
    """Σ_{i∈A} v_i, or None when a mask of A's sum belongs to a pair with an honest member outside A."""
    members = sorted(vectors)
    rows = vectors[members[0]].rows
    acc = np.zeros(len(vectors[members[0]].words) // np.dtype(dtype).itemsize, dtype=dtype)
    for i in A:
        acc += np.frombuffer(vectors[i].words, dtype=dtype)
    streams: list[list[tuple[bytes, int]]] = [[] for _ in range(rows)]
    for i in A:
        for j in partners(i, members):
            if j in A:
                continue
            if j not in coalition:
                return None
            ks = row_keys(pair_secret(coalition[j], keys[i]), T, m, i, j, h, rows)
            for ρ in range(rows):
                streams[ρ].append((ks[ρ], -pair_sign(i, j)))
    parts = acc.reshape(rows, -1)
    for ρ, part in enumerate(parts):
        accumulate_streams(part, streams[ρ])
    return acc


def readable_sums(server: DCServer, coalition: Mapping[int, int], partners: Callable = _complete
                  ) -> dict[frozenset, np.ndarray]:
    """Every set A of non-colluders whose upload sum the coalition unmasks: A → the model list's plaintext
    rows. ``coalition`` maps each colluder to its epoch secret y."""
    p = server.params
    keys = {i: k.dh_key for i, k in server.keys.items()}
    honest = [i for i in sorted(server.uploads) if i not in coalition]
    out = {}
    h = next(iter(server.uploads.values())).h
    for size in range(1, len(honest) + 1):
        for A in combinations(honest, size):
            s = _unmask(server.uploads, A, coalition, keys, server.T, p.upload_m, h, p.codec.dtype, partners)
            if s is not None:
                out[frozenset(A)] = s.reshape(parties(p), p.row_words)
    return out


def links(server: DCServer, coalition: Mapping[int, int], partners: Callable = _complete) -> dict[int, bytes]:
    """Honest members read alone: member → the tag of the nonzero row its upload holds."""
    out = {}
    for A, rows in readable_sums(server, coalition, partners).items():
        if len(A) != 1:
            continue
        (i,) = A
        written = [ρ for ρ in range(rows.shape[0]) if rows[ρ].any()]
        if len(written) == 1:
            out[i] = rows[written[0]].tobytes()[-credential.TAG_BYTES:]
    return out


def read_sets(server: DCServer, coalition: Mapping[int, int], partners: Callable = _complete
              ) -> dict[frozenset, set[bytes]]:
    """For each readable set: the tags of the rows its members wrote (what the coalition learns of it)."""
    out = {}
    for A, rows in readable_sums(server, coalition, partners).items():
        out[A] = {rows[ρ].tobytes()[-credential.TAG_BYTES:] for ρ in range(rows.shape[0]) if rows[ρ].any()}
    return out


__all__ = ["links", "read_sets", "readable_sums"]
