"""Prime-order groups behind one interface.

Notation is multiplicative as in docs/protocol.md: ``a * b`` is the group operation,
``a ** s`` exponentiation by a scalar, ``g`` the generator. Scalars are Python
ints in ``[0, q)``. Backends:

- :class:`Ristretto255` (default): RFC 9496 over libsodium via ``rbcl``;
  hash-to-group is RFC 9380's ``hash_to_ristretto255`` (expand_message_xmd
  with SHA-512, then the one-way map).
- :class:`Secp256k1` (optional, ``charm-crypto-lite``): SEC1 compressed points;
  hash-to-group by try-and-increment, which is **not constant time** in the
  hashed message (fine for public inputs such as slot indices).

Every element decoded from bytes goes through :meth:`Group.element_from_bytes`,
which rejects non-canonical encodings and the identity.
"""

from __future__ import annotations

import hashlib
import hmac
from abc import ABC, abstractmethod
from typing import Any

from reshuffle.crypto.rand import RandomSource, as_source
from reshuffle.errors import ConfigError, InvalidElement, InvalidScalar


def expand_message_xmd(msg: bytes, dst: bytes, length: int) -> bytes:
    """RFC 9380 §5.3.1 expand_message_xmd with SHA-512."""
    b_in, r_in = 64, 128
    if len(dst) > 255:
        raise ConfigError("hash-to-group domain tag longer than 255 bytes")
    ell = -(-length // b_in)
    if ell > 255 or length > 65535:
        raise ConfigError(f"expand_message_xmd: length {length} too large")
    dst_prime = dst + bytes([len(dst)])
    b0 = hashlib.sha512(
        bytes(r_in) + msg + length.to_bytes(2, "big") + b"\x00" + dst_prime
    ).digest()
    out = [hashlib.sha512(b0 + b"\x01" + dst_prime).digest()]
    for i in range(2, ell + 1):
        prev = bytes(x ^ y for x, y in zip(b0, out[-1]))
        out.append(hashlib.sha512(prev + bytes([i]) + dst_prime).digest())
    return b"".join(out)[:length]


class Element:
    """An element of a prime-order group. Immutable; compare with ``==``."""

    __slots__ = ("group", "_v", "_enc")

    def __init__(self, group: "Group", value: Any) -> None:
        self.group = group
        self._v = value
        self._enc: bytes | None = None

    def to_bytes(self) -> bytes:
        if self._enc is None:
            self._enc = self.group._encode(self._v)
        return self._enc

    def __mul__(self, other: "Element") -> "Element":
        self._same_group(other)
        return Element(self.group, self.group._op(self._v, other._v))

    def __truediv__(self, other: "Element") -> "Element":
        return self * other.inverse()

    def __pow__(self, s: int) -> "Element":
        return Element(self.group, self.group._exp(self._v, s % self.group.order))

    def inverse(self) -> "Element":
        return Element(self.group, self.group._inv(self._v))

    @property
    def is_identity(self) -> bool:
        return self.to_bytes() == self.group._identity_encoding

    def _same_group(self, other: "Element") -> None:
        if not isinstance(other, Element) or other.group is not self.group:
            raise TypeError("group operation between elements of different groups")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Element) or other.group is not self.group:
            return NotImplemented
        return hmac.compare_digest(self.to_bytes(), other.to_bytes())

    def __hash__(self) -> int:
        return hash(self.to_bytes())

    def __repr__(self) -> str:
        return f"Element({self.group.name}, {self.to_bytes().hex()[:16]}…)"


_DECODE_CACHE = 1 << 17  # valid encodings remembered per group (about 10 MB at most)


