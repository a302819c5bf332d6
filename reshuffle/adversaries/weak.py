"""Deliberately weakened participants: the checks the explorer and the attack tests must catch.

Each is the honest :class:`~reshuffle.protocol.participant.Participant` with one fix of
the protocol undone, as the code stood before it. Run against them, the explorer of PS
schedules and the reorder attacks must find the break; run against the honest
participant they must find nothing. This is how the tools show they can see an attack
(as the security games' sanity adversaries do).
"""

from __future__ import annotations

from dataclasses import replace

from reshuffle.protocol import messages as msg
from reshuffle.protocol.dcnet import DCParticipant
from reshuffle.protocol.grouped import GroupedParticipant
from reshuffle.protocol.messages import MsgType
from reshuffle.protocol.participant import Opened, Participant
from reshuffle.protocol.phases import PARTICIPANT_TABLE, PPhase, handler_name
from reshuffle.protocol.transcript import Transcript


class ReopensAfterUpload(Participant):
    """Before the fix: a member that sent its model list still opens the last iteration (its picks, hence
    its slot), a restart resumes at r + 1 whatever was sent, and a restarted slot phase uploads again under
    the same keys."""

    TABLE = {**PARTICIPANT_TABLE,
             PPhase.UPLOADED: {**PARTICIPANT_TABLE[PPhase.UPLOADED],
                               MsgType.OPEN_REQUEST: handler_name(MsgType.OPEN_REQUEST)}}

    def _check_fresh(self, s, m: int) -> None:
        """It masks a second plaintext under keys it used (the fix refuses)."""

    def _on_open_request(self, s, m: msg.OpenRequest):
        p, inv, r = s.session.params, s.inv, m.m
        if r != inv.last_certified or not s.slots.start <= r <= p.R_max or r not in inv.revealed:
            return super()._on_open_request(s, m)
        h = Transcript.at(s.h).absorb_open(r, m.reason)
        X = {j: s.peers.adverts[j].mask_keys[r - 1] for j in inv.mask_sets[r] if j != self.pid}
        reveal = msg.OpenReveal(self.T, r, self.pid, s.session.keys.mask[r - 1].secret, tuple(sorted(X.items())))
        return replace(s, phase=PPhase.AWAIT_RESTART, h=h, opened=Opened(r, r + 1)), [reveal]


class AnswersEveryComplaint(Participant):
    """Before the fix: a dealer answers any complaints the PS relays, as often as it is asked."""

    TABLE = {**PARTICIPANT_TABLE, PPhase.ANSWERED: {**PARTICIPANT_TABLE[PPhase.ANSWERED],
                                                    MsgType.COMPLAINTS: handler_name(MsgType.COMPLAINTS)}}

    def _on_complaints(self, s, m: msg.Complaints):
        dealt = s.dealing.dealt
        answer = msg.ComplaintAnswer(self.T, 0, self.pid, tuple((j, tuple(dealt[j])) for j in m.complainers
                                                               if j in dealt and j != self.pid))
        return replace(s, phase=PPhase.ANSWERED), [answer]


class TrustsAnnouncedParameters(Participant):
    """Before the fix: a participant takes the c, t, decoys and R_max the PS announces, and caps the
    complaints it answers with the announced c."""

    def _check_floors(self, p) -> None:
        """It checks nothing beyond what validation demands (0 <= c < N, (N + c)/2 < t)."""

    def _colluders(self, p) -> int:
        return p.c


class OpensWithoutView(Participant):
    """Before the fix: the opening of the decoy rows signed the keys only, not the h_M they were derived
    under (signed here as zeros), so a checker took h_M from the evidence, which the PS writes."""

    def _on_blame_request(self, s, m: msg.BlameRequest):
        s, (op,) = super()._on_blame_request(s, m)
        op = replace(op, h=bytes(len(op.h)))
        return replace(s, opening=op), [op]


class KeepsPseudonymOnlyWhenDone(Participant):
    """Before the fix: a member keeps the pseudonym issued in its round only once the round is done (as a
    node that writes it to its state folder after a delivered round). The PS records the issuance at the
    certificate, so a round that ends in between leaves it recorded and held by nobody."""

    @property
    def pseudonym(self):
        s = self.state
        done = s.phase in (PPhase.DONE, PPhase.OPENED, PPhase.DONE_BLAME)
        return s.nym if s.nym is not None and (s.nym_held or done) else None


class DCKeepsPseudonymOnlyAfterUpload(DCParticipant):
    """The DC-net member before the fix: it keeps the pseudonym issued in its round only once it sent its
    upload, while the PS records the issuance at its first count vector."""

    @property
    def pseudonym(self):
        return self.nym if self.view.uploaded else None


class TakesUngroupedRounds(GroupedParticipant):
    """A member without the group floor's default (an opted-in node): it takes part in a round bound to no
    group while it holds none, so a PS that never forms groups names it by its presence across rounds."""

    def handle(self, data: bytes) -> list[bytes]:
        if not self._started and self.client.phase.name == "AWAIT_OPEN" and self._membership is None \
                and msg.peek_type(data) is MsgType.ROUND_START:
            m = msg.decode(data, msg.Context())
            if not m.params.assignment:
                self._started = True
                return self.inner.handle(data)
        return super().handle(data)


__all__ = ["AnswersEveryComplaint", "DCKeepsPseudonymOnlyAfterUpload", "KeepsPseudonymOnlyWhenDone", "OpensWithoutView",
           "ReopensAfterUpload", "TakesUngroupedRounds", "TrustsAnnouncedParameters"]
