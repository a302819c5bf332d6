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


def _tag(K: bytes, T: int, position: int, *body) -> bytes:
    """HMAC-SHA256(K, label ‖ body)[:16]; ``body`` may come in pieces (buffers are fed without a copy)."""
    h = hmac.new(K, label("row/tag", T, position), hashlib.sha256)
    for piece in body:
        h.update(piece)
    return h.digest()[:TAG_BYTES]


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


class RowWriter:
    """:func:`build_row`'s bytes written one chunk at a time, for a fused pass (:func:`.prg.mask_rows`).

    ``write(first_word, part)`` fills words ``[first_word, first_word + part.size)`` of the row: the model's
    encoding (``codec.encode_into`` on that slice), then the padding and trailer; the tag is fed as the
    chunks pass, in order, so the row is never built apart. The words equal ``build_row(codec.encode(model)
    .words, ...)``; ``clipped`` counts the clipped coordinates, ``tag`` is the row's tag once written.
    """

    def __init__(self, model: np.ndarray, codec, token: bytes, cred: Credential, nym: pseudonym.Pseudonym,
                 K: bytes, T: int, position: int) -> None:
        self.model, self.codec = model, codec
        item = codec.dtype.itemsize
        self.d_bytes = model.size * item
        body = bytes(pad_bytes(self.d_bytes)) + bytes(token) + cred.r + cred.y + nym.row_bytes() + bytes(K)
        self._tail = np.frombuffer(body, dtype=np.uint8)  # the row's bytes after Enc(W), tag excluded
        self._mac = hmac.new(K, label("row/tag", T, position), hashlib.sha256)
        self.row_bytes = self.d_bytes + len(body) + TAG_BYTES
        self._item = item
        self._at = 0  # next byte expected: chunks come in order
        self.clipped = 0
        self.tag: bytes | None = None

    def write(self, first_word: int, part: np.ndarray) -> None:
        a = first_word * self._item
        b = a + part.nbytes
        if a != self._at or b > self.row_bytes:
            raise ValueError(f"row bytes [{a}, {b}) out of order (next is {self._at} of {self.row_bytes})")
        raw = part.view(np.uint8)
        d_end = min(b, self.d_bytes)
        if a < d_end:
            n = (d_end - a) // self._item
            self.clipped += self.codec.encode_into(self.model[first_word : first_word + n], part[:n])
            self._mac.update(raw[: d_end - a])
        tag_at = self.row_bytes - TAG_BYTES
        lo, hi = max(a, self.d_bytes), min(b, tag_at)
        if lo < hi:
            raw[lo - a : hi - a] = self._tail[lo - self.d_bytes : hi - self.d_bytes]
            self._mac.update(raw[lo - a : hi - a])
        if b > tag_at:
            if self.tag is None:
                self.tag = self._mac.digest()[:TAG_BYTES]
            lo = max(a, tag_at)
            raw[lo - a :] = np.frombuffer(self.tag, dtype=np.uint8)[lo - tag_at : b - tag_at]
        self._at = b


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
        # Fields are sliced out; the tag is fed from the row in place (no copy of the row).
        raw = memoryview(np.ascontiguousarray(rows[pos])).cast("B")
        token = bytes(raw[off : off + TOKEN_BYTES])
        r = bytes(raw[off + TOKEN_BYTES : off + TOKEN_BYTES + R_BYTES])
        y = bytes(raw[off + TOKEN_BYTES + R_BYTES : at_nym])
        rho = bytes(raw[at_nym : at_nym + pseudonym.NONCE_BYTES])
        z = bytes(raw[at_nym + pseudonym.NONCE_BYTES : at_nym + NYM_BYTES])
        K = bytes(raw[-TAG_BYTES - K_BYTES : -TAG_BYTES])
        if not hmac.compare_digest(token, tokens[pos]):
            failed.append(RowCheck(pos, "token"))
        elif not hmac.compare_digest(y, voprf.evaluate(s, sk, cred_input(T, r))):
            failed.append(RowCheck(pos, "credential"))
        elif not hmac.compare_digest(bytes(raw[-TAG_BYTES:]), _tag(K, T, pos, raw[:-TAG_BYTES])):
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