class Group(ABC):
    """A cyclic group of prime order ``order`` with a fixed generator."""

    name: str
    order: int
    element_size: int
    scalar_size: int
    _identity_encoding: bytes

    # --- backend hooks -------------------------------------------------------
    @abstractmethod
    def _op(self, a: Any, b: Any) -> Any: ...

    @abstractmethod
    def _exp(self, a: Any, s: int) -> Any: ...

    @abstractmethod
    def _inv(self, a: Any) -> Any: ...

    @abstractmethod
    def _encode(self, a: Any) -> bytes: ...

    @abstractmethod
    def _decode(self, data: bytes) -> Any:
        """Backend value for a canonical, non-identity encoding; else raise InvalidElement."""

    @abstractmethod
    def _generator(self) -> Any: ...

    @abstractmethod
    def _hash(self, dst: bytes, msg: bytes) -> Any: ...

    # --- public API ----------------------------------------------------------
    def generator(self) -> Element:
        return Element(self, self._generator())

    def base_mul(self, s: int) -> Element:
        """``g ** s``."""
        return Element(self, self._base_exp(s % self.order))

    def _base_exp(self, s: int) -> Any:
        """Backend value of ``g ** s`` for ``s`` in ``[0, q)`` (backends may use a fixed-base method)."""
        return self._exp(self._generator(), s)

    def element_from_bytes(self, data: bytes, field: str = "element") -> Element:
        """Decode and validate: exact length, canonical encoding, not the identity."""
        if not isinstance(data, (bytes, bytearray)):
            raise InvalidElement(f"{field}: expected bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) != self.element_size:
            raise InvalidElement(
                f"{field}: {self.name} element must be {self.element_size} bytes, got {len(data)}"
            )
        if data == self._identity_encoding:
            raise InvalidElement(f"{field}: identity element is not accepted")
        # Validation is a pure function of public bytes; in-process simulations decode each relayed
        # element once per participant, so valid encodings are remembered (bounded, per group).
        cache = self.__dict__.setdefault("_decoded", {})
        v = cache.get(data)
        if v is None:
            try:
                v = self._decode(data)
            except InvalidElement as exc:
                raise InvalidElement(f"{field}: {exc}") from None
            if isinstance(v, bytes):  # only immutable backend values may be shared
                if len(cache) >= _DECODE_CACHE:
                    cache.clear()
                cache[data] = v
        return Element(self, v)

    def hash_to_group(self, dst: bytes, msg: bytes) -> Element:
        """Random-oracle hash into the group; ``dst`` is the domain separation tag."""
        if not dst:
            raise ConfigError("hash_to_group needs a non-empty domain tag")
        return Element(self, self._hash(dst, msg))

    def random_scalar(self, rng: RandomSource | int | None = None) -> int:
        """Uniform non-zero scalar (64 bytes reduced mod q: bias < 2^-250)."""
        src = as_source(rng)
        while True:
            s = int.from_bytes(src.bytes(64), "big") % self.order
            if s:
                return s

    def scalar_to_bytes(self, s: int) -> bytes:
        if not 0 <= s < self.order:
            raise InvalidScalar("scalar out of range [0, q)")
        return s.to_bytes(self.scalar_size, "big")

    def scalar_from_bytes(self, data: bytes, field: str = "scalar") -> int:
        if len(data) != self.scalar_size:
            raise InvalidScalar(f"{field}: must be {self.scalar_size} bytes, got {len(data)}")
        s = int.from_bytes(data, "big")
        if s >= self.order:
            raise InvalidScalar(f"{field}: not reduced modulo the group order")
        return s

    def __repr__(self) -> str:
        return f"<Group {self.name}>"


class Ristretto255(Group):
    """RFC 9496 ristretto255 through libsodium (``rbcl``)."""

    name = "ristretto255"
    order = 2**252 + 27742317777372353535851937790883648493
    element_size = 32
    scalar_size = 32
    _identity_encoding = bytes(32)

    def __init__(self) -> None:
        import rbcl

        self._r = rbcl
        self._g = rbcl.crypto_scalarmult_ristretto255_base((1).to_bytes(32, "little"))

    def _op(self, a: bytes, b: bytes) -> bytes:
        return self._r.crypto_core_ristretto255_add(a, b)

    def _exp(self, a: bytes, s: int) -> bytes:
        return self._r.crypto_scalarmult_ristretto255_allow_scalar_zero(
            s.to_bytes(32, "little"), a
        )

    def _inv(self, a: bytes) -> bytes:
        return self._r.crypto_core_ristretto255_sub(self._identity_encoding, a)

    def _base_exp(self, s: int) -> bytes:
        # libsodium's fixed-base routine (precomputed tables) refuses s = 0, whose result is the identity.
        if not s:
            return self._identity_encoding
        return self._r.crypto_scalarmult_ristretto255_base(s.to_bytes(32, "little"))

    def _encode(self, a: bytes) -> bytes:
        return a

    def _decode(self, data: bytes) -> bytes:
        # libsodium's check is the RFC 9496 decode (canonical and on the group) except that it
        # ignores bit 255, which RFC 9496 requires to be zero (s < p): without the first test one
        # element would have two accepted encodings.
        if data[31] & 0x80 or not self._r.crypto_core_ristretto255_is_valid_point(data):
            raise InvalidElement("not a canonical ristretto255 encoding")
        return data

    def _generator(self) -> bytes:
        return self._g

    def _hash(self, dst: bytes, msg: bytes) -> bytes:
        return self.from_uniform_bytes(expand_message_xmd(msg, dst, 64))

    def from_uniform_bytes(self, data: bytes) -> bytes:
        """RFC 9496 §4.3.4 element derivation (the one-way map) of 64 bytes."""
        if len(data) != 64:
            raise ConfigError("from_uniform_bytes needs 64 bytes")
        return self._r.crypto_core_ristretto255_from_hash(data)


class Secp256k1(Group):
    """secp256k1 through ``charm-crypto-lite`` (OpenSSL); SEC1 compressed points."""

    name = "secp256k1"
    order = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
    field_p = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEFFFFFC2F
    element_size = 33
    scalar_size = 32
    _identity_encoding = bytes(33)

    def __init__(self) -> None:
        import base64

        from charm_lite.toolbox.eccurve import secp256k1
        from charm_lite.toolbox.ecgroup import ZR, ECGroup

        self._b64 = base64
        self._eg = ECGroup(secp256k1)
        self._ZR = ZR
        self._g = self._eg.generator()
        if int(self._eg.order()) != self.order:
            raise ConfigError("charm-crypto-lite reports an unexpected secp256k1 order")

    def _op(self, a, b):
        return a * b

    def _exp(self, a, s: int):
        return a ** self._eg.init(self._ZR, s)

    def _inv(self, a):
        return -a

    def _encode(self, a) -> bytes:
        ser = self._eg.serialize(a)
        raw = self._b64.b64decode(ser.split(b":", 1)[1])
        if raw == b"\x00":
            return self._identity_encoding
        return raw

    def _decode(self, data: bytes):
        if data[0] not in (2, 3):
            raise InvalidElement("not a SEC1 compressed point")
        x = int.from_bytes(data[1:], "big")
        if x >= self.field_p:
            raise InvalidElement("x coordinate not reduced")
        # charm returns the point at infinity for off-curve input instead of failing.
        p = self._eg.deserialize(b"1:" + self._b64.b64encode(data))
        if self._encode(p) != data:
            raise InvalidElement("not a point on secp256k1")
        return p

    def _generator(self):
        return self._g

    def _hash(self, dst: bytes, msg: bytes):
        # Try-and-increment: variable time in msg; every candidate is domain-separated.
        for ctr in range(256):
            h = hashlib.sha256(
                len(dst).to_bytes(1, "big") + dst + ctr.to_bytes(1, "big") + msg
            ).digest()
            cand = bytes([2 + (h[0] & 1)]) + hashlib.sha256(b"x" + h).digest()
            try:
                return self._decode(cand)
            except InvalidElement:
                continue
        raise RuntimeError("hash_to_group: no point after 256 tries (probability 2^-256)")


_BACKENDS = {"ristretto255": Ristretto255, "secp256k1": Secp256k1}
_CACHE: dict[str, Group] = {}


def available_groups() -> list[str]:
    """Names of the backends whose libraries import on this machine."""
    out = []
    for name in _BACKENDS:
        try:
            get_group(name)
        except ConfigError:
            continue
        out.append(name)
    return out


def get_group(name: str = "ristretto255") -> Group:
    """Shared instance of the named backend; ConfigError if unknown or not installed."""
    if name in _CACHE:
        return _CACHE[name]
    if name not in _BACKENDS:
        raise ConfigError(f"unknown group {name!r}; choose one of {sorted(_BACKENDS)}")
    try:
        grp = _BACKENDS[name]()
    except ImportError as exc:
        raise ConfigError(
            f"group {name!r} needs a library that is not installed ({exc}); "
            "install the 'charm' extra for secp256k1"
        ) from None
    _CACHE[name] = grp
    return grp
