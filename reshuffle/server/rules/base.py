"""What every detection/aggregation rule shares: input checks, the Decision, per-round randomness."""

from __future__ import annotations

import functools
import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from reshuffle.errors import ConfigError


def check_updates(updates: np.ndarray) -> np.ndarray:
    """Normalise the input once: a finite (n, d) float64 array with n ≥ 1."""
    U = np.asarray(updates, dtype=np.float64)
    if U.ndim != 2 or U.shape[0] < 1 or U.shape[1] < 1:
        raise ConfigError(f"a rule needs an (n, d) array of updates with n, d >= 1, got shape {U.shape}")
    if not np.isfinite(U).all():
        bad = np.flatnonzero(~np.isfinite(U).all(axis=1)).tolist()
        raise ConfigError(f"updates in rows {bad} are not finite")
    return U


def check_f(f: object, name: str = "f") -> int:
    if not isinstance(f, int) or isinstance(f, bool) or f < 0:
        raise ConfigError(f"{name} must be a non-negative int, got {f!r}")
    return f


def check_positive_int(v: object, name: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ConfigError(f"{name} must be a positive int, got {v!r}")
    return v


def check_positive(v: object, name: str) -> float:
    """A finite number > 0 (ints accepted, bools not)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or not v > 0:
        raise ConfigError(f"{name} must be a positive number, got {v!r}")
    return float(v)


def check_non_negative(v: object, name: str) -> float:
    """A finite number ≥ 0 (ints accepted, bools not)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        raise ConfigError(f"{name} must be a non-negative finite number, got {v!r}")
    return float(v)


def check_seed(seed: object) -> int:
    """The rule's seed; None draws one from OS randomness (a deployment's PS keeps it to itself)."""
    if seed is None:
        return secrets.randbits(63)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"seed must be a non-negative int or None, got {seed!r}")
    return seed


def check_round(round: object) -> int:
    if not isinstance(round, int) or isinstance(round, bool) or round < 0:
        raise ConfigError(f"round must be a non-negative int, got {round!r}")
    return round


def round_rng(seed: int, round: int, label: str) -> np.random.Generator:
    """The generator of one rule in one round: a function of (seed, round, label) only.

    ``label`` (the rule's name) separates the streams of rules that share a seed.
    These draws (coordinate subsets, bucket permutations, FLAME's noise) are not
    protocol secrets; they only need to be reproducible for a given (seed, round).
    """
    tag = int.from_bytes(hashlib.sha256(b"reshuffle/rule-rng/" + label.encode()).digest()[:8], "big")
    return np.random.default_rng(np.random.SeedSequence([seed, round, tag]))


#: The inputs a rule may take besides its rows (see :attr:`Rule.context`).
CONTEXT = frozenset({"pseudonyms", "global_model", "layout"})


def check_layout(layout: Sequence[tuple[str, Sequence[int]]] | None, d: int, name: str) -> list[tuple[str, tuple[int, ...]]]:
    """The flat model's entries as (name, shape) pairs, in order, covering exactly d coordinates; a clear
    refusal when the driver gave none or they do not add up to d."""
    if layout is None:
        raise ConfigError(f"rule {name!r} reads each layer's weights and needs the model's layout; the driver "
                          "gave none (use a driver that passes it, as the simulator and the Flower apps do)")
    out = []
    try:
        for entry, shape in layout:
            shape = tuple(int(x) for x in shape)
            if not isinstance(entry, str) or any(x < 1 for x in shape):
                raise ValueError(entry)
            out.append((entry, shape))
    except (TypeError, ValueError):
        raise ConfigError(f"rule {name!r}: a layout is (name, shape) pairs with positive sizes, got {layout!r}") from None
    size = sum(int(np.prod(s, dtype=np.int64)) for _, s in out)
    if size != d:
        raise ConfigError(f"rule {name!r}: the layout covers {size} coordinates, the rows have {d}")
    return out


