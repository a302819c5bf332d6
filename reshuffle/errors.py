"""Exception hierarchy.

Two families, kept apart as in tlslite-ng: errors about *received data*
(:class:`ProtocolError` and its subclasses), which a server catches per sender,
excludes the sender and carries on; and errors about *how the API is used*
(:class:`ConfigError`), which are raised early and never caught by the core.
"""

from __future__ import annotations


class ReShuffleError(Exception):
    """Base of every error raised by Re-Shuffle."""


class ConfigError(ReShuffleError, ValueError):
    """A parameter or argument is invalid on its own or against another one."""


class ProtocolError(ReShuffleError):
    """Received data is malformed, out of place or fails a check."""


class DecodeError(ProtocolError):
    """Bytes do not parse: truncated, extended, bad length or bad tag."""


class InvalidElement(ProtocolError):
    """A group element is not a canonical encoding of a non-identity element."""


class InvalidScalar(ProtocolError):
    """A scalar encoding is not canonical (>= group order) or has a bad length."""


class InvalidSignature(ProtocolError):
    """A signature or certificate does not verify."""


class InvalidShare(ProtocolError):
    """A Shamir share is malformed, duplicated or has an invalid index."""


class InvalidProof(ProtocolError):
    """A zero-knowledge proof (DLEQ / VOPRF) does not verify for the claimed statement."""


class InvalidToken(ProtocolError):
    """A slot token does not match the token issued for that slot."""


class DecryptionError(ProtocolError):
    """An AEAD ciphertext failed authentication."""


class UnexpectedMessage(ProtocolError):
    """A message arrived in the wrong phase or round, twice, or from an unknown sender."""


class AlreadyAnswered(UnexpectedMessage):
    """A single-use request was made a second time (OT request, unmask request)."""


class Refused(ProtocolError):
    """An honest party refuses a request that would break its security (e.g. both share kinds)."""


class BelowThreshold(ReShuffleError):
    """Fewer than t shares or participants remain: the secret cannot be recovered."""


class EncodingError(ReShuffleError, ValueError):
    """A model vector cannot be encoded (non-finite values, wrong dtype or shape)."""
