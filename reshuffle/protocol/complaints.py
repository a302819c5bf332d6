"""Verifiable shares (docs/protocol.md §6.4): Feldman checks, complaints, evidence.

A dealer commits to the polynomials of its 2M secrets in its signed
advertisement, with Ĉ under Fiat–Shamir weights. A recipient checks all shares
of one dealer at once against Ĉ (about t exponentiations) and complains about a
dealer whose shares fail (or never arrived). The PS checks Ĉ against the
commitments only when it must: on a complaint's answer (checked against Ĉ) or
when a reconstructed secret does not match its commitment. A complaint is
answered by the dealer publishing the disputed shares, signed; a bad answer
names the dealer, no answer excludes it, and both happen before the first
masked vector. At reveal time a share that fails the commitments is dropped;
its revealer is not named, because the weights are known to the dealer when it
deals, so a dealer can make errors that cancel in the batch and an honest member
may hold such a share.

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
from reshuffle.protocol.messages import ShareKind

KIND_BAD_COMMITMENT = "Ĉ inconsistent with its Feldman commitments"
KIND_BAD_ANSWER = "published a share that fails its own Feldman commitments"


def weights_context(T: int) -> bytes:
    return label("feldman/round", T)


def rho(advert: msg.Advertise) -> list[int]:
    return feldman.weights(advert.commitments, advert.sender, weights_context(advert.T))


def check_advert(advert: msg.Advertise) -> None:
    """Ĉ must be the weighted combination of the commitments (S·t exponentiations); InvalidShare if not."""
    want = feldman.combine(advert.commitments, rho(advert))
    if any(a != b for a, b in zip(want, advert.combined)) or len(want) != len(advert.combined):
        raise InvalidShare(f"participant {advert.sender}: {KIND_BAD_COMMITMENT}")


def check_shares(advert: msg.Advertise, x: int, ys) -> None:
    """All 2M shares at point x of one dealer, in one batch against its Ĉ; InvalidShare if not."""
    feldman.verify_batch(x, list(ys), advert.combined, rho(advert))


def secret_index(m: int, kind: ShareKind) -> int:
    """Row of a secret in the commitments: b_{i,m} at 2(m−1), x_{i,m} at 2(m−1) + 1."""
    return 2 * (m - 1) + (1 if kind is ShareKind.DH_SECRET else 0)


@dataclass(frozen=True)
class ShareEvidence:
    """A dealer's own signed statements that contradict its signed commitments."""

    kind: str
    pid: int
    advert: bytes  # the dealer's signed ADVERTISE
    message: bytes = b""  # the dealer's signed COMPLAINT_ANSWER
    subject: int = 0  # the complainer whose shares the answer fails

    def __str__(self) -> str:
        return self.kind


def verify_share_evidence(ev: ShareEvidence, keys: dict[int, VerifyKey], params) -> None:
    """Raises (Refused, InvalidSignature, DecodeError) unless the evidence holds."""
    ctx = msg.Context(params.group_obj(), params)
    adv = msg.decode(ev.advert, ctx)
    if not isinstance(adv, msg.Advertise):
        raise Refused("evidence: not an advertisement")
    msg.verify(adv, keys[adv.sender])
    if ev.kind == KIND_BAD_COMMITMENT:
        if adv.sender != ev.pid:
            raise Refused("evidence: advertisement of another participant")
        try:
            check_advert(adv)
        except InvalidShare:
            return
        raise Refused("evidence: Ĉ matches the commitments")
    m = msg.decode(ev.message, ctx)
    msg.verify(m, keys[ev.pid])
    if m.sender != ev.pid:
        raise Refused("evidence: message of another sender")
    if ev.kind == KIND_BAD_ANSWER:
        if adv.sender != ev.pid or not isinstance(m, msg.ComplaintAnswer):
            raise Refused("evidence: not the dealer's advertisement and answer")
        ys = dict(m.shares).get(ev.subject)
        if ys is None:
            raise Refused("evidence: the answer has no shares for that complainer")
        try:
            check_shares(adv, ev.subject + 1, ys)
        except InvalidShare:
            return
        raise Refused("evidence: the published shares pass the check")
    raise Refused(f"unknown evidence kind {ev.kind!r}")
