"""A deviating PS (docs/protocol.md §6.2–6.3, §7.1, §9 and docs/security/threat-model.md).

What must hold against each: an honest participant either detects the deviation
before it reveals anything that would link or unmask it, or the deviation makes
the affected sums uniformly random. Two checks judge every PS behaviour:
:func:`exposed` reads the honest participants' own records of what they revealed
(both share kinds of one owner and invocation), and the linker
(:mod:`~reshuffle.adversaries.linker`) plays the attacker on everything the PS
held at the end (:class:`CuriousServer`): a behaviour holds only if it links no
honest participant to its model.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from reshuffle.adversaries.base import PSBehaviour, Verdict, register_adversary
from reshuffle.adversaries.linker import PSView, correct_links, link
from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.protocol import messages as msg
from reshuffle.protocol.dcnet import DCPhase, DCServer, parties
from reshuffle.protocol.messages import ShareKind
from reshuffle.protocol.participant import Participant
from reshuffle.protocol.reservation import settled_slots
from reshuffle.protocol.server import DisputeStep, Server, UnmaskStep


def exposed(result, honest: list[int], colluders: int = 0) -> list[tuple[int, int]]:
    """(owner, m) of honest owners whose self seed AND DH secret reached t shares (colluders counted:
    ``colluders`` of them, or the announced c if larger)."""
    p = result.params
    c = max(p.c, colluders)
    out = []
    for m in range(1, p.upload_m + 1):
        counts: dict[tuple[int, ShareKind], int] = Counter()
        for i in honest:
            for owner, kind in result.views[i].revealed.get(m, {}).items():
                counts[(owner, kind)] += 1
        for j in honest:
            # The PS's colluders may add their shares of each kind.
            if min(counts[(j, ShareKind.SELF_SEED)], counts[(j, ShareKind.DH_SECRET)]) + c >= p.t:
                out.append((j, m))
    return out


class CuriousServer(Server):
    """The shipped PS, filing everything it receives and draws into a :class:`PSView`."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.view = PSView(self.params, self.T)

    def receive(self, sender: int, data: bytes) -> None:
        self.view.absorb(sender, data)
        super().receive(sender, data)

    def _new_slot_phase(self, start):
        slots = super()._new_slot_phase(start)
        self.view.tables = (*self.view.tables, tuple(slots.ot.tokens))
        return slots

    def _invocation(self, m, mask_set, counts, excluded=()):
        st, live = super()._invocation(m, mask_set, counts, excluded)
        v = self.view
        if m <= self.params.R_max:
            v.table_of = {**v.table_of, st.h: len(v.tables) - 1}
        v.mask_sets = {**v.mask_sets, **{(i, m, st.h): tuple(st.mask_set) for i in st.mask_set}}
        return st, live


