"""A deviating PS (docs/protocol.md §6.2–6.3, §7.1, §9 and docs/security/threat-model.md).

What must hold against each: an honest participant either detects the deviation
before it reveals anything that would link or unmask it, or the deviation makes
the affected sums uniformly random. :func:`exposed` checks the first half on the
honest participants' own records of what they revealed; the second shows as
rows that fail their checks.
"""

from __future__ import annotations

from collections import Counter

from reshuffle.adversaries.base import PSBehaviour, Verdict, register_adversary
from reshuffle.crypto.signatures import SERVER_ID
from reshuffle.protocol import messages as msg
from reshuffle.protocol.messages import ShareKind
from reshuffle.protocol.reservation import settled_slots
from reshuffle.protocol.server import Server, SPhase


def exposed(result, honest: list[int]) -> list[tuple[int, int]]:
    """(owner, m) of honest owners whose self seed AND DH secret reached t shares (colluders counted)."""
    p = result.params
    out = []
    for m in range(1, p.upload_m + 1):
        counts: dict[tuple[int, ShareKind], int] = Counter()
        for i in honest:
            for owner, kind in result.views[i].revealed.get(m, {}).items():
                counts[(owner, kind)] += 1
        for j in honest:
            # The PS's colluders may add their c shares of each kind.
            if min(counts[(j, ShareKind.SELF_SEED)], counts[(j, ShareKind.DH_SECRET)]) + p.c >= p.t:
                out.append((j, m))
    return out


class _PSAttack(PSBehaviour):
    def __init__(self, target: int = 0) -> None:
        self.target = target

    def verdict(self, result, honest, detected_by: str) -> Verdict:
        leaks = exposed(result, honest)
        wrong = sorted(set(result.blamed) & set(honest))
        moved = self.target in result.positions and getattr(result.output, "_forked", False)
        ok = not leaks and not wrong and not moved
        got = sum(i in result.positions for i in honest)
        return Verdict(ok, got, len(honest), True, wrong, detected_by,
                       f"individual uploads exposed: {leaks or 'none'}")


