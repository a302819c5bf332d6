"""Verifiable shares (docs/protocol.md §6.4): Feldman checks, complaints, evidence.

A dealer commits to the polynomials of its 2M secrets in its signed
advertisement. Its signed share bundle carries Ĉ under Fiat–Shamir weights that
hash the digest of the bundle's own ciphertexts: the shares are fixed before the
weights exist, so errors cannot be chosen to cancel. The PS relays every
dealer's (digest, Ĉ) to all, in the transcript. A recipient checks all shares of
one dealer at once against Ĉ (about t exponentiations) and complains about a
dealer whose shares fail (or never arrived). The PS checks Ĉ against the
commitments only when a reconstructed secret does not match its commitment. A
complaint is answered by the dealer publishing the disputed shares, signed; a
bad answer names the dealer, no answer excludes it, and both happen before the
first masked vector. At reveal time a share that fails the commitments is
dropped (and its revealer not named: it cannot show what the dealer sent it).

Every culprit comes with a :class:`ShareEvidence` that a third party checks with
:func:`verify_share_evidence` from the roster's keys alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from reshuffle.crypto import feldman
from reshuffle.crypto.domain import label
from reshuffle.crypto.signatures import VerifyKey
from reshuffle.errors import InvalidShare, Refused
from reshuffle.protocol import messages as msg
from reshuffle.protocol.evidence import advert_of, one_round, signed_by
from reshuffle.protocol.messages import ShareKind

KIND_BAD_COMMITMENT = "Ĉ inconsistent with its Feldman commitments"
KIND_BAD_ANSWER = "published a share that fails its own Feldman commitments"


def weights_context(T: int, digest: bytes) -> bytes:
    """Context of a dealer's weights: the round and the digest of its own share bundle."""
    return label("feldman/round", T) + bytes(digest)


@dataclass(frozen=True)
class Dealer:
    """What everyone knows of a dealer's sharing: its signed advertisement, its bundle's digest and Ĉ."""

    advert: msg.Advertise
    digest: bytes
    combined: tuple

    def rho(self) -> list[int]:
        return feldman.weights(self.advert.commitments, self.advert.sender, weights_context(self.advert.T, self.digest),
                               self.advert.commitments_encoding())


def combined_for(advert: msg.Advertise, digest: bytes) -> tuple:
    """Ĉ of a dealer's commitments under the weights of its bundle (the dealer's side)."""
    return tuple(feldman.combine(advert.commitments, Dealer(advert, digest, ()).rho()))


def own_combined(advert: msg.Advertise, digest: bytes, coefficients) -> tuple:
    """:func:`combined_for` computed by the dealer from its polynomials' coefficients (t exponentiations)."""
    rho = Dealer(advert, digest, ()).rho()
    return tuple(feldman.combine_from_coefficients(advert.enc_key.group, coefficients, rho))


def check_combined(d: Dealer) -> None:
    """Ĉ must be the weighted combination of the commitments (S·t exponentiations); InvalidShare if not."""
    want = combined_for(d.advert, d.digest)
    if len(want) != len(d.combined) or any(a != b for a, b in zip(want, d.combined)):
        raise InvalidShare(f"participant {d.advert.sender}: {KIND_BAD_COMMITMENT}")


def check_shares(d: Dealer, x: int, ys) -> None:
    """All 2M shares at point x of one dealer, in one batch against its Ĉ; InvalidShare if not."""
    feldman.verify_batch(x, list(ys), d.combined, d.rho())


def secret_index(m: int, kind: ShareKind) -> int:
    """Row of a secret in the commitments: b_{i,m} at 2(m−1), x_{i,m} at 2(m−1) + 1."""
    return 2 * (m - 1) + (1 if kind is ShareKind.DH_SECRET else 0)


@dataclass(frozen=True)
class ShareEvidence:
    """A dealer's own signed statements that contradict its signed commitments."""

    kind: str
    pid: int
    advert: bytes  # the dealer's signed ADVERTISE
    bundle: bytes  # the dealer's signed SHARE_BUNDLE (its digest fixes the weights; it carries Ĉ)
    message: bytes = b""  # the dealer's signed COMPLAINT_ANSWER
    subject: int = 0  # the complainer whose shares the answer fails

    def __str__(self) -> str:
        return self.kind


def verify_share_evidence(ev: ShareEvidence, keys: dict[int, VerifyKey], params) -> None:
    """Raises (Refused, InvalidSignature, DecodeError) unless the evidence holds.

    Everything it reads is the dealer's, of one round: its advertisement (under ``params``), its bundle
    (whose digest fixes the weights, with Ĉ) and, for a bad answer, its answer (the complainer's shares
    are the answer's own entry for ``subject``)."""
    ctx = msg.Context(params.group_obj(), params)
    adv = advert_of(ev.advert, ev.pid, keys, params, ctx)
    bundle = signed_by(ev.bundle, msg.ShareBundle, ev.pid, keys, ctx, "the share bundle")
    one_round(adv, bundle)
    dealer = Dealer(adv, bundle.digest(), bundle.combined)
    if ev.kind == KIND_BAD_COMMITMENT:
        try:
            check_combined(dealer)
        except InvalidShare:
            return
        raise Refused("evidence: Ĉ matches the commitments")
    if ev.kind == KIND_BAD_ANSWER:
        m = signed_by(ev.message, msg.ComplaintAnswer, ev.pid, keys, ctx, "the answer")
        one_round(adv, m)
        ys = dict(m.shares).get(ev.subject)
        if ys is None:
            raise Refused("evidence: the answer has no shares for that complainer")
        try:
            check_shares(dealer, ev.subject + 1, ys)
        except InvalidShare:
            return
        raise Refused("evidence: the published shares pass the check")
    raise Refused(f"unknown evidence kind {ev.kind!r}")
