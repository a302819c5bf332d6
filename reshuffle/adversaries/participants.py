"""Deviating participants (docs/security/threat-model.md, §9 and docs/security/threat-model.md): each is the honest state machine with one change."""

from __future__ import annotations

import dataclasses

from typing import Callable

import numpy as np

from reshuffle.adversaries.base import ParticipantBehaviour, Verdict, register_adversary
from reshuffle.protocol import messages as msg
from reshuffle.protocol.dcnet import DCParticipant
from reshuffle.protocol.messages import MsgType
from reshuffle.protocol.participant import Participant

REFUSED = "refused"
NAMED = "named with evidence"
GROUP_LOST = "its group delivers nothing this round"


def _delivered(result, honest) -> tuple[int, int]:
    """(honest models delivered, honest models that had to be: every honest upload of the model list)."""
    upload_m = result.params.upload_m
    expected = [i for i in honest if upload_m in result.views[i].uploaded]
    return sum(i in result.positions for i in expected), len(expected)


def verdict_all_honest_delivered(b: ParticipantBehaviour, result, honest, detected_by: str) -> Verdict:
    """The common verdict: every honest model that had a slot is delivered; no honest party is blamed."""
    got, want = _delivered(result, honest)
    wrong = sorted(set(result.blamed) & set(honest))
    culprits_ok = set(b.culprits) <= set(result.blamed)
    return Verdict(got == want and not wrong and culprits_ok, got, want, culprits_ok, wrong, detected_by)


class ByteTamper(ParticipantBehaviour):
    """Applies ``fn(bytes) -> [bytes]`` to its own messages of one type, then signs them as the sender.

    A building block for tests of the parsers and validators: what reaches the PS
    is exactly what a malicious participant could send under its own key.
    """

    name = "byte-tamper"

    def __init__(self, pids=(1,), mtype: MsgType = MsgType.ADVERTISE, fn: Callable = lambda d: [d],
                 m: int | None = None, once: bool = True) -> None:
        super().__init__(pids)
        self.mtype, self.fn, self.m, self.once = mtype, fn, m, once

    class participant_class(Participant):
        def _seal(self, m: msg.Message) -> list[bytes]:
            b, data = self.behaviour, m.encode(self._sk)
            if m.TYPE != b.mtype or (b.m is not None and m.m != b.m) or getattr(self, "_tampered", False):
                return [data]
            self._tampered = b.once
            return [msg.resign(d, self._sk, self.ctx) for d in b.fn(data)]

    def holds(self, result, honest) -> Verdict:
        return verdict_all_honest_delivered(self, result, honest, "parser/validator")


@register_adversary("malformed-after-upload")
class MalformedAfterUpload(ParticipantBehaviour):
    """Uploads correctly, then sends a malformed message before U_m is fixed (v1 lost every model)."""

    stopped_by = "§6.1: U_m is exactly the set of vectors added"

    class participant_class(Participant):
        def _seal(self, m: msg.Message) -> list[bytes]:
            out = super()._seal(m)
            if m.TYPE == MsgType.MASKED_INPUT and m.m == self.params.upload_m:
                out.append(out[0][:40])
            return out

    dc_outcome = REFUSED

    class dc_class(DCParticipant):
        def handle(self, data):
            out = super().handle(data)
            if msg.peek_type(data) is MsgType.DC_UPLOAD_REQUEST and out:
                out.append(out[0][:40])
            return out

    def holds(self, result, honest) -> Verdict:
        return verdict_all_honest_delivered(self, result, honest, self.stopped_by)


@register_adversary("replay")
class Replay(ParticipantBehaviour):
    """Replays its masked vector of invocation 1 into invocation 2 and sends every message twice."""

    stopped_by = "per-invocation header check and answer-once"

    class participant_class(Participant):
        def _seal(self, m: msg.Message) -> list[bytes]:
            out = super()._seal(m)
            if m.TYPE == MsgType.MASKED_INPUT and m.m == 1:
                self._first = out[0]
            if m.TYPE == MsgType.MASKED_INPUT and m.m == 2:
                return [self._first] + out + out
            return out + out

    dc_outcome = REFUSED

    class dc_class(DCParticipant):
        """Sends every reply twice, and its count vector of iteration 1 again in place of its upload first."""

        def handle(self, data):
            out = super().handle(data)
            t = msg.peek_type(data)
            if t is MsgType.DC_KEYS and out:
                self._first = out[0]
            if t is MsgType.DC_UPLOAD_REQUEST and out and hasattr(self, "_first"):
                return [self._first] + out + out
            return out + out

    def holds(self, result, honest) -> Verdict:
        return verdict_all_honest_delivered(self, result, honest, self.stopped_by)


