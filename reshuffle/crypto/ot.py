"""k-out-of-n oblivious transfer of slot tokens (Chu–Tzeng style), docs/protocol.md §5 step 2.

The PS is the sender of n 128-bit tokens ``tau_1..tau_n``. With
``H1(T, l)`` a hash into the group and ``H`` a hash to 16 bytes:

- sender: ``B = g^beta``, ``c_l = tau_l XOR H(T, l, H1(T, l)^beta)`` for every slot;
  the table ``(B, c_1..c_n)`` is computed once per round and shared by all receivers;
- receiver: k distinct choices ``sigma_j``, blinds ``a_j``, sends ``A_j = H1(T, sigma_j) * g^{a_j}``;
- sender: ``D_j = A_j^beta``, once per receiver per round, at most k elements;
- receiver: ``H1(T, sigma_j)^beta = D_j * B^{-a_j}``, hence ``tau_{sigma_j}``.

The ``A_j`` are uniform whatever the choices (receiver privacy, information
theoretic); a receiver learns at most k tokens under chosen-target CDH in the
random-oracle model (sender privacy). Slots are numbered ``0..n-1`` here.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group
from reshuffle.crypto.rand import RandomSource, as_source
from reshuffle.crypto.voprf import Proof, prove_dleq
from reshuffle.errors import AlreadyAnswered, ConfigError, DecodeError, UnexpectedMessage
from reshuffle.wire import Parser, Writer

TOKEN_BYTES = 16


def h1(group: Group, T: int, slot: int) -> Element:
    """``H1(T, l)``: the slot's group element for round T."""
    return group.hash_to_group(label("ot/H1"), label("ot/slot", T, slot))


def h_mask(T: int, slot: int, elem: Element) -> bytes:
    """``H(T, l, K)`` truncated to a token's length."""
    return hashlib.sha256(label("ot/H", T, slot) + elem.to_bytes()).digest()[:TOKEN_BYTES]


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


@dataclass(frozen=True)
class OTTable:
    """The sender's public table ``(B, c_0..c_{n-1})`` for round T."""

    T: int
    B: Element
    cipher: tuple[bytes, ...]

    @property
    def n(self) -> int:
        return len(self.cipher)

    def encode(self) -> bytes:
        w = Writer().u64(self.T).fixed(self.B.to_bytes(), self.B.group.element_size)
        if any(len(c) != TOKEN_BYTES for c in self.cipher):
            raise ValueError(f"OT table entries must be {TOKEN_BYTES} bytes")
        return w.u32(len(self.cipher)).raw(b"".join(self.cipher)).bytes()

    @classmethod
    def decode(cls, group: Group, data: bytes, max_n: int) -> "OTTable":
        p = Parser(data, "OT table")
        T = p.u64("T")
        B = group.element_from_bytes(p.fixed(group.element_size, "B"), "OT table B")
        n = p.u32("n")
        if not 0 < n <= max_n:
            raise DecodeError(f"OT table: n={n} not in [1, {max_n}]")
        cipher = tuple(p.fixed_list(TOKEN_BYTES, n, "c"))
        p.finish()
        return cls(T, B, cipher)


def _encode_elements(T: int, elems: tuple[Element, ...]) -> bytes:
    w = Writer().u64(T).u32(len(elems))
    for e in elems:
        w.fixed(e.to_bytes(), e.group.element_size)
    return w.bytes()


def _decode_elements(
    group: Group, data: bytes, k: int, what: str, name: str
) -> tuple[int, tuple[Element, ...]]:
    """``T u64 | count u32 | count elements``, 1 <= count <= k, each validated."""
    p = Parser(data, what)
    T = p.u64("T")
    cnt = p.u32("k")
    if not 0 < cnt <= k:
        raise DecodeError(f"{what}: {cnt} elements, expected 1..{k}")
    els = tuple(
        group.element_from_bytes(p.fixed(group.element_size, f"{name}[{j}]"), f"{what} {name}[{j}]")
        for j in range(cnt)
    )
    p.finish()
    return T, els


@dataclass(frozen=True)
class OTRequest:
    """The blinded choices ``A_1..A_k`` of one receiver."""

    T: int
    blinded: tuple[Element, ...]

    def encode(self) -> bytes:
        return _encode_elements(self.T, self.blinded)

    @classmethod
    def decode(cls, group: Group, data: bytes, k: int) -> "OTRequest":
        return cls(*_decode_elements(group, data, k, "OT request", "A"))


@dataclass(frozen=True)
class OTResponse:
    """The sender's answers ``D_j = A_j^beta``, in request order."""

    T: int
    answers: tuple[Element, ...]

    def encode(self) -> bytes:
        return _encode_elements(self.T, self.answers)

    @classmethod
    def decode(cls, group: Group, data: bytes, k: int) -> "OTResponse":
        return cls(*_decode_elements(group, data, k, "OT response", "D"))