@register_adversary("equivocate-u")
class EquivocateU(_PSAttack):
    """Shows half the participants U_m and the other half U_m without the target, to get both share kinds."""

    stopped_by = "§6.2–6.3 certificate: t signatures on one (T, m, U_m, h_m)"

    class server_class(Server):
        def _close_masked(self):
            out = super()._close_masked()
            if self.m != self.params.upload_m:
                return out
            b = self.behaviour
            Um = self.online[self.m]
            fewer = tuple(i for i in Um if i != b.target)
            alt = msg.UnmaskRequest(self.T, self.m, SERVER_ID, fewer).encode(self._sk)
            half = set(fewer[: len(fewer) // 2])
            self._alt = (fewer, msg.consent_statement(self.T, self.m, fewer, self._h), {})
            return [(i, alt if i in half else d) for i, d in out]

        def _on_consent(self, sender, c):
            fewer, stmt, sigs = getattr(self, "_alt", (None, None, None))
            try:
                super()._on_consent(sender, c)
            except Exception:
                if stmt is None:
                    raise
                self._roster[sender].key.verify("consent", stmt, c.consent)
                sigs[sender] = c.consent

        def _close_consent(self):
            fewer, stmt, sigs = getattr(self, "_alt", (None, None, None))
            if stmt is None:
                return super()._close_consent()
            # Certificates for both lists with whatever it collected (each below t if c is respected).
            main = msg.CertificateMsg(self.T, self.m, SERVER_ID, self.online[self.m], tuple(sorted(self._consents.items())))
            alt = msg.CertificateMsg(self.T, self.m, SERVER_ID, fewer, tuple(sorted(sigs.items())))
            self._start_unmask()
            return [(i, alt.encode(self._sk)) for i in sigs] + [(i, main.encode(self._sk)) for i in self._consents]

    def holds(self, result, honest) -> Verdict:
        return self.verdict(result, honest, self.stopped_by)


@register_adversary("fork-position")
class ForkPosition(_PSAttack):
    """Shows the target other counts of reservation iteration 1, which move its position.

    One free slot settles and one settled slot collides in the target's view only,
    so its model list has the usual length and the PS adds its vector like any other.
    """

    stopped_by = "§6.2–6.3 h_m in every stream key (the fork makes the sums random)"

    class server_class(Server):
        def _check_view(self, sender, mi):
            """It adds every vector, forked or not (it is the one forking)."""

        def _open_invocation(self, m, mask_set, counts):
            out = super()._open_invocation(m, mask_set, counts)
            if m != 2:
                return out
            fake = list(counts)
            free = next((s for s, c in enumerate(fake) if c == 0), None)
            last = max((s for s, c in enumerate(fake) if c == 1), default=None)
            if free is None or last is None or free > last:
                return out
            fake[free], fake[last] = 1, 2
            forked = msg.MaskRequest(self.T, m, SERVER_ID, tuple(fake)).encode(self._sk)
            return [(i, forked if i == self.behaviour.target else d) for i, d in out]

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        # A forked participant's vectors never cancel: its model cannot be delivered.
        v.holds = v.holds and self.target not in result.positions
        return v


@register_adversary("tagged-ot")
class TaggedOT(_PSAttack):
    """Answers the target's OT request under another beta, to recognise its tokens later."""

    stopped_by = "§7.1 DLEQ proof of the OT answers against B"

    class server_class(Server):
        def _on_ot_request(self, sender, m):
            super()._on_ot_request(sender, m)
            if sender == self.behaviour.target:
                from reshuffle.crypto.ot import OTRequest, OTResponse

                req = OTRequest.decode(self.group, m.request, self.params.k)
                beta2 = self.group.random_scalar(self._rng)
                fake = OTResponse(self.T, tuple(a**beta2 for a in req.blinded))
                good = self._ot_answers[sender]
                self._ot_answers[sender] = msg.OTResponseMsg(
                    good.T, good.m, good.sender, fake.encode(), good.ot_proof, good.cred_eval, good.cred_proof
                )

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

    class server_class(Server):
        def _check_view(self, sender, mi):
            """It adds every vector, forked or not."""

        def start(self):
            out = super().start()
            g = self.group
            self._gamma2 = g.random_scalar(self._rng)
            rs = msg.decode(out[0][1], self._ctx)
            other = msg.RoundStart(rs.T, rs.m, rs.sender, rs.params, rs.global_hash, rs.server_cert, rs.roster,
                                   g.base_mul(self._gamma2))
            return [(i, other.encode(self._sk) if i == self.behaviour.target else d) for i, d in out]

        def _on_ot_request(self, sender, m):
            if sender != self.behaviour.target:
                return super()._on_ot_request(sender, m)
            # The target's credential under its own key: its row would be recognisable.
            gamma, key = self._gamma, self.cred_key
            self._gamma, self.cred_key = self._gamma2, self.group.base_mul(self._gamma2)
            try:
                super()._on_ot_request(sender, m)
            finally:
                self._gamma, self.cred_key = gamma, key

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        v.holds = v.holds and self.target not in result.positions
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

    class server_class(Server):
        def start(self):
            out = super().start()
            rs = msg.decode(out[0][1], self._ctx)
            t = self.behaviour.target
            other = msg.RoundStart(rs.T, rs.m, rs.sender, rs.params, self.behaviour.global_hash_for(t, rs.global_hash),
                                   rs.server_cert, rs.roster, rs.cred_key).encode(self._sk)
            return [(i, other if i == t else d) for i, d in out]

        def _on_advertise(self, sender, a):
            if sender in self._adverts:
                return super()._on_advertise(sender, a)
            self._adverts[sender] = a  # any model: it is the one that forked them

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        v.holds = v.holds and self.target not in result.positions
        v.detail += f"; round: {result.failure or 'completed'}"
        return v


@register_adversary("both-shares")
class BothShares(_PSAttack):
    """After the upload's certificate, asks again with the target declared dropped (both share kinds)."""

    stopped_by = "answer-once per invocation; one signed statement per (T, m)"

    class server_class(Server):
        def _close_consent(self):
            out = super()._close_consent()
            if self.m == self.params.upload_m:
                Um = self.online[self.m]
                fewer = tuple(i for i in Um if i != self.behaviour.target)
                again = msg.UnmaskRequest(self.T, self.m, SERVER_ID, fewer).encode(self._sk)
                out += [(i, again) for i in fewer]
            return out

    def holds(self, result, honest) -> Verdict:
        return self.verdict(result, honest, self.stopped_by)



class _ForcedBlame(Server):
    """A PS that starts the blame step on a clean round (the rows are checked only at the upload)."""

    def _check_rows(self):
        super()._check_rows()
        self._failed.setdefault(-1, "forced")


@register_adversary("false-decoy-claim")
class FalseDecoyClaim(_PSAttack):
    """Starts the blame step on a clean round and claims every row is a decoy, to open the participants'."""

    stopped_by = "§9 audit: positions must be the decoys the opened seed gives; never one's own row"

    class server_class(_ForcedBlame):
        def _check_rows(self):
            super()._check_rows()
            self._decoy_pos = list(range(len(settled_slots(self.counts))))
            self._blame.positions = self._decoy_pos

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

    class server_class(_ForcedBlame):
        def _close_blame(self):
            t = self.behaviour.target
            ops = self._blame.openings
            if t not in ops:
                return super()._close_blame()
            partner = next(j for j in sorted(ops) if j != t)
            forged = msg.Opening(self.T, self.m, partner, tuple(
                (pos, tuple((j, bytes(32)) for j, _ in keys)) for pos, keys in ops[partner][0].rows))
            # Unsigned by the partner (signed by the PS instead), and a copy of the real one: neither may work.
            fake = forged.encode(self._sk)
            real = ops[partner][1]
            self.phase = SPhase.DISPUTE
            self._blame._disputed.add((min(t, partner), max(t, partner)))
            return [(t, msg.Dispute(self.T, self.m, SERVER_ID, partner, fake).encode(self._sk)),
                    (t, msg.Dispute(self.T, self.m, SERVER_ID, partner, real).encode(self._sk))]

    def holds(self, result, honest) -> Verdict:
        v = self.verdict(result, honest, self.stopped_by)
        errs = [type(e).__name__ for e in result.views[self.target].errors]
        v.holds = v.holds and any(e in ("InvalidSignature", "Refused") for e in errs)
        v.detail += f"; target errors: {errs}"
        return v