@register_adversary("multi-slot")
class MultiSlot(ParticipantBehaviour):
    """Marks all k candidate slots in every reservation iteration and fills every position it gets.

    v1 gave it 6 to 7 valid rows of 10. Its k-hot vector of the first iteration, where
    every member picks, breaks the count bound: the iteration is opened, its own signed
    vector names it and the slot phase restarts without it (§8.2). Had it slipped
    through, it would still hold one credential only (§7.2): rows sharing r are dropped.
    """

    stopped_by = "§8.2 count bound and opening; §7.2 one credential per participant"

    def __init__(self, pids=(1,)) -> None:
        super().__init__(pids)
        self.culprits = self.pids

    class participant_class(Participant):
        def _reservation_vector(self, s):
            s, v, rows = super()._reservation_vector(s)
            v[:] = 0
            v[list(s.slots.reservation.candidates)] = 1
            return s, v, rows

        def _model_list(self, s):
            from reshuffle.protocol import credential
            from reshuffle.protocol.reservation import settled_slots

            p, slots = self.params, s.slots
            S = settled_slots(slots.counts)
            lw = np.zeros((len(S), p.row_words), dtype=p.codec.dtype)
            enc = p.codec.encode(self._model)
            for pos, slot in enumerate(S):
                if slot in slots.tokens:
                    row = credential.build_row(enc.words, slots.tokens[slot], s.cred.value,
                                               self._rng.bytes(credential.K_BYTES), self.T, pos)
                    lw[pos] = np.frombuffer(row, dtype=p.codec.dtype)
            self.view.position = None
            return lw.reshape(-1), max(len(S), 1)

    dc_outcome = GROUP_LOST + "; nobody named"

    class dc_class(DCParticipant):
        """Marks three free slots in every count vector (the DC-net round's reservation has no OT candidates)."""

        def _vector(self):
            if self.view.slot is not None or not hasattr(self, "res"):
                return super()._vector()
            return _dc_vector(self, lambda v, free, pick: v.__setitem__(free[:3], 1))

    def holds(self, result, honest) -> Verdict:
        v = verdict_all_honest_delivered(self, result, honest, self.stopped_by)
        mine = sum(i in result.positions for i in self.pids)
        v.holds = v.holds and mine <= len(self.pids)
        v.detail = f"attacker rows delivered: {mine}; named: {sorted(result.blamed)}"
        return v


@register_adversary("count-abuse")
class CountAbuse(ParticipantBehaviour):
    """Submits an abusive count vector in reservation iteration ``iteration`` (§8.2).

    ``mode``: ``"k-hot"`` marks every candidate slot; ``"large"`` puts 5 at its pick;
    ``"cancel"`` adds -1 (2^32 - 1) at a slot it does not pick, which either shows as an
    out-of-range count or cancels an honest pick, whose owner then objects. v1 let such
    vectors disturb the reservation unnamed. Now the iteration is opened, the vector
    names its sender with its own signed messages, and the slot phase restarts without
    it; every honest model is delivered.
    """

    stopped_by = "§8.2 count checks, objection, opening and restart"
    MODES = ("k-hot", "large", "cancel")

    def __init__(self, pids=(1,), mode: str = "k-hot", iteration: int = 1) -> None:
        super().__init__(pids)
        if mode not in self.MODES:
            from reshuffle.errors import ConfigError

            raise ConfigError(f"count-abuse mode {mode!r}; choose from {self.MODES}")
        self.mode, self.iteration, self.culprits = mode, iteration, self.pids

    class participant_class(Participant):
        def _reservation_vector(self, s):
            s, v, rows = super()._reservation_vector(s)
            b, res = self.behaviour, s.slots.reservation
            if s.inv.m != b.iteration or getattr(self, "_abused", False):
                return s, v, rows
            self._abused = True
            if b.mode == "k-hot":
                v[list(res.candidates)] = 1  # its k OT choices
            elif b.mode == "large":
                v[res.pick if res.pick is not None else 0] = 5
            else:
                others = [j for j in range(self.params.n) if j != res.pick]
                v[others[int.from_bytes(self._rng.bytes(4), "big") % len(others)]] = np.uint32(2**32 - 1)
            return s, v, rows

    dc_outcome = GROUP_LOST + "; nobody named"

    class dc_class(DCParticipant):
        """The same abuse in its count vector of iteration ``iteration``."""

        def _vector(self):
            b = self.behaviour
            if self.m != b.iteration or getattr(self, "_abused", False):
                return super()._vector()
            self._abused = True

            def abuse(v, free, pick):
                if b.mode == "k-hot":
                    v[free[:3]] = 1
                elif b.mode == "large":
                    v[pick] = 5
                else:
                    v[free[-1]] = np.uint32(2**32 - 1)
            return _dc_vector(self, abuse)

    def holds(self, result, honest) -> Verdict:
        v = verdict_all_honest_delivered(self, result, honest, self.stopped_by)
        v.detail = f"named: {sorted(result.blamed)}"
        return v


