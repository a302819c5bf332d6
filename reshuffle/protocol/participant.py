"""Participant state machine (docs/protocol.md §5–§7).

A :class:`Participant` sees only bytes from the PS and answers with bytes. Every
incoming message is fully parsed, its PS signature checked and its content
validated before the state moves on; any :class:`ProtocolError` makes it answer
with a typed :class:`Refusal` and abort the round (the PS is the only sender, so
a bad message means a bad PS or a bad network, and the safe move is to stop
revealing anything). Every reply is signed with the participant's key.

The rooms it uses: :mod:`~reshuffle.protocol.transcript` (h_m, consent and
certificate), :mod:`~reshuffle.protocol.credential` (row credential and tag),
:mod:`~reshuffle.crypto.voprf` (proofs of the OT answers and the credential).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from reshuffle.crypto import voprf
from reshuffle.crypto.channel import Channel, DHKeyPair
from reshuffle.crypto.domain import label
from reshuffle.crypto.ot import OTReceiver, OTResponse, OTTable
from reshuffle.crypto.rand import RandomSource, as_source
from reshuffle.crypto.shamir import Shamir, Share
from reshuffle.crypto.signatures import (
    ROLE_SERVER,
    SERVER_ID,
    Certificate,
    CertificateAuthority,
    SigningKey,
)
from reshuffle.errors import (
    ConfigError,
    DecodeError,
    EncodingError,
    ProtocolError,
    Refused,
    UnexpectedMessage,
)
from reshuffle.protocol import messages as msg
from reshuffle.protocol import credential
from reshuffle.protocol import opening
from reshuffle.protocol.blame import audit_iteration, dispute_context
from reshuffle.protocol.complaints import Dealer, check_shares, own_combined, secret_index
from reshuffle.protocol.decoys import check_opening, decoy_positions, replay
from reshuffle.protocol.masking import mask_in_place, pair_row_key, pair_secret
from reshuffle.protocol.messages import Context, MsgType, ShareKind
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.phases import PARTICIPANT_TABLE, PPhase, expected_names
from reshuffle.protocol.reservation import Reservation, settled_slots
from reshuffle.protocol.transcript import CONSENT_CONTEXT, Transcript, check_certificate
from reshuffle.wire import Parser, Writer

SETUP_PHASE_AD = 1  # channel phase tag for setup shares


def global_model_hash(data: bytes) -> bytes:
    """``H(W_g^T)``: SHA-256 of the broadcast global model's bytes."""
    return hashlib.sha256(b"reshuffle/v1/global-model" + data).digest()


def ot_proof_context(T: int) -> bytes:
    """Context of the DLEQ proof that the OT answers of round T use the β of B (§7.1)."""
    return label("ot/answer-proof", T)


@dataclass
class _RoundKeys:
    enc: DHKeyPair
    mask: list[DHKeyPair]  # x_{i,m}, m = 1..M (index m-1)
    seeds: list[int]  # b_{i,m}


@dataclass
class ParticipantView:
    """What the participant knows about its own outcome (for the runner, never for the PS)."""

    slot: int | None = None
    position: int | None = None
    uploaded: set[int] = field(default_factory=set)
    errors: list[ProtocolError] = field(default_factory=list)
    clipped: int = 0  # coordinates of its model clipped by the fixed-point codec
    revealed: dict[int, dict[int, "ShareKind"]] = field(default_factory=dict)  # m -> owner -> kind it revealed
    model_digest: bytes | None = None  # SHA-256 of the model words in its row (to score a linking attacker)


