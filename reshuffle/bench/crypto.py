"""``reshuffle bench crypto``: throughput of every building block, with ratios to floors."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from reshuffle.bench.common import best_of, without_vartime
from reshuffle.crypto import feldman, voprf
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Ristretto255, available_groups, get_group
from reshuffle.crypto.ot import OTReceiver, OTSender
from reshuffle.crypto.prg import PRG, cores_available, derive_key
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


def bench_upload(d: int, g: int = 5, repeat: int = 3, chunk_bytes: int | None = None) -> dict:
    """A DC-net member's upload of a d-word model in a group of g (g + 1 rows, g − 1 pairwise streams per row),
    timed in one run: the raw AES-256-CTR keystream of the same bytes (the floor), SHA-256 of the uploaded
    bytes (the row hashes the upload signs), the separate passes (encode, row, list, mask, hash) and the fused
    pass; each as a ratio to the keystream."""
    import hashlib
    import os

    from reshuffle.crypto.prg import CHUNK_BYTES, _ZEROS
    from reshuffle.protocol import credential, dcnet
    from reshuffle.protocol import messages as msg
    from reshuffle.protocol.pseudonym import ROW_BYTES

    chunk = chunk_bytes or CHUNK_BYTES
    p = dcnet.dc_params(g, d)
    rows = dcnet.parties(p)
    row_bytes = p.row_words * p.codec.dtype.itemsize
    gen = np.random.Generator(np.random.PCG64(d))  # model values only
    model = (gen.normal(size=d) * 0.05).astype(np.float32)
    cred = credential.Credential(os.urandom(credential.R_BYTES), os.urandom(credential.Y_BYTES))

    class _Nym:
        def row_bytes(self, _b=os.urandom(ROW_BYTES)) -> bytes:
            return _b

    K, h, T, i, pos = os.urandom(credential.K_BYTES), os.urandom(32), 1, 0, rows // 2
    pairs = {j: os.urandom(32) for j in range(1, g)}
    keys = [derive_key(bytes(32), label("bench/upload", j)) for j in range(g - 1)]
    scratch = bytearray(chunk + 15)

    def keystream():  # the floor: (g − 1) AES-256-CTR streams over every row, into one reused chunk
        for _ in range(rows):
            for k in keys:
                enc = Cipher(algorithms.AES(k), modes.CTR(bytes(16))).encryptor()
                for a in range(0, row_bytes, chunk):
                    enc.update_into(_ZEROS.view(min(chunk, row_bytes - a)), scratch)

    blob = os.urandom(rows * row_bytes)

    def sha():  # the row hashes alone
        for r in range(rows):
            hashlib.sha256(memoryview(blob)[r * row_bytes:(r + 1) * row_bytes]).digest()

    def unfused():
        lw, _, _ = dcnet.plain_model_list(model, p, pos, cred, _Nym(), K, T)
        dcnet.mask_in_place(lw.reshape(-1), T, p.upload_m, i, pairs, h, rows)
        msg.row_hashes(lw.reshape(-1).view(np.uint8).data, rows)

    def fused():
        dcnet.masked_upload(model, p, pos, cred, _Nym(), K, T, i, pairs, h, chunk, overlap=False)

    def fused_overlap():  # the row hashes on a helper thread
        dcnet.masked_upload(model, p, pos, cred, _Nym(), K, T, i, pairs, h, chunk, overlap=True)

    fns = {"keystream": keystream, "sha256": sha, "unfused": unfused, "fused": fused, "fused_overlap": fused_overlap}
    t = dict.fromkeys(fns, float("inf"))
    cpu = dict.fromkeys(fns, float("inf"))  # this thread's CPU seconds: what a busy machine disturbs least
    for _ in range(repeat):  # interleaved, so that machine noise hits every one alike
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            t[name] = min(t[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], time.thread_time() - c0)
    ks_bytes = (g - 1) * rows * row_bytes
    out = {"d": d, "g": g, "rows": rows, "keystream_MB": ks_bytes / 1e6, "cores": cores_available()}
    out.update({f"{name}_s": v for name, v in t.items()})
    out.update({f"{name}_over_keystream": v / t["keystream"] for name, v in t.items() if name != "keystream"})
    # CPU ratios of the single-threaded passes (the overlapped hashes run on another thread: wall only).
    out.update({f"{name}_over_keystream_cpu": cpu[name] / cpu["keystream"] for name in ("sha256", "unfused", "fused")})
    out["fused_over_keystream_and_sha256_cpu"] = cpu["fused"] / (cpu["keystream"] + cpu["sha256"])
    out["speedup_fused"] = t["unfused"] / t["fused"]
    out["speedup_fused_cpu"] = cpu["unfused"] / cpu["fused"]
    out["speedup_fused_overlap"] = t["unfused"] / t["fused_overlap"]
    return out


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


class _CountingRistretto(Ristretto255):
    """A private Ristretto255 instance that counts exponentiations (never the shared one)."""

    def __init__(self) -> None:
        super().__init__()
        self.exps = 0

    def _exp(self, a: bytes, s: int) -> bytes:
        self.exps += 1
        return super()._exp(a, s)


def _timed(g: _CountingRistretto, fn, repeat: int) -> tuple[float, int]:
    """(best wall time, exponentiations of one call)."""
    g.exps = 0
    fn()
    exps = g.exps
    return best_of(fn, repeat), exps


def bench_voprf(k: int, repeat: int) -> dict:
    """§7.1 proved OT answers (batch of k), §7.2 credential (batch of 1), §9 one DH key."""
    g = _CountingRistretto()
    suite = voprf.Suite(g)
    beta, B = voprf.derive_key_pair(suite, bytes(32), b"bench beta")
    As = [g.hash_to_group(b"bench", bytes([j])) for j in range(k)]
    out: dict = {"k": k}

    def answer():
        return voprf.blind_evaluate(suite, beta, As, B)

    out["batch_evaluate_prove_s"], out["batch_evaluate_prove_exps"] = _timed(g, answer, repeat)
    Ds, proof = answer()
    out["batch_verify_s"], out["batch_verify_exps"] = _timed(
        g, lambda: voprf.verify_proof(suite, g.generator(), B, As, Ds, proof), repeat)

    gamma, C = voprf.derive_key_pair(suite, bytes(32), b"bench gamma")
    r, blinded = voprf.blind(suite, b"T=1|r=0123456789abcdef")
    out["credential_blind_s"], _ = _timed(g, lambda: voprf.blind(suite, b"T=1|r=0123456789abcdef"), repeat)
    out["credential_evaluate_prove_s"], out["credential_evaluate_prove_exps"] = _timed(
        g, lambda: voprf.blind_evaluate(suite, gamma, [blinded], C), repeat)
    ev, cproof = voprf.blind_evaluate(suite, gamma, [blinded], C)
    out["credential_finalize_verify_s"], out["credential_finalize_verify_exps"] = _timed(
        g, lambda: voprf.finalize(suite, [b"T=1|r=0123456789abcdef"], [r], ev, [blinded], C, cproof), repeat)
    out["credential_check_s"], out["credential_check_exps"] = _timed(
        g, lambda: voprf.evaluate(suite, gamma, b"T=1|r=0123456789abcdef"), repeat)

    x_i, x_j = g.random_scalar(), g.random_scalar()
    X_i, X_j = g.base_mul(x_i), g.base_mul(x_j)
    K = X_j**x_i
    ctx = label("bench/dh-key", 1, 0, 1)
    out["dh_key_prove_s"], out["dh_key_prove_exps"] = _timed(
        g, lambda: voprf.prove_dleq(x_i, g.generator(), X_i, [X_j], [K], None, ctx), repeat)
    dproof = voprf.prove_dleq(x_i, g.generator(), X_i, [X_j], [K], None, ctx)
    out["dh_key_verify_s"], out["dh_key_verify_exps"] = _timed(
        g, lambda: voprf.verify_dleq(g.generator(), X_i, [X_j], [K], dproof, ctx), repeat)
    return out


def bench_feldman(S: int, t: int, repeat: int) -> dict:
    """§6.4, per dealer: Ĉ from S × t commitments, then one recipient's batched check."""
    g = _CountingRistretto()
    xs = range(1, 2 * t)
    secrets = [g.random_scalar() for _ in range(S)]
    shares, coms = feldman.deal(secrets, t, xs, None, g)
    ctx = label("bench/feldman", 1, 1)
    out: dict = {"S": S, "t": t}
    out["deal_s"], out["deal_exps"] = _timed(g, lambda: feldman.deal(secrets, t, xs, None, g), 1)
    out["weights_s"], _ = _timed(g, lambda: feldman.weights(coms, 0, ctx), repeat)
    rho = feldman.weights(coms, 0, ctx)
    out["combine_s"], out["combine_exps"] = _timed(g, lambda: feldman.combine(coms, rho), repeat)
    c_hat = feldman.combine(coms, rho)
    x = t  # a typical participant index
    out["verify_batch_s"], out["verify_batch_exps"] = _timed(
        g, lambda: feldman.verify_batch(x, shares[x], c_hat, rho), repeat)
    out["verify_batch_libsodium_s"], out["verify_batch_libsodium_exps"] = without_vartime(lambda: _timed(
        g, lambda: feldman.verify_batch(x, shares[x], c_hat, rho), repeat))  # the same check, libsodium alone
    out["ratio_libsodium_to_vartime"] = out["verify_batch_libsodium_s"] / out["verify_batch_s"]
    out["verify_each_share_s"], out["verify_each_share_exps"] = _timed(
        g, lambda: [feldman.verify_share(x, y, row) for y, row in zip(shares[x], coms)], repeat)
    out["ratio_each_to_batch"] = out["verify_each_share_s"] / out["verify_batch_s"]
    return out


