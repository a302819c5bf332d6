"""``reshuffle bench round``: one real round per N at LeNet-5 size, with ratios to floors.

For each N it runs :func:`reshuffle.shuffle` (the real protocol, in process) and
reports per-phase seconds (mean per participant, and PS) and bytes. Two ratios
are measured in the same run, against floors computed on the same sizes:

- ``participant_mask_ratio``: raw AES-256-CTR keystream time for the bytes a
  participant's upload mask needs ((1 + degree) streams of the model-list
  length) divided by its masking time (``mask_in_place``, DH included);
- ``ps_floor_ratio``: (numpy sum of the N uploaded vectors + raw keystream for
  the N self masks it regenerates) divided by the PS's measured
  aggregate-and-unmask time (receiving the uploads plus closing the unmask phase).
"""

from __future__ import annotations

import time

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

import reshuffle
from reshuffle.bench.common import best_of
from reshuffle.crypto.channel import DHKeyPair
from reshuffle.crypto.group import get_group
from reshuffle.crypto.rand import SeededRandom
from reshuffle.protocol.masking import mask_in_place

LENET5_D = 61_706


def _keystream_time(n_words: int, streams: int, repeat: int) -> float:
    """Raw AES-CTR for ``streams`` × ``n_words`` words, one buffer reused."""
    buf = bytearray(4 * n_words + 15)
    zeros = bytes(4 * n_words)
    key = bytes(32)

    def run():
        for _ in range(streams):
            Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update_into(zeros, buf)

    return best_of(run, repeat)


def _mask_time(N: int, L: int, repeat: int) -> float:
    g = get_group()
    rng = SeededRandom(7)
    peers = {j: DHKeyPair.generate(g, rng).public for j in range(1, N)}
    x, b = g.random_scalar(rng), g.random_scalar(rng)
    v = np.zeros(L, dtype=np.uint32)
    return best_of(lambda: mask_in_place(v, g, 1, 4, 0, b, x, peers), repeat)


def bench_N(N: int, d: int, repeat: int) -> dict:
    # Test data only; the protocol draws its own secrets from a cryptographic PRG.
    gen = np.random.default_rng(N)
    ups = [(gen.normal(size=d) * 0.05).astype(np.float32) for _ in range(N)]
    t0 = time.perf_counter()
    r = reshuffle.shuffle(ups, seed=N)
    wall = time.perf_counter() - t0
    assert len(r.models) == N, "benchmark round lost participants"
    L = N * r.params.row_words  # model-list length in words (one row per participant)
    mask_s = _mask_time(N, L, repeat)
    floor_mask_s = _keystream_time(L, N, repeat)  # self mask + (N - 1) pairwise streams
    # PS floor: sum of N distinct uploaded-size vectors + N self-mask keystreams.
    acc = np.zeros(L, dtype=np.uint32)
    vecs = [np.full(L, i, dtype=np.uint32) for i in range(N)]

    def plain_sum():
        for v in vecs:
            np.add(acc, v, out=acc)

    floor_ps_s = best_of(plain_sum, repeat) + _keystream_time(L, N, repeat)
    ps_s = r.stats["upload"]["ps_s"] + r.stats["unmask"]["ps_s"]
    phases = {
        ph: {"participant_s": v["participant_s"], "ps_s": v["ps_s"]} for ph, v in r.stats.items()
    }
    sent = sum(v["participant_bytes_sent"] for v in r.stats.values())
    recv = sum(v["participant_bytes_received"] for v in r.stats.values())
    return {
        "d": d,
        "wall_s": wall,
        "phases": phases,
        "participant_bytes": sent + recv,
        "participant_bytes_sent": sent,
        "participant_bytes_received": recv,
        "participant_mask_s": mask_s,
        "participant_mask_floor_s": floor_mask_s,
        "participant_mask_ratio": floor_mask_s / mask_s,
        "ps_aggregate_unmask_s": ps_s,
        "ps_floor_s": floor_ps_s,
        "ps_floor_ratio": floor_ps_s / ps_s,
    }


def run(Ns=(10, 50, 100), d: int = LENET5_D, quick: bool = False) -> dict:
    if quick:
        Ns, d = [n for n in Ns if n <= 10] or [10], min(d, 4096)
    return {str(N): bench_N(N, d, 2 if quick else 3) for N in Ns}
