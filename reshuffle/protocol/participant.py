"""Participant state machine (docs/protocol.md §5–§9).

A :class:`Participant` sees only bytes from the PS and answers with bytes. Every
incoming message is fully parsed, its PS signature checked and its content
validated before the state moves on; any :class:`ProtocolError` makes it answer
with a typed :class:`Refusal` and abort the round (the PS is the only sender, so
a bad message means a bad PS or a bad network, and the safe move is to stop
revealing anything). Every reply is signed with the participant's key.

Everything the participant knows about the round between two messages is one
value, :class:`ParticipantState`: its phase (:class:`~reshuffle.protocol.phases.PPhase`)
and one frozen record per mechanism, each created by the transition that needs it
(:class:`Session` at ROUND_START, :class:`Peers` with the advertisements,
:class:`SlotPhase` per slot phase, :class:`Invocations` for the MaskedSums). Each
handler of :data:`~reshuffle.protocol.phases.PARTICIPANT_TABLE` takes the state and
the message and returns the next state with its replies; a refused message leaves
nothing of what it started. The explorer of PS schedules
(:mod:`reshuffle.adversaries.explorer`) branches a participant by copying it
(:meth:`Participant.fork`).

The rooms it uses: :mod:`~reshuffle.protocol.transcript` (h_m, consent and
certificate), :mod:`~reshuffle.protocol.credential` (row credential and tag),
:mod:`~reshuffle.crypto.voprf` (proofs of the OT answers and the credential).
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from reshuffle.crypto import voprf
from reshuffle.crypto.channel import Channel, DHKeyPair
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element
from reshuffle.crypto.ot import OTReceiver, OTRequest, OTResponse, OTTable
from reshuffle.crypto.rand import RandomSource, as_source, substream
from reshuffle.crypto.shamir import Shamir, Share
from reshuffle.crypto.signatures import (
    ROLE_SERVER,
    SERVER_ID,
    Certificate,
    CertificateAuthority,
    SigningKey,
    VerifyKey,
)
from reshuffle.errors import (
    ConfigError,
    DecodeError,
    EncodingError,
    ProtocolError,
    Refused,
    UnexpectedMessage,
)
from reshuffle.protocol import credential
from reshuffle.protocol import messages as msg
from reshuffle.protocol import opening
from reshuffle.protocol import pseudonym
from reshuffle.protocol.blame import audit_iteration, dispute_context
from reshuffle.protocol.complaints import Dealer, check_shares, own_combined, secret_index
from reshuffle.protocol.decoys import check_opening, decoy_positions, replay
from reshuffle.protocol.masking import mask_in_place, pair_row_key, pair_secret
from reshuffle.protocol.messages import Context, MsgType, ShareKind
from reshuffle.protocol.params import RoundParams, TrustFloors
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


@dataclass(frozen=True)
class RoundKeys:
    """This round's secrets: the channel key pair, and per invocation m = 1..M the masking key pair
    x_{i,m} (index m − 1) and the self-mask seed b_{i,m}."""

    enc: DHKeyPair = field(repr=False)
    mask: tuple[DHKeyPair, ...] = field(repr=False)
    seeds: tuple[int, ...] = field(repr=False)


@dataclass(frozen=True)
class Session:
    """What ROUND_START fixed (§5.0): the parameters, the roster, the PS's keys, this round's secrets."""

    params: RoundParams
    ctx: Context
    roster: Mapping[int, Certificate]
    server_vk: VerifyKey
    cred_key: Element
    keys: RoundKeys = field(repr=False)
    epoch: int = 0
    nym_key: Element | None = None  # P of the epoch (§7.3)


@dataclass(frozen=True)
class Dealing:
    """The dealer's side of setup (§6.4), dropped when setup ends: the polynomials, the own signed
    advertisement, and once the advertisers are known the share values dealt to each."""

    polys: tuple[tuple[int, ...], ...] = field(repr=False)
    advert: msg.Advertise
    dealt: Mapping[int, tuple[int, ...]] | None = field(default=None, repr=False)
    own_payload: bytes = field(default=b"", repr=False)


@dataclass(frozen=True)
class Peers:
    """The advertisers (§5.1): their signed advertisements and the channels to them."""

    adverts: Mapping[int, msg.Advertise]
    channels: Mapping[int, Channel]


@dataclass(frozen=True)
class CredentialRequest:
    """The row credential (§7.2): the nonce r, the blind and blinded input, and once unblinded the credential."""

    r: bytes = field(repr=False)
    blind: int = field(repr=False)
    blinded: Element
    value: credential.Credential | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SlotPhase:
    """One slot phase (§5.2–5.3, §8.2): its OT table and request, the tokens obtained, the reservation
    and the counts published so far. A restart begins another at invocation ``start``."""

    start: int
    table: OTTable
    decoy_commit: bytes
    ot: OTReceiver
    request: OTRequest
    tokens: Mapping[int, bytes] | None = field(default=None, repr=False)
    reservation: Reservation | None = field(default=None, repr=False)
    counts: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Invocations:
    """The MaskedSums (§6): the current invocation m, h_m of each, the mask set now and per invocation,
    the one U_m signed per invocation, what was revealed, and the last certified reservation iteration."""

    m: int = 0
    h: Mapping[int, bytes] = field(default_factory=dict)
    mask_set: tuple[int, ...] = ()
    mask_sets: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    consented: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    revealed: Mapping[int, Mapping[int, ShareKind]] = field(default_factory=dict)
    sent: frozenset[int] = frozenset()  # invocations whose vector it sent (each at most once)
    last_certified: int = 0
    abandoned: bool = False  # the first iteration was abandoned after complaints (§5a)


@dataclass(frozen=True)
class Opened:
    """An opening this participant answered (§8.2): the iteration, and where a restart must resume."""

    r: int
    resume: int


@dataclass(frozen=True)
class ParticipantState:
    """Everything the participant holds about round T between two messages; each handler returns the next."""

    phase: PPhase
    h: bytes  # the transcript hash so far (§6.2)
    session: Session | None = None
    dealing: Dealing | None = None
    peers: Peers | None = None
    # owner -> its 2M share values at our point
    held: Mapping[int, tuple[int, ...]] = field(default_factory=dict, repr=False)
    dealers: Mapping[int, Dealer] | None = None  # (digest, Ĉ) of each dealer, until setup ends
    cred: CredentialRequest | None = None
    slots: SlotPhase | None = None
    inv: Invocations = field(default_factory=Invocations)
    opened: Opened | None = None
    opening: msg.Opening | None = None  # its signed opening of the decoy rows (§9), kept for disputes
    # §7.3: its pseudonym record of the epoch (held from an earlier round, or drawn in this one; pending until
    # the PS's evaluation), whether it was handed over, and whether a certificate of this round has confirmed
    # the key it was issued under
    nym: pseudonym.Pseudonym | None = field(default=None, repr=False)
    nym_held: bool = False
    nym_certified: bool = False

    @property
    def position(self) -> int | None:
        """Its own row in the model list: its settled slot's rank among the settled slots (None without one)."""
        res = self.slots.reservation if self.slots is not None else None
        if res is None or res.slot is None:
            return None
        return settled_slots(self.slots.counts).index(res.slot)