def _blame_verdict(b: ParticipantBehaviour, result, honest, detected_by: str, must_name: bool) -> Verdict:
    """Tampering destroys rows but is never delivered; the culprit is named when it hit a decoy row."""
    wrong = sorted(set(result.blamed) & set(honest))
    named = set(b.pids) <= set(result.blamed)
    out = result.output
    delivered_tampered = any(pos in out.valid_positions for pos in getattr(result, "_tampered_positions", ()))
    got, want = _delivered(result, honest)
    ok = not wrong and not delivered_tampered and (named or not must_name)
    return Verdict(ok, got, want, named, wrong, detected_by,
                   f"named: {sorted(result.blamed)}; suspects: {out.suspects}; rows rejected: {out.rejected_rows}")


@register_adversary("false-objection")
class FalseObjection(ParticipantBehaviour):
    """Objects to the counts of reservation iteration ``iteration`` although its pick was counted.

    The objection forces the iteration open; the objector's own signed vector and the counts
    its signed objection's h commits to show the objection false, so it is named. Mid-reservation
    the slot phase restarts without it; if those counts ended the reservation, the objection
    replaced the upload and the round ends instead (§8.2).
    """

    stopped_by = "§8.2 opening: the objector's own vector and counts refute it"

    def __init__(self, pids=(1,), iteration: int = 1) -> None:
        super().__init__(pids)
        self.iteration, self.culprits = iteration, self.pids

    class participant_class(Participant):
        def _on_mask_request(self, s, m):
            pick = s.slots.reservation.pick
            nxt, out = super()._on_mask_request(s, m)
            # The request that follows the iteration's counts: the next iteration's, or the upload's
            # when those counts settled every party.
            if s.inv.last_certified != self.behaviour.iteration or not out or out[0].TYPE != MsgType.MASKED_INPUT:
                return nxt, out
            from dataclasses import replace

            from reshuffle.protocol.phases import PPhase

            slot = pick if pick is not None else min(s.slots.reservation.candidates)
            return replace(nxt, phase=PPhase.OBJECTED), [msg.Objection(self.T, m.m, self.pid, slot, nxt.inv.h[m.m])]

    dc_absent = ("no objections: a member that doubts the counts refuses, and its group delivers nothing, as for a "
                 "silent member (row dcnet-silent)")

    def holds(self, result, honest) -> Verdict:
        v = verdict_all_honest_delivered(self, result, honest, self.stopped_by)
        if result.failure is not None and "reservation had ended" in result.failure:
            # The objection replaced the upload: the round ends, with the objector named (§8.2).
            v.holds = v.culprits_right and not v.wrong
        v.detail = f"named: {sorted(result.blamed)}; round: {result.failure or 'completed'}"
        return v


@register_adversary("jam")
class Jam(ParticipantBehaviour):
    """Uploads a correctly masked model list of random words: every row, decoys included, is destroyed.

    v1 delivered 0 of 7 honest models and named nobody. Now the decoy rows are
    nonzero, the blame step opens them and the jammer's own signed upload and
    opening name it; the round delivers what passes (nothing) and the next round
    runs without it.
    """

    stopped_by = "§9 decoy audit and openings"

    class participant_class(Participant):
        def _model_list(self, s):
            lw, rows = super()._model_list(s)
            lw[:] = np.frombuffer(self._rng.bytes(lw.nbytes), dtype=lw.dtype)
            return lw, rows

    dc_outcome = NAMED

    class dc_class(DCParticipant):
        """Random words in every row of its model list, decoy rows included (masked as honest members mask)."""

        def _deviate(self, lw):
            return np.frombuffer(self._rng.bytes(lw.nbytes), dtype=lw.dtype).reshape(lw.shape).copy()

    def holds(self, result, honest) -> Verdict:
        return _blame_verdict(self, result, honest, self.stopped_by, must_name=True)