class OTSender:
    """The PS side for one round: draws tokens and beta, answers each receiver once."""

    def __init__(
        self, group: Group, T: int, n: int, k: int, rng: RandomSource | int | None = None
    ) -> None:
        if n < 1 or k < 1 or k > n:
            raise ConfigError(f"OT needs 1 <= k <= n, got n={n}, k={k}")
        src = as_source(rng)
        self.group, self.T, self.n, self.k = group, T, n, k
        self.tokens: tuple[bytes, ...] = tuple(src.bytes(TOKEN_BYTES) for _ in range(n))
        self._beta = group.random_scalar(src)
        self.table = OTTable(
            T,
            group.base_mul(self._beta),
            tuple(
                _xor(tau, h_mask(T, slot, h1(group, T, slot) ** self._beta))
                for slot, tau in enumerate(self.tokens)
            ),
        )
        self._answered: set[int] = set()

    def answer(self, receiver: int, request: OTRequest) -> OTResponse:
        """``D_j = A_j^beta`` for one receiver; a second request raises AlreadyAnswered."""
        if request.T != self.T:
            raise UnexpectedMessage(f"OT request for round {request.T}, this is round {self.T}")
        if receiver in self._answered:
            raise AlreadyAnswered(f"participant {receiver} already received its OT answer")
        response = self.evaluate(request)
        self._answered.add(receiver)
        return response

    def evaluate(self, request: OTRequest) -> OTResponse:
        """``D_j = A_j^beta`` for a validated request, without the answer-once bookkeeping of :meth:`answer`
        (which an honest PS applies; the explorer of PS schedules plays a PS that may not)."""
        if not 0 < len(request.blinded) <= self.k:
            raise DecodeError(f"OT request with {len(request.blinded)} elements, at most k={self.k}")
        if len({a.to_bytes() for a in request.blinded}) != len(request.blinded):
            raise DecodeError("OT request repeats an element")
        return OTResponse(self.T, tuple(a**self._beta for a in request.blinded))

    def prove(self, request: OTRequest, response: OTResponse, context: bytes, rng: RandomSource | None = None) -> Proof:
        """RFC 9497 batched DLEQ proof that every ``D_j = A_j^beta`` uses the beta of ``B`` (docs/protocol.md §7.1)."""
        g = self.group
        return prove_dleq(self._beta, g.generator(), self.table.B, request.blinded, response.answers, rng, context)

    def token_matches(self, slot: int, token: bytes) -> bool:
        """Constant-time comparison of a presented token with slot's token."""
        return 0 <= slot < self.n and hmac.compare_digest(self.tokens[slot], bytes(token))


class OTReceiver:
    """A participant's side: k distinct choices, blinded request, token recovery."""

    def __init__(
        self,
        group: Group,
        T: int,
        n: int,
        choices: list[int] | None = None,
        k: int | None = None,
        rng: RandomSource | int | None = None,
    ) -> None:
        src = as_source(rng)
        if choices is None:
            if k is None or not 0 < k <= n:
                raise ConfigError(f"need 1 <= k <= n to draw choices, got k={k}, n={n}")
            choices = sample_distinct(n, k, src)
        if len(set(choices)) != len(choices) or any(not 0 <= c < n for c in choices):
            raise ConfigError("OT choices must be distinct slots in [0, n)")
        self.group, self.T, self.n = group, T, n
        self.choices = list(choices)
        self._blinds = [group.random_scalar(src) for _ in self.choices]

    def request(self) -> OTRequest:
        g = self.group
        return OTRequest(
            self.T,
            tuple(h1(g, self.T, s) * g.base_mul(a) for s, a in zip(self.choices, self._blinds)),
        )

    def recover(self, table: OTTable, response: OTResponse) -> dict[int, bytes]:
        """Tokens ``{slot: tau_slot}`` for the receiver's choices."""
        if table.T != self.T or response.T != self.T:
            raise UnexpectedMessage("OT table or response is for another round")
        if table.n != self.n:
            raise DecodeError(f"OT table has {table.n} slots, expected {self.n}")
        if len(response.answers) != len(self.choices):
            raise DecodeError(
                f"OT response has {len(response.answers)} answers, expected {len(self.choices)}"
            )
        out = {}
        for s, a, d in zip(self.choices, self._blinds, response.answers):
            k_elem = d * (table.B ** (self.group.order - a))
            out[s] = _xor(table.cipher[s], h_mask(self.T, s, k_elem))
        return out


def sample_distinct(n: int, k: int, src: RandomSource) -> list[int]:
    """k distinct uniform values in [0, n) from a cryptographic source (partial Fisher–Yates)."""
    pool = list(range(n))
    for i in range(k):
        j = i + uniform_below(n - i, src)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:k]


def uniform_below(m: int, src: RandomSource) -> int:
    """Uniform int in [0, m) by rejection sampling."""
    if m <= 0:
        raise ConfigError("uniform_below needs m > 0")
    nbytes = (m.bit_length() + 7) // 8 + 1
    limit = (256**nbytes // m) * m
    while True:
        v = int.from_bytes(src.bytes(nbytes), "big")
        if v < limit:
            return v % m