class Participant:
    """P_i for one round T.

    Parameters
    ----------
    pid : participant id (its roster id; Shamir point ``x = pid + 1``).
    T : the round it expects.
    model : 1-D vector W_i^T to upload (float32; ring words for ``payload="words"``), or None
        while it trains: every offline step runs without it, and :meth:`provide_model` must
        hand it over before the upload is asked for.
    signing_key, cert : its long-term Ed25519 key and CA certificate.
    ca : the CA's verifier.
    global_hash : ``H(W_g^T)`` of the global model it received.
    rng : randomness source (default OS randomness).

    Raises
    ------
    EncodingError : a float model holds NaN or Inf (checked before anything is masked).
    """

    def __init__(
        self,
        pid: int,
        T: int,
        model: np.ndarray | None,
        signing_key: SigningKey,
        cert: Certificate,
        ca: CertificateAuthority,
        global_hash: bytes,
        rng: RandomSource | int | None = None,
    ) -> None:
        self.pid, self.T = pid, T
        self._model: np.ndarray | None = None
        self._sk, self._cert, self._ca = signing_key, cert, ca
        self._hash = global_hash
        self._rng = as_source(rng)
        self.phase = PPhase.AWAIT_START
        self.view = ParticipantView()
        self._ctx = Context()
        self.params: RoundParams | None = None
        self._tx = Transcript(T)
        self._m = 0  # current MaskedSum invocation
        self._h: dict[int, bytes] = {}  # m -> h_m
        self._consented: dict[int, tuple[int, ...]] = {}  # m -> the one U_m signed
        self._mask_sets: dict[int, list[int]] = {}  # m -> U_{m-1}, the mask set of invocation m
        self._revealed = self.view.revealed  # m -> owner -> kind revealed
        self._last_certified = 0  # the last reservation iteration certified (the one an opening may name)
        self._abandoned = False  # the PS abandoned the first iteration after complaints (§5a)
        if model is not None:
            self.provide_model(model)

    def provide_model(self, model: np.ndarray) -> None:
        """Set W_i^T once training is done; checked now (NaN/Inf, and length and kind once the round's
        parameters are known). Raises :class:`EncodingError` or :class:`ConfigError`."""
        if self._model is not None:
            raise ConfigError(f"participant {self.pid} already has its model for round {self.T}")
        model = np.asarray(model)
        if model.dtype.kind == "f" and not np.isfinite(model).all():
            bad = int((~np.isfinite(model)).sum())
            raise EncodingError(f"participant {self.pid}: model has {bad} NaN/Inf coordinates; nothing was masked")
        if self.params is not None:
            self._check_model(model, self.params, ConfigError)
        self._model = model

    def _check_model(self, model: np.ndarray, p: RoundParams, error: type[Exception]) -> None:
        if p.d != model.size:
            raise error(f"round expects models of length {p.d}, this one has {model.size}")
        if np.dtype(p.codec.dtype if p.payload == "words" else np.float32) != model.dtype:
            raise error(f"round expects payload {p.payload!r}, this model is {model.dtype}")

    # ------------------------------------------------------------------ #
    def handle(self, data: bytes) -> list[bytes]:
        """Process one message from the PS; return the replies to send back."""
        try:
            m = msg.decode(data, self._ctx)
            handlers = PARTICIPANT_TABLE[self.phase]
            if m.TYPE not in handlers:
                raise UnexpectedMessage(
                    f"participant {self.pid} in state '{self.phase.value}' got {m.TYPE.name}; "
                    f"expected {expected_names(handlers)}"
                )
            if m.sender != SERVER_ID:
                raise UnexpectedMessage(f"message claims sender {m.sender}, not the PS")
            if m.T != self.T:
                raise UnexpectedMessage(f"message for round {m.T}, this is round {self.T}")
            if m.TYPE is not MsgType.ROUND_START:
                msg.verify(m, self._server_vk)
            return [data for r in getattr(self, handlers[m.TYPE])(m) for data in self._seal(r)]
        except ProtocolError as exc:
            self.view.errors.append(exc)
            prev_phase = self.phase
            self.phase = PPhase.ABORTED
            if prev_phase in (PPhase.DONE, PPhase.OPENED, PPhase.ABORTED):
                return []
            return [msg.Refusal(self.T, self._m, self.pid, type(exc).__name__, str(exc)).encode(self._sk)]

    def _seal(self, m: msg.Message) -> list[bytes]:
        """The signed bytes to send for ``m`` (the hook adversaries override)."""
        return [m.encode(self._sk)]

    # ------------------------------------------------------------------ #
    # §5 step 0 → 1: check the signed broadcast, advertise keys.
    def _on_round_start(self, m: msg.RoundStart) -> list[msg.Message]:
        self._ca.verify(m.server_cert, subject=SERVER_ID, role=ROLE_SERVER)
        msg.verify(m, m.server_cert.key)
        if m.global_hash != self._hash:
            raise Refused("H(W_g^T) differs from the global model this participant received")
        roster = dict(m.roster)
        if roster.get(self.pid) != self._cert:
            raise Refused(f"roster does not list participant {self.pid} with its certificate")
        for pid, cert in m.roster:
            self._ca.verify(cert, subject=pid)
        p = m.params
        if self._model is not None:
            self._check_model(self._model, p, Refused)
        self.params, self._roster, self._server_vk = p, roster, m.server_cert.key
        self._cred_key = m.cred_key
        self._tx.absorb("round-start", m.body())
        g = p.group_obj()
        self._ctx = Context(g, p)
        self._keys = _RoundKeys(
            DHKeyPair.generate(g, self._rng),
            [DHKeyPair.generate(g, self._rng) for _ in range(p.M)],
            [g.random_scalar(self._rng) for _ in range(p.M)],
        )
        # §6.4: one degree t-1 polynomial per secret (b_1, x_1, b_2, x_2, ...), committed before any share.
        secrets = [v for m_ in range(p.M) for v in (self._keys.seeds[m_], self._keys.mask[m_].secret)]
        self._polys = [[sec] + [g.random_scalar(self._rng) for _ in range(p.t - 1)] for sec in secrets]
        commitments = tuple(tuple(g.base_mul(a) for a in poly) for poly in self._polys)
        adv = msg.Advertise(self.T, 0, self.pid, self._hash, self._keys.enc.public, commitments)
        self._my_advert = adv
        self.phase = PPhase.AWAIT_ADVERTS
        return [adv]

    # §5 step 1: verify every signed advertisement, share b_{i,m} and x_{i,m}.
    def _on_advertise_list(self, m: msg.AdvertiseList) -> list[msg.Message]:
        p, g = self.params, self._ctx.group
        adverts: dict[int, msg.Advertise] = {}
        for raw in m.adverts:
            a = msg.decode_shared(raw, self._ctx)  # the same relayed bytes reach every member
            if not isinstance(a, msg.Advertise):
                raise DecodeError("advertise list holds a non-ADVERTISE message")
            if a.sender not in self._roster or a.sender in adverts:
                raise Refused(f"advertise list has an unknown or repeated sender {a.sender}")
            if a.T != self.T or a.global_hash != self._hash:
                raise Refused(f"advertisement of {a.sender} is for another round or model")
            msg.verify(a, self._roster[a.sender].key)
            adverts[a.sender] = a
        if adverts.get(self.pid) != self._my_advert:
            raise Refused("the PS did not relay this participant's own advertisement unchanged")
        if len(adverts) < p.t:
            raise Refused(f"only {len(adverts)} advertisements, threshold t={p.t}")
        self._tx.absorb("adverts", m.body())
        self._adverts = adverts
        shamir = Shamir(g.order, p.t)
        peers = sorted(adverts)
        xs = [j + 1 for j in peers]
        self._dealt: dict[int, list[int]] = {j: [] for j in peers}
        for poly in self._polys:
            for j, share in zip(peers, shamir.shares_from_coefficients(poly, xs)):
                self._dealt[j].append(share.y)
        per_peer = {j: Writer() for j in peers}
        for j, ys in self._dealt.items():
            for y in ys:
                per_peer[j].fixed(y.to_bytes(g.scalar_size, "big"), g.scalar_size)
        self._own_shares_payload = per_peer[self.pid].bytes()
        cts = []
        # Kept for opening the peers' shares at delivery: one DH per peer, not two.
        self._channels = {j: Channel(self._keys.enc, adverts[j].enc_key, self.pid, j, self.T, self._rng)
                          for j in peers if j != self.pid}
        for j, ch in self._channels.items():
            cts.append((j, ch.seal(SETUP_PHASE_AD, per_peer[j].bytes())))
        self.phase = PPhase.AWAIT_SHARES
        # Ĉ under weights bound to these ciphertexts (§6.4): the shares are fixed before the weights.
        digest = msg.ShareBundle(self.T, 0, self.pid, tuple(cts)).digest()
        return [msg.ShareBundle(self.T, 0, self.pid, tuple(cts), own_combined(self._my_advert, digest, self._polys))]

    def _parse_shares(self, owner: int, payload: bytes) -> list[int]:
        g, p = self._ctx.group, self.params
        parser = Parser(payload, f"shares from {owner}")
        ys = [g.scalar_from_bytes(parser.fixed(g.scalar_size, "share"), f"share from {owner}") for _ in range(2 * p.M)]
        parser.finish()
        return ys

    def _hold(self, owner: int, ys: list[int]) -> None:
        # The owner's 2M share values in commitment order (b_1, x_1, b_2, ...): every held share has
        # x = pid + 1, so a Share is built only when it is revealed.
        self._held[owner] = tuple(ys)

    # §5 steps 1–2: shares addressed to us, U_0, OT table; request tokens and the credential (§7.2).
    def _on_share_delivery(self, m: msg.ShareDelivery) -> list[msg.Message]:
        p = self.params
        U0 = set(m.online)
        if not U0 <= set(self._adverts) or self.pid not in U0 or len(U0) < p.t:
            raise Refused(f"U_0 is not a subset of the advertisers containing {self.pid} with >= t members")
        table = OTTable.decode(self._ctx.group, m.ot_table, p.n)
        if table.T != self.T:
            raise UnexpectedMessage(f"OT table for round {table.T}")
        self._tx.absorb("setup", m.common())
        self._decoy_commit = m.decoy_commit
        info = {d: (digest, comb) for d, digest, comb in m.dealers}
        if set(info) != U0:
            raise Refused("the PS relayed the bundle digests of another set than U_0")
        self._dealers = {d: Dealer(self._adverts[d], digest, comb) for d, (digest, comb) in info.items()}
        self._held: dict[int, tuple[int, ...]] = {}
        self._hold(self.pid, self._parse_shares(self.pid, self._own_shares_payload))
        got = dict(m.ciphertexts)
        complaints = []
        for s in sorted(U0 - {self.pid}):
            # §6.4: all shares of one dealer checked in one batch; any failure is a complaint.
            try:
                if s not in got:
                    raise DecodeError(f"no shares delivered from {s}")
                ys = self._parse_shares(s, self._channels[s].open(SETUP_PHASE_AD, got[s]))
                check_shares(self._dealers[s], self.pid + 1, ys)
                self._hold(s, ys)
            except ProtocolError as exc:
                self.view.errors.append(exc)
                complaints.append(s)
        self._mask_set = sorted(U0)
        self._ot_table = table
        self._ot = OTReceiver(self._ctx.group, self.T, p.n, k=p.k, rng=self._rng)
        self._ot_request = self._ot.request()
        suite = credential.suite(self._ctx.group)
        self._cred_r = self._rng.bytes(credential.R_BYTES)
        self._cred_blind, self._cred_blinded = voprf.blind(
            suite, credential.cred_input(self.T, self._cred_r), self._rng
        )
        # §5a: the first reservation vector rides on the OT request. It needs the candidate slots,
        # not their tokens, and it is unmasked only after the OT answers' proofs have been checked
        # and t members certified U_1; if a complaint is raised the PS abandons it unrevealed.
        self._start_reservation()
        self._phase_start = 1
        first = self._masked_input(1, self._tx.absorb_counts(1, (), ()))
        self.phase = PPhase.AWAIT_OT
        return [msg.OTRequestMsg(self.T, 0, self.pid, self._ot_request.encode(), self._cred_blinded,
                                 tuple(complaints)), first]

    # §6.4: a dealer answers complaints by publishing the disputed shares, signed.
    def _on_complaints(self, m: msg.Complaints) -> list[msg.Message]:
        bad = (set(m.complainers) - set(self._dealt)) | ({self.pid} & set(m.complainers))
        if bad:
            raise Refused(f"complaints from {sorted(bad)}, who hold no shares dealt by this participant")
        return [msg.ComplaintAnswer(self.T, 0, self.pid, tuple((j, tuple(self._dealt[j])) for j in m.complainers))]

    # §7.1–7.2: both proofs are checked before U_1 is certified, hence before any vector is unmasked.
    def _on_ot_response(self, m: msg.OTResponseMsg) -> list[msg.Message]:
        g = self._ctx.group
        suite = credential.suite(g)
        (y,) = voprf.finalize(
            suite, [credential.cred_input(self.T, self._cred_r)], [self._cred_blind], [m.cred_eval],
            [self._cred_blinded], self._cred_key, voprf.Proof.decode(g, m.cred_proof),
        )
        self._credential = credential.Credential(self._cred_r, y)
        self._take_tokens(m.response, m.ot_proof)
        for dealer, raw in m.resolved:
            # The dealer's own signed, public answer to our complaint; checked like a delivery.
            ans = msg.decode(raw, self._ctx)
            if not isinstance(ans, msg.ComplaintAnswer) or ans.sender != dealer or dealer not in self._dealers:
                raise Refused(f"resolved complaint about {dealer} is not that dealer's answer")
            msg.verify(ans, self._roster[dealer].key)
            ys = dict(ans.shares).get(self.pid)
            try:
                if ys is None:
                    raise DecodeError(f"the answer of {dealer} holds no shares for us")
                check_shares(self._dealers[dealer], self.pid + 1, ys)
                self._hold(dealer, list(ys))
            except ProtocolError as exc:
                self.view.errors.append(exc)
        self._end_setup()
        self.phase = PPhase.AWAIT_FIRST
        return []

    # §5a: after complaints the PS abandons the first iteration (masked before the complaint step
    # could exclude a dealer): nothing of invocation 1 is ever revealed, the slot phase starts at 2.
    def _on_first_abandoned(self, m: msg.MaskRequest) -> list[msg.Message]:
        if m.m != 2 or m.counts:
            raise UnexpectedMessage(f"mask request for invocation {m.m} while U_1 is awaited")
        if self.params.R_max < 2:
            raise Refused("the first iteration is abandoned, but R_max=1 leaves no other")
        self._reservation.withdraw()
        self._phase_start = 2
        self._abandoned = True
        return self._on_mask_request(m)

    def _end_setup(self) -> None:
        """Setup is over (§6.4): drop what only dealing, checking and complaints needed.

        Kept: the peers' advertisements (their channel keys, g^b and X, for masking, audit
        and disputes) and the held share values. Dropped: this participant's polynomials,
        the shares it dealt (complaints are answered before the first masked vector), its
        own advertisement object and every dealer's Ĉ.
        """
        self._polys = self._dealt = self._dealers = self._own_shares_payload = self._my_advert = None

    def _take_tokens(self, response: bytes, proof: bytes) -> None:
        """Verify the OT answers' proof against B (§7.1) and recover the tokens of this participant's choices."""
        g = self._ctx.group
        resp = OTResponse.decode(g, response, self.params.k)
        if len(resp.answers) != len(self._ot_request.blinded):
            raise DecodeError(f"OT response has {len(resp.answers)} answers for {len(self._ot_request.blinded)} requests")
        voprf.verify_dleq(
            g.generator(), self._ot_table.B, self._ot_request.blinded, resp.answers,
            voprf.Proof.decode(g, proof), ot_proof_context(self.T),
        )
        self._tokens = self._ot.recover(self._ot_table, resp)

    def _start_reservation(self) -> None:
        """A slot phase's reservation over this participant's k OT choices (its candidate slots)."""
        self._reservation = Reservation(self._ot.choices, self._rng)
        self._counts: list[tuple[int, ...]] = []  # of the current slot phase

    # §6.1 for §5 steps 3–4: reservation vectors, then the model list, masked under h_m.
    def _on_mask_request(self, m: msg.MaskRequest) -> list[msg.Message]:
        p = self.params
        nxt = self._m + 1
        # The upload may follow any iteration whose counts settle every party (checked below).
        if m.m != nxt and not (m.m == p.upload_m and m.counts and nxt <= p.R_max):
            raise UnexpectedMessage(f"mask request for invocation {m.m}, expected {nxt}")
        if (m.m == self._phase_start) != (len(m.counts) == 0) or (m.counts and len(m.counts) != p.n):
            raise DecodeError(f"invocation {m.m} carries {len(m.counts)} counts")
        if m.m > p.upload_m:
            raise UnexpectedMessage(f"invocation {m.m} beyond the upload ({p.upload_m})")
        # Only the request that replaces an abandoned first iteration names the dealers the complaint step excluded.
        first = self._abandoned and m.m == 2
        if m.excluded and (not first or not set(m.excluded) <= set(self._mask_set) or self.pid in m.excluded):
            raise Refused(f"invocation {m.m} excludes {list(m.excluded)} from the mask set")
        if first:
            self._mask_set = sorted(set(self._mask_set) - set(m.excluded))
            if len(self._mask_set) < p.t:
                raise Refused(f"U_0 after the complaint step has {len(self._mask_set)} members, t={p.t}")
        h = self._tx.absorb_counts(m.m, m.counts, m.excluded)
        self._h[m.m], self._m = h, m.m
        if m.counts:
            # §8.2: counts no honest PS publishes stop the round; a lost own pick is objected to.
            bound = opening.count_bound(len(self._mask_set), p.decoys, len(settled_slots(self._counts)),
                                        len(self._mask_sets[self._phase_start]) - len(self._mask_set))
            reason = opening.check_counts(m.counts, bound)
            if reason is not None:
                raise Refused(f"published counts of iteration {m.m - 1} fail the count check: {reason}")
            pick = self._reservation.pick
            if pick is not None and m.counts[pick] == 0:
                self.phase = PPhase.OBJECTED
                return [msg.Objection(self.T, m.m, self.pid, pick, h)]
            self._counts.append(m.counts)
            self._reservation.observe(m.counts)
            # Both sides end the reservation at the same point: as soon as nobody can still pick.
            # Members missing from the phase's first U never submitted in it, so own no settled slot.
            done = opening.slots_done(len(self._mask_set), p.decoys, len(settled_slots(self._counts)),
                                      len(self._consented[self._phase_start]) - len(self._mask_set))
            if done and m.m <= p.R_max:
                raise Refused(f"invocation {m.m} is another reservation iteration, but every party has settled: "
                              "the upload comes next")
            if not done and m.m != nxt:
                raise Refused(f"invocation {m.m} skips iterations {nxt}..{p.R_max} while parties may still pick")
        # One model list per round: once it is sent, nothing about this slot phase's picks is revealed.
        self.phase = PPhase.UPLOADED if m.m == p.upload_m else PPhase.AWAIT_LIST
        return [self._masked_input(m.m, h)]

    def _masked_input(self, m: int, h: bytes) -> msg.MaskedInput:
        """Invocation m's vector (a reservation vector, or LW for the upload), masked under h_m."""
        self._h[m], self._m = h, m
        if m <= self.params.R_max:
            v, rows = self._reservation_vector(), 1
        else:
            v, rows = self._model_list()
        self._mask_sets[m] = list(self._mask_set)
        peers = {j: self._adverts[j].mask_keys[m - 1] for j in self._mask_set}
        mask_in_place(v, self._ctx.group, self.T, m, self.pid, self._keys.seeds[m - 1],
                      self._keys.mask[m - 1].secret, peers, h, rows)
        self.view.uploaded.add(m)
        v.setflags(write=False)  # the message views v: its words are copied once, into the encoding
        return msg.MaskedInput(self.T, m, self.pid, h, rows, memoryview(v).cast("B"))

    def _reservation_vector(self) -> np.ndarray:
        """One-hot at this iteration's pick, or all zeros (settled, or no free candidate left)."""
        v = np.zeros(self.params.n, dtype=np.uint32)
        pick = self._reservation.choose()
        if pick is not None:
            v[pick] = 1
        return v

    def _model_list(self) -> tuple[np.ndarray, int]:
        """LW: one row per settled slot; ours holds the credentialed, tagged row (§5 step 4, §7.2)."""
        p = self.params
        S = settled_slots(self._counts)
        lw = np.zeros((len(S), p.row_words), dtype=p.codec.dtype)
        if self._model is None:
            # Still training when the upload is asked for: this participant drops out of the round.
            raise UnexpectedMessage(f"participant {self.pid} has no model yet: the upload is asked for before "
                                    "training ended")
        slot = self._reservation.slot
        self.view.slot = slot
        if slot is not None:
            pos = S.index(slot)
            self.view.position = pos
            enc = p.codec.encode(self._model)
            self.view.clipped = enc.clipped
            self.view.model_digest = hashlib.sha256(enc.words.tobytes()).digest()
            row = credential.build_row(
                enc.words, self._tokens[slot], self._credential, self._rng.bytes(credential.K_BYTES), self.T, pos
            )
            lw[pos] = np.frombuffer(row, dtype=p.codec.dtype)
        return lw.reshape(-1), max(len(S), 1)

    # §8.2: open a failed iteration (reveal x_{i,r} only), then take part in the restarted slot phase.
    def _on_open_request(self, m: msg.OpenRequest) -> list[msg.Message]:
        r = m.m
        last = self._last_certified
        if r != last or not self._phase_start <= r <= self.params.R_max or r not in self._revealed:
            raise Refused(f"asked to open iteration {r}; the last certified iteration of this slot phase is {last}")
        self._tx.absorb_open(r, m.reason)
        # A restart resumes at the first invocation none of whose keys masked anything: one key, one
        # plaintext (after an objection, invocation r + 1's vectors were sent already).
        self._opened, self._resume = r, self._m + 1
        X = {j: self._adverts[j].mask_keys[r - 1] for j in self._mask_sets[r] if j != self.pid}
        # An objection to the counts that ended the reservation ends the round: the upload followed them.
        self.phase = PPhase.ENDED if self._m == self.params.upload_m else PPhase.AWAIT_RESTART
        return [msg.OpenReveal(self.T, r, self.pid, self._keys.mask[r - 1].secret, tuple(sorted(X.items())))]

    def _on_restart(self, m: msg.Restart) -> list[msg.Message]:
        p = self.params
        if m.m != self._resume or m.opened != self._opened:
            raise Refused(f"restart at invocation {m.m} after opening {m.opened}; expected {self._resume}, {self._opened}")
        if m.m > p.R_max:
            # No reservation iteration is left: a restart could only re-run the upload invocation.
            raise Refused(f"restart at invocation {m.m} leaves no reservation iteration (R_max={p.R_max})")
        keys = {j: c.key for j, c in self._roster.items()}
        named = set()
        for raw in m.evidence:
            ev = opening.CountEvidence.decode(raw)
            if ev.r != self._opened or ev.pid not in self._mask_set:
                raise Refused(f"restart names {ev.pid} for iteration {ev.r}, not a member of the opened one")
            opening.verify_count_evidence(ev, keys, p)
            named.add(ev.pid)
        if not set(m.silent) <= set(self._mask_set) or self.pid in set(m.silent) | named:
            raise Refused(f"restart drops {list(m.silent)}: not members of U_{self._opened} other than this one")
        self._mask_set = sorted(set(self._mask_set) - named - set(m.silent))
        if len(self._mask_set) < p.t:
            raise Refused(f"the restarted slot phase has {len(self._mask_set)} members, threshold t={p.t}")
        table = OTTable.decode(self._ctx.group, m.ot_table, p.n)
        if table.T != self.T:
            raise UnexpectedMessage(f"OT table for round {table.T}")
        self._tx.absorb("restart", m.body())
        self._ot_table, self._decoy_commit = table, m.decoy_commit
        self._ot = OTReceiver(self._ctx.group, self.T, p.n, k=p.k, rng=self._rng)
        self._ot_request = self._ot.request()
        self._m, self._phase_start = m.m - 1, m.m
        self.phase = PPhase.AWAIT_SLOTS
        return [msg.SlotRequest(self.T, m.m, self.pid, self._ot_request.encode())]

    def _on_slot_response(self, m: msg.SlotResponse) -> list[msg.Message]:
        if m.m != self._phase_start:
            raise UnexpectedMessage(f"slot response for invocation {m.m}, the slot phase restarts at {self._phase_start}")
        self._take_tokens(m.response, m.ot_proof)
        self._start_reservation()
        self.phase = PPhase.AWAIT_MASK
        return []

    # §6.2–6.3: sign the one statement (T, m, U_m, h_m) of this invocation.
    def _on_unmask_request(self, m: msg.UnmaskRequest) -> list[msg.Message]:
        p = self.params
        if m.m != self._m:
            raise UnexpectedMessage(f"U_{m.m} announced during invocation {self._m}")
        Um, prev = set(m.online), set(self._mask_set)
        if not Um <= prev:
            raise Refused(f"U_{m.m} is not a subset of U_{m.m - 1}: inconsistent online lists")
        if self.pid not in Um or len(Um) < p.t:
            raise Refused(f"U_{m.m} has {len(Um)} members (t={p.t}) or omits participant {self.pid}")
        self._consented[m.m] = m.online
        stmt = msg.consent_statement(self.T, m.m, m.online, self._h[m.m])
        self.phase = PPhase.AWAIT_CERT
        return [msg.Consent(self.T, m.m, self.pid, self._sk.sign(CONSENT_CONTEXT, stmt))]

    # §6.3 after the certificate: reveal shares once, never both kinds for one owner.
    def _on_certificate(self, m: msg.CertificateMsg) -> list[msg.Message]:
        p = self.params
        if m.m != self._m or m.online != self._consented.get(m.m):
            raise Refused(f"certificate is for another U_{m.m} than the one this participant signed")
        keys = {j: self._roster[j].key for j in m.online}
        check_certificate(self.T, m.m, m.online, self._h[m.m], m.signatures, keys, p.t)
        self._tx.absorb_certified(m.m, m.online)
        if m.m <= p.R_max:
            self._last_certified = m.m
        self.phase = PPhase.DONE if m.m == p.upload_m else PPhase.AWAIT_MASK
        return [self._reveal(m.m, m.online)]

    def _reveal(self, m: int, online: tuple[int, ...]) -> msg.UnmaskResponse:
        """Shares for a certified U_m: self seeds of its members, DH secrets of the dropped."""
        Um, prev = set(online), set(self._mask_set)
        plan = {j: ShareKind.SELF_SEED for j in Um}
        plan.update({j: ShareKind.DH_SECRET for j in prev - Um})
        # One kind per owner (plan is a dict), one answer per invocation (the state moves on).
        self._revealed[m] = plan
        out = [
            (owner, kind, Share(self.pid + 1, self._held[owner][secret_index(m, kind)]))
            for owner, kind in sorted(plan.items())
            if owner in self._held
        ]
        self._mask_set = sorted(Um)
        return msg.UnmaskResponse(self.T, m, self.pid, tuple(out))

    # §9 steps 1–2: audit every reservation iteration, then open the decoy rows' keys (never its own row).
    def _on_blame_request(self, m: msg.BlameRequest) -> list[msg.Message]:
        p, g = self.params, self._ctx.group
        if m.m != p.upload_m:
            raise UnexpectedMessage(f"blame request for invocation {m.m}, the upload is {p.upload_m}")
        check_opening(self.T, m.decoy_seed, self._decoy_commit)
        picks, slots = replay(m.decoy_seed, self.T, p.n, p.k, p.decoys, self._counts)
        keys = {j: c.key for j, c in self._roster.items()}
        # The slot phase that produced the upload (it ended early once every party had settled).
        iterations = range(self._phase_start, self._phase_start + len(self._counts))
        if len(m.vectors) != len(iterations):
            raise Refused(f"blame request audits {len(m.vectors)} iterations, the slot phase had {len(iterations)}")
        for idx, r in enumerate(iterations):
            vectors = [msg.decode(v, self._ctx) for v in m.vectors[idx]]
            audit_iteration(
                g, self.T, r, self._h[r], list(self._consented[r]), self._mask_sets[r], vectors,
                dict(m.seeds[idx]), dict(m.dropped[idx]), self._adverts, keys, self._counts[idx], picks[idx],
            )
        positions = decoy_positions(self._counts, slots)
        if list(m.positions) != positions or self.view.position in positions:
            raise Refused(f"asked to open positions {list(m.positions)}, the decoys hold {positions}")
        up = p.upload_m
        x = self._keys.mask[up - 1].secret
        K = {j: pair_secret(x, self._adverts[j].mask_keys[up - 1]) for j in self._mask_sets[up] if j != self.pid}
        rows = tuple(
            (pos, tuple((j, pair_row_key(K_j, self.T, up, self.pid, j, self._h[up], pos)) for j, K_j in sorted(K.items())))
            for pos in positions
        )
        self._opening = msg.Opening(self.T, up, self.pid, rows)
        self.phase = PPhase.OPENED
        return [self._opening]

    # §9 step 3: reveal K_ij, proved, only against the partner's signed conflicting opening.
    def _on_dispute(self, m: msg.Dispute) -> list[msg.Message]:
        g, up = self._ctx.group, self.params.upload_m
        theirs = msg.decode(m.partner_opening, self._ctx)
        if not isinstance(theirs, msg.Opening) or theirs.sender != m.partner or theirs.T != self.T:
            raise Refused("dispute does not carry the partner's opening")
        msg.verify(theirs, self._roster[m.partner].key)
        mine = {pos: dict(keys) for pos, keys in self._opening.rows}
        if all(dict(keys).get(self.pid) == mine.get(pos, {}).get(m.partner) for pos, keys in theirs.rows):
            raise Refused(f"the opening of {m.partner} does not conflict with this participant's")
        x = self._keys.mask[up - 1].secret
        X_p = self._adverts[m.partner].mask_keys[up - 1]
        K = X_p**x
        proof = voprf.prove_dleq(x, g.generator(), self._keys.mask[up - 1].public, [X_p], [K], self._rng,
                                 dispute_context(self.T, self.pid, m.partner))
        self.phase = PPhase.DONE_BLAME
        return [msg.DisputeAnswer(self.T, up, self.pid, m.partner, K, proof.encode(g))]
