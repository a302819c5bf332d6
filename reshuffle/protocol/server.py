"""Parameter-server state machine (docs/protocol.md §5–§9, docs/security/threat-model.md).

The :class:`Server` only ever sees ``(transport sender id, bytes)``. Each
message is parsed, its sender's signature checked and its content validated
before it changes any state; a :class:`ProtocolError` is recorded against its
sender, which is excluded from the rest of the round (duplicates are only
ignored), and the round goes on with the others. Only too few participants
(:class:`BelowThreshold`) ends a round. Every PS message is signed.

U_m is exactly the set of masked vectors added to the accumulator (§6.1): a
member that misbehaves afterwards is only a dropout for answering.

What the PS collects in a step lives in that step's state object (:class:`OTStep`,
:class:`MaskedSum`, :class:`ConsentStep`, ...), created by the closer of the step
before; what the round keeps across steps is set up in ``__init__`` (advertisements,
dealers, the online lists, the published counts, the current slot phase). Each closer
returns the next state with its messages; the schedule (:mod:`~reshuffle.protocol.schedule`)
names the closer of each step.

Driving it: ``start()`` returns the first messages; then, per step, feed every
reply to ``receive()`` and call ``close_phase()`` when the step's deadline has
passed; it returns the next messages. ``output`` is set once ``done``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import ClassVar, Mapping

import numpy as np

from reshuffle.crypto import feldman, voprf
from reshuffle.crypto.ot import OTRequest, OTSender
from reshuffle.crypto.group import Element
from reshuffle.crypto.rand import RandomSource, as_source, substream
from reshuffle.crypto.shamir import Shamir, Share
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, Certificate, CertificateAuthority, SigningKey
from reshuffle.errors import (
    AlreadyAnswered,
    BelowThreshold,
    ConfigError,
    DecodeError,
    InvalidShare,
    ProtocolError,
    Refused,
    UnexpectedMessage,
)
from reshuffle.protocol import complaints as cpl
from reshuffle.protocol import credential
from reshuffle.protocol import messages as msg
from reshuffle.protocol import opening
from reshuffle.protocol import pseudonym
from reshuffle.protocol.blame import BlameCollector, Evidence
from reshuffle.protocol.decoys import Decoys, commitment, decoy_positions
from reshuffle.protocol.masking import unmask_in_place
from reshuffle.protocol.messages import Context, MsgType, ShareKind
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.participant import ot_proof_context
from reshuffle.protocol.phases import SPhase, expected_names
from reshuffle.protocol.reservation import settled_slots
from reshuffle.protocol.schedule import SERVER_TABLE, Step, closer_of, stage_of, step_of
from reshuffle.protocol.transcript import CONSENT_CONTEXT, Transcript

Outbox = list[tuple[int, bytes]]


def admit(sender: int, data: bytes, roster: dict[int, Certificate], excluded: set[int], T: int,
          ctx: Context) -> msg.Message:
    """Parse a participant's message and check what every PS step checks first: a known,
    not excluded sender that the header names, its signature, the round; a REFUSAL raises Refused."""
    if sender not in roster:
        raise UnexpectedMessage(f"unknown sender {sender}")
    if sender in excluded:
        raise UnexpectedMessage(f"participant {sender} was excluded earlier in this round")
    m = msg.decode(data, ctx)
    if m.sender != sender:
        raise UnexpectedMessage(f"header names sender {m.sender}, transport says {sender}")
    msg.verify(m, roster[sender].key)
    if m.T != T:
        raise UnexpectedMessage(f"message for round {m.T}, this is round {T}")
    if isinstance(m, msg.Refusal):
        raise Refused(f"participant refused: {m.error}: {m.reason}")
    return m


@dataclass(frozen=True)
class ErrorRecord:
    """A rejected message: the stage, the transport sender and the typed error."""

    stage: str
    sender: int
    error: ProtocolError

    def __str__(self) -> str:
        return f"[{self.stage}] from {self.sender}: {type(self.error).__name__}: {self.error}"


@dataclass
class RoundOutput:
    """What the PS learns: unlinked models and public round statistics."""

    models: list[np.ndarray]
    valid_positions: list[int]
    n_positions: int
    counts: list[tuple[int, ...]]
    online: dict[int, tuple[int, ...]]  # m -> U_m (0: setup)
    errors: list[ErrorRecord] = field(default_factory=list)
    # position -> why its row was not delivered: token, credential, tag, pseudonym, duplicate credential,
    # duplicate pseudonym (§7.2–7.3)
    rejected_rows: dict[int, str] = field(default_factory=dict)
    # participant id -> reason with its evidence (protocol v2, §9); never an honest party.
    blamed: dict[int, str] = field(default_factory=dict)
    evidence: dict[int, "Evidence"] = field(default_factory=dict)
    # members that could not answer the blame step while a decoy row stayed unexplained: never named
    suspects: list[int] = field(default_factory=list)
    decoy_positions: list[int] = field(default_factory=list)
    # PS seconds spent summing the uploads and removing their masks (the floor's two operations)
    timings: dict[str, float] = field(default_factory=dict)
    # A round in anonymity groups (protocol/grouped.py): each group's members, where group j's rows start,
    # each group's parameters, and why a group delivered nothing. A round of one group leaves them empty.
    groups: tuple[tuple[int, ...], ...] = ()
    offsets: dict[int, int] = field(default_factory=dict)
    group_params: dict[int, "RoundParams"] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    # each delivered model's epoch pseudonym ρ (§7.3), in the order of ``models``
    pseudonyms: list[bytes] = field(default_factory=list)

    @property
    def discarded_positions(self) -> list[int]:
        return sorted(set(range(self.n_positions)) - set(self.valid_positions))


# --------------------------------------------------------------------------------------- round-long records
@dataclass
class PSSlotPhase:
    """The PS side of one slot phase (§5.2–5.3, §8.2): its OT key and table, its decoys (from a seed
    committed before anyone picks), the counts it published and its first invocation's mask set size.
    A participant's side is :class:`~reshuffle.protocol.participant.SlotPhase`."""

    start: int
    ot: OTSender
    decoy_seed: bytes = field(repr=False)
    decoys: Decoys
    counts: list[tuple[int, ...]] = field(default_factory=list)
    members: int = 0  # |U_{start-1}|: the members that could hold a slot of this phase

    @property
    def last(self) -> int:
        """Its last iteration whose counts were published (start − 1 before any)."""
        return self.start + len(self.counts) - 1

    def iterations(self) -> range:
        """The iterations it ran (it ends early once every party has settled)."""
        return range(self.start, self.start + len(self.counts))