@register_adversary("tamper-one-row")
class TamperOneRow(ParticipantBehaviour):
    """Adds noise into one row it does not own (v1 delivered the noise as that row's model).

    The row's tag (a PRF under a key inside the row) fails, so the row is dropped,
    never delivered; when the row was a decoy the blame step names the tamperer
    (probability d/(|S|+d) per row hit).
    """

    stopped_by = "§7.2 row tag; §9 decoys"

    class participant_class(Participant):
        def _model_list(self, s):
            lw, rows = super()._model_list(s)
            p = self.params
            grid = lw.reshape(rows, p.row_words)
            others = [r for r in range(rows) if r != self.view.position]
            if others:
                from reshuffle.crypto.ot import uniform_below

                victim = others[uniform_below(len(others), self._rng)]
                grid[victim, : p.d] += np.frombuffer(self._rng.bytes(4 * p.d), dtype=grid.dtype)[: p.d]
                self.behaviour.hit = victim
            return lw, rows

    dc_outcome = "never delivered; " + NAMED + " when the row hit is a decoy's"

    class dc_class(DCParticipant):
        """Adds noise into one row of its model list that is not its own (a member's or a decoy's)."""

        def _deviate(self, lw):
            from reshuffle.crypto.ot import uniform_below

            lw = lw.copy()
            others = [r for r in range(lw.shape[0]) if r != self.view.position]
            victim = others[uniform_below(len(others), self._rng)]
            d = self.params.d
            lw[victim, :d] += np.frombuffer(self._rng.bytes(lw.itemsize * d), dtype=lw.dtype)
            self.behaviour.hit = victim
            return lw

    def holds(self, result, honest) -> Verdict:
        v = _blame_verdict(self, result, honest, self.stopped_by, must_name=False)
        hit = getattr(self, "hit", None)
        v.holds = v.holds and hit not in result.output.valid_positions
        if hit in result.output.decoy_positions:
            v.holds = v.holds and v.culprits_right
        v.detail += f"; row hit: {hit} ({'decoy' if hit in result.output.decoy_positions else 'participant'})"
        return v


@register_adversary("false-opening")
class FalseOpening(Jam):
    """Jams, and in the blame step opens a wrong key for one partner (to muddy the evidence).

    The partner is shown its signed conflicting opening, reveals K_ij with a DLEQ
    proof, and the false opener is named for it (or for its nonzero decoy row).
    """

    stopped_by = "§9 disputes: K_ij revealed with a DLEQ proof"

    class participant_class(Jam.participant_class):
        def _on_blame_request(self, s, m):
            s, (op,) = super()._on_blame_request(s, m)
            rows = []
            for pos, keys in op.rows:
                keys = list(keys)
                j, k = keys[0]
                keys[0] = (j, bytes(b ^ 0xFF for b in k))
                rows.append((pos, tuple(keys)))
            from dataclasses import replace

            op = replace(op, rows=tuple(rows))
            return replace(s, opening=op), [op]

    dc_outcome = NAMED + "; the partner it lied about a suspect, never named"

    class dc_class(Jam.dc_class):
        """Jams, then opens a wrong key towards its first partner at every decoy row."""

        def _opening(self, op):
            first = min(j for _, j, _ in op.keys)
            keys = tuple((p, j, bytes(b ^ 0xFF for b in k) if j == first else k) for p, j, k in op.keys)
            return msg.DCOpening(op.T, op.m, op.sender, op.h, keys)

    def holds(self, result, honest) -> Verdict:
        return _blame_verdict(self, result, honest, self.stopped_by, must_name=True)


