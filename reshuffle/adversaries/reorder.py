"""PS attacks that compose legal steps in an unusual order or relay what they should not.

Each is judged, as every PS behaviour, by the links the curious PS can compute at
the end (:class:`~reshuffle.adversaries.ps.LinkingPS`): it holds only if the PS
links no honest participant to its model.

- ``open-after-upload``: let the reservation end early, collect every member's masked
  model list, ask for an opening of the last iteration (its picks are the slots of that
  upload), restart the slot phase and finish a second upload under the same self-mask
  seeds. The second reveal strips the first upload's self masks; the opening says whose
  row is whose.
- ``object-at-upload``: the same with the shipped PS and one colluding participant that
  sends a false objection instead of its model list.
- ``complain-for-shares``: complaints in everyone's name, to have every dealer publish
  every share of its secrets.
"""

from __future__ import annotations

from dataclasses import replace

from reshuffle.adversaries.base import register_adversary
from reshuffle.adversaries.ps import CuriousServer, LinkingPS
from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.protocol import messages as msg
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.phases import PPhase


@register_adversary("open-after-upload")
class OpenAfterUpload(LinkingPS):
    """Collects the upload, then opens the last reservation iteration and restarts the slot phase."""

    stopped_by = "one key, one plaintext: no opening, objection or restart after the upload"
    dc_absent = ("the reservation ends before the upload request, and a member that uploaded answers nothing but "
                 "a DC_BLAME of the decoys' rows (row dcnet-false-decoy-claim)")

    class server_class(CuriousServer):
        _reordered = False

        def _close_masked(self, st):
            if st.inv == self.params.upload_m and not self._reordered and not st.objections:
                self._reordered = True
                r = self.slots.last
                reason = f"counts of iteration {r} fail a check"
                nxt, _ = self._open(st, r, reason)
                # It asks every member of U_r, the ones that uploaded included, and resumes at r + 1.
                ask = self._live(self.online[r])
                nxt.collector.members, nxt.resume = ask, r + 1
                return nxt, self._broadcast(ask, msg.OpenRequest(self.T, r, SERVER_ID, reason))
            return super()._close_masked(st)


class _FalseObjector(Participant):
    """Objects to the counts that end the reservation instead of uploading, though its pick settled."""

    def _on_mask_request(self, s, m):
        nxt, out = super()._on_mask_request(s, m)
        slot = nxt.slots.reservation.slot
        if m.m != self.params.upload_m or slot is None:
            return nxt, out
        return replace(nxt, phase=PPhase.OBJECTED), [msg.Objection(self.T, m.m, self.pid, slot, nxt.inv.h[m.m])]


@register_adversary("object-at-upload")
class ObjectAtUpload(LinkingPS):
    """The shipped PS with one colluder that objects falsely at the upload (an opening follows)."""

    stopped_by = "after the reservation ended, an objection ends the round"
    dc_absent = "no objections: a member refuses counts that fail its checks (rows dcnet-count-abuse, dcnet-silent)"
    colluders = (1,)
    colluder_class = _FalseObjector


@register_adversary("complain-for-shares")
class ComplainForShares(LinkingPS):
    """Sends every dealer complaints in the names of all the others, to have every share published.

    Complaints are the PS's to relay: it can also induce honest ones, by withholding a dealer's
    ciphertexts from its recipients. Each answer publishes the complainers' shares of all 2M
    secrets of the dealer; t of them give the PS every b and x of that dealer, hence its upload.
    """

    stopped_by = "a dealer answers complaints once, for at most t − 1 − c complainers (§6.4)"
    dc_absent = "no shares and no complaints: colluders hand the PS their keys instead (row dcnet-colluders)"

    class server_class(CuriousServer):
        def _on_ot_request(self, st, sender, m):
            super()._on_ot_request(st, sender, m)
            for dealer in self.online[0]:
                if dealer != sender:
                    st.complaints.setdefault(dealer, set()).add(sender)