# --------------------------------------------------------------------------------------- step states
@dataclass
class Collect:
    """What one step collects; each step's closer builds the next one."""

    PHASE: ClassVar[SPhase]

    @property
    def m(self) -> int:
        return 0


@dataclass
class Started(Collect):
    PHASE: ClassVar[SPhase] = SPhase.START


@dataclass
class AdvertStep(Collect):
    PHASE: ClassVar[SPhase] = SPhase.ADVERTS
    adverts: dict[int, msg.Advertise] = field(default_factory=dict)


@dataclass
class BundleStep(Collect):
    PHASE: ClassVar[SPhase] = SPhase.BUNDLES
    advertisers: list[int] = field(default_factory=list)
    bundles: dict[int, msg.ShareBundle] = field(default_factory=dict)


@dataclass
class MaskedSum(Collect):
    """Invocation m's vectors (§6.1): added to a running sum as they arrive; objections beside them."""

    PHASE: ClassVar[SPhase] = SPhase.MASKED
    inv: int
    mask_set: list[int]
    acc: np.ndarray
    n_rows: int
    h: bytes
    uploaded: set[int] = field(default_factory=set)
    objections: dict[int, bytes] = field(default_factory=dict)
    decoy_picks: np.ndarray | None = None  # a reservation iteration's decoy picks
    blame: BlameCollector | None = None  # the upload's decoy rows, kept for the blame step

    @property
    def m(self) -> int:
        return self.inv


@dataclass
class OTStep(Collect):
    """OT requests, credential requests and complaints, with the first reservation vector (§5a)."""

    PHASE: ClassVar[SPhase] = SPhase.OT
    first: MaskedSum
    answers: dict[int, msg.OTResponseMsg] = field(default_factory=dict)
    complaints: dict[int, set[int]] = field(default_factory=dict)  # dealer -> complainers

    @property
    def m(self) -> int:
        return self.first.inv


@dataclass
class ComplaintStep(Collect):
    """The accused dealers' public answers (§6.4)."""

    PHASE: ClassVar[SPhase] = SPhase.COMPLAINTS
    ot_answers: dict[int, msg.OTResponseMsg]
    complaints: dict[int, set[int]]
    answers: dict[int, bytes] = field(default_factory=dict)


@dataclass
class ConsentStep(Collect):
    """Signatures on (T, m, U_m, h_m) (§6.2–6.3)."""

    PHASE: ClassVar[SPhase] = SPhase.CONSENT
    sum: MaskedSum
    online: tuple[int, ...]
    dropped: list[int]
    statement: bytes
    consents: dict[int, bytes] = field(default_factory=dict)

    @property
    def m(self) -> int:
        return self.sum.inv


@dataclass
class UnmaskStep(Collect):
    """The shares revealed against the certificate (§6.3)."""

    PHASE: ClassVar[SPhase] = SPhase.UNMASK
    sum: MaskedSum
    online: tuple[int, ...]
    dropped: list[int]
    shares: dict[tuple[int, ShareKind], dict[int, Share]] = field(default_factory=dict)
    answered: set[int] = field(default_factory=set)

    @property
    def m(self) -> int:
        return self.sum.inv


@dataclass
class OpenStep(Collect):
    """The reveals of an opened iteration (§8.2), and the invocation a restart resumes at."""

    PHASE: ClassVar[SPhase] = SPhase.OPEN
    collector: opening.OpeningCollector
    resume: int

    @property
    def m(self) -> int:
        return self.collector.r


@dataclass
class SlotStep(Collect):
    """The restarted slot phase's OT requests (§8.2)."""

    PHASE: ClassVar[SPhase] = SPhase.SLOTS
    inv: int
    members: list[int]
    answers: dict[int, msg.SlotResponse] = field(default_factory=dict)

    @property
    def m(self) -> int:
        return self.inv


@dataclass
class BlameStep(Collect):
    """Openings of the decoy rows (§9); then DISPUTE answers in :class:`DisputeStep`."""

    PHASE: ClassVar[SPhase] = SPhase.BLAME
    blame: BlameCollector
    valid: list[int]
    failed: dict[int, str]
    lw: np.ndarray

    @property
    def m(self) -> int:
        return self.blame.m


@dataclass
class DisputeStep(BlameStep):
    PHASE: ClassVar[SPhase] = SPhase.DISPUTE


@dataclass
class Finished(Collect):
    PHASE: ClassVar[SPhase] = SPhase.DONE
    m_: int = 0

    @property
    def m(self) -> int:
        return self.m_