@register_adversary("bad-share")
class BadShare(ParticipantBehaviour):
    """Deals one recipient an inconsistent share and, asked in public, publishes the same bad share.

    v1: when only t members answered, its secret could not be reconstructed and the
    round aborted (0 of 7). Now the recipient's batched Feldman check fails, it
    complains, the dealer's signed answer fails its own commitments: it is named and
    excluded before anyone masks anything, and the round runs without it.
    """

    stopped_by = "§6.4 batched Feldman check, public complaint answer"
    dc_absent = "no shares: the DC-net round's masks are pairwise keys agreed from the members' signed epoch keys"

    def __init__(self, pids=(1,), victim: int | None = None, index: int = 0, delta: int = 1) -> None:
        super().__init__(pids)
        self.victim = victim  # None: the lowest other participant
        self.index, self.delta = index, delta  # which of the 2M shares is off, and by how much

    class participant_class(Participant):
        def _on_advertise_list(self, s, m):
            s, (bundle,) = super()._on_advertise_list(s, m)
            from dataclasses import replace

            from reshuffle.protocol.complaints import combined_for
            from reshuffle.protocol.participant import SETUP_PHASE_AD, _share_payload

            g, deal = self.ctx.group, s.dealing
            v = self.behaviour.victim
            v = min(j for j in deal.dealt if j != self.pid) if v is None else v
            if v not in deal.dealt or v == self.pid:
                return s, [bundle]
            b = self.behaviour  # a behaviour reusing this class may set only the victim
            ys = list(deal.dealt[v])
            i = getattr(b, "index", 0) % len(ys)
            ys[i] = (ys[i] + getattr(b, "delta", 1)) % g.order
            # The bad share is what it deals, and what it would publish to answer the complaint.
            s = replace(s, dealing=replace(deal, dealt={**deal.dealt, v: tuple(ys)}))
            ct = s.peers.channels[v].seal(SETUP_PHASE_AD, _share_payload(g, ys))
            cts = tuple((j, ct if j == v else c) for j, c in bundle.ciphertexts)
            digest = msg.ShareBundle(bundle.T, bundle.m, bundle.sender, cts).digest()
            return s, [msg.ShareBundle(bundle.T, bundle.m, bundle.sender, cts, combined_for(deal.advert, digest))]

    def holds(self, result, honest) -> Verdict:
        v = verdict_all_honest_delivered(self, result, honest, self.stopped_by)
        v.culprits_right = set(self.pids) <= set(result.blamed)
        v.holds = v.holds and v.culprits_right
        v.detail = f"named: {sorted(result.blamed)}"
        return v


@register_adversary("false-complaint")
class FalseComplaint(ParticipantBehaviour):
    """Complains about every other dealer although its shares were fine.

    Every accused dealer publishes the complainer's shares (which the complainer
    had anyway); nobody is named, since a complaint cannot be proved false, and the
    round completes with every honest model.
    """

    stopped_by = "§6.4 public answers (a false complaint costs the dealers one message)"
    dc_absent = "no shares and no complaints in the DC-net round"

    class participant_class(Participant):
        def _seal(self, m):
            if m.TYPE == MsgType.OT_REQUEST:
                others = tuple(j for j in self.state.inv.mask_set if j != self.pid)
                m = dataclasses.replace(m, complaints=others)
            return super()._seal(m)

    def holds(self, result, honest) -> Verdict:
        return verdict_all_honest_delivered(self, result, honest, self.stopped_by)


def _dc_vector(member: DCParticipant, write: Callable) -> msg.MaskedInput:
    """A DC-net member's count vector with its honest pick, then ``write(v, other free slots, pick)`` applied,
    masked as an honest vector is."""
    from reshuffle.protocol.dcnet import _below, mask_in_place

    p = member.params
    v = np.zeros(p.n, dtype=np.uint32)
    free = member.res.free()
    member._pick = free[_below(member._rng, len(free))] if member.view.slot is None else None
    if member._pick is not None:
        v[member._pick] = 1
    write(v, [s for s in free if s != member._pick], member._pick if member._pick is not None else free[0])
    mask_in_place(v, member.T, member.m, member.pid, member._pairs, member._h, 1)
    return msg.MaskedInput(member.T, member.m, member.pid, member._h, 1, v.tobytes())


def _silent_verdict(b: ParticipantBehaviour, result, honest, detected_by: str) -> Verdict:
    """A member that sends nothing (or nothing the PS accepts) from some step on: no honest member is named and
    every honest model that had to be is delivered (in the Shamir-shared round its own is lost, the others
    recovered)."""
    v = verdict_all_honest_delivered(b, result, honest, detected_by)
    v.detail = f"named: {sorted(result.blamed)}; round: {result.failure or 'completed'}"
    return v


