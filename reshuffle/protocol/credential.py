"""One row per participant: the row credential and the row tag (docs/protocol.md §7.2).

Each participant obtains exactly one anonymous credential per round: an RFC 9497
VOPRF evaluation under the PS's key γ (C = g^γ is in RoundStart, hence in h) of
``cred_input(T, r)`` for a fresh random 16-byte ``r``. γ is independent of the
OT key β, so the k OT answers give no extra credentials, and one C for everyone
means a credential links no row. A row of the model list is::

    Enc(W) ‖ pad ‖ τ (16 B) ‖ r (16 B) ‖ y (64 B) ‖ ρ (16 B) ‖ z (64 B) ‖ K (16 B) ‖ tag (16 B)

padded with zero words so that its size is a multiple of 16 bytes (4 words of
32 bits). ``tag = HMAC-SHA256(K, label(T, position) ‖ every other byte)[:16]``
under the fresh key K inside the row: a PRF, so adding anything to any field, K
included, breaks the tag. The PS delivers a row only if token, credential and
tag pass, and drops every row whose ``r`` appears more than once: a coalition
of c participants gets at most c rows (one-more Diffie–Hellman). ρ ‖ z is the
row's epoch pseudonym (:mod:`~reshuffle.protocol.pseudonym`, §7.3): the PS also
requires z = F_π(epoch, ρ) and drops every row whose ρ appears more than once.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from reshuffle.crypto import voprf
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Group
from reshuffle.crypto.ot import TOKEN_BYTES
from reshuffle.protocol import pseudonym

R_BYTES = 16
Y_BYTES = voprf.NH  # SHA-512 output of Finalize
K_BYTES = 16
TAG_BYTES = 16
NYM_BYTES = pseudonym.ROW_BYTES  # ρ ‖ z
TRAILER_BYTES = TOKEN_BYTES + R_BYTES + Y_BYTES + NYM_BYTES + K_BYTES + TAG_BYTES
ROW_ALIGN = 16  # bytes: 4 words of 32 bits


def suite(group: Group) -> voprf.Suite:
    """The VOPRF ciphersuite of the credential (ristretto255-SHA512 on the default group)."""
    return voprf.Suite(group, voprf.MODE_VOPRF)


def cred_input(T: int, r: bytes) -> bytes:
    """The credential's VOPRF input for round T and nonce r."""
    return label("row/credential", T) + bytes(r)


def pad_bytes(d_bytes: int) -> int:
    """Zero bytes after Enc(W) so that the whole row is a multiple of ROW_ALIGN."""
    return -(d_bytes + TRAILER_BYTES) % ROW_ALIGN


def row_bytes(d_bytes: int) -> int:
    return d_bytes + pad_bytes(d_bytes) + TRAILER_BYTES


def _tag(K: bytes, T: int, position: int, body: bytes) -> bytes:
    return hmac.new(K, label("row/tag", T, position) + body, hashlib.sha256).digest()[:TAG_BYTES]


@dataclass(frozen=True)
class Credential:
    """A participant's unblinded credential (r, y) for one round."""

    r: bytes = field(repr=False)
    y: bytes = field(repr=False)


def build_row(payload: np.ndarray, token: bytes, cred: Credential, nym: pseudonym.Pseudonym, K: bytes, T: int,
              position: int) -> bytes:
    """The bytes of one row: payload words, padding, token, credential, pseudonym, K and tag."""
    body = (
        payload.tobytes() + bytes(pad_bytes(payload.nbytes)) + bytes(token) + cred.r + cred.y + nym.row_bytes()
        + bytes(K)
    )
    return body + _tag(K, T, position, body)


@dataclass(frozen=True)
class RowCheck:
    """Why a row was not delivered: one of 'token', 'credential', 'tag', 'pseudonym', 'duplicate credential',
    'duplicate pseudonym'."""

    position: int
    reason: str


def _nym_ok(nyms: pseudonym.EpochIssuer, rho: bytes, z: bytes) -> bool:
    try:
        nyms.verify(rho, z)
    except pseudonym.InvalidPseudonym:
        return False
    return True


def check_rows(
    rows: np.ndarray, d_bytes: int, tokens: list[bytes], T: int, sk: int, group: Group,
    nyms: pseudonym.EpochIssuer,
) -> tuple[list[int], list[RowCheck], dict[int, bytes]]:
    """Positions that pass token, credential, tag and pseudonym, the failures, and each passing row's ρ.

    ``rows`` is the (positions, row words) array of the unmasked model list;
    ``tokens[p]`` is the token of the reservation slot position p stands for;
    ``nyms`` holds the epoch key the pseudonyms are checked under.
    """
    s = suite(group)
    off = d_bytes + pad_bytes(d_bytes)
    at_nym = off + TOKEN_BYTES + R_BYTES + Y_BYTES
    passed: dict[int, tuple[bytes, bytes]] = {}
    failed: list[RowCheck] = []
    for pos in range(rows.shape[0]):
        raw = rows[pos].tobytes()
        token = raw[off : off + TOKEN_BYTES]
        r = raw[off + TOKEN_BYTES : off + TOKEN_BYTES + R_BYTES]
        y = raw[off + TOKEN_BYTES + R_BYTES : at_nym]
        rho = raw[at_nym : at_nym + pseudonym.NONCE_BYTES]
        z = raw[at_nym + pseudonym.NONCE_BYTES : at_nym + NYM_BYTES]
        K = raw[-TAG_BYTES - K_BYTES : -TAG_BYTES]
        if not hmac.compare_digest(token, tokens[pos]):
            failed.append(RowCheck(pos, "token"))
        elif not hmac.compare_digest(y, voprf.evaluate(s, sk, cred_input(T, r))):
            failed.append(RowCheck(pos, "credential"))
        elif not hmac.compare_digest(raw[-TAG_BYTES:], _tag(K, T, pos, raw[:-TAG_BYTES])):
            failed.append(RowCheck(pos, "tag"))
        elif not _nym_ok(nyms, rho, z):
            failed.append(RowCheck(pos, "pseudonym"))
        else:
            passed[pos] = (r, rho)
    # One row per credential and one per pseudonym: every row sharing either is dropped.
    creds = Counter(r for r, _ in passed.values())
    names = Counter(rho for _, rho in passed.values())
    for pos, (r, rho) in list(passed.items()):
        if creds[r] > 1:
            del passed[pos]
            failed.append(RowCheck(pos, "duplicate credential"))
        elif names[rho] > 1:
            del passed[pos]
            failed.append(RowCheck(pos, "duplicate pseudonym"))
    return sorted(passed), sorted(failed, key=lambda c: c.position), {pos: rho for pos, (_, rho) in passed.items()}
