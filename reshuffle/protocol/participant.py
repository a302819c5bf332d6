"""Participant state machine (PROTOCOL.md §4–§5).

A :class:`Participant` sees only bytes from the PS and answers with bytes. Every
incoming message is fully parsed and checked before the state moves on; any
:class:`ProtocolError` makes it answer with a typed :class:`Refusal` and abort
the round (the PS is the only sender, so a bad message means a bad PS or a bad
network, and the safe move is to stop revealing anything).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from reshuffle.crypto.channel import Channel, DHKeyPair
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
    DecodeError,
    ProtocolError,
    Refused,
    UnexpectedMessage,
)
from reshuffle.protocol import messages as msg
from reshuffle.protocol.masking import mask_in_place
from reshuffle.protocol.messages import Context, ShareKind
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.phases import PARTICIPANT_TABLE, PPhase, expected_names
from reshuffle.protocol.reservation import Reservation, settled_slots
from reshuffle.wire import Parser, Writer

SETUP_PHASE_AD = 1  # channel phase tag for setup shares


def global_model_hash(data: bytes) -> bytes:
    """``H(W_g^T)``: SHA-256 of the broadcast global model's bytes."""
    return hashlib.sha256(b"reshuffle/v1/global-model" + data).digest()


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


class Participant:
    """P_i for one round T.

    Parameters
    ----------
    pid : participant id (its roster id; Shamir point ``x = pid + 1``).
    T : the round it expects.
    model : 1-D float32 vector W_i^T (or update) to upload.
    signing_key, cert : its long-term Ed25519 key and CA certificate.
    ca : the CA's verifier.
    global_hash : ``H(W_g^T)`` of the global model it received.
    rng : randomness source (default OS randomness).
    """

    def __init__(
        self,
        pid: int,
        T: int,
        model: np.ndarray,
        signing_key: SigningKey,
        cert: Certificate,
        ca: CertificateAuthority,
        global_hash: bytes,
        rng: RandomSource | int | None = None,
    ) -> None:
        self.pid, self.T = pid, T
        self._model = model
        self._sk, self._cert, self._ca = signing_key, cert, ca
        self._hash = global_hash
        self._rng = as_source(rng)
        self.phase = PPhase.AWAIT_START
        self.view = ParticipantView()
        self._ctx = Context()
        self.params: RoundParams | None = None
        self._m = 0  # current MaskedSum invocation
        self._revealed: dict[int, dict[int, ShareKind]] = {}  # m -> owner -> kind revealed

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
            return getattr(self, handlers[m.TYPE])(m)
        except ProtocolError as exc:
            self.view.errors.append(exc)
            prev_phase = self.phase
            self.phase = PPhase.ABORTED
            if prev_phase in (PPhase.DONE, PPhase.ABORTED):
                return []
            return [msg.Refusal(self.T, self._m, self.pid, type(exc).__name__, str(exc)).encode()]

    # ------------------------------------------------------------------ #
    # §5 step 0 → 1: check the broadcast, advertise signed keys.
    def _on_round_start(self, m: msg.RoundStart) -> list[bytes]:
        if m.global_hash != self._hash:
            raise Refused("H(W_g^T) differs from the global model this participant received")
        self._ca.verify(m.server_cert, subject=SERVER_ID, role=ROLE_SERVER)
        roster = dict(m.roster)
        if roster.get(self.pid) != self._cert:
            raise Refused(f"roster does not list participant {self.pid} with its certificate")
        for pid, cert in m.roster:
            self._ca.verify(cert, subject=pid)
        p = m.params
        if p.d != self._model.size:
            raise Refused(f"round expects models of length {p.d}, this one has {self._model.size}")
        self.params, self._roster, self._server_vk = p, roster, m.server_cert.key
        g = p.group_obj()
        self._ctx = Context(g, p)
        self._keys = _RoundKeys(
            DHKeyPair.generate(g, self._rng),
            [DHKeyPair.generate(g, self._rng) for _ in range(p.M)],
            [g.random_scalar(self._rng) for _ in range(p.M)],
        )
        adv = msg.Advertise(
            self.T, 0, self.pid, self._hash, self._keys.enc.public,
            tuple(kp.public for kp in self._keys.mask),
            tuple(g.base_mul(b) for b in self._keys.seeds), bytes(64),
        )
        adv = msg.Advertise(**{**adv.__dict__, "signature": self._sk.sign("advertise", adv.signed_bytes())})
        self._my_advert = adv
        self.phase = PPhase.AWAIT_ADVERTS
        return [adv.encode()]

    # §5 step 1: verify every advertisement, share b_{i,m} and x_{i,m}.
    def _on_advertise_list(self, m: msg.AdvertiseList) -> list[bytes]:
        p, g = self.params, self._ctx.group
        adverts: dict[int, msg.Advertise] = {}
        for raw in m.adverts:
            a = msg.decode(raw, self._ctx)
            if not isinstance(a, msg.Advertise):
                raise DecodeError("advertise list holds a non-ADVERTISE message")
            if a.sender not in self._roster or a.sender in adverts:
                raise Refused(f"advertise list has an unknown or repeated sender {a.sender}")
            if a.T != self.T or a.global_hash != self._hash:
                raise Refused(f"advertisement of {a.sender} is for another round or model")
            self._roster[a.sender].key.verify("advertise", a.signed_bytes(), a.signature)
            adverts[a.sender] = a
        if adverts.get(self.pid) != self._my_advert:
            raise Refused("the PS did not relay this participant's own advertisement unchanged")
        if len(adverts) < p.t:
            raise Refused(f"only {len(adverts)} advertisements, threshold t={p.t}")
        self._adverts = adverts
        shamir = Shamir(g.order, p.t)
        peers = sorted(adverts)
        xs = [j + 1 for j in peers]
        per_peer: dict[int, Writer] = {j: Writer() for j in peers}
        for idx in range(p.M):
            for secret in (self._keys.seeds[idx], self._keys.mask[idx].secret):
                for j, share in zip(peers, shamir.split(secret, xs, self._rng)):
                    per_peer[j].fixed(share.y.to_bytes(g.scalar_size, "big"), g.scalar_size)
        self._own_shares_payload = per_peer[self.pid].bytes()
        cts = []
        for j in peers:
            if j == self.pid:
                continue
            ch = Channel(self._keys.enc, adverts[j].enc_key, self.pid, j, self.T, self._rng)
            cts.append((j, ch.seal(SETUP_PHASE_AD, per_peer[j].bytes())))
        self.phase = PPhase.AWAIT_SHARES
        return [msg.ShareBundle(self.T, 0, self.pid, tuple(cts)).encode()]

    def _parse_shares(self, owner: int, payload: bytes) -> None:
        g, p = self._ctx.group, self.params
        parser = Parser(payload, f"shares from {owner}")
        for idx in range(p.M):
            for kind in (ShareKind.SELF_SEED, ShareKind.DH_SECRET):
                y = int.from_bytes(parser.fixed(g.scalar_size, "share"), "big")
                if y >= g.order:
                    raise DecodeError(f"share from {owner} not reduced")
                self._held[(owner, idx + 1, kind)] = Share(self.pid + 1, y)
        parser.finish()

    # §5 steps 1–2: receive the shares addressed to us, signed U_0, OT table; request tokens.
    def _on_share_delivery(self, m: msg.ShareDelivery) -> list[bytes]:
        p = self.params
        self._server_vk.verify("ulist", msg.signed_list(self.T, 0, self._hash, m.online), m.signature)
        U0 = set(m.online)
        if not U0 <= set(self._adverts) or self.pid not in U0 or len(U0) < p.t:
            raise Refused(f"U_0 is not a subset of the advertisers containing {self.pid} with >= t members")
        self._held: dict[tuple[int, int, ShareKind], Share] = {}
        self._parse_shares(self.pid, self._own_shares_payload)
        got = dict(m.ciphertexts)
        for s in sorted(U0 - {self.pid}):
            if s not in got:
                self.view.errors.append(DecodeError(f"no shares delivered from {s}"))
                continue
            ch = Channel(self._keys.enc, self._adverts[s].enc_key, self.pid, s, self.T)
            try:
                self._parse_shares(s, ch.open(SETUP_PHASE_AD, got[s]))
            except ProtocolError as exc:
                # P_s sent us garbage: we simply hold none of its shares.
                self.view.errors.append(exc)
        self._mask_set = sorted(U0)
        table = OTTable.decode(self._ctx.group, m.ot_table, p.n)
        if table.T != self.T:
            raise UnexpectedMessage(f"OT table for round {table.T}")
        self._ot_table = table
        self._ot = OTReceiver(self._ctx.group, self.T, p.n, k=p.k, rng=self._rng)
        self.phase = PPhase.AWAIT_OT
        return [msg.OTRequestMsg(self.T, 0, self.pid, self._ot.request().encode()).encode()]

    def _on_ot_response(self, m: msg.OTResponseMsg) -> list[bytes]:
        resp = OTResponse.decode(self._ctx.group, m.response, self.params.k)
        self._tokens = self._ot.recover(self._ot_table, resp)
        self._reservation = Reservation(self._tokens, self._rng)
        self._counts: list[tuple[int, ...]] = []
        self.phase = PPhase.AWAIT_MASK
        return []

    # §4 step 3 for §5 steps 3–4: reservation vectors, then the model list.
    def _on_mask_request(self, m: msg.MaskRequest) -> list[bytes]:
        p = self.params
        if m.m != self._m + 1:
            raise UnexpectedMessage(f"mask request for invocation {m.m}, expected {self._m + 1}")
        self._server_vk.verify("counts", msg.signed_counts(self.T, m.m, self._hash, m.counts), m.signature)
        if (m.m == 1) != (len(m.counts) == 0) or (m.m > 1 and len(m.counts) != p.n):
            raise DecodeError(f"invocation {m.m} carries {len(m.counts)} counts")
        if m.m > p.upload_m:
            raise UnexpectedMessage(f"invocation {m.m} beyond the upload ({p.upload_m})")
        if m.counts:
            self._counts.append(m.counts)
            self._reservation.observe(m.counts)
        self._m = m.m
        if m.m <= p.R_max:
            v = np.zeros(p.n, dtype=np.uint32)
            pick = self._reservation.choose()
            if pick is not None:
                v[pick] = 1
        else:
            v = self._model_list()
        g = self._ctx.group
        peers = {j: self._adverts[j].mask_keys[m.m - 1] for j in self._mask_set}
        mask_in_place(v, g, self.T, m.m, self.pid, self._keys.seeds[m.m - 1],
                      self._keys.mask[m.m - 1].secret, peers)
        self.view.uploaded.add(m.m)
        self.phase = PPhase.AWAIT_UNMASK
        return [msg.MaskedInput(self.T, m.m, self.pid, v.tobytes()).encode()]

    def _model_list(self) -> np.ndarray:
        """LW: one row per settled slot; ours holds Enc(W_i) ‖ τ_slot (§5 step 4)."""
        p = self.params
        S = settled_slots(self._counts)
        lw = np.zeros((len(S), p.row_words), dtype=p.codec.dtype)
        slot = self._reservation.slot
        self.view.slot = slot
        if slot is not None:
            pos = S.index(slot)
            self.view.position = pos
            lw[pos, : p.d] = p.codec.encode(self._model).words
            lw[pos, p.d :] = np.frombuffer(self._tokens[slot], dtype=p.codec.dtype)
        return lw.reshape(-1)

    # §4 step 4: reveal shares, once per invocation, never both kinds for one owner.
    def _on_unmask_request(self, m: msg.UnmaskRequest) -> list[bytes]:
        p = self.params
        if m.m != self._m:
            raise UnexpectedMessage(f"unmask request for invocation {m.m}, current is {self._m}")
        self._server_vk.verify("ulist", msg.signed_list(self.T, m.m, self._hash, m.online), m.signature)
        Um, prev = set(m.online), set(self._mask_set)
        if not Um <= prev:
            raise Refused(f"U_{m.m} is not a subset of U_{m.m - 1}: inconsistent online lists")
        if self.pid not in Um or len(Um) < p.t:
            raise Refused(f"U_{m.m} has {len(Um)} members (t={p.t}) or omits participant {self.pid}")
        plan = {j: ShareKind.SELF_SEED for j in Um}
        plan.update({j: ShareKind.DH_SECRET for j in prev - Um})
        # One kind per owner (plan is a dict) and one answer per invocation (the
        # state moves on, so a second request is an UnexpectedMessage): an
        # inconsistent PS would need t answers of each kind, i.e. 2t > N answers.
        self._revealed[m.m] = plan
        out = [
            (owner, kind, self._held[(owner, m.m, kind)])
            for owner, kind in sorted(plan.items())
            if (owner, m.m, kind) in self._held
        ]
        self._mask_set = sorted(Um)
        self.phase = PPhase.DONE if m.m == p.upload_m else PPhase.AWAIT_MASK
        return [msg.UnmaskResponse(self.T, m.m, self.pid, tuple(out)).encode()]