@register_adversary("silent")
class Silent(ParticipantBehaviour):
    """Takes part until the upload, then sends nothing more (a member that stops its group on purpose).

    In a round without stable groups its model is lost and the others are recovered
    from the shares. In the DC-net round the masks cancel only in the full sum, so its
    group delivers nothing this round; the PS names it as the silent member of the
    failed group (``failed_groups``), and the other groups deliver.
    """

    stopped_by = "§6 dropout tolerance (Shamir-shared round); all or none by arithmetic (DC-net round)"
    dc_outcome = GROUP_LOST + "; the PS names it silent"

    class participant_class(Participant):
        def _seal(self, m: msg.Message) -> list[bytes]:
            if m.TYPE == MsgType.MASKED_INPUT and m.m == self.params.upload_m or getattr(self, "_quiet", False):
                self._quiet = True
                return []
            return super()._seal(m)

    class dc_class(DCParticipant):
        def handle(self, data):
            if msg.peek_type(data) is MsgType.DC_UPLOAD_REQUEST:
                self._quiet = True
            return [] if getattr(self, "_quiet", False) else super().handle(data)

    def holds(self, result, honest) -> Verdict:
        return _silent_verdict(self, result, honest, self.stopped_by)


@register_adversary("wrong-length")
class WrongLength(ParticipantBehaviour):
    """Uploads a model list one row short, correctly masked and signed under its own key."""

    stopped_by = "the PS checks every upload's rows and length against the settled parties"
    dc_outcome = REFUSED + "; " + GROUP_LOST + "; the PS names it silent"

    class participant_class(Participant):
        def _model_list(self, s):
            lw, rows = super()._model_list(s)
            return lw[: (rows - 1) * self.params.row_words].copy(), rows - 1

    class dc_class(DCParticipant):
        def _on_upload_request(self, m):
            (up,) = super()._on_upload_request(m)
            size = len(up.words) // up.rows
            return [msg.MaskedInput(up.T, up.m, up.sender, up.h, up.rows - 1, bytes(up.words)[:-size])]

    def holds(self, result, honest) -> Verdict:
        return _silent_verdict(self, result, honest, self.stopped_by)


@register_adversary("invalid-element")
class InvalidElement(ParticipantBehaviour):
    """Sends its first message with a public key that is no group element (its channel key in the Shamir-shared
    round, its epoch key Y_i in the DC-net round)."""

    stopped_by = "every received element decoded and checked before use"
    dc_outcome = REFUSED + "; " + GROUP_LOST + "; the PS names it silent"

    class participant_class(Participant):
        def _seal(self, m: msg.Message) -> list[bytes]:
            out = super()._seal(m)
            if m.TYPE == MsgType.ADVERTISE:
                e = m.enc_key.to_bytes()
                return [d.replace(e, b"\xff" * len(e), 1) for d in out]
            return out

    class dc_class(DCParticipant):
        def handle(self, data):
            out = super().handle(data)
            if msg.peek_type(data) is MsgType.DC_START and out and self.params is not None:
                e = self._Y.to_bytes()
                out = [d.replace(e, b"\xff" * len(e), 1) for d in out]
            return out

    def holds(self, result, honest) -> Verdict:
        return _silent_verdict(self, result, honest, self.stopped_by)


@register_adversary("garbage-upload")
class GarbageUpload(ParticipantBehaviour):
    """Uploads random bytes of the right length in place of its masked model list, signed under its own key
    (no mask at all, unlike ``jam``, which masks random words)."""

    stopped_by = "decoy rows opened after the upload: its signed upload minus its own opened keys is nonzero"
    dc_outcome = NAMED

    class participant_class(Participant):
        def _seal(self, m: msg.Message) -> list[bytes]:
            if m.TYPE == MsgType.MASKED_INPUT and m.m == self.params.upload_m:
                m = dataclasses.replace(m, words=self._rng.bytes(len(m.words)))
            return super()._seal(m)

    class dc_class(DCParticipant):
        def _on_upload_request(self, m):
            (up,) = super()._on_upload_request(m)
            return [dataclasses.replace(up, words=self._rng.bytes(len(up.words)))]

    def __init__(self, pids=(1,)) -> None:
        super().__init__(pids)
        self.culprits = self.pids

    def holds(self, result, honest) -> Verdict:
        return _blame_verdict(self, result, honest, self.stopped_by, must_name=True)