def check_pseudonyms(pseudonyms: Sequence[object] | None, n: int, name: str) -> list[str]:
    """One opaque label per row (bytes or str), as strings; a clear refusal when the driver gave none.

    Bytes become their hex form, so labels survive a JSON checkpoint.
    """
    if pseudonyms is None:
        raise ConfigError(f"rule {name!r} keeps a history per pseudonym and needs one pseudonym per row; "
                          "the rows came without pseudonyms (use a per-round rule, or a driver that delivers them)")
    out = []
    for p in pseudonyms:
        if isinstance(p, (bytes, bytearray)) and p:
            out.append("h:" + bytes(p).hex())
        elif isinstance(p, str) and p:
            out.append("s:" + p)
        else:
            raise ConfigError(f"rule {name!r}: a pseudonym must be non-empty bytes or str, got {p!r}")
    if len(out) != n:
        raise ConfigError(f"rule {name!r}: {len(out)} pseudonyms for {n} rows")
    return out


def decide_in_context(rule: "Rule", updates: np.ndarray, round: int, **context: Any) -> "Decision":
    """``rule.decide`` given the inputs it declares in :attr:`Rule.context` (the others are dropped).

    A context value that is None is passed as None: a pseudonymous rule then refuses with a clear message.
    """
    stray = set(context) - CONTEXT
    if stray:
        raise ConfigError(f"unknown rule context {sorted(stray)}; known: {sorted(CONTEXT)}")
    return rule.decide(updates, round=round, **{k: v for k, v in context.items() if k in rule.context})


def pack_json(data: dict[str, Any]) -> np.ndarray:
    """JSON data as a uint8 array (a checkpoint holds arrays only)."""
    return np.frombuffer(json.dumps(data, sort_keys=True, allow_nan=True).encode(), dtype=np.uint8).copy()


def unpack_json(arr: np.ndarray) -> dict[str, Any]:
    return json.loads(np.asarray(arr, dtype=np.uint8).tobytes().decode())


def column_median(U: np.ndarray) -> np.ndarray:
    """``np.median(U, axis=0)`` of a finite (n, d) array, the same values, from one sort down the columns.

    numpy's median partitions each strided column separately, several times slower on the (20, 10⁵)
    rows a round holds; a rule's attacker replays the rule many times a round, so this is its hot path.

    >>> import numpy as np
    >>> column_median(np.array([[1.0, 9.0], [2.0, 0.0], [100.0, 1.0], [3.0, 3.0]])).tolist()
    [2.5, 2.0]
    """
    s = np.sort(U, axis=0)
    m = len(s) // 2
    return s[m].copy() if len(s) % 2 else (s[m - 1] + s[m]) / 2


#: Row counts up to which :func:`column_median_of` selects with a min/max network instead of sorting.
NETWORK_ROWS = 12
#: Columns per block of a network pass (a block of every row stays in cache).
_BLOCK = 8192