@dataclass
class ParticipantView:
    """What the participant knows about its own outcome (for the runner, never for the PS)."""

    slot: int | None = field(default=None, repr=False)
    position: int | None = field(default=None, repr=False)
    uploaded: set[int] = field(default_factory=set)
    errors: list[ProtocolError] = field(default_factory=list)
    clipped: int = 0  # coordinates of its model clipped by the fixed-point codec
    revealed: dict[int, dict[int, "ShareKind"]] = field(default_factory=dict)  # m -> owner -> kind it revealed
    # the tags of the rows it wrote, unique per row (to score a linking attacker)
    row_tags: tuple[bytes, ...] = field(default=(), repr=False)


Replies = tuple[ParticipantState, list[msg.Message]]


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
    floors : its own bounds on the round parameters the PS announces (default :class:`TrustFloors`()):
        a ROUND_START beyond them is refused with :class:`~reshuffle.protocol.params.BelowFloor`.

    Raises
    ------
    EncodingError : a float model holds NaN or Inf (checked before anything is masked).

    Hooks (:data:`reshuffle.adversaries.base.PARTICIPANT_HOOKS`): a deviating participant
    overrides only these. The message handlers named by :attr:`TABLE` take the state and a
    message that :meth:`handle` has decoded, matched to the state and checked to come from
    the PS, for round T, under the PS's signature (ROUND_START's handler checks its own);
    each returns the next state and its replies, which go out through :meth:`_seal`. When a
    handler raises a :class:`ProtocolError`, nothing of its work is kept: the participant
    aborts in the state it had and refuses (a signed Refusal until its round is over). The
    named hooks say what each may change where they are defined.
    """

    #: Hook: which message each state accepts, and its handler (a weakened participant accepts more).
    TABLE = PARTICIPANT_TABLE

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
        floors: TrustFloors | None = None,
    ) -> None:
        self.pid, self.T = pid, T
        self.floors = floors if floors is not None else TrustFloors()
        if not isinstance(self.floors, TrustFloors):
            raise ConfigError(f"floors must be a TrustFloors, got {type(floors).__name__}")
        self._model: np.ndarray | None = None
        self._sk, self._cert, self._ca = signing_key, cert, ca
        self._hash = global_hash
        self._rng = as_source(rng)
        # Pseudonym issuance draws from its own stream, so that the round's other draws stay as they were.
        self._nym_rng = substream(self._rng, b"participant/pseudonym")
        # Set by the group wrapper for a round of its anonymity group: the advertisements' pseudonym commitments
        # are then checked against those its group mates signed earlier in the epoch (§7.3).
        self.group_round = False
        self.state = ParticipantState(PPhase.AWAIT_START, Transcript(T).h)
        self.view = ParticipantView()
        if model is not None:
            self.provide_model(model)

    # ------------------------------------------------------------------ #
    @property
    def phase(self) -> PPhase:
        return self.state.phase

    @property
    def params(self) -> RoundParams | None:
        return self.state.session.params if self.state.session else None

    @property
    def ctx(self) -> Context:
        return self.state.session.ctx if self.state.session else Context()

    def hold_pseudonym(self, nym: pseudonym.Pseudonym | None) -> None:
        """Give it the pseudonym it was issued in an earlier round (§7.3), before ROUND_START. A pseudonym of
        the round's epoch is used as it is (under the same P, else :class:`EpochKeyMismatch`); one of an
        earlier epoch is dropped and a new one asked for."""
        if self.phase is not PPhase.AWAIT_START:
            raise ConfigError(f"participant {self.pid}: a pseudonym is handed over before the round starts")
        if nym is not None and not isinstance(nym, pseudonym.Pseudonym):
            raise ConfigError(f"a pseudonym must be a Pseudonym, got {type(nym).__name__}")
        if nym is not None and not nym.blinded:
            raise ConfigError(f"participant {self.pid}: the pseudonym handed over keeps no request to commit to")
        self.state = replace(self.state, nym=nym, nym_held=nym is not None)

    @property
    def pseudonym(self) -> pseudonym.Pseudonym | None:
        """Its pseudonym record of the round's epoch, to keep for the epoch's next rounds (a driver stores it
        before it sends the replies of the message that changed it): drawn at ROUND_START, before the
        advertisement that commits to it leaves; with z once the PS's evaluation verified; with the
        commitments its group mates signed. A pending one is asked for again with the same B, and gets the
        same pseudonym (the PS records the first B of each identity). A kept one is confirmed by the round
        that uses it (the same P, then a certificate before any row carries it)."""
        return self.state.nym

    def fork(self) -> "Participant":
        """An independent copy in the same state (the state is a value; the randomness and the diary
        are copied), for the explorer of PS schedules. Needs a copyable randomness source."""
        if not hasattr(self._rng, "copy"):
            raise ConfigError("only a participant with a seeded randomness source can be forked")
        out = copy.copy(self)
        out._rng = self._rng.copy()
        out._nym_rng = self._nym_rng.copy() if hasattr(self._nym_rng, "copy") else self._nym_rng
        v = self.view
        out.view = replace(v, uploaded=set(v.uploaded), errors=list(v.errors),
                           revealed={m: dict(plan) for m, plan in v.revealed.items()})
        return out

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
        """Process one message from the PS; return the replies to send back.

        Hook: a deviation may drop, repeat or rewrite whole messages around ``super().handle``,
        which runs every check before the state moves."""
        s = self.state
        try:
            m = msg.decode(data, self.ctx)
            handlers = self.TABLE[s.phase]
            if m.TYPE not in handlers:
                raise UnexpectedMessage(
                    f"participant {self.pid} in state '{s.phase.value}' got {m.TYPE.name}; "
                    f"expected {expected_names(handlers)}"
                )
            if m.sender != SERVER_ID:
                raise UnexpectedMessage(f"message claims sender {m.sender}, not the PS")
            if m.T != self.T:
                raise UnexpectedMessage(f"message for round {m.T}, this is round {self.T}")
            if m.TYPE is not MsgType.ROUND_START:
                msg.verify(m, s.session.server_vk)
            self.state, replies = getattr(self, handlers[m.TYPE])(s, m)
            return [data for r in replies for data in self._seal(r)]
        except ProtocolError as exc:
            self.view.errors.append(exc)
            self.state = replace(s, phase=PPhase.ABORTED)
            if s.phase in (PPhase.DONE, PPhase.OPENED, PPhase.ABORTED):
                return []
            m_ = s.inv.m
            return [msg.Refusal(self.T, m_, self.pid, type(exc).__name__, str(exc)).encode(self._sk)]

    def _seal(self, m: msg.Message) -> list[bytes]:
        """Hook: the signed bytes sent for reply ``m``, once its handler has moved the state on. A deviation
        may send other bytes, more or none; the state keeps what the honest reply said."""
        return [m.encode(self._sk)]

    # ------------------------------------------------------------------ #
    # §5 step 0 → 1: check the signed broadcast, advertise keys.
    def _on_round_start(self, s: ParticipantState, m: msg.RoundStart) -> Replies:
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
        # The parameters are the PS's choice: taken only within this participant's own floors (§11).
        self._check_floors(p)
        if self._model is not None:
            self._check_model(self._model, p, Refused)
        g = p.group_obj()
        # §7.3: a record held for this epoch must be under the announced P; one of an earlier epoch is dropped
        # and a request drawn, kept (the driver stores it) before the advertisement that commits to it leaves.
        nym = pseudonym.record_for(s.nym, g, m.epoch, m.nym_key, self._nym_rng)
        epoch_key = pseudonym.key_digest(m.epoch, m.nym_key)
        commit = nym.commitment()
        keys = RoundKeys(
            DHKeyPair.generate(g, self._rng),
            tuple(DHKeyPair.generate(g, self._rng) for _ in range(p.M)),
            tuple(g.random_scalar(self._rng) for _ in range(p.M)),
        )
        # §6.4: one degree t-1 polynomial per secret (b_1, x_1, b_2, x_2, ...), committed before any share.
        secrets = [v for m_ in range(p.M) for v in (keys.seeds[m_], keys.mask[m_].secret)]
        polys = tuple((sec, *(g.random_scalar(self._rng) for _ in range(p.t - 1))) for sec in secrets)
        commitments = tuple(tuple(g.base_mul(a) for a in poly) for poly in polys)
        adv = msg.Advertise(self.T, 0, self.pid, self._hash, p.digest(), keys.enc.public, commitments, epoch_key,
                            commit, pseudonym.sign_commitment(self._sk, self.pid, epoch_key, commit))
        session = Session(p, Context(g, p), roster, m.server_cert.key, m.cred_key, keys, m.epoch, m.nym_key)
        h = Transcript.at(s.h).absorb("round-start", m.body())
        return replace(s, phase=PPhase.AWAIT_ADVERTS, h=h, session=session, dealing=Dealing(polys, adv), nym=nym,
                       nym_held=nym is s.nym), [adv]

    def _check_floors(self, p: RoundParams) -> None:
        """Hook: refuse ROUND_START parameters beyond this participant's floors (BelowFloor). Called before
        any key is drawn; a deviation that checks less takes whatever c, t, decoys and R_max the PS announces."""
        self.floors.check(p)

    def _colluders(self, p: RoundParams) -> int:
        """Hook: the c every cap uses, the stricter of the announced c and this participant's own (the
        complaints it answers are capped at t − 1 − c)."""
        return self.floors.c_bound(p)

    # §5 step 1: verify every signed advertisement, share b_{i,m} and x_{i,m}.
    def _on_advertise_list(self, s: ParticipantState, m: msg.AdvertiseList) -> Replies:
        ses, deal = s.session, s.dealing
        p, g = ses.params, ses.ctx.group
        adverts: dict[int, msg.Advertise] = {}
        for raw in m.adverts:
            a = msg.decode_shared(raw, ses.ctx)  # the same relayed bytes reach every member
            if not isinstance(a, msg.Advertise):
                raise DecodeError("advertise list holds a non-ADVERTISE message")
            if a.sender not in ses.roster or a.sender in adverts:
                raise Refused(f"advertise list has an unknown or repeated sender {a.sender}")
            if a.T != self.T or a.global_hash != self._hash or a.params_hash != p.digest():
                raise Refused(f"advertisement of {a.sender} is for another round, model or round parameters")
            if a.epoch_key != deal.advert.epoch_key:
                # §7.3: one P for every member, or the PS could recognise one member's pseudonym.
                raise pseudonym.EpochKeyMismatch(f"advertisement of {a.sender} signs another epoch key than the "
                                                 "one this participant was given")
            msg.verify(a, ses.roster[a.sender].key)
            adverts[a.sender] = a
        if adverts.get(self.pid) != deal.advert:
            raise Refused("the PS did not relay this participant's own advertisement unchanged")
        if len(adverts) < p.t:
            raise Refused(f"only {len(adverts)} advertisements, threshold t={p.t}")
        nym = s.nym
        if self.group_round:
            # §7.3: a group mate that signs another pseudonym request than earlier in the epoch was issued (or
            # asks) twice; the group is not continued (IssuanceChanged, with both signed commitments).
            nym = pseudonym.check_mates(nym, deal.advert.epoch_key, ses.roster,
                                        {j: (a.nym_commit, a.nym_sig) for j, a in adverts.items()},
                                        set(adverts) - {self.pid})
        shamir = Shamir(g.order, p.t)
        peers = sorted(adverts)
        xs = [j + 1 for j in peers]
        dealt: dict[int, list[int]] = {j: [] for j in peers}
        for poly in deal.polys:
            for j, share in zip(peers, shamir.shares_from_coefficients(poly, xs)):
                dealt[j].append(share.y)
        # Kept for opening the peers' shares at delivery: one DH per peer, not two.
        channels = {j: Channel(ses.keys.enc, adverts[j].enc_key, self.pid, j, self.T, self._rng)
                    for j in peers if j != self.pid}
        deal = replace(deal, dealt={j: tuple(ys) for j, ys in dealt.items()}, own_payload=_share_payload(g, dealt[self.pid]))
        cts = tuple((j, ch.seal(SETUP_PHASE_AD, _share_payload(g, deal.dealt[j]))) for j, ch in channels.items())
        # Ĉ under weights bound to these ciphertexts (§6.4): the shares are fixed before the weights.
        digest = msg.ShareBundle(self.T, 0, self.pid, cts).digest()
        bundle = msg.ShareBundle(self.T, 0, self.pid, cts, own_combined(deal.advert, digest, deal.polys))
        h = Transcript.at(s.h).absorb("adverts", m.body())
        return replace(s, phase=PPhase.AWAIT_SHARES, h=h, dealing=deal, peers=Peers(adverts, channels),
                       nym=nym), [bundle]

    def _parse_shares(self, s: ParticipantState, owner: int, payload: bytes) -> tuple[int, ...]:
        g, p = s.session.ctx.group, s.session.params
        parser = Parser(payload, f"shares from {owner}")
        ys = tuple(g.scalar_from_bytes(parser.fixed(g.scalar_size, "share"), f"share from {owner}")
                   for _ in range(2 * p.M))
        parser.finish()
        return ys

    # §5 steps 1–2: shares addressed to us, U_0, OT table; request tokens and the credential (§7.2).
    def _on_share_delivery(self, s: ParticipantState, m: msg.ShareDelivery) -> Replies:
        ses, p = s.session, s.session.params
        U0 = set(m.online)
        if not U0 <= set(s.peers.adverts) or self.pid not in U0 or len(U0) < p.t:
            raise Refused(f"U_0 is not a subset of the advertisers containing {self.pid} with >= t members")
        table = OTTable.decode(ses.ctx.group, m.ot_table, p.n)
        if table.T != self.T:
            raise UnexpectedMessage(f"OT table for round {table.T}")
        info = {d: (digest, comb) for d, digest, comb in m.dealers}
        if set(info) != U0:
            raise Refused("the PS relayed the bundle digests of another set than U_0")
        dealers = {d: Dealer(s.peers.adverts[d], digest, comb) for d, (digest, comb) in info.items()}
        # Every held share has x = pid + 1 (owner -> the 2M values in commitment order b_1, x_1, b_2, ...):
        # a Share is built only when it is revealed.
        held = {self.pid: self._parse_shares(s, self.pid, s.dealing.own_payload)}
        got = dict(m.ciphertexts)
        complaints = []
        for d in sorted(U0 - {self.pid}):
            # §6.4: all shares of one dealer checked in one batch; any failure is a complaint.
            try:
                if d not in got:
                    raise DecodeError(f"no shares delivered from {d}")
                ys = self._parse_shares(s, d, s.peers.channels[d].open(SETUP_PHASE_AD, got[d]))
                check_shares(dealers[d], self.pid + 1, ys)
                held[d] = ys
            except ProtocolError as exc:
                self.view.errors.append(exc)
                complaints.append(d)
        ot = OTReceiver(ses.ctx.group, self.T, p.n, k=p.k, rng=self._rng)
        request = ot.request()
        suite = credential.suite(ses.ctx.group)
        r = self._rng.bytes(credential.R_BYTES)
        blind, blinded = voprf.blind(suite, credential.cred_input(self.T, r), self._rng)
        # §7.3: while its request is pending, the B its advertisement committed to (the same in every round).
        nym_req = s.nym.blinded_element() if s.nym.pending else None
        h = Transcript.at(s.h).absorb("setup", m.common())
        # §5a: the first reservation vector rides on the OT request. It needs the candidate slots,
        # not their tokens, and it is unmasked only after the OT answers' proofs have been checked
        # and t members certified U_1; if a complaint is raised the PS abandons it unrevealed.
        slots = SlotPhase(1, table, m.decoy_commit, ot, request, reservation=Reservation.start(ot.choices))
        h1 = Transcript.at(h).absorb_counts(1, (), ())
        s = replace(s, h=h1, held=held, dealers=dealers, cred=CredentialRequest(r, blind, blinded), slots=slots,
                    inv=replace(s.inv, mask_set=tuple(sorted(U0))))
        s, first = self._masked_input(s, 1, h1)
        ot_req = msg.OTRequestMsg(self.T, 0, self.pid, request.encode(), blinded, tuple(complaints),
                                  nym_req)
        return replace(s, phase=PPhase.AWAIT_OT), [ot_req, first]

    # §6.4: a dealer answers complaints by publishing the disputed shares, signed: once, and for at most
    # t − 1 − c complainers. The PS relays the ciphertexts, so it can make honest recipients complain by
    # withholding them; with the c shares of its colluders, more published shares would reach t. The c is
    # this participant's own bound, never less than its floor, whatever the PS announced.
    def _on_complaints(self, s: ParticipantState, m: msg.Complaints) -> Replies:
        p, dealt = s.session.params, s.dealing.dealt
        bad = (set(m.complainers) - set(dealt)) | ({self.pid} & set(m.complainers))
        if bad:
            raise Refused(f"complaints from {sorted(bad)}, who hold no shares dealt by this participant")
        c = self._colluders(p)
        if len(set(m.complainers)) > p.t - 1 - c:
            raise Refused(f"{len(set(m.complainers))} complaints: publishing that many shares would give the PS "
                          f"and c={c} colluders t={p.t} of them; at most {p.t - 1 - c} are answered")
        answer = msg.ComplaintAnswer(self.T, 0, self.pid, tuple((j, tuple(dealt[j])) for j in m.complainers))
        return replace(s, phase=PPhase.ANSWERED), [answer]

    # §7.1–7.2: both proofs are checked before U_1 is certified, hence before any vector is unmasked.
    def _on_ot_response(self, s: ParticipantState, m: msg.OTResponseMsg) -> Replies:
        ses, g = s.session, s.session.ctx.group
        suite = credential.suite(g)
        (y,) = voprf.finalize(
            suite, [credential.cred_input(self.T, s.cred.r)], [s.cred.blind], [m.cred_eval],
            [s.cred.blinded], ses.cred_key, voprf.Proof.decode(g, m.cred_proof),
        )
        nym = s.nym
        if nym.pending:
            if m.nym_eval is None:
                raise Refused("the PS answered without the pseudonym this participant asked for")
            nym = pseudonym.finish(g, nym, ses.nym_key, m.nym_eval, m.nym_proof)
        elif m.nym_eval is not None:
            raise UnexpectedMessage("a pseudonym evaluation that this participant did not ask for")
        slots = self._take_tokens(s, s.slots, m.response, m.ot_proof)
        held = dict(s.held)
        for dealer, raw in m.resolved:
            # The dealer's own signed, public answer to our complaint; checked like a delivery.
            ans = msg.decode(raw, ses.ctx)
            if not isinstance(ans, msg.ComplaintAnswer) or ans.sender != dealer or dealer not in s.dealers:
                raise Refused(f"resolved complaint about {dealer} is not that dealer's answer")
            msg.verify(ans, ses.roster[dealer].key)
            ys = dict(ans.shares).get(self.pid)
            try:
                if ys is None:
                    raise DecodeError(f"the answer of {dealer} holds no shares for us")
                check_shares(s.dealers[dealer], self.pid + 1, ys)
                held[dealer] = tuple(ys)
            except ProtocolError as exc:
                self.view.errors.append(exc)
        # Setup is over (§6.4): the polynomials, the shares dealt and every dealer's Ĉ are dropped; kept
        # are the peers' advertisements (channel keys, g^b and X, for masking, audit and disputes) and
        # the held share values.
        return replace(s, phase=PPhase.AWAIT_FIRST, held=held, cred=replace(s.cred, value=credential.Credential(
            s.cred.r, y)), slots=slots, dealing=None, dealers=None, nym=nym), []

    # §5a: after complaints the PS abandons the first iteration (masked before the complaint step
    # could exclude a dealer): nothing of invocation 1 is ever revealed, the slot phase starts at 2.
    def _on_first_abandoned(self, s: ParticipantState, m: msg.MaskRequest) -> Replies:
        if m.m != 2 or m.counts:
            raise UnexpectedMessage(f"mask request for invocation {m.m} while U_1 is awaited")
        if s.session.params.R_max < 2:
            raise Refused("the first iteration is abandoned, but R_max=1 leaves no other")
        slots = replace(s.slots, start=2, reservation=s.slots.reservation.withdraw())
        return self._on_mask_request(replace(s, slots=slots, inv=replace(s.inv, abandoned=True)), m)

    def _take_tokens(self, s: ParticipantState, slots: SlotPhase, response: bytes, proof: bytes) -> SlotPhase:
        """Verify the OT answers' proof against B (§7.1) and recover the tokens of this participant's choices."""
        g, p = s.session.ctx.group, s.session.params
        resp = OTResponse.decode(g, response, p.k)
        if len(resp.answers) != len(slots.request.blinded):
            raise DecodeError(f"OT response has {len(resp.answers)} answers for {len(slots.request.blinded)} requests")
        voprf.verify_dleq(
            g.generator(), slots.table.B, slots.request.blinded, resp.answers,
            voprf.Proof.decode(g, proof), ot_proof_context(self.T),
        )
        return replace(slots, tokens=slots.ot.recover(slots.table, resp))

    # §6.1 for §5 steps 3–4: reservation vectors, then the model list, masked under h_m.
    def _on_mask_request(self, s: ParticipantState, m: msg.MaskRequest) -> Replies:
        p, inv, slots = s.session.params, s.inv, s.slots
        nxt = inv.m + 1
        # The upload may follow any iteration whose counts settle every party (checked below).
        if m.m != nxt and not (m.m == p.upload_m and m.counts and nxt <= p.R_max):
            raise UnexpectedMessage(f"mask request for invocation {m.m}, expected {nxt}")
        if (m.m == slots.start) != (len(m.counts) == 0) or (m.counts and len(m.counts) != p.n):
            raise DecodeError(f"invocation {m.m} carries {len(m.counts)} counts")
        if m.counts and not slots.start <= inv.m == inv.last_certified:
            # Counts publish the last certified iteration of this slot phase; there is none yet.
            raise UnexpectedMessage(f"counts with the request for invocation {m.m}, but no iteration of this slot "
                                    f"phase (from {slots.start}) is certified")
        if m.m > p.upload_m:
            raise UnexpectedMessage(f"invocation {m.m} beyond the upload ({p.upload_m})")
        # Only the request that replaces an abandoned first iteration names the dealers the complaint step excluded.
        first = inv.abandoned and m.m == 2
        if m.excluded and (not first or not set(m.excluded) <= set(inv.mask_set) or self.pid in m.excluded):
            raise Refused(f"invocation {m.m} excludes {list(m.excluded)} from the mask set")
        mask_set = inv.mask_set
        if first:
            mask_set = tuple(sorted(set(mask_set) - set(m.excluded)))
            if len(mask_set) < p.t:
                raise Refused(f"U_0 after the complaint step has {len(mask_set)} members, t={p.t}")
        h = Transcript.at(s.h).absorb_counts(m.m, m.counts, m.excluded)
        s = replace(s, h=h, inv=replace(inv, m=m.m, h={**inv.h, m.m: h}, mask_set=mask_set))
        if m.counts:
            # §8.2: counts no honest PS publishes stop the round; a lost own pick is objected to.
            settled = len(settled_slots(slots.counts))
            missing = len(inv.mask_sets[slots.start]) - len(mask_set)
            reason = opening.check_counts(m.counts, opening.count_bound(len(mask_set), p.decoys, settled, missing))
            if reason is not None:
                raise Refused(f"published counts of iteration {m.m - 1} fail the count check: {reason}")
            pick = slots.reservation.pick
            if pick is not None and m.counts[pick] == 0:
                return replace(s, phase=PPhase.OBJECTED), [msg.Objection(self.T, m.m, self.pid, pick, h)]
            slots = replace(slots, counts=slots.counts + (tuple(m.counts),),
                            reservation=slots.reservation.observe(m.counts))
            s = replace(s, slots=slots)
            # Both sides end the reservation at the same point: as soon as nobody can still pick.
            # Members missing from the phase's first U never submitted in it, so own no settled slot.
            done = opening.slots_done(len(mask_set), p.decoys, len(settled_slots(slots.counts)),
                                      len(inv.consented[slots.start]) - len(mask_set))
            if done and m.m <= p.R_max:
                raise Refused(f"invocation {m.m} is another reservation iteration, but every party has settled: "
                              "the upload comes next")
            if not done and m.m != nxt:
                raise Refused(f"invocation {m.m} skips iterations {nxt}..{p.R_max} while parties may still pick")
        s, vector = self._masked_input(s, m.m, h)
        # One model list per round: once it is sent, nothing about this slot phase's picks is revealed.
        return replace(s, phase=PPhase.UPLOADED if m.m == p.upload_m else PPhase.AWAIT_LIST), [vector]

    def _masked_input(self, s: ParticipantState, m: int, h: bytes) -> tuple[ParticipantState, msg.MaskedInput]:
        """Invocation m's vector (a reservation vector, or LW for the upload), masked under h_m."""
        ses, inv = s.session, s.inv
        self._check_fresh(s, m)
        s = replace(s, inv=replace(inv, h={**inv.h, m: h}, m=m, mask_sets={**inv.mask_sets, m: inv.mask_set},
                                   sent=inv.sent | {m}))
        if m <= ses.params.R_max:
            s, v, rows = self._reservation_vector(s)
        else:
            v, rows = self._model_list(s)
        peers = {j: s.peers.adverts[j].mask_keys[m - 1] for j in inv.mask_set}
        mask_in_place(v, ses.ctx.group, self.T, m, self.pid, ses.keys.seeds[m - 1],
                      ses.keys.mask[m - 1].secret, peers, h, rows)
        self.view.uploaded.add(m)
        v.setflags(write=False)  # the message views v: its words are copied once, into the encoding
        return s, msg.MaskedInput(self.T, m, self.pid, h, rows, memoryview(v).cast("B"))

    def _check_fresh(self, s: ParticipantState, m: int) -> None:
        """Hook: one key, one plaintext; refuse a second vector under the keys of invocation m. Called before
        anything is masked; a deviation that lets it pass masks a second plaintext under the same keys."""
        if m in s.inv.sent:
            raise Refused(f"invocation {m}'s vector was sent already: its keys mask one plaintext")

    def _reservation_vector(self, s: ParticipantState) -> tuple[ParticipantState, np.ndarray, int]:
        """Hook: (state, vector, rows) of a reservation iteration: one-hot at this iteration's pick, or all
        zeros (settled, or no free candidate left). The vector is masked and sent as returned, and the
        state returned is kept: a deviation may mark any words, the count checks and the opening judge them."""
        v = np.zeros(s.session.params.n, dtype=np.uint32)
        res = s.slots.reservation.choose(self._rng)
        if res.pick is not None:
            v[res.pick] = 1
        return replace(s, slots=replace(s.slots, reservation=res)), v, 1

    def _model_list(self, s: ParticipantState) -> tuple[np.ndarray, int]:
        """Hook: (LW, rows) of the upload: one row per settled slot; its own holds the credentialed, tagged
        row (§5 step 4, §7.2). LW is masked and sent as returned: a deviation may write any words, the row
        checks and the blame step judge them."""
        p, slots = s.session.params, s.slots
        S = settled_slots(slots.counts)
        lw = np.zeros((len(S), p.row_words), dtype=p.codec.dtype)
        if self._model is None:
            # Still training when the upload is asked for: this participant drops out of the round.
            raise UnexpectedMessage(f"participant {self.pid} has no model yet: the upload is asked for before "
                                    "training ended")
        slot = slots.reservation.slot
        self.view.slot = slot
        if slot is not None:
            pos = s.position
            self.view.position = pos
            enc = p.codec.encode(self._model)
            self.view.clipped = enc.clipped
            # A certificate of this round (t members signed h, which holds P) confirms the key of the pseudonym
            # it holds or was issued, also one kept from a round that ended before its certificate.
            if s.nym is None or s.nym.pending or not s.nym_certified:
                raise Refused(f"participant {self.pid} holds no confirmed pseudonym of epoch {s.session.epoch}")
            row = credential.build_row(
                enc.words, slots.tokens[slot], s.cred.value, s.nym, self._rng.bytes(credential.K_BYTES), self.T, pos
            )
            self.view.row_tags += (row[-credential.TAG_BYTES:],)
            lw[pos] = np.frombuffer(row, dtype=p.codec.dtype)
        return lw.reshape(-1), max(len(S), 1)

    # §8.2: open a failed iteration (reveal x_{i,r} only), then take part in the restarted slot phase.
    def _on_open_request(self, s: ParticipantState, m: msg.OpenRequest) -> Replies:
        p, inv, r = s.session.params, s.inv, m.m
        last = inv.last_certified
        if r != last or not s.slots.start <= r <= p.R_max or r not in inv.revealed:
            raise Refused(f"asked to open iteration {r}; the last certified iteration of this slot phase is {last}")
        h = Transcript.at(s.h).absorb_open(r, m.reason)
        X = {j: s.peers.adverts[j].mask_keys[r - 1] for j in inv.mask_sets[r] if j != self.pid}
        reveal = msg.OpenReveal(self.T, r, self.pid, s.session.keys.mask[r - 1].secret, tuple(sorted(X.items())))
        # A restart resumes at the first invocation none of whose keys masked anything: one key, one
        # plaintext (after an objection, invocation r + 1's vectors were sent already). An objection
        # to the counts that ended the reservation ends the round: the upload followed them.
        phase = PPhase.ENDED if inv.m == p.upload_m else PPhase.AWAIT_RESTART
        return replace(s, phase=phase, h=h, opened=Opened(r, inv.m + 1)), [reveal]

    def _on_restart(self, s: ParticipantState, m: msg.Restart) -> Replies:
        ses, p, op = s.session, s.session.params, s.opened
        if m.m != op.resume or m.opened != op.r:
            raise Refused(f"restart at invocation {m.m} after opening {m.opened}; expected {op.resume}, {op.r}")
        if m.m > p.R_max:
            # No reservation iteration is left: a restart could only re-run the upload invocation.
            raise Refused(f"restart at invocation {m.m} leaves no reservation iteration (R_max={p.R_max})")
        keys = {j: c.key for j, c in ses.roster.items()}
        mask_set = set(s.inv.mask_set)
        named = set()
        for raw in m.evidence:
            ev = opening.CountEvidence.decode(raw)
            if ev.r != op.r or ev.pid not in mask_set:
                raise Refused(f"restart names {ev.pid} for iteration {ev.r}, not a member of the opened one")
            opening.verify_count_evidence(ev, keys, p)
            named.add(ev.pid)
        if not set(m.silent) <= mask_set or self.pid in set(m.silent) | named:
            raise Refused(f"restart drops {list(m.silent)}: not members of U_{op.r} other than this one")
        mask_set -= named | set(m.silent)
        if len(mask_set) < p.t:
            raise Refused(f"the restarted slot phase has {len(mask_set)} members, threshold t={p.t}")
        table = OTTable.decode(ses.ctx.group, m.ot_table, p.n)
        if table.T != self.T:
            raise UnexpectedMessage(f"OT table for round {table.T}")
        h = Transcript.at(s.h).absorb("restart", m.body())
        ot = OTReceiver(ses.ctx.group, self.T, p.n, k=p.k, rng=self._rng)
        request = ot.request()
        slots = SlotPhase(m.m, table, m.decoy_commit, ot, request)
        inv = replace(s.inv, m=m.m - 1, mask_set=tuple(sorted(mask_set)))
        s = replace(s, phase=PPhase.AWAIT_SLOTS, h=h, slots=slots, inv=inv)
        return s, [msg.SlotRequest(self.T, m.m, self.pid, request.encode())]

    def _on_slot_response(self, s: ParticipantState, m: msg.SlotResponse) -> Replies:
        if m.m != s.slots.start:
            raise UnexpectedMessage(f"slot response for invocation {m.m}, the slot phase restarts at {s.slots.start}")
        slots = self._take_tokens(s, s.slots, m.response, m.ot_proof)
        slots = replace(slots, reservation=Reservation.start(slots.ot.choices))
        return replace(s, phase=PPhase.AWAIT_MASK, slots=slots), []

    # §6.2–6.3: sign the one statement (T, m, U_m, h_m) of this invocation.
    def _on_unmask_request(self, s: ParticipantState, m: msg.UnmaskRequest) -> Replies:
        p, inv = s.session.params, s.inv
        if m.m != inv.m:
            raise UnexpectedMessage(f"U_{m.m} announced during invocation {inv.m}")
        Um, prev = set(m.online), set(inv.mask_set)
        if not Um <= prev:
            raise Refused(f"U_{m.m} is not a subset of U_{m.m - 1}: inconsistent online lists")
        if self.pid not in Um or len(Um) < p.t:
            raise Refused(f"U_{m.m} has {len(Um)} members (t={p.t}) or omits participant {self.pid}")
        self.floors.check_members(p, len(Um))
        if m.m in inv.consented:
            raise Refused(f"U_{m.m} was signed already: one statement per invocation")
        stmt = msg.consent_statement(self.T, m.m, m.online, inv.h[m.m])
        s = replace(s, phase=PPhase.AWAIT_CERT, inv=replace(inv, consented={**inv.consented, m.m: m.online}))
        return s, [msg.Consent(self.T, m.m, self.pid, self._sk.sign(CONSENT_CONTEXT, stmt))]

    # §6.3 after the certificate: reveal shares once, never both kinds for one owner.
    def _on_certificate(self, s: ParticipantState, m: msg.CertificateMsg) -> Replies:
        p, inv = s.session.params, s.inv
        if m.m != inv.m or m.online != inv.consented.get(m.m):
            raise Refused(f"certificate is for another U_{m.m} than the one this participant signed")
        keys = {j: s.session.roster[j].key for j in m.online}
        check_certificate(self.T, m.m, m.online, inv.h[m.m], m.signatures, keys, p.t)
        h = Transcript.at(s.h).absorb_certified(m.m, m.online)
        plan, response = self._reveal(s, m.m, m.online)
        # One answer per invocation: the state moves on.
        self.view.revealed[m.m] = dict(plan)
        inv = replace(inv, mask_set=tuple(sorted(m.online)), revealed={**inv.revealed, m.m: plan},
                      last_certified=m.m if m.m <= p.R_max else inv.last_certified)
        phase = PPhase.DONE if m.m == p.upload_m else PPhase.AWAIT_MASK
        # t members signed this h, which holds P (§7.3): a pseudonym issued in this round is now the epoch's.
        return replace(s, phase=phase, h=h, inv=inv, nym_certified=True), [response]

    def _reveal(self, s: ParticipantState, m: int, online) -> tuple[dict[int, ShareKind], msg.UnmaskResponse]:
        """Hook: the shares for U_m = ``online``: self seeds of its members, DH secrets of the rest of the mask
        set; one kind per owner (the plan is a dict). Called once per invocation, after the certificate of
        U_m is checked; the plan returned is what the view records as revealed."""
        Um, prev = set(online), set(s.inv.mask_set)
        plan = {j: ShareKind.SELF_SEED for j in Um}
        plan.update({j: ShareKind.DH_SECRET for j in prev - Um})
        out = tuple(
            (owner, kind, Share(self.pid + 1, s.held[owner][secret_index(m, kind)]))
            for owner, kind in sorted(plan.items())
            if owner in s.held
        )
        return plan, msg.UnmaskResponse(self.T, m, self.pid, out)

    # §9 steps 1–2: audit every reservation iteration, then open the decoy rows' keys (never its own row).
    def _on_blame_request(self, s: ParticipantState, m: msg.BlameRequest) -> Replies:
        ses, p, g, inv, slots = s.session, s.session.params, s.session.ctx.group, s.inv, s.slots
        if m.m != p.upload_m:
            raise UnexpectedMessage(f"blame request for invocation {m.m}, the upload is {p.upload_m}")
        check_opening(self.T, m.decoy_seed, slots.decoy_commit)
        picks, decoy_slots = replay(m.decoy_seed, self.T, p.n, p.k, p.decoys, slots.counts)
        keys = {j: c.key for j, c in ses.roster.items()}
        # The slot phase that produced the upload (it ended early once every party had settled).
        iterations = range(slots.start, slots.start + len(slots.counts))
        if len(m.vectors) != len(iterations):
            raise Refused(f"blame request audits {len(m.vectors)} iterations, the slot phase had {len(iterations)}")
        for idx, r in enumerate(iterations):
            vectors = [msg.decode(v, ses.ctx) for v in m.vectors[idx]]
            audit_iteration(
                g, self.T, r, inv.h[r], list(inv.consented[r]), inv.mask_sets[r], vectors,
                dict(m.seeds[idx]), dict(m.dropped[idx]), s.peers.adverts, keys, slots.counts[idx], picks[idx],
            )
        positions = decoy_positions(slots.counts, decoy_slots)
        if list(m.positions) != positions or s.position in positions:
            raise Refused(f"asked to open positions {list(m.positions)}, the decoys hold {positions}")
        up = p.upload_m
        x = ses.keys.mask[up - 1].secret
        X = {j: s.peers.adverts[j].mask_keys[up - 1] for j in inv.mask_sets[up] if j != self.pid}
        K = {j: pair_secret(x, X_j) for j, X_j in X.items()}
        rows = tuple(
            (pos, tuple((j, pair_row_key(K_j, self.T, up, self.pid, j, inv.h[up], pos)) for j, K_j in sorted(K.items())))
            for pos in positions
        )
        # It signs what the keys were derived from (h_M, each X_j): evidence can then read nothing it did not sign.
        op = msg.Opening(self.T, up, self.pid, inv.h[up], tuple(sorted(X.items())), rows)
        return replace(s, phase=PPhase.OPENED, opening=op), [op]

    # §9 step 3: reveal K_ij, proved, only against the partner's signed conflicting opening.
    def _on_dispute(self, s: ParticipantState, m: msg.Dispute) -> Replies:
        ses, g, up = s.session, s.session.ctx.group, s.session.params.upload_m
        theirs = msg.decode(m.partner_opening, ses.ctx)
        if not isinstance(theirs, msg.Opening) or theirs.sender != m.partner or theirs.T != self.T:
            raise Refused("dispute does not carry the partner's opening")
        msg.verify(theirs, ses.roster[m.partner].key)
        mine = {pos: dict(keys) for pos, keys in s.opening.rows}
        if all(dict(keys).get(self.pid) == mine.get(pos, {}).get(m.partner) for pos, keys in theirs.rows):
            raise Refused(f"the opening of {m.partner} does not conflict with this participant's")
        x = ses.keys.mask[up - 1].secret
        X_p = s.peers.adverts[m.partner].mask_keys[up - 1]
        K = X_p**x
        proof = voprf.prove_dleq(x, g.generator(), ses.keys.mask[up - 1].public, [X_p], [K], self._rng,
                                 dispute_context(self.T, self.pid, m.partner))
        return replace(s, phase=PPhase.DONE_BLAME), [msg.DisputeAnswer(self.T, up, self.pid, m.partner, K,
                                                                       proof.encode(g))]


def _share_payload(g, ys) -> bytes:
    """Share values as fixed-size scalars, in commitment order (one recipient's plaintext, §6.4)."""
    w = Writer()
    for y in ys:
        w.fixed(y.to_bytes(g.scalar_size, "big"), g.scalar_size)
    return w.bytes()