def colluder_secrets(p: Participant) -> dict:
    """Everything a colluding participant hands the PS: its own secrets, the shares it holds and its
    signing key (it signs whatever the PS asks)."""
    keys = p.state.session.keys
    held = {(owner, idx // 2 + 1, ShareKind.DH_SECRET if idx % 2 else ShareKind.SELF_SEED): y
            for owner, ys in p.state.held.items() for idx, y in enumerate(ys)}
    return {**{(m + 1, ShareKind.SELF_SEED): b for m, b in enumerate(keys.seeds)},
            **{(m + 1, ShareKind.DH_SECRET): kp.secret for m, kp in enumerate(keys.mask)}, "held": held,
            "sk": p._sk}


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
        self.servers: list[CuriousServer] = []  # one per anonymity group (one without groups)

    def make(self, *args, **kwargs) -> CuriousServer:
        s = super().make(*args, **kwargs)
        self.server = s
        self.servers.append(s)
        return s

    def make_participant(self, pid: int, *args, **kwargs) -> Participant:
        p = self.colluder_class(pid, *args, **kwargs)
        p.behaviour = self
        self.coalition[pid] = p
        return p

    def links(self, result, honest) -> list[int]:
        """Honest participants the PS linked to their own model (in a round in groups, in any group)."""
        secrets = {pid: colluder_secrets(p) for pid, p in self.coalition.items() if p.state.session is not None}
        truth = {i: result.views[i].row_tags for i in honest if result.views[i].row_tags}
        linked: set[int] = set()
        for s in self.servers:
            # A colluder's shares are keyed by owner: those of another group's members find no advertisement.
            s.view.colluders = {**s.view.colluders, **secrets}
            linked.update(correct_links(link(s.view), truth))
        return sorted(linked)

    def verdict(self, result, honest, detected_by: str) -> Verdict:
        leaks = exposed(result, honest, len(self.colluders))
        linked = self.links(result, honest)
        wrong = sorted(set(result.blamed) & set(honest))
        got = sum(i in result.positions for i in honest)
        return Verdict(not leaks and not linked and not wrong, got, len(honest), True, wrong, detected_by,
                       f"individual uploads exposed: {leaks or 'none'}; honest models linked: {linked or 'none'}")

    def holds(self, result, honest) -> Verdict:
        return self.verdict(result, honest, self.stopped_by)


class _PSAttack(LinkingPS):
    def __init__(self, target: int = 0) -> None:
        super().__init__()
        self.target = target


REFUSED = "refused"
FORKED = "its fork leaves noise: nothing of the group delivered, nobody linked"


def _dc_reply(server: DCServer, out, target: int, change) -> list:
    """``out`` with the PS message to ``target`` decoded, changed by ``change(message)`` and signed again."""
    return [(i, change(msg.decode(d, server._ctx)).encode(server._sk) if i == target else d) for i, d in out]


class _DCAcceptAll(DCServer):
    """A DC-net PS that takes every member's key, whatever model, parameters or epoch key it signs (it is the one
    that handed out the forks)."""

    def _on_keys(self, sender, m):
        """Accepts every key."""


class _DCForcedBlame(DCServer):
    """A DC-net PS that starts the blame step on a clean round (of the decoys' rows, or of every row)."""

    open_all = False

    def _close_upload(self, got):
        out = super()._close_upload(got)
        if self.phase is not DCPhase.DONE:
            return out  # a real blame step
        p = self.params
        self.output, self.phase = None, DCPhase.BLAME
        rows = tuple(range(parties(p))) if self.open_all else tuple(self.decoy_positions)
        vectors = tuple(msg.relay_bytes(v) for r in sorted(self.vectors) for v in self.vectors[r].values())
        data = msg.DCBlame(self.T, p.upload_m, SERVER_ID, self._seed, rows, vectors).encode(self._sk)
        return [(i, data) for i in sorted(self._roster)]


@register_adversary("equivocate-u")
class EquivocateU(_PSAttack):
    """Shows half the participants U_m and the other half U_m without the target, to get both share kinds."""

    stopped_by = "§6.2–6.3 certificate: t signatures on one (T, m, U_m, h_m)"

    class server_class(CuriousServer):
        _alt = None

        def _close_masked(self, st):
            nxt, out = super()._close_masked(st)
            if st.inv != self.params.upload_m:
                return nxt, out
            target = self.behaviour.target
            fewer = tuple(i for i in nxt.online if i != target)
            alt = msg.UnmaskRequest(self.T, st.inv, SERVER_ID, fewer).encode(self._sk)
            half = set(fewer[: len(fewer) // 2])
            self._alt = (fewer, msg.consent_statement(self.T, st.inv, fewer, st.h), {})
            return nxt, [(i, alt if i in half else d) for i, d in out]

        def _on_consent(self, st, sender, c):
            try:
                super()._on_consent(st, sender, c)
            except Exception:
                if self._alt is None:
                    raise
                fewer, stmt, sigs = self._alt
                self._roster[sender].key.verify("consent", stmt, c.consent)
                sigs[sender] = c.consent

        def _close_consent(self, st):
            if self._alt is None:
                return super()._close_consent(st)
            fewer, stmt, sigs = self._alt
            # Certificates for both lists with whatever it collected (each below t if c is respected).
            main = msg.CertificateMsg(self.T, st.m, SERVER_ID, st.online, tuple(sorted(st.consents.items())))
            alt = msg.CertificateMsg(self.T, st.m, SERVER_ID, fewer, tuple(sorted(sigs.items())))
            self._tx.absorb_certified(st.m, st.online)
            out = [(i, alt.encode(self._sk)) for i in sigs] + [(i, main.encode(self._sk)) for i in st.consents]
            return UnmaskStep(st.sum, st.online, st.dropped), out

    dc_outcome = REFUSED + " (all or none: every member's key relayed)"

    class dc_class(DCServer):
        """Relays the target every member's key but one (the DC-net round's online set), the others all."""

        def _close_keys(self, got):
            out = super()._close_keys(got)
            t = self.behaviour.target
            return _dc_reply(self, out, t, lambda m: dataclasses.replace(m, keys=m.keys[:-1] if t != max(
                self.keys) else m.keys[1:]))


@register_adversary("fork-position")
class ForkPosition(_PSAttack):
    """Shows the target other counts of reservation iteration 1, which move its position.

    One free slot settles and one settled slot collides in the target's view only,
    so its model list has the usual length and the PS adds its vector like any other.
    """

    stopped_by = "§6.2–6.3 h_m in every stream key (the fork makes the sums random)"

    class server_class(CuriousServer):
        def _check_view(self, st, sender, mi):
            """It adds every vector, forked or not (it is the one forking)."""

        def _open_invocation(self, m, mask_set, counts, excluded=()):
            st, out = super()._open_invocation(m, mask_set, counts, excluded)
            if m != 2:
                return st, out
            fake = list(counts)
            free = next((s for s, c in enumerate(fake) if c == 0), None)
            last = max((s for s, c in enumerate(fake) if c == 1), default=None)
            if free is None or last is None or free > last:
                return st, out
            fake[free], fake[last] = 1, 2
            forked = msg.MaskRequest(self.T, m, SERVER_ID, tuple(fake)).encode(self._sk)
            return st, [(i, forked if i == self.behaviour.target else d) for i, d in out]

    dc_outcome = FORKED

    class dc_class(DCServer):
        """Shows the target other final counts in its upload request: one settled slot moved to a free one."""

        def _close_vectors(self, got):
            out = super()._close_vectors(got)
            if self.phase is not DCPhase.UPLOAD:
                return out
            pub = list(self.res.history[-1])
            free = pub.index(0)
            last = max(s for s, c in enumerate(pub) if c == 1)
            pub[free], pub[last] = 1, 0
            return _dc_reply(self, out, self.behaviour.target, lambda m: dataclasses.replace(m, counts=tuple(pub)))

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        # A forked participant's vectors never cancel: its model cannot be delivered.
        v.holds = v.holds and self.target not in result.positions
        return v


@register_adversary("tagged-ot")
class TaggedOT(_PSAttack):
    """Answers the target's OT request under another beta, to recognise its tokens later."""

    stopped_by = "§7.1 DLEQ proof of the OT answers against B"

    class server_class(CuriousServer):
        def _on_ot_request(self, st, sender, m):
            super()._on_ot_request(st, sender, m)
            if sender == self.behaviour.target:
                from reshuffle.crypto.ot import OTRequest, OTResponse

                req = OTRequest.decode(self.group, m.request, self.params.k)
                beta2 = self.group.random_scalar(self._rng)
                fake = OTResponse(self.T, tuple(a**beta2 for a in req.blinded))
                good = st.answers[sender]
                st.answers[sender] = dataclasses.replace(good, response=fake.encode())

    dc_outcome = REFUSED + " (the credential's DLEQ proof against C)"

    class dc_class(DCServer):
        """Evaluates the target's credential request under another key, to recognise its credential later."""

        def _close_keys(self, got):
            out = super()._close_keys(got)
            t = self.behaviour.target
            beta2 = self.group.random_scalar(self._rng)
            return _dc_reply(self, out, t, lambda m: dataclasses.replace(
                m, cred_eval=self.keys[t].cred_request**beta2))

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        errs = [type(e).__name__ for e in result.views[self.target].errors]
        view = result.views[self.target]
        # Its first reservation vector left with its OT request (§5a); it stopped at the answer's proof,
        # before it consented to anything or revealed a share, and it never uploaded a model.
        v.holds = (v.holds and errs[:1] == ["InvalidProof"] and view.uploaded <= {1} and not view.revealed
                   and result.params.upload_m not in view.uploaded)
        v.detail += f"; target errors: {errs}"
        return v


@register_adversary("per-participant-key")
class PerParticipantKey(_PSAttack):
    """Sends the target its own credential key C' (and so its own RoundStart), to recognise its row."""

    stopped_by = "§6.2–6.3 C in RoundStart, hence in h (the fork makes the sums random)"

    class server_class(CuriousServer):
        def _check_view(self, st, sender, mi):
            """It adds every vector, forked or not."""

        def start(self):
            out = super().start()
            g = self.group
            self._gamma2 = g.random_scalar(self._rng)
            rs = msg.decode(out[0][1], self._ctx)
            other = dataclasses.replace(rs, cred_key=g.base_mul(self._gamma2))
            return [(i, other.encode(self._sk) if i == self.behaviour.target else d) for i, d in out]

        def _on_ot_request(self, st, sender, m):
            if sender != self.behaviour.target:
                return super()._on_ot_request(st, sender, m)
            # The target's credential under its own key: its row would be recognisable.
            gamma, key = self._gamma, self.cred_key
            self._gamma, self.cred_key = self._gamma2, self.group.base_mul(self._gamma2)
            try:
                super()._on_ot_request(st, sender, m)
            finally:
                self._gamma, self.cred_key = gamma, key

    dc_outcome = REFUSED + " (the credential's DLEQ proof against the C every member signs into h)"

    class dc_class(DCServer):
        """Sends the target a DC_START with its own credential key C'."""

        def start(self):
            out = super().start()
            C2 = self.group.base_mul(self.group.random_scalar(self._rng))
            return _dc_reply(self, out, self.behaviour.target, lambda m: dataclasses.replace(m, cred_key=C2))

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        v.holds = v.holds and self.target not in result.positions
        return v


@register_adversary("per-participant-epoch-key")
class PerParticipantEpochKey(_PSAttack):
    """Gives the target its own epoch key P' (and so its own RoundStart), to recognise its pseudonym in
    every row of the epoch, and relays every advertisement as it is."""

    stopped_by = "§7.3 every advertisement signs (epoch, P); each member compares them before it asks for a pseudonym"

    class server_class(CuriousServer):
        def start(self):
            out = super().start()
            g = self.group
            rs = msg.decode(out[0][1], self._ctx)
            other = dataclasses.replace(rs, nym_key=g.base_mul(g.random_scalar(self._rng))).encode(self._sk)
            return [(i, other if i == self.behaviour.target else d) for i, d in out]

        def _on_advertise(self, st, sender, a):
            if sender in st.adverts:
                return super()._on_advertise(st, sender, a)
            st.adverts[sender] = a  # the target's advertisement signs its own key: relayed anyway

    dc_outcome = REFUSED + " (every DC_KEY signs the epoch key; each member compares them)"

    class dc_class(_DCAcceptAll):
        """Sends the target a DC_START with its own epoch key P', and relays every key as it is."""

        def start(self):
            out = super().start()
            P2 = self.group.base_mul(self.group.random_scalar(self._rng))
            return _dc_reply(self, out, self.behaviour.target, lambda m: dataclasses.replace(m, nym_key=P2))

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        errs = [type(e).__name__ for e in result.views[self.target].errors]
        v.holds = v.holds and self.target not in result.positions and "EpochKeyMismatch" in errs
        v.detail += f"; target errors: {errs}; round: {result.failure or 'completed'}"
        return v


@register_adversary("different-global-model")
class DifferentGlobalModel(_PSAttack):
    """Gives the target another global model W_g' (a marked model would make its update recognisable)
    and a RoundStart with H(W_g'), then relays every advertisement as it is."""

    stopped_by = "§5 H(W_g) in every signed advertisement and in h (the target's fork is refused)"

    def global_hash_for(self, pid: int, gh: bytes) -> bytes:
        """What the target is given instead of the real global model (the harness asks this)."""
        from reshuffle.protocol.participant import global_model_hash

        return global_model_hash(b"marked" + gh) if pid == self.target else gh

    class server_class(CuriousServer):
        def start(self):
            out = super().start()
            rs = msg.decode(out[0][1], self._ctx)
            t = self.behaviour.target
            other = dataclasses.replace(rs, global_hash=self.behaviour.global_hash_for(t, rs.global_hash)
                                        ).encode(self._sk)
            return [(i, other if i == t else d) for i, d in out]

        def _on_advertise(self, st, sender, a):
            if sender in st.adverts:
                return super()._on_advertise(st, sender, a)
            st.adverts[sender] = a  # any model: it is the one that forked them

    dc_outcome = REFUSED + " (every DC_KEY signs H(W_g); each member compares them)"

    class dc_class(_DCAcceptAll):
        """Sends the target a DC_START with H(W_g'), and relays every key as it is."""

        def start(self):
            out = super().start()
            b = self.behaviour
            return _dc_reply(self, out, b.target, lambda m: dataclasses.replace(
                m, global_hash=b.global_hash_for(b.target, m.global_hash)))

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        v.holds = v.holds and self.target not in result.positions
        v.detail += f"; round: {result.failure or 'completed'}"
        return v


@register_adversary("both-shares")
class BothShares(_PSAttack):
    """After the upload's certificate, asks again with the target declared dropped (both share kinds)."""

    stopped_by = "answer-once per invocation; one signed statement per (T, m)"
    dc_absent = "no shares to ask for twice: a member that uploaded answers nothing but DC_BLAME"

    class server_class(CuriousServer):
        def _close_consent(self, st):
            nxt, out = super()._close_consent(st)
            if st.m == self.params.upload_m:
                fewer = tuple(i for i in st.online if i != self.behaviour.target)
                again = msg.UnmaskRequest(self.T, st.m, SERVER_ID, fewer).encode(self._sk)
                out += [(i, again) for i in fewer]
            return nxt, out


class _ForcedBlame(CuriousServer):
    """A PS that starts the blame step on a clean round (the rows are checked only at the upload)."""

    def _check_rows(self, st):
        lw, valid, failed = super()._check_rows(st)
        return lw, valid, {**failed, -1: "forced"}


@register_adversary("false-decoy-claim")
class FalseDecoyClaim(_PSAttack):
    """Starts the blame step on a clean round and claims every row is a decoy, to open the participants'."""

    stopped_by = "§9 audit: positions must be the decoys the opened seed gives; never one's own row"
    dc_outcome = REFUSED + " (the audit: only the decoys' rows are opened)"

    class dc_class(_DCForcedBlame):
        """Starts the blame step on a clean round and asks every member to open every row."""

        open_all = True

    class server_class(_ForcedBlame):
        def _check_rows(self, st):
            out = super()._check_rows(st)
            st.sum.blame.positions = list(range(len(settled_slots(self.counts))))
            return out

    def dc_holds(self, result, honest, server=None) -> Verdict:
        from reshuffle.adversaries.dcteam import TWO, verdict

        # The members upload in a clean round, then refuse to open: judged as any PS, plus every refusal.
        v = verdict(self, result, honest, server, claim="linked nobody")
        refused = [i for i in TWO[0] if any(type(e).__name__ == "Refused" for e in result.views[i].errors)]
        v.holds = v.holds and refused == TWO[0] and not result.blamed
        v.detail += f"; refused to open: {refused}"
        return v

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        refused = [i for i in honest if any(type(e).__name__ == "Refused" for e in result.views[i].errors)]
        v.holds = v.holds and len(refused) == len([i for i in honest if result.params.upload_m in result.views[i].uploaded])
        v.detail += f"; refused to open: {refused}"
        return v


@register_adversary("forged-dispute")
class ForgedDispute(_PSAttack):
    """Forces a blame step and shows the target a forged 'conflicting opening' to extract K_ij."""

    stopped_by = "§9: K_ij only against the partner's validly signed, conflicting opening"
    dc_absent = "no disputes: two openings of one pair that differ make both members suspects, never named"

    class server_class(_ForcedBlame):
        def _close_blame(self, st):
            t = self.behaviour.target
            ops = st.blame.openings
            if t not in ops:
                return super()._close_blame(st)
            partner = next(j for j in sorted(ops) if j != t)
            real_op = ops[partner][0]
            forged = msg.Opening(self.T, st.m, partner, real_op.h, real_op.peers, tuple(
                (pos, tuple((j, bytes(32)) for j, _ in keys)) for pos, keys in real_op.rows))
            # Unsigned by the partner (signed by the PS instead), and a copy of the real one: neither may work.
            fake = forged.encode(self._sk)
            real = ops[partner][1]
            st.blame._disputed.add((min(t, partner), max(t, partner)))
            return DisputeStep(st.blame, st.valid, st.failed, st.lw), [
                (t, msg.Dispute(self.T, st.m, SERVER_ID, partner, fake).encode(self._sk)),
                (t, msg.Dispute(self.T, st.m, SERVER_ID, partner, real).encode(self._sk))]

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        errs = [type(e).__name__ for e in result.views[self.target].errors]
        v.holds = v.holds and any(e in ("InvalidSignature", "Refused") for e in errs)
        v.detail += f"; target errors: {errs}"
        return v


@register_adversary("replayed-start")
class ReplayedStart(_PSAttack):
    """Sends the target its round's start twice, the second a verbatim replay, hoping for a second key message
    (the DC-net round) or a second advertisement (the Shamir-shared round) under one view."""

    stopped_by = "one start per round: a replayed start is refused before anything is masked or revealed"
    dc_outcome = REFUSED

    class server_class(CuriousServer):
        def start(self):
            out = super().start()
            return out + [(i, d) for i, d in out if i == self.behaviour.target]

    class dc_class(DCServer):
        def start(self):
            out = super().start()
            return out + [(i, d) for i, d in out if i == self.behaviour.target]

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        errs = [type(e).__name__ for e in result.views[self.target].errors]
        v.holds = v.holds and bool(errs) and result.params.upload_m not in result.views[self.target].uploaded
        v.detail += f"; target errors: {errs}; round: {result.failure or 'completed'}"
        return v
