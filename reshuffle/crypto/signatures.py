"""Ed25519 signatures and a small certificate authority.

Every signature is over ``label(context) || message`` so that a signature made
for one message type never verifies as another. The CA binds a participant id
(or the PS) to its Ed25519 verification key; it is offline after set-up.
Verification raises :class:`InvalidSignature`; it never returns a bool.

Keys and signing go through ``cryptography`` (OpenSSL); every verification, by
participants, the PS and third parties checking evidence alike, goes through
libsodium (PyNaCl), which is about twice as fast here (53 against 103 µs) and
stricter: it refuses non-canonical and small-order public keys and R values, so
a key of small order (which OpenSSL accepts, and under which a signature of
every message verifies) signs nothing.
"""

from __future__ import annotations

import hmac

import os
from dataclasses import dataclass
from pathlib import Path

import nacl.bindings
import nacl.exceptions
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from reshuffle.crypto.domain import label
from reshuffle.errors import ConfigError, DecodeError, InvalidSignature
from reshuffle.wire import Parser, Writer

SIG_BYTES = 64
VK_BYTES = 32
ROLE_PARTICIPANT = 0
ROLE_SERVER = 1
SERVER_ID = 0xFFFFFFFF


def _msg(context: str, message: bytes) -> bytes:
    return label("sig/" + context) + message


class VerifyKey:
    """An Ed25519 public key."""

    __slots__ = ("_k", "_raw")

    def __init__(self, key: Ed25519PublicKey) -> None:
        self._k = key
        self._raw = key.public_bytes_raw()

    @classmethod
    def from_bytes(cls, data: bytes) -> "VerifyKey":
        if len(data) != VK_BYTES:
            raise DecodeError(f"Ed25519 public key must be {VK_BYTES} bytes, got {len(data)}")
        try:
            return cls(Ed25519PublicKey.from_public_bytes(bytes(data)))
        except ValueError as exc:
            raise DecodeError(f"invalid Ed25519 public key: {exc}") from None

    def to_bytes(self) -> bytes:
        return self._raw

    def verify(self, context: str, message: bytes, signature: bytes) -> None:
        if len(signature) != SIG_BYTES:
            raise InvalidSignature(f"signature must be {SIG_BYTES} bytes, got {len(signature)}")
        try:
            nacl.bindings.crypto_sign_open(bytes(signature) + _msg(context, message), self._raw)
        except nacl.exceptions.BadSignatureError:
            raise InvalidSignature(f"bad {context} signature") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VerifyKey) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)


class SigningKey:
    """An Ed25519 private key."""

    __slots__ = ("_k",)

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._k = key

    @classmethod
    def generate(cls) -> "SigningKey":
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> "SigningKey":
        """Deterministic key from 32 bytes (tests and simulations)."""
        return cls(Ed25519PrivateKey.from_private_bytes(bytes(seed)))

    @property
    def verify_key(self) -> VerifyKey:
        return VerifyKey(self._k.public_key())

    def sign(self, context: str, message: bytes) -> bytes:
        return self._k.sign(_msg(context, message))

    def derive_secret(self, domain: bytes) -> bytes:
        """32 bytes = HMAC-SHA256(private key, domain): a secret bound to this key and ``domain`` (the DC-net
        round's epoch key is derived so, the same in every round of an epoch without any stored state)."""
        if not domain:
            raise ConfigError("a derived secret needs a non-empty domain")
        raw = self._k.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                    serialization.NoEncryption())
        return hmac.digest(raw, b"reshuffle/v1/signing-key-derive" + bytes(domain), "sha256")

    def to_pem(self) -> bytes:
        return self._k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    @classmethod
    def from_pem(cls, data: bytes) -> "SigningKey":
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"not a PEM private key: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError("PEM key is not an Ed25519 key")
        return cls(key)


@dataclass(frozen=True)
class Certificate:
    """CA's statement that ``subject`` (participant id, or SERVER_ID) owns ``key``."""

    subject: int
    role: int
    key: VerifyKey
    signature: bytes

    def body(self) -> bytes:
        return Writer().u32(self.subject).u8(self.role).fixed(self.key.to_bytes(), VK_BYTES).bytes()

    def encode(self) -> bytes:
        return Writer().raw(self.body()).fixed(self.signature, SIG_BYTES).bytes()

    @classmethod
    def decode(cls, data: bytes) -> "Certificate":
        p = Parser(data, "certificate")
        subject = p.u32("subject")
        role = p.u8("role")
        if role not in (ROLE_PARTICIPANT, ROLE_SERVER):
            raise DecodeError(f"certificate: unknown role {role}")
        key = VerifyKey.from_bytes(p.fixed(VK_BYTES, "key"))
        sig = p.fixed(SIG_BYTES, "signature")
        p.finish()
        return cls(subject, role, key, sig)


