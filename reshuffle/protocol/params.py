"""Round parameters (docs/protocol.md §2, §5 step 0), validated on their own and together."""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

import hashlib

from reshuffle.crypto.domain import label
from reshuffle.crypto.encoding import FixedPoint, RawWords
from reshuffle.crypto.group import get_group
from reshuffle.crypto.ot import TOKEN_BYTES
from reshuffle.crypto.prg import ring_dtype
from reshuffle.errors import ConfigError, DecodeError, Refused
from reshuffle.wire import Parser, Writer

GROUPS = ("ristretto255", "secp256k1")
PAYLOADS = ("fixed", "words")  # fixed-point float models, or raw ring words (bit-exact bytes)
MAX_PARTICIPANTS = 1 << 16
MAX_SLOTS = 1 << 20
MAX_MODEL = 1 << 28
ASSIGNMENT_BYTES = 32  # digest of the anonymity-group assignment (docs/protocol.md, "Anonymity groups")
MIN_ANONYMITY = 2  # default floor: honest members a participant is hidden among (roster minus c, U_m minus c)
GROUP_SIZE = 5  # default stable anonymity set: the least group a participant joins (4 honest against c = 1)
COLLUSION = 0.2  # default share of a round assumed to collude with the PS: c = max(1, ⌊N/5⌋)
MAX_R_MAX = 16  # default ceiling on the reservation iterations a participant commits keys for
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


def colluders(N: int, fraction: float = COLLUSION) -> int:
    """c for a round of N under a collusion ``fraction``: ⌊fraction·N⌋, never below 1 (one colluder is
    always tolerated). Exact in the fraction's decimal value, so both sides of a round agree."""
    return max(1, int(Fraction(str(fraction)) * N))


def threshold(N: int, c: int) -> int:
    """The least t with t > (N + c)/2: two certified views then share an honest signer (§6.3)."""
    return (N + c) // 2 + 1


def default_decoys(N: int) -> int:
    """d_y: 2 from N = 10, else 1 (section 8.1)."""
    return 2 if N >= 10 else 1


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
        k = min(8, n), c = max(1, ⌊N/5⌋), t = ⌊(N + c)/2⌋ + 1, R_max = 4 (docs/protocol.md §5, §6.2–6.3, §8,
        §11). ConfigError if a participant with the default :class:`TrustFloors` would refuse them (N = 2
        leaves one honest member: the smallest round is :func:`smallest_round`)."""
        _pos_int("N", N)
        decoys = overrides.pop("decoys", None)
        decoys = default_decoys(N) if decoys is None else decoys
        overrides["decoys"] = decoys
        n = overrides.pop("n", None) or default_slots(N + decoys, d, overrides.get("b", 32))
        k = overrides.pop("k", None) or min(8, n)
        c = overrides.pop("c", None)
        c = colluders(N) if c is None else c
        t = overrides.pop("t", None) or threshold(N, c)
        p = cls(N=N, d=d, n=n, k=k, t=t, c=c, **overrides).validated()
        # What a participant with the default floors would refuse is a configuration error here.
        why = TrustFloors().violation(p)
        if why is not None:
            raise ConfigError(f"participants refuse these parameters: {why[3]}")
        return p

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

    def digest(self) -> bytes:
        """SHA-256 of the encoded parameters: every advertisement signs it, so evidence names a participant
        only under the parameters it took part with (docs/protocol.md §4, §9)."""
        return hashlib.sha256(label("round/params") + self.encode()).digest()

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


# --------------------------------------------------------------------------------------- trust floors
class BelowFloor(Refused):
    """The PS announced a round parameter beyond this participant's own bound (docs/protocol.md §11)."""

    def __init__(self, param: str, announced: int, bound: int, text: str) -> None:
        super().__init__(text)
        self.param, self.announced, self.bound = param, announced, bound