class Server:
    """The PS for one round T.

    Parameters
    ----------
    params : round parameters (validated here).
    T : round number.
    roster : participant id → CA certificate of its signing key.
    signing_key, cert : the PS's long-term key and its CA certificate (role server).
    ca : the CA verifier.
    global_hash : ``H(W_g^T)``.
    rng : randomness for tokens, beta and share-subset retries.
    pseudonyms : the epoch key and its issuance record (§7.3), kept by the caller across the epoch's rounds
        (default: a fresh key whose epoch is this round).
    identities : roster id → the identity issuance is recorded under (default: the roster id).

    Hooks (:data:`reshuffle.adversaries.base.SERVER_HOOKS`): a deviating PS overrides only
    these. A message handler ``_on_<message type>`` (:data:`~reshuffle.protocol.schedule.SERVER_TABLE`)
    gets the step's state and a message that :meth:`receive` has admitted (a known sender not
    excluded, its signature, round T, the step's type and invocation); it files what it accepts
    in the step's state, and a :class:`ProtocolError` it raises excludes the sender (a duplicate
    is only dropped). A step's closer (named by the schedule) takes the step's state once its
    deadline passed and returns the next state with the signed messages to send; a
    :class:`BelowThreshold` it raises ends the round. The named hooks say what each may change
    where they are defined.
    """

    def __init__(
        self,
        params: RoundParams,
        T: int,
        roster: dict[int, Certificate],
        signing_key: SigningKey,
        cert: Certificate,
        ca: CertificateAuthority,
        global_hash: bytes,
        rng: RandomSource | int | None = None,
        *,
        pseudonyms: pseudonym.EpochIssuer | None = None,
        identities: Mapping[int, int] | None = None,
    ) -> None:
        self.params = params.validated()
        if len(roster) != params.N:
            raise ConfigError(f"roster has {len(roster)} participants, params say N={params.N}")
        for pid, c in roster.items():
            ca.verify(c, subject=pid)
        ca.verify(cert, subject=SERVER_ID, role=ROLE_SERVER)
        if cert.key != signing_key.verify_key:
            raise ConfigError("the PS certificate does not certify its signing key")
        self.T, self._roster, self._sk, self._cert = T, dict(roster), signing_key, cert
        self._hash = global_hash
        self._rng = as_source(rng)
        self.group = params.group_obj()
        self._ctx = Context(self.group, params)
        self.state: Collect = Started()
        self.errors: list[ErrorRecord] = []  # rejected messages and discarded shares
        self.excluded: set[int] = set()
        self.online: dict[int, tuple[int, ...]] = {}  # m -> U_m (0: U_0)
        self.counts: list[tuple[int, ...]] = []  # every published count vector, restarts included
        self.output: RoundOutput | None = None
        self.adverts: dict[int, msg.Advertise] = {}  # the accepted advertisements, relayed
        self.bundles: dict[int, msg.ShareBundle] = {}  # the dealers of U_0: their signed bundles
        self.dealers: dict[int, cpl.Dealer] = {}  # and their (digest, Ĉ)
        self.slots: PSSlotPhase | None = None  # the current slot phase
        # Per reservation iteration, what the blame audit shows (§9): m -> sender -> signed vector, the self
        # seeds of U_m and the DH secrets of its dropped members.
        self.vectors: dict[int, dict[int, bytes]] = {}
        self.seeds: dict[int, dict[int, int]] = {}
        self.dropped_x: dict[int, dict[int, int]] = {}
        self._tx = Transcript(T)
        self._culprits: dict[int, object] = {}  # §6.4, §8.2 culprits with their evidence
        # Of the upload invocation: wall seconds, and this thread's CPU seconds (which other load does not inflate).
        self.timings = {"ps_sum_s": 0.0, "ps_unmask_s": 0.0, "ps_sum_cpu_s": 0.0, "ps_unmask_cpu_s": 0.0}
        # §7.2: the credential key γ, independent of every OT key β.
        self._gamma = self.group.random_scalar(self._rng)
        self.cred_key = self.group.base_mul(self._gamma)
        # §7.3: the epoch key π, shared by the epoch's rounds, and whom it was issued to.
        # Its draws come from their own stream, so that the round's other draws stay as they were.
        self._nym_rng = substream(self._rng, b"server/pseudonym")
        self.nyms = pseudonyms if pseudonyms is not None else pseudonym.EpochIssuer(params.group, T,
                                                                                     rng=self._nym_rng)
        if self.nyms.group_name != params.group:
            raise ConfigError(f"the epoch key is of group {self.nyms.group_name}, the round uses {params.group}")
        if identities is not None and not set(roster) <= set(identities):
            raise ConfigError("identities must name every participant of the roster")
        self._identity = {i: (identities[i] if identities is not None else i) for i in roster}
        self._nym_requests: dict[int, Element] = {}  # blinded pseudonym requests awaiting their answer
        self._nym_sent: set[int] = set()  # evaluations sent, recorded as issued at the member's certificate

    # ------------------------------------------------------------------ #
    @property
    def phase(self) -> SPhase:
        return self.state.PHASE

    @property
    def m(self) -> int:
        """The invocation being collected (0 during setup)."""
        return self.state.m

    @property
    def done(self) -> bool:
        return self.phase is SPhase.DONE

    @property
    def stage_name(self) -> str:
        """User-facing stage of what is being collected (setup, ot, reserve, upload, unmask)."""
        if self.phase is SPhase.START:
            return "setup"
        handlers = SERVER_TABLE[self.phase]
        if not handlers:
            return "done"
        # The stage of the message being collected: one mapping, in schedule.py.
        return stage_of(next(iter(handlers)), self.m, self.params.upload_m)

    @property
    def step(self) -> Step:
        """The schedule step now being collected (:mod:`~reshuffle.protocol.schedule`)."""
        return step_of(self.phase, self.m, self.params.upload_m)

    def needs_model(self, pid: int) -> bool:
        """Whether the step now pushed to ``pid`` needs its model (the first online step on)."""
        return not self.done and not self.step.offline

    @property
    def culprits(self) -> dict:
        """Participants named so far with their evidence (§6.4, §8.2; the blame step adds at the end)."""
        return dict(self._culprits)

    def failed_output(self) -> RoundOutput:
        """What a round that delivered nothing leaves: online sets, errors and the culprits named so far."""
        named = self.culprits
        return RoundOutput([], [], 0, list(self.counts), dict(self.online), list(self.errors),
                           blamed={i: str(e) for i, e in named.items()}, evidence=named)

    def tokens(self) -> tuple[bytes, ...]:
        """The current slot phase's tokens τ (the PS's own secret)."""
        return self.slots.ot.tokens

    # ------------------------------------------------------------------ #
    def start(self) -> Outbox:
        """§5 step 0: broadcast parameters, H(W_g^T), certificates.

        Hook: a deviation may send each participant another ROUND_START."""
        if self.phase is not SPhase.START:
            raise ConfigError("start() called twice")
        rs = msg.RoundStart(
            self.T, 0, SERVER_ID, self.params, self._hash, self._cert,
            tuple(sorted(self._roster.items())), self.cred_key, self.nyms.epoch, self.nyms.key,
        )
        self._tx.absorb("round-start", rs.body())
        self.state = AdvertStep()
        return self._broadcast(sorted(self._roster), rs)

    def receive(self, sender: int, data: bytes) -> None:
        """Validate and absorb one message; errors are recorded, never raised.

        Hook: a deviation may look at every byte it is sent before ``super().receive`` checks it."""
        st = self.state
        try:
            m = admit(sender, data, self._roster, self.excluded, self.T, self._ctx)
            handlers = SERVER_TABLE[st.PHASE]
            if m.TYPE not in handlers:
                raise UnexpectedMessage(
                    f"PS in state '{st.PHASE.value}' got {m.TYPE.name}; expected {expected_names(handlers)}"
                )
            # The OT request (invocation 0) shares its step with the first vector (invocation 1).
            want = 0 if m.TYPE is MsgType.OT_REQUEST else st.m
            if m.m != want:
                raise UnexpectedMessage(f"message for invocation {m.m}, current is {want}")
            getattr(self, handlers[m.TYPE])(st, sender, m)
        except ProtocolError as exc:
            self.errors.append(ErrorRecord(self.stage_name, sender, exc))
            # A duplicate is dropped, not punished: the first copy stands.
            if sender in self._roster and not isinstance(exc, AlreadyAnswered):
                self.excluded.add(sender)

    def close_phase(self) -> Outbox:
        """The deadline of the current step has passed: compute the next state and emit its messages."""
        if self.phase in (SPhase.START, SPhase.DONE):
            raise ConfigError(f"close_phase() in state '{self.phase.value}'")
        self.state, out = getattr(self, closer_of(self.phase))(self.state)
        return out

    def _live(self, ids) -> list[int]:
        return sorted(i for i in ids if i not in self.excluded)

    def _need(self, ids, what: str) -> list[int]:
        ids = self._live(ids)
        if len(ids) < self.params.t:
            raise BelowThreshold(
                f"{what}: {len(ids)} participants remain, threshold t={self.params.t}"
            )
        return ids

    def _broadcast(self, ids, m: msg.Message) -> Outbox:
        """The same signed message to each of ``ids``."""
        data = m.encode(self._sk)
        return [(i, data) for i in ids]

    def _name(self, pid: int, ev) -> None:
        """Record a culprit with its evidence (first evidence stands)."""
        self._culprits.setdefault(pid, ev)

    # ------------------------------------------------------------------ #
    # §5 step 1: setup
    def _on_advertise(self, st: AdvertStep, sender: int, a: msg.Advertise) -> None:
        if sender in st.adverts:
            raise AlreadyAnswered(f"second advertisement from {sender}")
        if a.global_hash != self._hash:
            raise Refused(f"advertisement of {sender} signs another global model")
        if a.params_hash != self.params.digest():
            raise Refused(f"advertisement of {sender} signs other round parameters")
        if a.epoch_key != pseudonym.key_digest(self.nyms.epoch, self.nyms.key):
            raise pseudonym.EpochKeyMismatch(f"advertisement of {sender} signs another epoch key")
        st.adverts[sender] = a

    def _close_adverts(self, st: AdvertStep) -> tuple[Collect, Outbox]:
        ids = self._need(st.adverts, "setup (advertisements)")
        self.adverts = {i: st.adverts[i] for i in ids}
        relay = msg.AdvertiseList(self.T, 0, SERVER_ID, tuple(msg.relay_bytes(self.adverts[i]) for i in ids))
        self._tx.absorb("adverts", relay.body())
        return BundleStep(ids), self._broadcast(ids, relay)

    def _on_share_bundle(self, st: BundleStep, sender: int, b: msg.ShareBundle) -> None:
        if sender not in self.adverts:
            raise UnexpectedMessage(f"share bundle from {sender}, who did not advertise")
        if sender in st.bundles:
            raise AlreadyAnswered(f"second share bundle from {sender}")
        want = set(st.advertisers) - {sender}
        got = {r for r, _ in b.ciphertexts}
        if got != want:
            raise DecodeError(f"share bundle of {sender} addresses {sorted(got)}, expected {sorted(want)}")
        st.bundles[sender] = b

    def _close_bundles(self, st: BundleStep) -> tuple[Collect, Outbox]:
        U0 = self._need(st.bundles, "setup (share bundles)")
        self.online[0] = tuple(U0)
        self.slots = self._new_slot_phase(1)
        table, commit = self.slots.ot.table.encode(), commitment(self.T, self.slots.decoy_seed)
        self.bundles = {d: st.bundles[d] for d in U0}
        self.dealers = {d: cpl.Dealer(self.adverts[d], b.digest(), b.combined) for d, b in self.bundles.items()}
        dealers = tuple((d, self.dealers[d].digest, self.dealers[d].combined) for d in U0)
        self._tx.absorb("setup", msg.ShareDelivery(self.T, 0, SERVER_ID, tuple(U0), table, commit, dealers, ()).common())
        ciphertexts = {d: dict(b.ciphertexts) for d, b in self.bundles.items()}
        out = []
        for j in U0:
            cts = tuple((d, ciphertexts[d][j]) for d in U0 if d != j)
            out.append((j, msg.ShareDelivery(self.T, 0, SERVER_ID, tuple(U0), table, commit, dealers, cts)
                        .encode(self._sk)))
        # §5a: every member answers the delivery with its OT request and its first reservation vector.
        first, _ = self._invocation(1, U0, ())
        return OTStep(first), out

    def _new_slot_phase(self, start: int) -> PSSlotPhase:
        """Hook: a fresh OT key β with its table, and decoys from a seed committed to before anyone picks
        (§8.2), for the slot phase that begins at invocation ``start``. The table and the seed's commitment
        are sent as returned: participants check the OT answers against B and the opened seed against it."""
        p = self.params
        ot = OTSender(self.group, self.T, p.n, p.k, self._rng)
        seed = self._rng.bytes(32)
        return PSSlotPhase(start, ot, seed, Decoys(seed, self.T, p.n, p.k, p.decoys))

    # §5 step 2, §7.1–7.2: slot tokens with a proof, and one credential per participant.
    def _on_ot_request(self, st: OTStep, sender: int, m: msg.OTRequestMsg) -> None:
        if sender not in self.online[0]:
            raise UnexpectedMessage(f"OT request from {sender}, who is not in U_0")
        if not set(m.complaints) <= set(self.online[0]) - {sender}:
            raise Refused(f"complaints of {sender} name {list(m.complaints)}, not all other members of U_0")
        req = OTRequest.decode(self.group, m.request, self.params.k)
        answer = self.slots.ot.answer(sender, req)  # a second request: AlreadyAnswered, the first stands
        if m.nym_request is not None:
            # §7.3: only the request its advertisement committed to (what its group mates keep), and only the
            # identity's first B of the epoch (the same B again gets the same evaluation); otherwise the asker
            # is excluded and nothing is sent to it.
            if pseudonym.request_digest(self.nyms.epoch, m.nym_request.to_bytes()) != self.adverts[sender].nym_commit:
                raise Refused(f"participant {sender} asks for a pseudonym its advertisement did not commit to")
            self.nyms.check(self._identity[sender], m.nym_request)
        for dealer in m.complaints:
            st.complaints.setdefault(dealer, set()).add(sender)
        g = self.group
        proof = self.slots.ot.prove(req, answer, ot_proof_context(self.T), self._rng)
        (cred_eval,), cred_proof = voprf.blind_evaluate(
            credential.suite(g), self._gamma, [m.cred_request], self.cred_key, self._rng
        )
        if m.nym_request is not None:
            # Evaluated, and its B recorded, when its answer leaves (_ot_answers_out).
            self._nym_requests[sender] = m.nym_request
        st.answers[sender] = msg.OTResponseMsg(
            self.T, 0, SERVER_ID, answer.encode(), proof.encode(g), cred_eval, cred_proof.encode(g)
        )

    def _close_ot(self, st: OTStep) -> tuple[Collect, Outbox]:
        accused = {d: c for d, c in st.complaints.items() if d not in self.excluded and c - self.excluded}
        for d in sorted(accused):
            # A wrong Ĉ fails every recipient's check; it names its dealer from signed messages alone,
            # whatever the dealer answers (S·t exponentiations, only for an accused dealer).
            try:
                cpl.check_combined(self.dealers[d])
            except InvalidShare as exc:
                self._name(d, cpl.ShareEvidence(cpl.KIND_BAD_COMMITMENT, d, msg.relay_bytes(self.adverts[d]),
                                                msg.relay_bytes(self.bundles[d])))
                self.errors.append(ErrorRecord(self.stage_name, d, exc))
                self.excluded.add(d)
        if not accused:
            # The OT answers come first: every member checks their proofs before it consents to U_1.
            nxt, out = self._close_masked(st.first)
            return nxt, self._ot_answers_out(st.answers, st.complaints, {}, set()) + out
        # §6.4: every accused dealer must publish the disputed shares before anything is unmasked. The
        # first iteration was masked under a U_0 that may lose a dealer: it is abandoned, never unmasked,
        # and the slot phase starts at invocation 2 (its decoys start afresh from the committed seed).
        if self.params.R_max < 2:
            raise BelowThreshold("complaints abandon the first reservation iteration and R_max=1 leaves no other")
        self.vectors.pop(1, None)
        s = self.slots
        self.slots = PSSlotPhase(2, s.ot, s.decoy_seed, Decoys(s.decoy_seed, self.T, self.params.n, self.params.k,
                                                                 self.params.decoys))
        out = [(d, msg.Complaints(self.T, 0, SERVER_ID, tuple(sorted(c))).encode(self._sk))
               for d, c in sorted(accused.items()) if d not in self.excluded]
        return ComplaintStep(st.answers, st.complaints), out

    def _on_complaint_answer(self, st: ComplaintStep, sender: int, a: msg.ComplaintAnswer) -> None:
        want = st.complaints.get(sender, set())
        if not want or sender in st.answers:
            raise AlreadyAnswered(f"complaint answer from {sender}, who was not asked (again)")
        got = dict(a.shares)
        if set(got) != want:
            raise Refused(f"answer of {sender} covers {sorted(got)}, complaints came from {sorted(want)}")
        for j, ys in sorted(got.items()):
            try:
                cpl.check_shares(self.dealers[sender], j + 1, ys)
            except InvalidShare:
                self._name(sender, cpl.ShareEvidence(cpl.KIND_BAD_ANSWER, sender, msg.relay_bytes(self.adverts[sender]),
                                                      msg.relay_bytes(self.bundles[sender]), msg.relay_bytes(a),
                                                      subject=j))
                raise
        st.answers[sender] = msg.relay_bytes(a)

    def _close_complaints(self, st: ComplaintStep) -> tuple[Collect, Outbox]:
        # A dealer that answered badly is named (and excluded by receive()); one that is silent is a dropout.
        silent = {d for d in st.complaints if d not in st.answers}  # complaints only name members of U_0
        out = self._ot_answers_out(st.ot_answers, st.complaints, st.answers, silent)
        gone = silent | (set(self.online[0]) & self.excluded)
        nxt, req = self._open_invocation(2, sorted(set(self.online[0]) - gone), (), tuple(sorted(gone)))
        return nxt, out + req

    def _ot_answers_out(self, answers, complaints, resolved_by, silent: set[int]) -> Outbox:
        """Each member's OT answer with the dealers' answers to its complaints; none to ``silent`` dealers."""
        out = []
        for i, a in sorted(answers.items()):
            if i in self.excluded or i in silent:
                continue
            resolved = tuple((d, resolved_by[d]) for d in sorted(resolved_by) if i in complaints[d])
            a = a.with_resolved(resolved)
            if i in self._nym_requests:
                # §7.3: the pseudonym goes with the OT answer, its B recorded now (a re-ask gets the same one);
                # the member is noted as holding it at its certificate.
                ev, proof = self.nyms.evaluate(self._identity[i], self._nym_requests.pop(i), self._nym_rng)
                self._nym_sent.add(i)
                a = dataclasses.replace(a, nym_eval=ev, nym_proof=proof)
            out.append((i, a.encode(self._sk)))
        return out

    # §6: one MaskedSum invocation
    def _open_invocation(self, m: int, mask_set, counts: tuple[int, ...], excluded: tuple[int, ...] = ()
                         ) -> tuple[MaskedSum, Outbox]:
        """Hook: invocation m's state (:meth:`_invocation`) and its MASK_REQUEST with ``counts`` to the live
        members of ``mask_set``. A deviation may send any member another request; each member binds the
        counts it was shown into h_m, so vectors made under other counts do not cancel in the sum."""
        st, live = self._invocation(m, mask_set, counts, excluded)
        return st, self._broadcast(live, msg.MaskRequest(self.T, m, SERVER_ID, counts, excluded))

    def _invocation(self, m: int, mask_set, counts: tuple[int, ...], excluded: tuple[int, ...] = ()
                    ) -> tuple[MaskedSum, list[int]]:
        """Hook: invocation m's state: its accumulator, its decoy picks or kept decoy rows, h_m after its
        counts; and the live members of its mask set to ask. Sends nothing: a deviation may observe or
        change what the PS expects, and what it sends is :meth:`_open_invocation`'s."""
        p, slots = self.params, self.slots
        # Participants mask against the whole list U_{m-1}; members excluded since
        # are simply not asked, and count as dropped when unmasking.
        mask_set = sorted(mask_set)
        if m == slots.start:
            slots.members = len(mask_set)
        live = self._need(mask_set, f"invocation {m}")
        # A count vector is one row of n words; the model list one row per settled slot.
        positions = 0 if m <= p.R_max else len(settled_slots(slots.counts))
        n_rows = max(positions, 1)
        length = p.n if m <= p.R_max else positions * p.row_words
        acc = np.zeros(length, dtype=np.dtype(f"<u{p.vector_bits(m) // 8}"))
        # np.zeros maps zero pages lazily; writing them now keeps the page faults out of the first upload's add.
        acc.fill(0)
        h = self._tx.absorb_counts(m, counts, excluded)
        st = MaskedSum(m, mask_set, acc, n_rows, h)
        if m <= p.R_max:
            self.vectors[m] = {}  # signed count vectors, for the audit
            st.decoy_picks = slots.decoys.picks()
        else:
            st.blame = BlameCollector(self.group, p, self.T, m, decoy_positions(slots.counts, slots.decoys.slots),
                                      self.adverts)
        return st, live

    def _on_masked_input(self, st: MaskedSum | OTStep, sender: int, mi: msg.MaskedInput) -> None:
        st = st.first if isinstance(st, OTStep) else st
        if sender not in st.mask_set:
            raise UnexpectedMessage(f"masked input from {sender}, who is not in U_{st.inv - 1}")
        if sender in st.uploaded:
            raise AlreadyAnswered(f"second masked input from {sender} in invocation {st.inv}")
        if len(mi.words) != st.acc.nbytes or mi.rows != st.n_rows:
            raise DecodeError(
                f"masked input of {sender} has {len(mi.words)} bytes in {mi.rows} rows, "
                f"expected {st.acc.nbytes} in {st.n_rows}"
            )
        self._check_view(st, sender, mi)
        # Only the rows blame may ever show a third party are hashed: a count vector whole, an
        # upload's decoy rows (the sender cannot tell them from the others).
        upload = st.inv > self.params.R_max
        msg.check_rows(mi, st.blame.positions if upload else None)
        # Streamed into the running sum: the PS never holds N vectors at once; it keeps what
        # blame may need: count vectors (short) and each upload's decoy rows with its signature.
        words = np.frombuffer(mi.words, dtype=st.acc.dtype)
        t0, c0 = time.perf_counter(), time.thread_time()
        np.add(st.acc, words, out=st.acc)
        if upload:
            self.timings["ps_sum_s"] += time.perf_counter() - t0
            self.timings["ps_sum_cpu_s"] += time.thread_time() - c0
            st.blame.keep_upload(sender, mi, words.reshape(st.n_rows, -1))
        else:
            self.vectors[st.inv][sender] = msg.relay_bytes(mi)
        st.uploaded.add(sender)

    def _on_objection(self, st: MaskedSum, sender: int, o: msg.Objection) -> None:
        """§8.2: a member's pick of the last iteration shows count 0; checked only by opening it."""
        if sender not in st.mask_set or st.inv == self.slots.start:
            raise UnexpectedMessage(f"objection from {sender} to invocation {st.inv}, which follows no counts")
        if sender in st.uploaded or sender in st.objections:
            raise AlreadyAnswered(f"objection from {sender}, who already answered invocation {st.inv}")
        if o.h != st.h:
            raise Refused(f"objection of {sender} was made under another transcript h_{st.inv}")
        st.objections[sender] = msg.relay_bytes(o)

    def _check_view(self, st: MaskedSum, sender: int, mi: msg.MaskedInput) -> None:
        """Hook: refuse a vector masked under another h_m (it would only randomise the sum). Called before the
        vector is added; a deviation that accepts it adds a vector that does not cancel."""
        if mi.h != st.h:
            raise Refused(f"masked input of {sender} was made under another transcript h_{st.inv}")

    def _close_masked(self, st: MaskedSum) -> tuple[Collect, Outbox]:
        if st.objections:
            r = self.slots.last  # the iteration whose counts were objected to
            return self._open(st, r, f"{len(st.objections)} objection(s) to the counts of iteration {r}")
        # U_m is exactly what was added, even if a member is excluded later (§6.1).
        Um = tuple(sorted(st.uploaded))
        if len(Um) < self.params.t:
            raise BelowThreshold(f"invocation {st.inv} uploads: {len(Um)} participants, threshold t={self.params.t}")
        self.online[st.inv] = Um
        dropped = sorted(set(st.mask_set) - set(Um))
        nxt = ConsentStep(st, Um, dropped, msg.consent_statement(self.T, st.inv, Um, st.h))
        return nxt, self._broadcast(self._live(Um), msg.UnmaskRequest(self.T, st.inv, SERVER_ID, Um))

    # §6.2–6.3: collect t signatures on (T, m, U_m, h_m) before anyone reveals anything.
    def _on_consent(self, st: ConsentStep, sender: int, c: msg.Consent) -> None:
        if sender not in st.online:
            raise UnexpectedMessage(f"consent from {sender}, who is not in U_{st.m}")
        if sender in st.consents:
            raise AlreadyAnswered(f"second consent from {sender}")
        self._roster[sender].key.verify(CONSENT_CONTEXT, st.statement, c.consent)
        st.consents[sender] = c.consent

    def _close_consent(self, st: ConsentStep) -> tuple[Collect, Outbox]:
        signers = self._need(st.consents, f"invocation {st.m} consent")
        sigs = tuple((i, st.consents[i]) for i in signers)
        self._tx.absorb_certified(st.m, st.online)
        cert = msg.CertificateMsg(self.T, st.m, SERVER_ID, st.online, sigs)
        # §7.3: a member that gets this certificate holds its pseudonym from now on: it counts as issued.
        held = self._nym_sent & set(signers)
        self.nyms.confirm(self._identity[i] for i in sorted(held))
        self._nym_sent -= held
        return UnmaskStep(st.sum, st.online, st.dropped), self._broadcast(signers, cert)

    def _on_unmask_response(self, st: UnmaskStep, sender: int, r: msg.UnmaskResponse) -> None:
        Um = set(st.online)
        if sender not in Um:
            raise UnexpectedMessage(f"unmask response from {sender}, who is not in U_{st.m}")
        if sender in st.answered:
            raise AlreadyAnswered(f"second unmask response from {sender}")
        seen = set()
        for owner, kind, share in r.shares:
            want = ShareKind.SELF_SEED if owner in Um else ShareKind.DH_SECRET if owner in st.dropped else None
            if kind is not want:
                raise InvalidShare(f"share of kind {kind.name} for participant {owner} was not requested")
            if share.x != sender + 1:
                raise InvalidShare(f"share index {share.x} does not belong to participant {sender}")
            if owner in seen:
                raise InvalidShare(f"two shares for participant {owner}")
            seen.add(owner)
        st.answered.add(sender)
        for owner, kind, share in r.shares:
            st.shares.setdefault((owner, kind), {})[sender] = share

    def _recover(self, st: UnmaskStep, owner: int, kind: ShareKind) -> int:
        """Reconstruct and check against g^b or X (§6.3). Only on a mismatch: check the owner's Ĉ
        (a wrong one names the owner, §6.4) and each share against its commitments, and rebuild from
        t shares that pass. A share that fails is dropped; its revealer is not named, since it could
        not show what the dealer sent it."""
        p, g = self.params, self.group
        adv = self.adverts[owner]
        row = adv.commitments[cpl.secret_index(st.m, kind)]
        held = sorted(st.shares.get((owner, kind), {}).items())
        what = f"{kind.name} of participant {owner} (invocation {st.m})"
        shamir = Shamir(g.order, p.t)
        if len(held) >= p.t:
            secret = shamir.reconstruct([sh for _, sh in held[: p.t]], check=False)
            if g.base_mul(secret) == row[0]:
                return secret
        try:
            cpl.check_combined(self.dealers[owner])
        except InvalidShare:
            self._name(owner, cpl.ShareEvidence(cpl.KIND_BAD_COMMITMENT, owner, msg.relay_bytes(adv),
                                                msg.relay_bytes(self.bundles[owner])))
        good = []
        for revealer, sh in held:
            try:
                feldman.verify_share(sh.x, sh.y, row)
                good.append(sh)
            except InvalidShare as exc:
                self.errors.append(ErrorRecord(self.stage_name, revealer, InvalidShare(f"{what}: {exc}")))
        if len(good) < p.t:
            raise BelowThreshold(f"{what}: {len(good)} valid shares, threshold t={p.t}")
        return shamir.reconstruct(good[: p.t], check=False)

    def _close_unmask(self, st: UnmaskStep) -> tuple[Collect, Outbox]:
        p, m, acc = self.params, st.m, st.sum.acc
        seeds = {i: self._recover(st, i, ShareKind.SELF_SEED) for i in st.online}
        secrets = {j: self._recover(st, j, ShareKind.DH_SECRET) for j in st.dropped}
        keys = {k: self.adverts[k].mask_keys[m - 1] for k in st.online}
        t0, c0 = time.perf_counter(), time.thread_time()
        unmask_in_place(acc, self.group, self.T, m, st.online, seeds, secrets, keys, st.sum.h, st.sum.n_rows)
        if m == p.upload_m:
            self.timings["ps_unmask_s"] += time.perf_counter() - t0
            self.timings["ps_unmask_cpu_s"] += time.thread_time() - c0
        self.seeds[m], self.dropped_x[m] = seeds, secrets
        if m <= p.R_max:
            return self._publish(st, acc + st.sum.decoy_picks)
        return self._deliver_rows(st, seeds)

    def _publish(self, st: UnmaskStep, counts_v: np.ndarray) -> tuple[Collect, Outbox]:
        """Hook: §5 step 3, §8.2: check iteration m's unmasked counts, then ask for the next iteration or the
        upload (or open the iteration when its counts fail). A deviation may open or ask otherwise; each
        member checks the counts and the request against what it signed."""
        p, m, slots = self.params, st.m, self.slots
        Um = st.online
        bound = opening.count_bound(len(Um), p.decoys, len(settled_slots(slots.counts)), slots.members - len(Um))
        reason = opening.check_counts(counts_v, bound)
        if reason is not None:
            return self._open(st.sum, m, f"counts of iteration {m}: {reason}")
        counts = tuple(int(c) for c in counts_v)
        self.counts.append(counts)
        slots.counts.append(counts)
        slots.decoys.observe(counts)
        # Once no party can still pick, the remaining iterations would be all zeros: go to the upload.
        # Members missing from the phase's first U never submitted in it, so own no settled slot.
        done = opening.slots_done(len(Um), p.decoys, len(settled_slots(slots.counts)),
                                  len(self.online[slots.start]) - len(Um))
        return self._open_invocation(p.upload_m if done else m + 1, Um, counts)

    def _deliver_rows(self, st: UnmaskStep, seeds: dict[int, int]) -> tuple[Collect, Outbox]:
        """§5 steps 5–6 with §7.2: the rows whose token, credential and tag pass; §9 if a nonzero one fails."""
        slots = self.slots
        lw, valid, failed = self._check_rows(st)
        blame = st.sum.blame
        if not blame.needed(failed):
            return self._finish(st.m, lw, valid, failed, blame, None), []
        blame.begin(st.online, st.sum.mask_set, seeds, st.sum.acc)
        # §9: open the decoys; every live member audits and opens its keys of the decoy rows.
        its = slots.iterations()
        req = msg.BlameRequest(
            self.T, st.m, SERVER_ID, slots.decoy_seed, tuple(blame.positions),
            tuple(tuple(v for _, v in sorted(self.vectors.get(r, {}).items())) for r in its),
            tuple(tuple(sorted(self.seeds[r].items())) for r in its),
            tuple(tuple(sorted(self.dropped_x[r].items())) for r in its),
        )
        return BlameStep(blame, valid, failed, lw), self._broadcast(self._live(st.online), req)

    def _check_rows(self, st: UnmaskStep) -> tuple[np.ndarray, list[int], dict[int, str]]:
        """Hook: the model list by rows, the positions whose token, credential and tag pass, and why the others
        fail. A failed nonzero row starts the blame step, in which each member checks the decoy positions
        it is asked to open against the opened decoy seed."""
        p, slots = self.params, self.slots
        S = settled_slots(slots.counts)
        lw = st.sum.acc.reshape(len(S), p.row_words)
        d_bytes = p.d * lw.dtype.itemsize
        valid, failed_rows, self._names = credential.check_rows(
            lw, d_bytes, [slots.ot.tokens[slot] for slot in S], self.T, self._gamma, self.group, self.nyms
        )
        # An all-zero row is what a settled owner that dropped (or a decoy) leaves: empty, not tampered.
        return lw, valid, {c.position: ("empty" if not lw[c.position].any() else c.reason) for c in failed_rows}

    # §8.2: open a failed iteration, name who broke it, restart the slot phase without them.
    def _open(self, st: MaskedSum, r: int, reason: str) -> tuple[Collect, Outbox]:
        """Open iteration r; ``st`` is the invocation being collected (r itself after a failed count check,
        r + 1 or the upload after objections)."""
        # The slot phase restarts at the first invocation whose keys masked nothing: r + 1 after a failed
        # count check, r + 2 after objections (members sent their vectors of r + 1 beside them).
        resume = st.inv + 1
        Ur = self.online[r]
        # After the reservation ended the upload followed: only the objectors open (their own picks);
        # a member that sent its model list reveals nothing of its slot phase, and the round ends.
        ask = sorted(st.objections) if st.inv == self.params.upload_m else self._live(Ur)
        collector = opening.OpeningCollector(
            self.group, self.params, r, ask, self.adverts, self.vectors[r], self.seeds[r], st.objections,
            self.slots.counts[-1] if st.objections else (), Ur,
        )
        self._tx.absorb_open(r, reason)
        return OpenStep(collector, resume), self._broadcast(ask, msg.OpenRequest(self.T, r, SERVER_ID, reason))

    def _on_open_reveal(self, st: OpenStep, sender: int, rv: msg.OpenReveal) -> None:
        st.collector.on_reveal(sender, rv)

    def _close_open(self, st: OpenStep) -> tuple[Collect, Outbox]:
        p, r = self.params, st.collector.r
        evidence, silent = st.collector.result()
        for pid, ev in evidence.items():
            self._name(pid, ev)
        self.excluded |= set(evidence) | set(silent)
        # The mask set every member computes: U_r without the named and the silent (members excluded
        # earlier for other reasons stay in it and count as dropped, as in any invocation).
        remaining = sorted(set(self.online[r]) - set(evidence) - set(silent))
        if st.resume > p.R_max:
            why = ("an objection came after the reservation had ended (the upload followed its counts)"
                   if st.resume > p.upload_m else f"no iteration is left to restart the slot phase (R_max={p.R_max})")
            raise BelowThreshold(f"reservation iteration {r} was opened and {why}; the round ends; "
                                 f"named: {sorted(evidence)}")
        live = self._need(remaining, f"restart after iteration {r}")
        self.slots = self._new_slot_phase(st.resume)
        table, commit = self.slots.ot.table.encode(), commitment(self.T, self.slots.decoy_seed)
        rs = msg.Restart(self.T, st.resume, SERVER_ID, r, table, commit,
                         tuple(evidence[i].encode() for i in sorted(evidence)), tuple(silent))
        self._tx.absorb("restart", rs.body())
        return SlotStep(st.resume, remaining), self._broadcast(live, rs)

    def _on_slot_request(self, st: SlotStep, sender: int, sr: msg.SlotRequest) -> None:
        if sender not in st.members:
            raise UnexpectedMessage(f"slot request from {sender}, who is not in the restarted slot phase")
        if sender in st.answers:
            raise AlreadyAnswered(f"second slot request from {sender}")
        req = OTRequest.decode(self.group, sr.request, self.params.k)
        answer = self.slots.ot.answer(sender, req)
        proof = self.slots.ot.prove(req, answer, ot_proof_context(self.T), self._rng)
        st.answers[sender] = msg.SlotResponse(self.T, st.inv, SERVER_ID, answer.encode(), proof.encode(self.group))

    def _close_slots(self, st: SlotStep) -> tuple[Collect, Outbox]:
        self.excluded |= set(st.members) - set(st.answers)
        out = [(i, a.encode(self._sk)) for i, a in sorted(st.answers.items()) if i not in self.excluded]
        # Members that did not ask are dropouts of the next invocation, like any silent member.
        nxt, req = self._open_invocation(st.inv, st.members, ())
        return nxt, out + req

    def _on_opening(self, st: BlameStep, sender: int, op: msg.Opening) -> None:
        st.blame.on_opening(sender, op)

    def _close_blame(self, st: BlameStep) -> tuple[Collect, Outbox]:
        out = st.blame.disputes()
        if out:
            return DisputeStep(st.blame, st.valid, st.failed, st.lw), [(i, d.encode(self._sk)) for i, d in out]
        return self._close_dispute(st)

    def _on_dispute_answer(self, st: DisputeStep, sender: int, a: msg.DisputeAnswer) -> None:
        st.blame.on_dispute_answer(sender, a)

    def _close_dispute(self, st: BlameStep) -> tuple[Collect, Outbox]:
        return self._finish(st.m, st.lw, st.valid, st.failed, st.blame, st.blame.result()), []

    def _finish(self, m: int, lw: np.ndarray, valid: list[int], failed: dict[int, str], blame: BlameCollector,
                verdict) -> Finished:
        p = self.params
        models = [p.codec.decode(lw[pos, : p.d].copy()) for pos in valid]
        named = {**self._culprits, **(verdict.evidence if verdict else {})}
        self.output = RoundOutput(
            models, valid, lw.shape[0], list(self.counts), dict(self.online), self.errors,
            rejected_rows=dict(failed),
            blamed={i: str(e) for i, e in named.items()},
            evidence=named,
            suspects=verdict.suspects if verdict else [],
            decoy_positions=list(blame.positions),
            timings=dict(self.timings),
            pseudonyms=[self._names[pos] for pos in valid],
        )
        return Finished(m)