@functools.lru_cache(maxsize=None)
def sorting_network(n: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sort on n wires as compare-exchanges (i, j), i < j: min to i, max to j.

    Built for the next power of two; comparators that touch a wire ≥ n are dropped (those wires hold +∞).
    """
    size = 1
    while size < n:
        size *= 2
    out = []
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        out.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple((a, b) for a, b in out if b < n)


@functools.lru_cache(maxsize=None)
def selection_network(n: int, wanted: tuple[int, ...]) -> tuple[tuple[int, int, bool, bool], ...]:
    """The comparators of :func:`sorting_network` that the outputs at ``wanted`` depend on, as
    (i, j, need the min, need the max)."""
    need, keep = set(wanted), []
    for i, j in reversed(sorting_network(n)):
        lo, hi = i in need, j in need
        if lo or hi:
            keep.append((i, j, lo, hi))
            need |= {i, j}
    return tuple(reversed(keep))


def column_median_of(U: np.ndarray, rows) -> np.ndarray:
    """``column_median(U[rows])`` (the same values, bit for bit) without copying the rows.

    Few rows (up to :data:`NETWORK_ROWS`) go through a min/max selection network block by block, several
    times faster than sorting down strided columns. The network picks the same order statistics as the
    sort; only the sign of a zero could differ, so the columns whose median is zero are taken from the
    sort itself.
    """
    rows = [int(i) for i in rows]
    k = len(rows)
    if k > NETWORK_ROWS or k == 0:
        return column_median(U[rows])
    m = k // 2
    net = selection_network(k, (m,) if k % 2 else (m - 1, m))
    d = U.shape[1]
    out = np.empty(d)
    for c in range(0, d, _BLOCK):
        r = [U[i, c:c + _BLOCK] for i in rows]
        for i, j, lo, hi in net:
            a, b = r[i], r[j]
            if lo:
                r[i] = np.minimum(a, b)
            if hi:
                r[j] = np.maximum(a, b)
        out[c:c + _BLOCK] = r[m] if k % 2 else (r[m - 1] + r[m]) / 2
    zero = np.flatnonzero(out == 0)
    if zero.size:
        out[zero] = column_median(U[np.ix_(rows, zero)])
    return out


def identical_rows(U: np.ndarray) -> np.ndarray:
    """Each row's group of rows equal to it in every coordinate (−0.0 equal to 0.0): labels 0..g−1 in
    first-row order.

    Rows are bucketed by a fingerprint that equal rows share (their sum and 64 spread coordinates, each
    plus 0.0 so that −0.0 reads as 0.0) and then compared exactly, so a shared fingerprint never joins
    two different rows.

    >>> import numpy as np
    >>> identical_rows(np.array([[1.0, 2.0], [0.0, 0.0], [1.0, 2.0], [-0.0, 0.0]])).tolist()
    [0, 1, 0, 1]
    """
    U = np.asarray(U, dtype=np.float64)
    n, d = U.shape
    probe = np.unique(np.linspace(0, d - 1, min(d, 64)).astype(np.int64)) if d else np.zeros(0, np.int64)
    with np.errstate(over="ignore", invalid="ignore"):  # a sum that overflows is as good a key
        keys = np.concatenate([U.sum(axis=1)[:, None], U[:, probe]], axis=1) + 0.0
    labels = np.empty(n, dtype=np.int64)
    heads: dict[bytes, list[int]] = {}
    for i in range(n):
        bucket = heads.setdefault(keys[i].tobytes(), [])
        j = next((j for j in bucket if np.array_equal(U[j], U[i])), None)
        if j is None:
            bucket.append(i)
        labels[i] = i if j is None else labels[j]
    _, out = np.unique(labels, return_inverse=True)
    return out.ravel()


def pairwise_sq_distances(U: np.ndarray) -> np.ndarray:
    """‖u_i − u_j‖² for all pairs, from one Gram matrix (float64, clipped at 0)."""
    sq = np.einsum("ij,ij->i", U, U)
    D = sq[:, None] + sq[None, :] - 2.0 * (U @ U.T)
    np.maximum(D, 0.0, out=D)
    np.fill_diagonal(D, 0.0)
    return D


def cosine_to(U: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """cos(u_i, ref) for each row; 0 where either vector is zero."""
    denom = np.linalg.norm(U, axis=1) * np.linalg.norm(ref)
    dots = U @ ref
    return np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)


def clip_factors(norms: np.ndarray, bound: float) -> np.ndarray:
    """min(1, bound / ‖x‖) per row; 1 for a zero row."""
    return np.minimum(1.0, np.divide(bound, norms, out=np.ones_like(norms), where=norms > 0))


@dataclass(frozen=True)
class Decision:
    """What a rule did with the n rows of one round.

    ``aggregate``
        the update added to W_g (float64, length d).
    ``accepted``
        sorted rows the rule passes unflagged; every other row counts as
        detected when TPR/FPR are measured. Each rule documents what
        "accepted" means for it (for a clipping rule: not clipped).
    ``weights``
        per row, in [0, 1], how much of the row survives in the aggregate:
        1 untouched, 0 removed, in between down-weighted (clipped to that
        fraction of its length, kept in that fraction of the coordinates, or
        trust-scored). Filters never accept a row of weight 0; rules that
        accept every row (``detects = False``) may.
    """

    aggregate: np.ndarray
    accepted: tuple[int, ...]
    weights: np.ndarray

    def __post_init__(self) -> None:
        n = self.weights.shape[0] if self.weights.ndim == 1 else -1
        if n < 1 or self.aggregate.ndim != 1:
            raise ConfigError(f"a Decision needs 1-d weights and aggregate, got {self.weights.shape}, {self.aggregate.shape}")
        if list(self.accepted) != sorted(set(self.accepted)) or any(not 0 <= i < n for i in self.accepted):
            raise ConfigError(f"accepted rows {list(self.accepted)} are not sorted distinct indices below n={n}")
        if not ((self.weights >= 0) & (self.weights <= 1)).all():
            raise ConfigError("Decision weights must lie in [0, 1]")

    @property
    def n(self) -> int:
        return int(self.weights.shape[0])

    @property
    def flagged(self) -> list[int]:
        """Rows not accepted (rejected or down-weighted): what TPR/FPR count."""
        ok = set(self.accepted)
        return [i for i in range(self.n) if i not in ok]

    @property
    def rejected(self) -> list[int]:
        """Rows with no influence on the aggregate."""
        return np.flatnonzero(self.weights == 0).tolist()

    @property
    def down_weighted(self) -> list[int]:
        """Rows that count, but less than in full."""
        return np.flatnonzero((self.weights > 0) & (self.weights < 1)).tolist()

    @classmethod
    def mean_of(cls, U: np.ndarray, rows) -> "Decision":
        """Accept ``rows`` as they are and average them (the zero update when there are none)."""
        rows = sorted(int(i) for i in rows)
        w = np.zeros(U.shape[0])
        w[rows] = 1.0
        agg = U[rows].mean(axis=0) if rows else np.zeros(U.shape[1])
        return cls(agg, tuple(rows), w)


class Rule:
    """A rule on the (n, d) array of unlinked updates U_i = W_i − W_g.

    Configure in ``__init__``, apply with ``decide(U, round=T)`` (a
    :class:`Decision`); ``select(U)`` (accepted rows) and ``rule(U)`` (the
    aggregate) are shorthands for it. Rows are anonymous: a rule sees no sender
    ids, only what the PS recovers. The default aggregate is the unweighted mean
    of the accepted rows (the PS cannot weight by sample counts without linking
    rows to clients).

    A subclass implements either ``select(U)`` alone (a filter whose aggregate
    is the mean of the accepted rows) or ``decide``. Rules that draw random
    numbers (``randomized = True``) take a ``seed`` in ``__init__`` and draw from
    :func:`round_rng` (seed, round), so one round's decision is reproducible.
    """

    name: ClassVar[str] = "rule"
    #: True when the rule may reject or down-weight rows (detection); False for
    #: rules that bound influence coordinate-wise and accept every row.
    detects: ClassVar[bool] = True
    #: True when ``decide`` draws random numbers (then ``__init__`` takes ``seed``).
    randomized: ClassVar[bool] = False
    #: The ``__init__`` parameter that receives the run's f (None: it takes none).
    f_param: ClassVar[str | None] = None
    #: What ``decide`` takes besides the rows (keywords of :data:`CONTEXT`): ``pseudonyms``, one label per
    #: row, for rules that keep a history per pseudonym; ``global_model``, W_g, for rules that compare rows
    #: with it; ``layout``, the flat model's (name, shape) entries, for rules that read layers (``energy``).
    #: A driver passes them through :func:`decide_in_context`.
    context: ClassVar[frozenset[str]] = frozenset()

    def commit(self) -> None:
        """Make the state the last ``decide`` computed the rule's own (the deployed step calls it once per round).

        ``decide`` itself never changes what a later round sees, so a copy that the
        attackers probe, or a refused round, leaves the history as it was. Stateless
        rules have nothing to commit.
        """

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, JSON data) the next round depends on beyond the configuration; empty for stateless rules."""
        return {}, {}

    def restore(self, arrays: dict[str, np.ndarray], data: dict[str, Any]) -> None:
        """Continue from :meth:`state`'s output (a resumed run)."""
        if arrays or data:
            raise ConfigError(f"rule {self.name!r} keeps no state, got arrays {sorted(arrays)} and data {sorted(data)}")

    def decide(self, updates: np.ndarray, *, round: int = 0) -> Decision:
        if type(self).select is Rule.select:
            raise NotImplementedError(f"{type(self).__name__} must implement decide() or select()")
        check_round(round)
        U = check_updates(updates)
        return Decision.mean_of(U, self.select(U))

    def select(self, updates: np.ndarray, *, round: int = 0) -> list[int]:
        return list(self.decide(updates, round=round).accepted)

    def __call__(self, updates: np.ndarray, *, round: int = 0) -> np.ndarray:
        return self.decide(updates, round=round).aggregate

    def min_rows(self) -> int:
        """The fewest rows ``decide`` accepts as configured (with fewer it refuses); 1 unless the rule needs more.

        A run whose rounds can never deliver this many rows is refused before its first round.
        """
        return 1

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"
