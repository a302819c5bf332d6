"""The rules' hot paths: CPU seconds per ``decide``, and each column kernel against its plain numpy definition.

``python -m reshuffle.bench.rules`` times ``decide`` of the framing grid's rules
(``clip-trim``, ``hammer-anvil``, ``hammer-signals``) on n rows of d float64
coordinates (by default the MLP's 199,210 on 20 rows) after a few committed
rounds of history, as the attackers' replay calls it; then times each kernel of
:mod:`reshuffle.server.rules` against the straightforward formula it replaces,
checks that both give the same bits, and prints the ratio. It exits 1 if any
kernel's output differs.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from typing import Callable

import numpy as np

from reshuffle.server.rules import make_rule
from reshuffle.server.rules.base import column_median, column_median_of, decide_in_context, identical_rows
from reshuffle.server.rules.coordinate import kept_by_rank
from reshuffle.server.rules.hammer import merge_groups

RULES = ("clip-trim", "hammer-anvil", "hammer-signals")


def rows(n: int, d: int, seed: int) -> np.ndarray:
    """Update-like rows: Gaussian at per-row scales, a twentieth of the columns 0 in every row, row 1 a copy of row 0."""
    rng = np.random.default_rng(seed)
    U = rng.normal(scale=1e-3, size=(n, d)) * rng.exponential(size=(n, 1))
    U[:, rng.random(d) < 0.05] = 0.0
    if n > 1:
        U[1] = U[0]
    return U


def cpu_per_call(f: Callable[[], object], repeat: int) -> float:
    """CPU seconds of one call of f, the mean of ``repeat`` calls after one to warm up."""
    f()
    t0 = time.process_time()
    for _ in range(repeat):
        f()
    return (time.process_time() - t0) / repeat


def time_rule(name: str, n: int, d: int, rounds: int, repeat: int) -> float:
    """CPU seconds of one ``decide`` of ``name`` (f = n // 5) in round ``rounds + 1``, after ``rounds`` commits."""
    rule = make_rule(name, n // 5, seed=1)
    labels = [f"p{i}" for i in range(n)]
    for t in range(1, rounds + 1):
        decide_in_context(rule, rows(n, d, t), t, pseudonyms=labels)
        rule.commit()
    U = rows(n, d, rounds + 1)
    return cpu_per_call(lambda: decide_in_context(rule, U, rounds + 1, pseudonyms=labels), repeat)


def _ranks_kept(U: np.ndarray, t: int) -> np.ndarray:
    ranks = np.empty(U.shape, dtype=np.int64)
    np.put_along_axis(ranks, np.argsort(U, axis=0, kind="stable"), np.arange(len(U))[:, None], axis=0)
    return (ranks >= t) & (ranks < len(U) - t)


def add_at_merge(V: np.ndarray, alpha: np.ndarray, group: np.ndarray):
    """``merge_groups`` by its plain formula (``np.add.at``): the reference its bits are checked against."""
    g = int(group.max()) + 1
    total = np.bincount(group, weights=alpha, minlength=g)
    count = np.bincount(group, minlength=g)
    W = np.zeros((g, V.shape[1]))
    np.add.at(W, group, V * alpha[:, None])
    plain = np.zeros((g, V.shape[1]))
    np.add.at(plain, group, V)
    M = np.where((total > 0)[:, None], W / np.where(total > 0, total, 1.0)[:, None], plain / count[:, None])
    wM = np.minimum(1.0, total)
    return M, wM, np.divide(alpha * wM[group], total[group], out=np.zeros_like(alpha), where=total[group] > 0)


def _hashed_rows(U: np.ndarray) -> np.ndarray:
    Z = np.ascontiguousarray(U) + 0.0
    labels = np.empty(len(Z), dtype=np.int64)
    heads: dict[bytes, list[int]] = {}
    for i in range(len(Z)):
        bucket = heads.setdefault(hashlib.blake2b(Z[i].tobytes(), digest_size=16).digest(), [])
        j = next((j for j in bucket if np.array_equal(Z[j], Z[i])), None)
        if j is None:
            bucket.append(i)
        labels[i] = i if j is None else labels[j]
    return np.unique(labels, return_inverse=True)[1].ravel()


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and np.array_equal(a, b) and (
        a.dtype.kind != "f" or np.array_equal(np.signbit(a), np.signbit(b)))


def kernels(n: int, d: int, repeat: int) -> list[tuple[str, float, float, bool]]:
    """(kernel, its CPU s, the plain formula's CPU s, same bits) for each kernel on ``rows(n, d)``."""
    U = rows(n, d, 0)
    peers = list(range(0, n, max(1, n // 5)))[:5]
    t = max(1, n // 5) if n > 2 else 0
    group = np.array([0, 0] + list(range(1, n - 1)))[:n]
    alpha = np.linspace(0.0, 1.0, n)
    cases = [
        (f"median of {len(peers)} rows", lambda: column_median_of(U, peers), lambda: column_median(U[peers])),
        (f"trimming mask (t={t})", lambda: kept_by_rank(U, t), lambda: _ranks_kept(U, t)),
        ("merging groups", lambda: merge_groups(U, alpha, group), lambda: add_at_merge(U, alpha, group)),
        ("identical rows", lambda: identical_rows(U), lambda: _hashed_rows(U)),
    ]
    return [(name, cpu_per_call(fast, repeat), cpu_per_call(plain, repeat), _same(fast(), plain()))
            for name, fast, plain in cases]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reshuffle.bench.rules", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20, help="rows per round (20)")
    p.add_argument("--dim", type=int, default=199_210, help="coordinates per row (199,210: the MLP)")
    p.add_argument("--rounds", type=int, default=3, help="committed rounds of history before timing (3)")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per figure (3)")
    p.add_argument("--rules", nargs="*", default=list(RULES), help="rules to time (the framing grid's)")
    a = p.parse_args(argv)
    if a.rows < 3 or a.dim < 11 or a.rounds < 0 or a.repeat < 1:
        p.error("need --rows >= 3, --dim >= 11 (label-groups reads 10 output entries), --rounds >= 0, --repeat >= 1")
    print(f"n = {a.rows} rows, d = {a.dim}, {a.rounds} rounds of history; CPU seconds per call")
    for name in a.rules:
        print(f"  {name:16s} {time_rule(name, a.rows, a.dim, a.rounds, a.repeat):8.3f}")
    ok = True
    print("kernel                      kernel s  numpy s  ratio  same bits")
    for name, fast, plain, same in kernels(a.rows, a.dim, a.repeat):
        ok &= same
        print(f"  {name:24s} {fast:8.4f} {plain:8.4f} {plain / max(fast, 1e-9):5.1f}x  {'yes' if same else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