@dataclass(frozen=True)
class TrustFloors:
    """A participant's own bounds on the parameters its guarantees depend on (docs/protocol.md §11).

    The PS writes the round parameters into ROUND_START; a participant takes part only if they
    meet these, and every cap it applies uses the stricter of the announced value and its own.

    ``collusion``: the colluders c it assumes among N, ``max(1, ⌊collusion·N⌋)`` (c is never below
    1: one colluder is always tolerated); the announced c must be at least that, and t at least
    ⌊(N + c)/2⌋ + 1. ``anonymity``: the honest members it must be hidden among: N − c, and |U_m| − c
    before it consents to U_m, at least this. ``decoys``: the least d_y (None: the default rule,
    2 from N = 10, else 1), which decides how likely a tamperer is named. ``R_max``: a ceiling on
    the reservation iterations (each costs 2 secrets with t commitments; no guarantee needs more).
    ``group``: the least stable anonymity group it joins (default 5). A group of g members runs its
    rounds with N = g, so the honest set it hides among, in every round and across rounds, is
    g − c_g with c_g = max(1, ⌊collusion·g⌋): 4 for the default g = 5 (c = 1), 8 for g = 10 (c = 2).
    The floor it applies is :attr:`min_group`, never below the smallest round its other floors accept.
    ``ungrouped``: whether it takes part in a round bound to no stable group (default False: a node
    with a group floor answers only rounds of its own group, so a PS that never forms groups gets
    nothing from it; a round of all N that changes its roster names senders across rounds).
    ``draw``: the least groups the candidate list of an assignment must be able to form; a list of
    fewer than ``draw``·g candidates is refused (default 2: a list of g to 2g − 1 makes the draw a
    no-op, its one group the PS's choice). ``federation``: the federation's size where the participant
    knows it (a Flower node's ``num-partitions``): a list of the whole federation is taken even below
    ``draw``·g, since the PS then had no list to choose.
    """

    collusion: float = COLLUSION
    anonymity: int = MIN_ANONYMITY
    decoys: int | None = None
    R_max: int = MAX_R_MAX
    group: int = GROUP_SIZE
    ungrouped: bool = False
    draw: int = 2
    federation: int | None = None

    def __post_init__(self) -> None:
        f = self.collusion
        if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 <= f < 1:
            raise ConfigError(f"collusion floor must be a fraction in [0, 1), got {f!r}")
        if not isinstance(self.anonymity, int) or isinstance(self.anonymity, bool) or self.anonymity < 2:
            raise ConfigError(f"anonymity floor must be an int >= 2 (one honest member hides nobody), "
                              f"got {self.anonymity!r}")
        d = self.decoys
        if d is not None and (not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= 64):
            raise ConfigError(f"decoys floor must be None or an int in [0, 64], got {d!r}")
        if not isinstance(self.R_max, int) or isinstance(self.R_max, bool) or not 1 <= self.R_max <= 64:
            raise ConfigError(f"R_max ceiling must be an int in [1, 64], got {self.R_max!r}")
        if not isinstance(self.group, int) or isinstance(self.group, bool) or not 2 <= self.group <= MAX_PARTICIPANTS:
            raise ConfigError(f"group floor must be an int in [2, {MAX_PARTICIPANTS}], got {self.group!r}")
        if not isinstance(self.ungrouped, bool):
            raise ConfigError(f"ungrouped must be true or false, got {self.ungrouped!r}")
        if not isinstance(self.draw, int) or isinstance(self.draw, bool) or not 1 <= self.draw <= 64:
            raise ConfigError(f"draw floor must be an int in [1, 64] (groups the candidate list can form), "
                              f"got {self.draw!r}")
        fed = self.federation
        if fed is not None and (not isinstance(fed, int) or isinstance(fed, bool) or not 2 <= fed <= MAX_PARTICIPANTS):
            raise ConfigError(f"federation must be None or an int in [2, {MAX_PARTICIPANTS}], got {fed!r}")

    @property
    def min_group(self) -> int:
        """The least stable group it joins: ``group``, raised to the smallest round whose N − c reaches
        ``anonymity`` (a group is a round's roster, so the round floor applies to it too)."""
        return max(self.group, smallest_round(self))

    def min_candidates(self, g: int) -> int:
        """The least candidates it accepts in an assignment of group size ``g``: ``draw``·g, or the whole
        federation where it knows that to be smaller."""
        return self.draw * g if self.federation is None else min(self.draw * g, self.federation)

    def group_honest(self, g: int) -> int:
        """The honest members a group of ``g`` hides each member among, against this participant's c."""
        return g - self.c(g)

    def c(self, N: int) -> int:
        """The colluders this participant assumes in a round of N."""
        return colluders(N, self.collusion)

    def t(self, N: int) -> int:
        """The least threshold it accepts in a round of N."""
        return threshold(N, self.c(N))

    def min_decoys(self, N: int) -> int:
        return default_decoys(N) if self.decoys is None else self.decoys

    def c_bound(self, p: RoundParams) -> int:
        """The c every cap uses: the stricter of the announced c and its own."""
        return max(p.c, self.c(p.N))

    def violation(self, p: RoundParams) -> tuple[str, int, int, str] | None:
        """(parameter, announced, bound, why) for the first parameter of ``p`` beyond the floors, or None."""
        N, c = p.N, self.c(p.N)
        if p.c < c:
            return "c", p.c, c, (f"c={p.c} colluders announced for N={N}, below this participant's floor c={c} "
                                 f"(max(1, ⌊{self.collusion}·N⌋))")
        if p.t < self.t(N):
            return "t", p.t, self.t(N), f"threshold t={p.t} announced, below this participant's floor t={self.t(N)}"
        honest = N - self.c_bound(p)
        if honest < self.anonymity:
            return "N", N, self.anonymity + self.c_bound(p), (
                f"N={N} with c={self.c_bound(p)} leaves {honest} honest member(s), below this participant's "
                f"anonymity floor of {self.anonymity} (a round needs N >= {smallest_round(self)})")
        if p.decoys < self.min_decoys(N):
            return "decoys", p.decoys, self.min_decoys(N), (
                f"decoys={p.decoys} announced, below this participant's floor of {self.min_decoys(N)}")
        if p.R_max > self.R_max:
            return "R_max", p.R_max, self.R_max, (
                f"R_max={p.R_max} announced, above this participant's ceiling of {self.R_max}")
        return None

    def check(self, p: RoundParams) -> None:
        """Raise :class:`BelowFloor` (naming the parameter, the announced value and the bound) if ``p`` is
        beyond the floors."""
        why = self.violation(p)
        if why is not None:
            raise BelowFloor(*why)

    def check_members(self, p: RoundParams, members: int) -> None:
        """Before consenting to a U_m of ``members``: the honest among them must reach the anonymity floor."""
        if members - self.c_bound(p) < self.anonymity:
            raise BelowFloor("U_m", members, self.anonymity + self.c_bound(p), (
                f"U_m has {members} members; with c={self.c_bound(p)} that leaves "
                f"{members - self.c_bound(p)} honest, below this participant's anonymity floor of {self.anonymity}"))


def smallest_round(floors: TrustFloors | None = None) -> int:
    """The least N a participant with ``floors`` (default: the defaults) takes part in: N − c >= anonymity.

    With the defaults (c = max(1, ⌊N/5⌋), anonymity 2) that is N = 3; N = 2 leaves one honest member."""
    f = floors or TrustFloors()
    N = 2
    while N - f.c(N) < f.anonymity:
        N += 1
    return N