class CertificateAuthority:
    """Issues and verifies certificates; reads and writes its keys as files."""

    CA_KEY = "ca.key"
    CA_PUB = "ca.pub"

    def __init__(self, signing_key: SigningKey | None, verify_key: VerifyKey) -> None:
        self._sk = signing_key
        self.verify_key = verify_key

    @classmethod
    def generate(cls) -> "CertificateAuthority":
        sk = SigningKey.generate()
        return cls(sk, sk.verify_key)

    @classmethod
    def from_seed(cls, seed: bytes) -> "CertificateAuthority":
        sk = SigningKey.from_seed(seed)
        return cls(sk, sk.verify_key)

    @classmethod
    def verifier(cls, verify_key: VerifyKey) -> "CertificateAuthority":
        """A CA that can only verify (what participants and the PS hold)."""
        return cls(None, verify_key)

    def issue(self, subject: int, key: VerifyKey, role: int = ROLE_PARTICIPANT) -> Certificate:
        if self._sk is None:
            raise ConfigError("this CA holds only its public key and cannot issue")
        if not 0 <= subject <= 0xFFFFFFFF:
            raise ConfigError(f"subject id {subject} out of range")
        unsigned = Certificate(subject, role, key, bytes(SIG_BYTES))
        return Certificate(subject, role, key, self._sk.sign("cert", unsigned.body()))

    def verify(self, cert: Certificate, subject: int | None = None, role: int | None = None) -> None:
        """Raise InvalidSignature unless the CA signed ``cert`` (for ``subject``/``role``)."""
        if subject is not None and cert.subject != subject:
            raise InvalidSignature(f"certificate is for {cert.subject}, expected {subject}")
        if role is not None and cert.role != role:
            raise InvalidSignature(f"certificate role {cert.role}, expected {role}")
        self.verify_key.verify("cert", cert.body(), cert.signature)

    # --- files ---------------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> None:
        if self._sk is None:
            raise ConfigError("cannot save a verify-only CA's private key")
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        _write_private(d / self.CA_KEY, self._sk.to_pem())
        (d / self.CA_PUB).write_text(self.verify_key.to_bytes().hex() + "\n")

    @classmethod
    def load(cls, directory: str | os.PathLike, public_only: bool = False) -> "CertificateAuthority":
        d = Path(directory)
        pub = d / cls.CA_PUB
        if not pub.is_file():
            raise ConfigError(f"CA public key not found: {pub}")
        try:
            vk = VerifyKey.from_bytes(bytes.fromhex(pub.read_text().strip()))
        except (ValueError, DecodeError) as exc:
            raise ConfigError(f"{pub}: not a hex Ed25519 public key ({exc})") from None
        if public_only:
            return cls.verifier(vk)
        key = d / cls.CA_KEY
        if not key.is_file():
            raise ConfigError(f"CA private key not found: {key}")
        sk = SigningKey.from_pem(key.read_bytes())
        if sk.verify_key != vk:
            raise ConfigError(f"{key} does not match {pub}")
        return cls(sk, vk)

    def issue_files(self, directory: str | os.PathLike, subject: int, role: int = ROLE_PARTICIPANT) -> Path:
        """Generate a key for ``subject``, certify it, write ``<name>.key`` and ``<name>.cert``."""
        sk = SigningKey.generate()
        cert = self.issue(subject, sk.verify_key, role)
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        name = identity_name(subject, role)
        _write_private(d / f"{name}.key", sk.to_pem())
        (d / f"{name}.cert").write_bytes(cert.encode())
        return d / name


def identity_name(subject: int, role: int = ROLE_PARTICIPANT) -> str:
    return "server" if role == ROLE_SERVER else f"participant-{subject}"


def load_identity(
    directory: str | os.PathLike, subject: int, role: int = ROLE_PARTICIPANT
) -> tuple[SigningKey, Certificate]:
    """Read ``<name>.key`` and ``<name>.cert`` written by :meth:`CertificateAuthority.issue_files`."""
    d = Path(directory)
    name = identity_name(subject, role)
    kf, cf = d / f"{name}.key", d / f"{name}.cert"
    for f in (kf, cf):
        if not f.is_file():
            raise ConfigError(f"identity file not found: {f}")
    sk = SigningKey.from_pem(kf.read_bytes())
    try:
        cert = Certificate.decode(cf.read_bytes())
    except DecodeError as exc:
        raise ConfigError(f"{cf}: {exc}") from None
    if cert.key != sk.verify_key or cert.subject != subject or cert.role != role:
        raise ConfigError(f"{cf} does not certify the key in {kf} for subject {subject}")
    return sk, cert


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