def bench_signatures(repeat: int) -> dict:
    """Ed25519: signing (OpenSSL), verification (libsodium) and OpenSSL's verification of the same bytes."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from reshuffle.crypto.signatures import SigningKey, _msg

    sk = SigningKey.from_seed(bytes(range(32)))
    vk = sk.verify_key
    message = bytes(200)  # a consent statement's size
    sig = sk.sign("bench", message)
    openssl = Ed25519PublicKey.from_public_bytes(vk.to_bytes())
    n = 50
    out = {
        "sign_s": best_of(lambda: [sk.sign("bench", message) for _ in range(n)], repeat) / n,
        "verify_s": best_of(lambda: [vk.verify("bench", message, sig) for _ in range(n)], repeat) / n,
        "verify_openssl_s": best_of(lambda: [openssl.verify(sig, _msg("bench", message)) for _ in range(n)],
                                    repeat) / n,
    }
    out["ratio_openssl_to_libsodium"] = out["verify_openssl_s"] / out["verify_s"]
    return out


def run(quick: bool = False, on_step: Callable[[str], None] | None = None) -> dict:
    n_words = 1 << (18 if quick else 22)
    rep = 3 if quick else 7
    parts = {
        "prg": lambda: bench_prg(n_words, rep),
        "upload": lambda: bench_upload(1 << (16 if quick else 20), 5, 3 if quick else 5),
        "group": lambda: {name: bench_group(name, 50 if quick else 300) for name in available_groups()},
        "ot": lambda: bench_ot(400, 8, rep),
        "shamir": lambda: {str(N): bench_shamir(N, N // 2 + 1, 2 if quick else 3) for N in (100, 1000)},
        "voprf": lambda: bench_voprf(8, 3 if quick else 7),
        "feldman": lambda: bench_feldman(10, 13, 3 if quick else 7),
        "signatures": lambda: bench_signatures(3 if quick else 7),
    }
    out = {}
    for name, measure in parts.items():
        if on_step is not None:
            on_step(name)
        out[name] = measure()
    return out
