"""Round parameters (docs/protocol.md §2, §5 step 0), validated on their own and together."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from reshuffle.crypto.encoding import FixedPoint, RawWords
from reshuffle.crypto.group import get_group
from reshuffle.crypto.ot import TOKEN_BYTES
from reshuffle.crypto.prg import ring_dtype
from reshuffle.errors import ConfigError, DecodeError
from reshuffle.wire import Parser, Writer

GROUPS = ("ristretto255", "secp256k1")
PAYLOADS = ("fixed", "words")  # fixed-point float models, or raw ring words (bit-exact bytes)
MAX_PARTICIPANTS = 1 << 16
MAX_SLOTS = 1 << 20
MAX_MODEL = 1 << 28
ASSIGNMENT_BYTES = 32  # digest of the anonymity-group assignment (docs/protocol.md, "Anonymity groups")
ONE_ITERATION = 0.9  # default n: one reservation iteration suffices with at least this chance
SLOT_BUDGET = 16  # ... unless the OT table would exceed 1/SLOT_BUDGET of a participant's upload


def p_one_iteration(picks: int, n: int) -> float:
    """Chance that ``picks`` uniform picks among ``n`` slots are distinct: one iteration settles all."""
    if picks > n:
        return 0.0
    return float(np.exp(np.log1p(-np.arange(picks, dtype=np.float64) / n).sum()))


def default_slots(picks: int, d: int, b: int = 32) -> int:
    """Default n for ``picks`` = N + d_y parties and models of ``d`` words of ``b`` bits.

    The smallest n at which one reservation iteration settles everyone with chance
    ``ONE_ITERATION`` (no collision among the picks), capped so that the OT table
    (n tokens) stays within 1/SLOT_BUDGET of a participant's upload (picks rows of d
    words), and never below 4·picks (docs/protocol.md §11).
    """
    floor = 4 * picks
    cap = min(MAX_SLOTS, picks * d * b // (8 * TOKEN_BYTES * SLOT_BUDGET))
    if cap <= floor:
        return floor
    lo, hi = floor, cap  # p_one_iteration grows with n: the least n in [lo, hi] that reaches the target
    if p_one_iteration(picks, hi) < ONE_ITERATION:
        return hi
    while lo < hi:
        mid = (lo + hi) // 2
        if p_one_iteration(picks, mid) >= ONE_ITERATION:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _pos_int(name: str, v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ConfigError(f"{name} must be a positive int, got {v!r}")
    return v


@dataclass(frozen=True)
class RoundParams:
    """Everything both sides must agree on for one round.

    ``N`` participants in the roster, ``n`` reservation slots, ``k`` OT choices,
    threshold ``t``, ``c`` participants that may collude with the PS (docs/protocol.md
    §6.2–6.3: ``t > (N + c)/2``), ``decoys`` virtual participants of the
    reservation (§8), ``R_max`` reservation iterations, model length ``d``, ring
    width ``b`` with ``f`` fractional bits and range ``±clip``. ``payload`` is
    ``"fixed"`` (float models, fixed-point codec) or ``"words"`` (the model already
    is ``d`` ring words, delivered bit-exact).

    With anonymity groups (:mod:`reshuffle.protocol.groups`) a round is one group of
    ``cohorts``: ``cohort`` is its index and ``assignment`` the 32-byte digest of the
    partition every member recomputed. They travel in ROUND_START, hence enter h_m.
    A round without groups has ``cohort=0, cohorts=1, assignment=b""``.
    """

    N: int
    d: int
    n: int
    k: int
    t: int
    c: int = 0
    R_max: int = 4
    decoys: int = 2
    b: int = 32
    f: int = 24
    clip: float = 64.0
    group: str = "ristretto255"
    payload: str = "fixed"
    cohort: int = 0
    cohorts: int = 1
    assignment: bytes = b""

    @classmethod
    def default(cls, N: int, d: int, **overrides) -> "RoundParams":
        """Defaults: decoys d_y = 2 (1 below N = 10), n = :func:`default_slots` (N + d_y, d, b),
        k = min(8, n), c = ⌊N/5⌋, t = ⌊(N + c)/2⌋ + 1, R_max = 4 (docs/protocol.md §5, §6.2–6.3, §8, §11)."""
        _pos_int("N", N)
        decoys = overrides.pop("decoys", None)
        decoys = (2 if N >= 10 else 1) if decoys is None else decoys
        overrides["decoys"] = decoys
        n = overrides.pop("n", None) or default_slots(N + decoys, d, overrides.get("b", 32))
        k = overrides.pop("k", None) or min(8, n)
        c = overrides.pop("c", None)
        c = N // 5 if c is None else c
        t = overrides.pop("t", None) or (N + c) // 2 + 1
        return cls(N=N, d=d, n=n, k=k, t=t, c=c, **overrides).validated()

    def validated(self) -> "RoundParams":
        for name in ("N", "d", "n", "k", "t", "R_max", "b"):
            _pos_int(name, getattr(self, name))
        if self.N > MAX_PARTICIPANTS:
            raise ConfigError(f"N={self.N} exceeds {MAX_PARTICIPANTS}")
        if self.N < 2:
            raise ConfigError("a shuffle needs at least N=2 participants")
        if self.n > MAX_SLOTS or self.d > MAX_MODEL:
            raise ConfigError(f"n={self.n} or d={self.d} too large")
        if self.k > self.n:
            raise ConfigError(f"k={self.k} OT choices exceed n={self.n} slots")
        if not isinstance(self.c, int) or isinstance(self.c, bool) or not 0 <= self.c < self.N:
            raise ConfigError(f"c (colluders) must be an int in [0, N), got {self.c!r}")
        if not (self.N + self.c) / 2 < self.t <= self.N:
            raise ConfigError(
                f"threshold t={self.t} must satisfy (N + c)/2 < t <= N (N={self.N}, c={self.c}): "
                "two certified views must share an honest signer"
            )
        if not isinstance(self.decoys, int) or isinstance(self.decoys, bool) or not 0 <= self.decoys <= 64:
            raise ConfigError(f"decoys must be an int in [0, 64], got {self.decoys!r}")
        if self.R_max > 64:
            raise ConfigError(f"R_max={self.R_max} is more than 64 iterations")
        if self.group not in GROUPS:
            raise ConfigError(f"unknown group {self.group!r}; choose one of {GROUPS}")
        if self.payload not in PAYLOADS:
            raise ConfigError(f"unknown payload {self.payload!r}; choose one of {PAYLOADS}")
        ring_dtype(self.b)
        if TOKEN_BYTES % ring_dtype(self.b).itemsize:
            raise ConfigError("token must fill whole ring words")
        FixedPoint(self.b, self.f, self.clip)
        self._validate_cohort()
        return self

    def _validate_cohort(self) -> None:
        for name in ("cohort", "cohorts"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool):
                raise ConfigError(f"{name} must be an int, got {v!r}")
        if not 1 <= self.cohorts <= MAX_PARTICIPANTS or not 0 <= self.cohort < self.cohorts:
            raise ConfigError(f"group {self.cohort} of {self.cohorts}: need 0 <= cohort < cohorts <= {MAX_PARTICIPANTS}")
        if not isinstance(self.assignment, bytes) or len(self.assignment) not in (0, ASSIGNMENT_BYTES):
            raise ConfigError(f"assignment must be empty or {ASSIGNMENT_BYTES} bytes")
        if self.cohorts > 1 and not self.assignment:
            raise ConfigError(f"a round split into {self.cohorts} groups must carry the assignment digest")

    def with_(self, **kw) -> "RoundParams":
        return replace(self, **kw).validated()

    # --- derived quantities -------------------------------------------------
    @property
    def M(self) -> int:
        """MaskedSum invocations per round: R_max reservations + 1 upload."""
        return self.R_max + 1

    @property
    def upload_m(self) -> int:
        return self.R_max + 1

    @property
    def token_words(self) -> int:
        return TOKEN_BYTES // ring_dtype(self.b).itemsize

    @property
    def row_words(self) -> int:
        """Words per model-list position: Enc(W) ‖ pad ‖ τ ‖ r ‖ y ‖ K ‖ tag (§7.2)."""
        from reshuffle.protocol.credential import row_bytes

        item = ring_dtype(self.b).itemsize
        return row_bytes(self.d * item) // item

    @property
    def codec(self) -> FixedPoint | RawWords:
        return RawWords(self.b) if self.payload == "words" else FixedPoint(self.b, self.f, self.clip)

    def group_obj(self):
        return get_group(self.group)

    def vector_bits(self, m: int) -> int:
        """Counts use Z_{2^32}; the model list uses Z_{2^b}."""
        return 32 if m <= self.R_max else self.b

    # --- wire ---------------------------------------------------------------
    def encode(self) -> bytes:
        w = Writer().u32(self.N).u32(self.d).u32(self.n).u32(self.k).u32(self.t).u32(self.c)
        w.u8(self.R_max).u8(self.decoys).u8(self.b).u8(self.f)
        w.var(repr(float(self.clip)).encode()).var(self.group.encode()).var(self.payload.encode())
        w.u32(self.cohort).u32(self.cohorts).var(self.assignment)
        return w.bytes()

    @classmethod
    def decode(cls, data: bytes) -> "RoundParams":
        p = Parser(data, "round parameters")
        N, d, n, k, t, c = (p.u32(x) for x in ("N", "d", "n", "k", "t", "c"))
        R_max, decoys, b, f = p.u8("R_max"), p.u8("decoys"), p.u8("b"), p.u8("f")
        try:
            clip = float(p.var("clip", 32).decode("ascii"))
            group = p.var("group", 32).decode("ascii")
            payload = p.var("payload", 16).decode("ascii")
        except (UnicodeDecodeError, ValueError) as exc:
            raise DecodeError(f"round parameters: {exc}") from None
        cohort, cohorts = p.u32("cohort"), p.u32("cohorts")
        assignment = bytes(p.var("assignment", ASSIGNMENT_BYTES))
        p.finish()
        try:
            return cls(N, d, n, k, t, c, R_max, decoys, b, f, clip, group, payload,
                       cohort, cohorts, assignment).validated()
        except ConfigError as exc:
            raise DecodeError(f"round parameters rejected: {exc}") from None
