"""Ed25519 with contexts; the CA, its files and the `reshuffle ca` command."""

import pytest

from reshuffle.cli import main
from reshuffle.crypto.signatures import (
    ROLE_SERVER,
    Certificate,
    CertificateAuthority,
    SigningKey,
    VerifyKey,
    load_identity,
)
from reshuffle.errors import ConfigError, DecodeError, InvalidSignature


def test_sign_verify_with_context():
    sk = SigningKey.generate()
    sig = sk.sign("adv", b"hello")
    sk.verify_key.verify("adv", b"hello", sig)
    with pytest.raises(InvalidSignature):
        sk.verify_key.verify("other", b"hello", sig)
    with pytest.raises(InvalidSignature):
        sk.verify_key.verify("adv", b"hellO", sig)
    with pytest.raises(InvalidSignature, match="64 bytes"):
        sk.verify_key.verify("adv", b"hello", sig[:-1])
    with pytest.raises(DecodeError):
        VerifyKey.from_bytes(b"\x00" * 31)


# The identity point (y = 1) and a point of order 2 (y = −1), as Ed25519 public keys.
SMALL_ORDER_KEYS = [bytes([1]) + bytes(31), bytes.fromhex("ec" + "ff" * 30 + "7f")]


@pytest.mark.parametrize("key", SMALL_ORDER_KEYS)
def test_small_order_key_signs_nothing(key):
    # The attack: register a key A of small order; R = identity, S = 0 then satisfies OpenSSL's
    # verification equation 0 = R + H(R, A, M)·A for every message (identity) or half of them
    # (order 2), so "signed" statements of this party could be forged by anyone.
    from cryptography.exceptions import InvalidSignature as OpenSSLInvalid
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from reshuffle.crypto.signatures import _msg

    universal = bytes([1]) + bytes(31) + bytes(32)
    forged = 0
    for i in range(32):
        message = b"view %d" % i
        try:
            Ed25519PublicKey.from_public_bytes(key).verify(universal, _msg("consent", message))
        except OpenSSLInvalid:
            continue
        forged += 1
        with pytest.raises(InvalidSignature):
            VerifyKey.from_bytes(key).verify("consent", message, universal)
    assert forged >= 8  # the forgery is real under OpenSSL's check


def test_non_canonical_s_is_refused():
    # S + L is the same scalar: accepting it would make every signature malleable.
    L = 2**252 + 27742317777372353535851937790883648493
    sk = SigningKey.generate()
    sig = sk.sign("adv", b"hello")
    S = int.from_bytes(sig[32:], "little")
    malleated = sig[:32] + (S + L).to_bytes(32, "little")
    with pytest.raises(InvalidSignature):
        sk.verify_key.verify("adv", b"hello", malleated)


def test_ca_issue_and_verify():
    ca = CertificateAuthority.generate()
    sk = SigningKey.generate()
    cert = ca.issue(4, sk.verify_key)
    ca.verify(cert, subject=4)
    assert Certificate.decode(cert.encode()) == cert
    with pytest.raises(InvalidSignature, match="expected 5"):
        ca.verify(cert, subject=5)
    forged = Certificate(5, cert.role, cert.key, cert.signature)
    with pytest.raises(InvalidSignature):
        ca.verify(forged)
    with pytest.raises(InvalidSignature):
        CertificateAuthority.generate().verify(cert)
    with pytest.raises(ConfigError):
        CertificateAuthority.verifier(ca.verify_key).issue(1, sk.verify_key)


def test_certificate_decode_rejects_garbage():
    cert = CertificateAuthority.generate().issue(1, SigningKey.generate().verify_key)
    enc = cert.encode()
    with pytest.raises(DecodeError):
        Certificate.decode(enc[:-1])
    with pytest.raises(DecodeError):
        Certificate.decode(enc + b"\x00")
    with pytest.raises(DecodeError, match="role"):
        Certificate.decode(enc[:4] + b"\x07" + enc[5:])


def test_files_roundtrip(tmp_path):
    ca = CertificateAuthority.generate()
    ca.save(tmp_path)
    loaded = CertificateAuthority.load(tmp_path)
    assert loaded.verify_key == ca.verify_key
    ca.issue_files(tmp_path, 3)
    sk, cert = load_identity(tmp_path, 3)
    loaded.verify(cert, subject=3)
    assert (tmp_path / "ca.key").stat().st_mode & 0o077 == 0
    with pytest.raises(ConfigError, match="not found"):
        load_identity(tmp_path, 4)
    with pytest.raises(ConfigError, match="not found"):
        CertificateAuthority.load(tmp_path / "nope")


def test_cli_ca(tmp_path, capsys):
    assert main(["ca", "init", "--dir", str(tmp_path)]) == 0
    assert main(["ca", "init", "--dir", str(tmp_path)]) == 2  # refuses to overwrite
    assert "exists" in capsys.readouterr().err
    assert main(["ca", "issue", "--dir", str(tmp_path), "--ids", "0-2,5", "--server"]) == 0
    assert main(["ca", "verify", "--dir", str(tmp_path), "--ids", "0-2,5"]) == 0
    _, cert = load_identity(tmp_path, 0xFFFFFFFF, ROLE_SERVER)
    CertificateAuthority.load(tmp_path).verify(cert, role=ROLE_SERVER)
    with pytest.raises(SystemExit):
        main(["ca", "issue", "--dir", str(tmp_path), "--ids", "3-1"])
    assert "invalid id list" in capsys.readouterr().err
