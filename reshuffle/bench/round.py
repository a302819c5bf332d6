"""``reshuffle bench round``: one real round per N at LeNet-5 size, with ratios to floors.

For each N it runs :func:`reshuffle.shuffle` (the real protocol, in process) and
reports per-phase seconds (mean per participant, and PS) and bytes. Two ratios
are measured in the same run, against floors computed on the same sizes:

- ``participant_mask_ratio``: raw AES-256-CTR keystream time for the bytes a
  participant's upload mask needs ((1 + degree) streams of the model-list
  length) divided by its masking time (``mask_in_place``, DH included);
- ``ps_floor_ratio``: (numpy sum of the N uploaded vectors + raw keystream for
  the N self masks it regenerates) divided by the time the PS spends on exactly
  those two operations in the round (summing the uploads, ``unmask_in_place``;
  ``RoundOutput.timings``); ``ps_round_floor_ratio`` divides the same floor by the
  PS's whole upload-and-unmask time (signatures, row hashes, consents, Shamir
  recovery, row checks and decoding included); ``ps_floor_cpu_ratio`` is the same
  ratio in this thread's CPU seconds on both sides (the round's two operations are
  timed once, the floor best of ``repeat``; CPU time is what other load on a
  shared machine does not inflate);
- ``round_floor_ratio``: both floors together divided by the round's critical
  path (PS time plus the slowest participant, summed over phases).

With ``group_size`` g the round runs in anonymity groups (``reshuffle.shuffle(...,
group_size=g)``) and both floors are those of the groups: per group, its |U_j|
uploads of its own length and |U_j| streams of it, summed over the groups;
``workers`` runs the participants in that many processes
(:mod:`reshuffle.harness.parallel`). Per N it also reports ``wall_s``, ``cpu_s``
(CPU seconds of the round, workers included: on a shared machine ``cpu_s`` /
cores is what the round needs), ``participant_critical_s`` (the slowest participant per phase, summed: what
participants put on the round's critical path), ``participant_cpu_s`` (a
participant's mean handler CPU time over the round), ``participant_after_training_s``
(a participant's mean seconds after local training ends: the upload's MaskedSum and
anything after it; the offline steps run in :func:`reshuffle.prepare`, before the
models exist), ``round_trips`` and ``round_trips_after_training`` (counted from the
steps the driver executed, :mod:`reshuffle.protocol.schedule`), the same with one
dropout in the reservation and one at the upload (``*_dropouts``), next to
``secaggplus_round_trips``, ``ps_s`` (the PS over all
phases) and ``peak_rss_mb``: the peak of the summed proportional set size of
this process and its workers (shared pages counted once), sampled every 0.1 s.

The round's lower bound from the masks alone: ``participant_keystream_add_s`` is
the time to expand one participant's |U_j| AES-256-CTR streams over its upload
(the largest group's length; one key per stream, no per-row keys) and add each into
an accumulator; ``mask_floor_wall_s`` is that time summed over all N participants
(each at its own group's sizes) and divided by ``workers``: the wall time no round
on this machine can beat, even with every other cost at zero and the workers alone
on their cores.

``mechanisms`` times each protocol-v2 mechanism on its own at the round's sizes
(docs/protocol.md §8): signing and verifying one upload (per-row hashes + Ed25519),
the OT answer proof, the credential, the row checks, one certificate check, and
the decoy rows' share of the upload; ``blame_extra_s`` is the extra in-process
time of a round whose jammer starts the blame step.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from typing import Callable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

import reshuffle
from reshuffle.bench.common import best_of, without_vartime
from reshuffle.crypto.channel import DHKeyPair
from reshuffle.crypto.group import get_group
from reshuffle.crypto.rand import SeededRandom
from reshuffle.crypto import feldman, voprf
from reshuffle.crypto.ot import OTReceiver, OTSender
from reshuffle.crypto.prg import accumulate_streams, cores_available
from reshuffle.crypto.signatures import SigningKey
from reshuffle.protocol import credential
from reshuffle.protocol import messages as msg
from reshuffle.protocol import pseudonym
from reshuffle.protocol.masking import mask_in_place
from reshuffle.protocol.schedule import ONLINE_STAGES
from reshuffle.protocol.transcript import CONSENT_CONTEXT, check_certificate

LENET5_D = 61_706


def _keystream_time(n_words: int, streams: int, repeat: int, clock=time.perf_counter) -> float:
    """Raw AES-CTR for ``streams`` × ``n_words`` words, one buffer reused."""
    buf = bytearray(4 * n_words + 15)
    zeros = bytes(4 * n_words)
    key = bytes(32)

    def run():
        for _ in range(streams):
            Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update_into(zeros, buf)

    return best_of(run, repeat, clock)


def _keystream_add_time(n_words: int, streams: int, repeat: int) -> float:
    """Expand ``streams`` AES-CTR streams of ``n_words`` words and add each into one accumulator.

    One key per stream (no per-row keys), chunked so that the accumulator stays in
    cache (:func:`~reshuffle.crypto.prg.accumulate_streams`): what one participant's
    mask costs at the least.
    """
    acc = np.zeros(n_words, dtype=np.uint32)
    keyed = [(i.to_bytes(32, "big"), 1) for i in range(streams)]
    return best_of(lambda: accumulate_streams(acc, keyed), repeat)


def _mask_floor_wall(groups, workers: int, repeat: int) -> tuple[float, float]:
    """(one participant of the largest group, the round's mask floor on ``workers`` cores).

    The round's floor is every participant's keystream expansion and addition,
    sum over groups of |U_j| × one member's time, divided by the workers.
    """
    timed = {}
    for U, L, _ in groups:
        if (U, L) not in timed:
            timed[(U, L)] = _keystream_add_time(L, U, repeat)
    U, L, _ = max(groups, key=lambda g: g[1])
    return timed[(U, L)], sum(U_j * timed[(U_j, L_j)] for U_j, L_j, _ in groups) / max(workers, 1)


def _mask_time(N: int, L: int, rows: int, repeat: int) -> float:
    g = get_group()
    rng = SeededRandom(7)
    peers = {j: DHKeyPair.generate(g, rng).public for j in range(1, N)}
    x, b = g.random_scalar(rng), g.random_scalar(rng)
    v = np.zeros(L, dtype=np.uint32)
    return best_of(lambda: mask_in_place(v, g, 1, 5, 0, b, x, peers, bytes(32), rows), repeat)


def _feldman_dealers(g, N: int, t: int, S: int, x: int, rng) -> list:
    """(shares at x, Ĉ, weights) of N − 1 dealers of S secrets at threshold t."""
    out = []
    for i in range(1, N):
        shares, coms = feldman.deal([g.random_scalar(rng) for _ in range(S)], t, range(1, N + 1), rng)
        rho = feldman.weights(coms, i, b"bench")
        out.append((shares[x], feldman.combine(coms, rho), rho))
    return out


def _mechanisms(r, N: int, rows: int, repeat: int) -> dict:
    """Each v2 mechanism timed alone at this round's sizes (§6.2–§9)."""
    p, g = r.params, get_group()
    rng = SeededRandom(11)
    sk = SigningKey.from_seed(bytes(32))
    words = np.frombuffer(rng.bytes(4 * rows * p.row_words), dtype=np.uint32)
    mi = msg.MaskedInput(1, p.upload_m, 0, bytes(32), rows, words.tobytes())
    enc = mi.encode(sk)
    ctx = msg.Context(g, p)
    sender = OTSender(g, 1, p.n, p.k, rng)
    recv = OTReceiver(g, 1, p.n, k=p.k, rng=rng)
    req = recv.request()
    ans = sender.answer(0, req)
    proof = sender.prove(req, ans, b"bench", rng)
    suite = credential.suite(g)
    gamma = g.random_scalar(rng)
    C = g.base_mul(gamma)
    blind, blinded = voprf.blind(suite, b"bench", rng)
    (ev,), cproof = voprf.blind_evaluate(suite, gamma, [blinded], C, rng)
    lw = np.zeros((rows, p.row_words), dtype=np.uint32)
    nyms = pseudonym.EpochIssuer(p.group, 0, rng=rng)
    tokens = [rng.bytes(16) for _ in range(rows)]
    members = list(range(N))
    keys = {i: SigningKey.from_seed(bytes([i + 1]) * 32) for i in members}
    stmt = msg.consent_statement(1, p.upload_m, members, bytes(32))
    sigs_all = [(i, keys[i].sign(CONSENT_CONTEXT, stmt)) for i in members]  # the PS relays every consent
    vks = {i: k.verify_key for i, k in keys.items()}
    # The middle participant's point: Horner's cost grows with the bits of x.
    x = N // 2 + 1
    dealers = _feldman_dealers(g, N, p.t, 2 * p.M, x, rng)
    return {
        # One participant's share checks of every other dealer at setup (§6.4), one batch per dealer.
        "feldman_checks_s": best_of(lambda: [feldman.verify_batch(x, ys, comb, rho) for ys, comb, rho in dealers],
                                    repeat, time.thread_time),
        # The same checks with t − 1 libsodium exponentiations per dealer instead of Horner's rule.
        "feldman_checks_libsodium_s": best_of(lambda: without_vartime(
            lambda: [feldman.verify_batch(x, ys, comb, rho) for ys, comb, rho in dealers]), repeat, time.thread_time),
        "sign_upload_s": best_of(lambda: mi.encode(sk), repeat),
        "verify_upload_s": best_of(lambda: msg.verify(msg.decode(enc, ctx), sk.verify_key), repeat),
        "ot_proof_s": best_of(lambda: sender.prove(req, ans, b"bench", rng), repeat),
        "ot_proof_verify_s": best_of(
            lambda: voprf.verify_dleq(g.generator(), sender.table.B, req.blinded, ans.answers, proof, b"bench"), repeat),
        "credential_eval_s": best_of(lambda: voprf.blind_evaluate(suite, gamma, [blinded], C, rng), repeat),
        "credential_finalize_s": best_of(
            lambda: voprf.finalize(suite, [b"bench"], [blind], [ev], [blinded], C, cproof), repeat),
        "row_checks_s": best_of(lambda: credential.check_rows(lw, p.d * 4, tokens, 1, gamma, g, nyms), repeat),
        "certificate_check_s": best_of(
            lambda: check_certificate(1, p.upload_m, members, bytes(32), sigs_all, vks, p.t), repeat),
        "certificate_check_every_s": best_of(
            lambda: check_certificate(1, p.upload_m, members, bytes(32), sigs_all, vks, p.t, every=True), repeat),
        "decoy_upload_fraction": p.decoys / max(rows - p.decoys, 1),
    }


# Run in a fresh interpreter for each measurement, against whichever checkout of the package is on
# PYTHONPATH (this one, or a baseline such as v1): only reshuffle.shuffle, Participant.handle and
# messages.peek_type are used, which every version has. Each handler call is timed in thread CPU
# seconds and booked under the PS message type it handled; a call counts as after training when
# the participant handled the upload's invocation (v1 has no offline part: all of it counts).
_PARTICIPANT_CPU = r"""
import json, sys, time
from collections import defaultdict
import numpy as np
import reshuffle
from reshuffle.protocol import participant as P
from reshuffle.protocol.messages import peek_type
N, d, seed, split = map(int, sys.argv[1:5])
cpu, after = defaultdict(lambda: defaultdict(float)), defaultdict(float)
orig = P.Participant.handle
ONLINE = {"MASK_REQUEST", "UNMASK_REQUEST", "CERTIFICATE", "BLAME_REQUEST", "DISPUTE"}
def handle(self, data):
    t0 = time.thread_time()
    try:
        return orig(self, data)
    finally:
        dt = time.thread_time() - t0
        kind = getattr(peek_type(data), "name", "other")
        cpu[self.pid][kind] += dt
        upload = getattr(getattr(self, "params", None), "upload_m", None)
        state = getattr(self, "state", None)  # this version keeps the invocation in its state value
        m = state.inv.m if hasattr(state, "inv") else getattr(self, "_m", 0)
        if not split or upload is None or (kind in ONLINE and m == upload):
            after[self.pid] += dt
P.Participant.handle = handle
gen = np.random.default_rng(N)  # test data only
ups = [(gen.normal(size=d) * 0.05).astype(np.float32) for _ in range(N)]
reshuffle.shuffle(ups, seed=seed)
kinds = sorted({k for v in cpu.values() for k in v})
totals = [sum(v.values()) for v in cpu.values()]
print(json.dumps({"mean_s": sum(totals) / len(totals), "max_s": max(totals),
                  "after_training_mean_s": sum(after.values()) / len(cpu),
                  "after_training_max_s": max(after.get(i, 0.0) for i in cpu),
                  "by_message_s": {k: sum(v[k] for v in cpu.values()) / len(cpu) for k in kinds}}))
"""


def participant_cpu(N: int, d: int, root: str | None = None, seed: int | None = None) -> dict:
    """A participant's handler CPU seconds in one round (mean and slowest participant; in all and
    after training; per PS message type), measured in a fresh interpreter on the package at ``root``
    (default: this checkout; another root is a version without the offline part, all after training)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    split = "0" if root else "1"
    root = root or str(Path(reshuffle.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1"}
    args = [str(N), str(d), str(N if seed is None else seed), split]
    out = subprocess.run([sys.executable, "-c", _PARTICIPANT_CPU, *args], env=env, capture_output=True, text=True,
                         timeout=1800, cwd=root)
    if out.returncode:
        raise RuntimeError(f"participant CPU run at {root} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_participant_cpu(N: int, d: int, baseline: str, repeat: int = 3) -> dict:
    """This checkout against ``baseline`` (a checkout of another version), alternating in one run;
    each figure is the least of ``repeat`` rounds (the least noisy on a shared machine)."""
    runs: dict[str, list[dict]] = {"now": [], "baseline": []}
    for _ in range(repeat):
        runs["now"].append(participant_cpu(N, d))
        runs["baseline"].append(participant_cpu(N, d, baseline))
    best = {k: min(v, key=lambda r: r["mean_s"]) for k, v in runs.items()}
    keys = ("mean_s", "max_s", "after_training_mean_s", "after_training_max_s")
    out = {k: {f: min(r[f] for r in v) for f in keys} for k, v in runs.items()}
    for k in out:
        out[k]["by_message_s"] = best[k]["by_message_s"]
    b = out["baseline"]
    out["ratios"] = {
        # The baseline's whole round ran after training: its slowest participant is its critical path.
        "after_training_max/baseline_max": out["now"]["after_training_max_s"] / b["max_s"],
        "mean/baseline_mean": out["now"]["mean_s"] / b["mean_s"],
        "max/baseline_max": out["now"]["max_s"] / b["max_s"],
    }
    out["baseline_path"], out["repeat"] = baseline, repeat
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


class PeakMemory:
    """Peak of the summed PSS of this process and its descendants, sampled in a thread.

    Falls back to this process's ``ru_maxrss`` where ``/proc`` has no PSS.
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> int:
        pids, seen = [os.getpid()], set()
        while pids:
            pid = pids.pop()
            if pid not in seen:
                seen.add(pid)
                pids += _children(pid)
        return sum(_pss_kb(pid) for pid in seen)

    def _loop(self) -> None:
        while True:
            self.peak_kb = max(self.peak_kb, self._sample())
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if not self.peak_kb:
            self.peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @property
    def mb(self) -> float:
        return self.peak_kb / 1024


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its reaped children."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _groups(r) -> list[tuple[int, int, object]]:
    """(|U_j|, words uploaded, params) per group that reached its upload (one entry without groups)."""
    outs = getattr(r.output, "group_outputs", None)
    if outs is None:
        p = r.params
        return [(len(r.output.online.get(p.upload_m, ())), r.output.n_positions * p.row_words, p)]
    params = r.output.group_params
    return [
        (len(o.online.get(params[j].upload_m, ())), o.n_positions * params[j].row_words, params[j])
        for j, o in sorted(outs.items())
    ]


def _ps_floor(groups, repeat: int, clock=time.perf_counter) -> float:
    """Sum of |U_j| vectors + |U_j| keystreams of each group's length; one group of each shape is timed."""
    total, timed = 0.0, {}
    for U, L, _ in groups:
        if (U, L) not in timed:
            acc = np.zeros(L, dtype=np.uint32)
            vecs = [np.full(L, i, dtype=np.uint32) for i in range(U)]

            def plain_sum():
                for v in vecs:
                    np.add(acc, v, out=acc)

            timed[(U, L)] = best_of(plain_sum, repeat, clock) + _keystream_time(L, U, repeat, clock)
        total += timed[(U, L)]
    return total


SECAGGPLUS_ROUND_TRIPS = 4  # Flower's SecAgg+ fit: setup, share keys, collect masked vectors, unmask


def _group_options(N: int, group_size: int | None, set_size: int | None) -> dict:
    """``shuffle``'s keywords for per-round groups of ``group_size``, or the simulator's stable sets of
    ``set_size`` (formed once, as :func:`reshuffle.run.sets.form_sets` forms them from seed N), or one round."""
    if set_size is not None:
        from reshuffle.run.sets import form_sets

        return {"groups": form_sets(range(N), set_size, seed=N)}
    return {"group_size": group_size} if group_size is not None else {}


def _trips(r, N: int, group_size: int | None, workers: int | None, set_size: int | None = None) -> dict:
    """Round trips executed (happy path: this round), next to a round with dropouts and SecAgg+'s.

    The dropout round runs at the same N with short models (round trips do not depend on d):
    one participant drops in the reservation and one at the upload. In groups each dropout
    ends its own group's round (all or none), so that round may deliver nothing; its round
    trips are counted all the same.
    """
    out = {"round_trips": r.round_trips["round_trips"],
           "round_trips_after_training": r.round_trips["round_trips_after_training"],
           "round_trips_steps": r.round_trips["steps"],
           "secaggplus_round_trips": SECAGGPLUS_ROUND_TRIPS}
    gen = np.random.default_rng(N + 1)  # test data only
    ups = [(gen.normal(size=16) * 0.05).astype(np.float32) for _ in range(N)]
    kw = _group_options(N, group_size, set_size)
    dropped = reshuffle.shuffle(ups, seed=N + 1, workers=workers, dropouts={"reserve": [0], "upload": [1]},
                                raise_on_failure=not kw, **kw)
    out["round_trips_dropouts"] = dropped.round_trips["round_trips"]
    out["round_trips_after_training_dropouts"] = dropped.round_trips["round_trips_after_training"]
    return out


def reservation_monte_carlo(N: int, trials: int, R_max: int = 4, seed: int = 0, d: int = 1) -> dict:
    """Monte Carlo of the reservation with the default n, k and decoys for N and model length d
    (honest parties, no dropouts).

    Returns the distribution of iterations run (the reservation ends once every party has
    settled, at most R_max), the chance of one iteration computed in closed form beside it,
    and the fraction of participants left without a slot.
    """
    from reshuffle.crypto.ot import sample_distinct
    from reshuffle.protocol.opening import slots_done
    from reshuffle.protocol.params import RoundParams
    from reshuffle.protocol.reservation import Reservation, settled_slots

    from reshuffle.protocol.params import p_one_iteration

    p = RoundParams.default(N, d)
    rng = SeededRandom(seed, b"bench/reservation")
    iterations: dict[int, int] = {}
    unslotted = 0
    for _ in range(trials):
        parties = [Reservation.start(sample_distinct(p.n, p.k, rng)) for _ in range(N + p.decoys)]
        history: list[np.ndarray] = []
        for _ in range(R_max):
            counts = np.zeros(p.n, dtype=np.int64)
            parties = [q.choose(rng) for q in parties]
            for q in parties:
                if q.pick is not None:
                    counts[q.pick] += 1
            history.append(counts)
            parties = [q.observe(counts) for q in parties]
            if slots_done(N, p.decoys, len(settled_slots(history)), 0):
                break
        iterations[len(history)] = iterations.get(len(history), 0) + 1
        unslotted += sum(q.slot is None for q in parties[:N])
    mean = sum(r * c for r, c in iterations.items()) / trials
    return {"trials": trials, "d": d, "n": p.n, "k": p.k, "decoys": p.decoys, "R_max": R_max,
            "iterations": {str(r): c / trials for r, c in sorted(iterations.items())},
            "one_iteration_closed_form": p_one_iteration(N + p.decoys, p.n),
            "mean_iterations": mean, "mean_round_trips": 5 + 3 * mean,
            "participant_without_slot": unslotted / (trials * N)}


def bench_N(N: int, d: int, repeat: int, group_size: int | None = None, workers: int | None = None,
            blame: bool = True, set_size: int | None = None) -> dict:
    # Test data only; the protocol draws its own secrets from a cryptographic PRG.
    gen = np.random.default_rng(N)
    ups = [(gen.normal(size=d) * 0.05).astype(np.float32) for _ in range(N)]
    kw = _group_options(N, group_size, set_size)
    cpu0 = _cpu_s()
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        # Offline steps first (no model), then the upload: the split a deployment overlaps with training.
        r = reshuffle.prepare(N, d, seed=N, workers=workers, **kw).upload(ups)
        wall = time.perf_counter() - t0
    cpu = _cpu_s() - cpu0  # the workers are joined (reaped) when shuffle returns
    assert len(r.models) == N, "benchmark round lost participants"
    groups = _groups(r)
    # A participant's mask in the largest group: (1 + degree) streams of its upload length.
    U, L, gp = max(groups, key=lambda g: g[1])
    rows = L // gp.row_words  # one row per settled participant plus the decoys'
    mask_s = _mask_time(U, L, rows, repeat)
    floor_mask_s = _keystream_time(L, U, repeat)  # self mask + (U - 1) pairwise streams
    floor_ps_s = _ps_floor(groups, repeat)
    floor_ps_cpu_s = _ps_floor(groups, repeat, time.thread_time)
    keystream_add_s, mask_floor_wall_s = _mask_floor_wall(groups, workers or 1, repeat)
    phase_stats = {ph: v for ph, v in r.stats.items() if isinstance(v, dict) and "ps_s" in v}
    ps_s = phase_stats["upload"]["ps_s"] + phase_stats["unmask"]["ps_s"]
    outs = getattr(r.output, "group_outputs", None) or {0: r.output}
    sum_unmask = sum(o.timings["ps_sum_s"] + o.timings["ps_unmask_s"] for o in outs.values())
    sum_unmask_cpu = sum(o.timings["ps_sum_cpu_s"] + o.timings["ps_unmask_cpu_s"] for o in outs.values())
    # With groups the assignment is one more entry ("assign"), so its bytes and time count too.
    sent = sum(v["participant_bytes_sent"] for v in phase_stats.values())
    recv = sum(v["participant_bytes_received"] for v in phase_stats.values())
    critical = sum(v["ps_s"] + v["participant_max_s"] for v in phase_stats.values())
    online = [phase_stats[ph] for ph in ONLINE_STAGES]
    out = {
        "d": d,
        "group_size": group_size,
        "set_size": set_size,
        "groups": len(groups),
        "workers": workers or 1,
        "wall_s": wall,
        "cpu_s": cpu,
        "participant_critical_s": sum(v["participant_max_s"] for v in phase_stats.values()),
        "participant_cpu_s": sum(v["participant_cpu_s"] for v in phase_stats.values()),
        # After local training ends: the upload's MaskedSum and anything after it (blame).
        "participant_after_training_s": sum(v["participant_s"] for v in online),
        "participant_after_training_critical_s": sum(v["participant_max_s"] for v in online),
        **_trips(r, N, group_size, workers, set_size),
        "reservation_monte_carlo": reservation_monte_carlo(N, 200 if repeat < 3 else 1000 if N <= 50 else 300, d=d),
        "ps_s": sum(v["ps_s"] for v in phase_stats.values()),
        "peak_rss_mb": mem.mb,
        "critical_path_s": critical,
        "round_floor_ratio": (floor_mask_s + floor_ps_s) / critical,
        "mechanisms": _mechanisms(r, U, rows, repeat),
        "phases": {ph: {"participant_s": v["participant_s"], "ps_s": v["ps_s"]} for ph, v in phase_stats.items()},
        "participant_bytes": sent + recv,
        "participant_bytes_sent": sent,
        "participant_bytes_received": recv,
        "participant_upload_bytes": phase_stats["upload"]["participant_bytes_sent"],
        "participant_mask_s": mask_s,
        "participant_mask_floor_s": floor_mask_s,
        "participant_mask_ratio": floor_mask_s / mask_s,
        "participant_keystream_add_s": keystream_add_s,
        "mask_floor_wall_s": mask_floor_wall_s,
        "ps_aggregate_unmask_s": ps_s,
        "ps_floor_s": floor_ps_s,
        "ps_sum_unmask_s": sum_unmask,
        "ps_floor_ratio": floor_ps_s / sum_unmask,
        "ps_floor_cpu_s": floor_ps_cpu_s,
        "ps_sum_unmask_cpu_s": sum_unmask_cpu,
        "ps_floor_cpu_ratio": floor_ps_cpu_s / sum_unmask_cpu,
        "ps_round_floor_ratio": floor_ps_s / ps_s,
    }
    if blame:
        from reshuffle.adversaries import make_adversary

        t0 = time.perf_counter()
        jammed = reshuffle.shuffle(ups, seed=N, workers=workers, adversaries=[make_adversary("jam")], **kw)
        out["blame_extra_s"] = time.perf_counter() - t0 - wall
        out["blame_named"] = sorted(jammed.blamed)
    return out


def run(Ns=(10, 50, 100), d: int = LENET5_D, quick: bool = False, group_size: int | None = None,
        workers: int | None = None, blame: bool | None = None, baseline: str | None = None,
        set_size: int | None = None, on_step: Callable[[str], None] | None = None) -> dict:
    """One :func:`bench_N` per N. The blame round (a jammer, for ``blame_extra_s``) runs by
    default only without groups and for N <= 100, where it costs one more round. ``baseline``:
    a checkout of another version (e.g. ``git worktree add /tmp/v1 61dd95d``) whose participants'
    CPU is measured beside this one's, alternating, per N (:func:`compare_participant_cpu`). ``set_size``: the
    round of a simulation with stable anonymity sets of at least that size (each set runs its own round);
    ``group_size``: new groups drawn for the round."""
    if quick:
        Ns, d = [n for n in Ns if n <= 10] or [10], min(d, 4096)
    out = {}
    for N in Ns:
        if on_step is not None:
            on_step(f"N={N}")
        out[str(N)] = bench_N(N, d, 2 if quick else 3, group_size, workers,
                              blame if blame is not None else (group_size is None and set_size is None and N <= 100),
                              set_size=set_size)
        if baseline is not None:
            out[str(N)]["participant_cpu_vs_baseline"] = compare_participant_cpu(N, d, baseline, 2 if quick else 3)
    return out


# ------------------------------------------------------------------------------ stable groups (DC-net round)
def stable_groups(N: int, g: int) -> list[list[int]]:
    """⌊N/g⌋ groups of consecutive ids (the last takes the rest): a stable partition for the benchmark."""
    k = max(1, N // g)
    groups = [list(range(j * g, (j + 1) * g)) for j in range(k)]
    groups[-1] += list(range(k * g, N))
    return groups


def training_time(model: str, N: int, samples: int = 32, batch: int = 16) -> dict:
    """Seconds for N clients to train one local epoch of ``samples`` CIFAR-shaped inputs each, one after
    another on this process's torch threads (what an in-process simulation of N clients spends)."""
    import torch

    from reshuffle.bench.models import CASES
    from reshuffle.clients import TrainConfig, build_model, get_flat, local_train

    shape, classes = next((c[1], c[2]) for c in CASES if c[0] == model)
    rng = np.random.default_rng(0)  # input data only
    x = rng.normal(size=(samples, *shape)).astype(np.float32)
    y = rng.integers(0, classes, size=samples).astype(np.int64)
    net = build_model(model, shape, classes, seed=0).to(torch.device("cpu"))
    W_g = get_flat(net)
    cfg = TrainConfig(batch_size=batch, lr=0.05)
    local_train(net, W_g, x, y, cfg, 0)  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    for c in range(N):
        local_train(net, W_g, x, y, cfg, c)
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"model": model, "d": int(W_g.size), "samples_per_client": samples, "torch_threads": torch.get_num_threads(),
            "training_s": total, "training_cpu_s": cpu, "training_per_client_s": total / N}


def bench_stable(N: int, d: int, group_size: int = 5, seeds=(1, 2, 3), train_model: str | None = None) -> dict:
    """Stable groups of ``group_size`` in the DC-net round: per seed, round trips in all and after training,
    the upload as a multiple of d, and protocol seconds (offline, after training, critical path); with
    ``train_model`` the training time of N clients measured in the same run beside it."""
    gen = np.random.default_rng(N)  # test data only
    ups = [(gen.normal(size=d) * 0.05).astype(np.float32) for _ in range(N)]
    groups = stable_groups(N, group_size)
    runs = []
    cores = cores_available()

    def one(seed: int, workers: int):
        t0, c0 = time.perf_counter(), time.process_time()
        pr = reshuffle.prepare(N, d, seed=seed, groups=groups)
        offline, offline_cpu = time.perf_counter() - t0, time.process_time() - c0
        pr._server.workers = workers  # the PS's threads for its groups' upload steps
        t0, c0 = time.perf_counter(), time.process_time()
        r = pr.upload(ups)
        online, online_cpu = time.perf_counter() - t0, time.process_time() - c0
        if len(r.models) != N:
            raise AssertionError(f"stable-group round lost participants: {len(r.models)} of {N}")
        return r, offline, offline_cpu, online, online_cpu

    for seed in seeds:
        # The PS's groups in turn (1 thread), then side by side on every core, on the same seed: the PS's
        # seconds after training in each give the pool's speedup (process CPU counts every thread).
        serial = one(seed, 1)[0] if cores > 1 else None
        r, offline, offline_cpu, online, online_cpu = one(seed, cores)
        st = {ph: v for ph, v in r.stats.items() if isinstance(v, dict) and "ps_s" in v}
        up = st["upload"]["participant_bytes_sent"]
        crit = sum(v["ps_s"] + v["participant_max_s"] for v in st.values())
        after = sum(st[ph]["ps_s"] + st[ph]["participant_max_s"] for ph in ONLINE_STAGES)
        ps_after = sum(st[ph]["ps_s"] for ph in ONLINE_STAGES)
        ps_after_serial = ps_after if serial is None else sum(
            serial.stats[ph]["ps_s"] for ph in ONLINE_STAGES if ph in serial.stats)
        runs.append({"seed": seed, "round_trips": r.round_trips["round_trips"],
                     "ps_workers": cores, "ps_after_training_s": ps_after,
                     "ps_after_training_serial_s": ps_after_serial,
                     "ps_group_speedup": ps_after_serial / ps_after if ps_after > 0 else 1.0,
                     "round_trips_after_training": r.round_trips["round_trips_after_training"],
                     "steps": " ".join(r.round_trips["steps"]),
                     "upload_over_d": up / (d * 4), "offline_wall_s": offline, "after_training_wall_s": online,
                     "protocol_wall_s": offline + online, "protocol_cpu_s": offline_cpu + online_cpu,
                     "after_training_cpu_s": online_cpu, "critical_path_s": crit,
                     "after_training_critical_s": after,
                     "participant_after_training_max_s": sum(st[ph]["participant_max_s"] for ph in ONLINE_STAGES),
                     "ps_s": sum(v["ps_s"] for v in st.values())})
    out = {"N": N, "d": d, "group_size": group_size, "groups": len(groups), "runs": runs,
           "max_round_trips": max(x["round_trips"] for x in runs),
           "max_round_trips_after_training": max(x["round_trips_after_training"] for x in runs),
           "upload_over_d": runs[0]["upload_over_d"],
           # The least disturbed of each: a busy machine only ever adds time to a run.
           "ps_group_speedup_best": min(x["ps_after_training_serial_s"] for x in runs)
           / min(x["ps_after_training_s"] for x in runs)}
    if train_model is not None:
        tr = training_time(train_model, N)
        out["training"] = tr
        out["protocol_over_training"] = min(x["protocol_wall_s"] for x in runs) / tr["training_s"]
        out["protocol_over_training_cpu"] = min(x["protocol_cpu_s"] for x in runs) / tr["training_cpu_s"]
        for x in runs:
            x["protocol_over_training"] = x["protocol_wall_s"] / tr["training_s"]
            x["protocol_over_training_cpu"] = x["protocol_cpu_s"] / tr["training_cpu_s"]
    return out


def run_stable(Ns=(20, 100, 200), d: int = LENET5_D, group_size: int = 5, quick: bool = False,
               train_model: str | None = None) -> dict:
    """:func:`bench_stable` per N (one seed with ``quick``, three otherwise)."""
    seeds = (1,) if quick else (1, 2, 3)
    return {str(N): bench_stable(N, d, group_size, seeds, train_model) for N in Ns}


def print_stable(results: dict) -> None:
    """One line per N and seed: round trips (after training), upload / d, protocol seconds; availability."""
    av = results.get("availability")
    for N, res in results.items():
        if N == "availability":
            continue
        for x in res["runs"]:
            print(f"N={N:>4} g={res['group_size']} seed={x['seed']}: {x['round_trips']} round trips "
                  f"({x['round_trips_after_training']} after training; {x['steps']}), "
                  f"upload {x['upload_over_d']:.2f}·d, "
                  f"protocol {x['protocol_wall_s']:.2f} s in process ({x['after_training_wall_s']:.2f} s after "
                  f"training; CPU {x['protocol_cpu_s']:.2f} s, {x['after_training_cpu_s']:.2f} s), "
                  f"critical path {x['critical_path_s']:.2f} s ({x['after_training_critical_s']:.2f} s after "
                  "training); "
                  f"PS after training {x['ps_after_training_s']:.2f} s on {x['ps_workers']} thread(s) vs "
                  f"{x['ps_after_training_serial_s']:.2f} s group by group: speedup {x['ps_group_speedup']:.2f}"
                  + (f"; protocol / training {x['protocol_over_training']:.2f} (CPU "
                     f"{x['protocol_over_training_cpu']:.2f})" if "protocol_over_training" in x else ""))
        if len(res["runs"]) > 1:
            print(f"N={N:>4}: PS after training, best of {len(res['runs'])} seeds: group by group / "
                  f"{res['runs'][0]['ps_workers']} thread(s) = {res['ps_group_speedup_best']:.2f}")
        if "training" in res:
            tr = res["training"]
            print(f"N={N:>4}: training {tr['model']} (d={tr['d']:,}) {tr['training_s']:.2f} s for {N} clients "
                  f"in process ({tr['training_per_client_s']:.2f} s each; CPU {tr['training_cpu_s']:.2f} s); "
                  f"protocol / training = {res['protocol_over_training']:.2f} (CPU: "
                  f"{res['protocol_over_training_cpu']:.2f})")
    if av is not None:
        for rate, x in av["rates"].items():
            print(f"silent members {float(rate):.0%} (N={av['N']}, g={av['group_size']}, {av['rounds']} rounds): "
                  f"{x['silent_members']:.1f} silent a round, groups delivered {x['groups_delivered']:.0%} "
                  f"((1 − rate)^g = {x['expected_groups']:.0%}), models delivered {x['models_delivered']:.0%}")


def availability(N: int = 100, group_size: int = 5, rates=(0.0, 0.02, 0.05, 0.1), rounds: int = 5, d: int = 64,
                 seed: int = 0) -> dict:
    """Stable groups in the DC-net round with each member silent with probability ``rate`` (from a stage drawn
    uniformly among setup, ot, reserve, upload): groups and models delivered, next to (1 − rate)^g, the chance
    that a group of g has no silent member. A silent member costs its group the round (all or none)."""
    from reshuffle.crypto.ot import sample_distinct

    stages = ("setup", "ot", "reserve", "upload")
    rng = SeededRandom(seed, b"bench/availability")  # which members fall silent: test schedule only
    gen = np.random.default_rng(seed)  # model values only
    groups = stable_groups(N, group_size)
    out = {}
    for rate in rates:
        delivered_groups = delivered_models = silent = 0
        for k in range(rounds):
            drops: dict[str, list[int]] = {}
            for i in range(N):
                if int.from_bytes(rng.bytes(4), "big") < rate * 2**32:
                    drops.setdefault(stages[sample_distinct(len(stages), 1, rng)[0]], []).append(i)
                    silent += 1
            ups = [(gen.normal(size=d) * 0.05).astype(np.float32) for _ in range(N)]
            r = reshuffle.shuffle(ups, seed=seed + k + 1, groups=groups, dropouts=drops, raise_on_failure=False)
            delivered_models += len(r.models)
            delivered_groups += len(groups) - len(r.failed_groups or {})
        out[f"{rate:g}"] = {"silent_members": silent / rounds,
                            "groups_delivered": delivered_groups / (rounds * len(groups)),
                            "models_delivered": delivered_models / (rounds * N),
                            "expected_groups": (1 - rate) ** group_size}
    return {"N": N, "group_size": group_size, "rounds": rounds, "rates": out}
