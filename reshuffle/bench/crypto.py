"""``reshuffle bench crypto``: throughput of every building block, with ratios to floors."""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from reshuffle.bench.common import best_of
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import available_groups, get_group
from reshuffle.crypto.ot import OTReceiver, OTSender
from reshuffle.crypto.prg import PRG, derive_key
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto.shamir import Shamir, _lagrange_at_zero


def bench_prg(n_words: int, repeat: int) -> dict:
    seed = bytes(range(32))
    dom = label("bench/prg", 0)
    key = derive_key(seed, dom)
    nbytes = 4 * n_words
    buf = bytearray(nbytes + 15)
    zeros = bytes(nbytes)

    def keystream():  # the floor: raw AES-256-CTR from the same library, same bytes
        Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update_into(zeros, buf)

    out = np.empty(n_words, dtype=np.uint32)

    def prg_words():  # includes HKDF key derivation; fills a preallocated array
        PRG(seed, dom).words_into(out)

    gen = np.random.Generator(np.random.PCG64(0))  # reference only: never used for masks

    def pcg():
        gen.integers(0, 2**32, size=n_words, dtype=np.uint32)

    # Interleave the measurements so that machine noise hits all of them alike.
    t_ks = t_prg = t_pcg = float("inf")
    for _ in range(repeat):
        t_ks = min(t_ks, best_of(keystream, 1))
        t_prg = min(t_prg, best_of(prg_words, 1))
        t_pcg = min(t_pcg, best_of(pcg, 1))
    return {
        "n_words": n_words,
        "words_per_s": n_words / t_prg,
        "keystream_words_per_s": n_words / t_ks,
        "pcg64_words_per_s": n_words / t_pcg,
        "ratio_to_keystream": t_ks / t_prg,
        "ratio_to_pcg64": t_pcg / t_prg,
    }


def bench_group(name: str, n_ops: int) -> dict:
    g = get_group(name)
    x = g.random_scalar(SeededRandom(1))
    p = g.hash_to_group(b"bench", b"p")

    def muls():
        q = p
        for _ in range(n_ops):
            q = q**x

    def hashes():
        for i in range(n_ops):
            g.hash_to_group(b"bench", i.to_bytes(4, "big"))

    return {"mul_per_s": n_ops / best_of(muls, 3), "hash_per_s": n_ops / best_of(hashes, 3)}


def bench_ot(n: int, k: int, repeat: int) -> dict:
    g = get_group()
    sender_holder: list[OTSender] = []

    def table():
        sender_holder[:] = [OTSender(g, 1, n, k)]

    t_table = best_of(table, repeat)
    sender = sender_holder[0]
    receivers = [OTReceiver(g, 1, n, k=k) for _ in range(repeat)]
    reqs = [r.request() for r in receivers]

    it = iter(range(repeat))

    def answer():
        i = next(it)
        sender.answer(i, reqs[i])

    t_req = best_of(answer, repeat)

    fresh_ids = iter(range(10_000, 10_000 + repeat))

    def receive():
        r = OTReceiver(g, 1, n, k=k)
        resp = sender.answer(next(fresh_ids), r.request())
        r.recover(sender.table, resp)

    t_recv_full = best_of(receive, repeat)
    return {
        "n": n,
        "k": k,
        "ps_table_s": t_table,
        "ps_per_request_s": t_req,
        # receiver work only: request + recovery, minus the sender's answer inside the loop
        "receiver_s": max(t_recv_full - t_req, 0.0),
    }


def bench_shamir(N: int, t: int, repeat: int) -> dict:
    g = get_group()
    sh = Shamir(g.order, t)
    secret = g.random_scalar()
    xs = range(1, N + 1)
    shares = sh.split(secret, xs)
    t_split = best_of(lambda: sh.split(secret, xs), repeat)
    def cold_reconstruct():  # a new set of share holders: no cached Lagrange coefficients
        _lagrange_at_zero.cache_clear()
        sh.reconstruct(shares[:t])

    t_rec = best_of(cold_reconstruct, repeat)
    t_rec_cached = best_of(lambda: sh.reconstruct(shares[:t]), repeat)
    assert sh.reconstruct(shares[-t:]) == secret
    return {"t": t, "split_s": t_split, "reconstruct_s": t_rec, "reconstruct_cached_s": t_rec_cached}


def run(quick: bool = False) -> dict:
    n_words = 1 << (18 if quick else 22)
    rep = 3 if quick else 7
    return {
        "prg": bench_prg(n_words, rep),
        "group": {name: bench_group(name, 50 if quick else 300) for name in available_groups()},
        "ot": bench_ot(400, 8, rep),
        "shamir": {
            str(N): bench_shamir(N, N // 2 + 1, 2 if quick else 3) for N in (100, 1000)
        },
    }
