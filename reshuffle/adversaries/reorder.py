"""PS attacks that compose legal steps in an unusual order, and the curious PS that scores them.

Every PS behaviour here is judged by :func:`~reshuffle.adversaries.linker.link` on
what the PS holds at the end (:class:`CuriousServer`): the attack holds off only if
the PS links no honest participant to its model.

- ``open-after-upload``: let the reservation end early, collect every member's masked
  model list, ask for an opening of the last iteration (its picks are the slots of that
  upload), restart the slot phase and finish a second upload under the same self-mask
  seeds. The second reveal strips the first upload's self masks; the opening says whose
  row is whose.
- ``object-at-upload``: the same with the shipped PS and one colluding participant that
  sends a false objection instead of its model list.
"""

from __future__ import annotations

from dataclasses import replace

from reshuffle.adversaries.base import PSBehaviour, Verdict, register_adversary
from reshuffle.adversaries.linker import PSView, correct_links, link
from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.protocol import messages as msg
from reshuffle.protocol.messages import ShareKind
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.phases import PPhase
from reshuffle.protocol.server import Server


class CuriousServer(Server):
    """The shipped PS, filing everything it receives and draws into a :class:`PSView`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.view = PSView(self.params, self.T)

    def receive(self, sender: int, data: bytes) -> None:
        self.view.absorb(sender, data)
        super().receive(sender, data)

    def _new_slot_phase(self):
        out = super()._new_slot_phase()
        self.view.tables.append(list(self._ot.tokens))
        return out

    def _prepare_invocation(self, m, mask_set, counts, excluded=()):
        live = super()._prepare_invocation(m, mask_set, counts, excluded)
        if m <= self.params.R_max:
            self.view.table_of[self._h] = len(self.view.tables) - 1
        for i in self._mask_set:
            self.view.mask_sets[(i, m, self._h)] = tuple(self._mask_set)
        return live


def colluder_secrets(p: Participant) -> dict:
    """Everything a colluding participant hands the PS: its own secrets and the shares it holds."""
    keys = p.state.session.keys
    held = {(owner, idx // 2 + 1, ShareKind.DH_SECRET if idx % 2 else ShareKind.SELF_SEED): y
            for owner, ys in p.state.held.items() for idx, y in enumerate(ys)}
    return {**{(m + 1, ShareKind.SELF_SEED): b for m, b in enumerate(keys.seeds)},
            **{(m + 1, ShareKind.DH_SECRET): kp.secret for m, kp in enumerate(keys.mask)}, "held": held}


class LinkingPS(PSBehaviour):
    """A PS behaviour scored by the links its :class:`CuriousServer` can compute.

    ``colluders`` are participant ids that share every secret with the PS; they run
    ``colluder_class`` (the honest participant by default).
    """

    colluders: tuple[int, ...] = ()
    colluder_class: type = Participant
    server_class = CuriousServer

    def __init__(self) -> None:
        self.coalition: dict[int, Participant] = {}
        self.server: CuriousServer | None = None

    def make(self, *args, **kwargs) -> CuriousServer:
        s = super().make(*args, **kwargs)
        self.server = s
        return s

    def make_participant(self, pid: int, *args, **kwargs) -> Participant:
        p = self.colluder_class(pid, *args, **kwargs)
        p.behaviour = self
        self.coalition[pid] = p
        return p

    def links(self, result, honest) -> list[int]:
        """Honest participants the PS linked to their own model."""
        view = self.server.view
        for pid, p in self.coalition.items():
            keys = p.state.session.keys if p.state.session else None
            if keys is not None:
                view.colluders[pid] = colluder_secrets(p)
        truth = {i: result.views[i].model_digest for i in honest if result.views[i].model_digest}
        return correct_links(link(view), truth, view.params)

    def holds(self, result, honest) -> Verdict:
        linked = self.links(result, honest)
        wrong = sorted(set(result.blamed) & set(honest))
        got = sum(i in result.positions for i in honest)
        return Verdict(not linked and not wrong, got, len(honest), True, wrong, self.stopped_by,
                       f"honest models linked: {linked or 'none'}")


@register_adversary("open-after-upload")
class OpenAfterUpload(LinkingPS):
    """Collects the upload, then opens the last reservation iteration and restarts the slot phase."""

    stopped_by = "one key, one plaintext: no opening, objection or restart after the upload"

    class server_class(CuriousServer):
        _reordered = False

        def _close_masked(self):
            if self.m == self.params.upload_m and not self._reordered and not self._objections:
                self._reordered = True
                r = self._phase_start + len(self._phase_counts) - 1
                reason = f"counts of iteration {r} fail a check"
                self._open(r, reason)
                # It asks every member of U_r, the ones that uploaded included.
                ask = self._live(self.online[r])
                self._opening.members = ask
                return self._broadcast(ask, msg.OpenRequest(self.T, r, SERVER_ID, reason))
            return super()._close_masked()


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

    class server_class(CuriousServer):
        def _on_ot_request(self, sender, m):
            super()._on_ot_request(sender, m)
            for dealer in self.online[0]:
                if dealer != sender:
                    self._complaints.setdefault(dealer, set()).add(sender)
