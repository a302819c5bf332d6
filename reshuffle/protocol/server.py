"""Parameter-server state machine (docs/protocol.md §6, docs/security/threat-model.md, §6.2–6.3, §7.2).

The :class:`Server` only ever sees ``(transport sender id, bytes)``. Each
message is parsed, its sender's signature checked and its content validated
before it changes any state; a :class:`ProtocolError` is recorded against its
sender, which is excluded from the rest of the round (duplicates are only
ignored), and the round goes on with the others. Only too few participants
(:class:`BelowThreshold`) ends a round. Every PS message is signed.

U_m is exactly the set of masked vectors added to the accumulator (§8 item 7):
a member that misbehaves afterwards is only a dropout for answering.

Driving it: ``start()`` returns the first messages; then, per phase, feed every
reply to ``receive()`` and call ``close_phase()`` when the phase's deadline has
passed; it returns the next messages. ``output`` is set once ``done``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from reshuffle.crypto import feldman, voprf
from reshuffle.crypto.ot import OTRequest, OTSender
from reshuffle.crypto.rand import RandomSource, as_source
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
from reshuffle.protocol import credential
from reshuffle.protocol import messages as msg
from reshuffle.protocol.blame import BlameCollector, Evidence
from reshuffle.protocol import complaints as cpl
from reshuffle.protocol import opening
from reshuffle.protocol.decoys import Decoys, commitment, decoy_positions
from reshuffle.protocol.masking import unmask_in_place
from reshuffle.protocol.participant import ot_proof_context
from reshuffle.protocol.transcript import CONSENT_CONTEXT, Transcript
from reshuffle.protocol.messages import Context, MsgType, ShareKind
from reshuffle.protocol.params import RoundParams
from reshuffle.protocol.phases import SERVER_TABLE, SPhase, expected_names, phase_of
from reshuffle.protocol.reservation import settled_slots
from reshuffle.protocol.schedule import Step, closer_of, step_of

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
    """A rejected message: the phase, the transport sender and the typed error."""

    phase: str
    sender: int
    error: ProtocolError

    def __str__(self) -> str:
        return f"[{self.phase}] from {self.sender}: {type(self.error).__name__}: {self.error}"


@dataclass
class RoundOutput:
    """What the PS learns: unlinked models and public round statistics."""

    models: list[np.ndarray]
    valid_positions: list[int]
    n_positions: int
    counts: list[tuple[int, ...]]
    online: dict[int, tuple[int, ...]]  # m -> U_m (0: setup)
    errors: list[ErrorRecord] = field(default_factory=list)
    # position -> why its row was not delivered: token, credential, tag, duplicate credential (§7.2)
    rejected_rows: dict[int, str] = field(default_factory=dict)
    # participant id -> reason with its evidence (protocol v2, §9); never an honest party.
    blamed: dict[int, str] = field(default_factory=dict)
    evidence: dict[int, "Evidence"] = field(default_factory=dict)
    # members that could not answer the blame step while a decoy row stayed unexplained: never named
    suspects: list[int] = field(default_factory=list)
    decoy_positions: list[int] = field(default_factory=list)
    # PS seconds spent summing the uploads and removing their masks (the floor's two operations)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def discarded_positions(self) -> list[int]:
        return sorted(set(range(self.n_positions)) - set(self.valid_positions))


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
        self.phase = SPhase.START
        self.m = 0
        self.errors: list[ErrorRecord] = []  # rejected messages and discarded shares
        self.excluded: set[int] = set()
        self.online: dict[int, tuple[int, ...]] = {}
        self.counts: list[tuple[int, ...]] = []  # every published count vector, restarts included
        self._phase_counts: list[tuple[int, ...]] = []  # those of the current slot phase (§8.2)
        self._phase_start = 1  # its first invocation
        self.output: RoundOutput | None = None
        self._adverts: dict[int, msg.Advertise] = {}
        self._tx = Transcript(T)
        self._share_evidence: dict[int, cpl.ShareEvidence] = {}  # §6.4 culprits
        # Of the upload invocation: wall seconds, and this thread's CPU seconds (which other load does not inflate).
        self.timings = {"ps_sum_s": 0.0, "ps_unmask_s": 0.0, "ps_sum_cpu_s": 0.0, "ps_unmask_cpu_s": 0.0}
        self._h = b""
        # §7.2: the credential key γ, independent of every OT key β.
        self._gamma = self.group.random_scalar(self._rng)
        self.cred_key = self.group.base_mul(self._gamma)

    @property
    def done(self) -> bool:
        return self.phase is SPhase.DONE

    @property
    def phase_name(self) -> str:
        """User-facing phase of what is being collected (setup, ot, reserve, upload, unmask)."""
        if self.phase is SPhase.START:
            return "setup"
        handlers = SERVER_TABLE[self.phase]
        if not handlers:
            return "done"
        # The phase of the message being collected: one mapping, in phases.py.
        return phase_of(next(iter(handlers)), self.m, self.params.upload_m)

    @property
    def step(self) -> Step:
        """The schedule step now being collected (:mod:`~reshuffle.protocol.schedule`)."""
        return step_of(self.phase, self.m, self.params.upload_m)

    # ------------------------------------------------------------------ #
    def start(self) -> Outbox:
        """§5 step 0: broadcast parameters, H(W_g^T), certificates."""
        if self.phase is not SPhase.START:
            raise ConfigError("start() called twice")
        rs = msg.RoundStart(
            self.T, 0, SERVER_ID, self.params, self._hash, self._cert,
            tuple(sorted(self._roster.items())), self.cred_key,
        )
        self._tx.absorb("round-start", rs.body())
        self.phase = SPhase.ADVERTS
        return self._broadcast(sorted(self._roster), rs)

    def receive(self, sender: int, data: bytes) -> None:
        """Validate and absorb one message; errors are recorded, never raised."""
        try:
            m = admit(sender, data, self._roster, self.excluded, self.T, self._ctx)
            handlers = SERVER_TABLE[self.phase]
            if m.TYPE not in handlers:
                raise UnexpectedMessage(
                    f"PS in state '{self.phase.value}' got {m.TYPE.name}; expected {expected_names(handlers)}"
                )
            # The OT request (invocation 0) shares its step with the first vector (invocation 1).
            want = 0 if m.TYPE is MsgType.OT_REQUEST else self.m
            if m.m != want:
                raise UnexpectedMessage(f"message for invocation {m.m}, current is {want}")
            getattr(self, handlers[m.TYPE])(sender, m)
        except ProtocolError as exc:
            self.errors.append(ErrorRecord(self.phase_name, sender, exc))
            # A duplicate is dropped, not punished: the first copy stands.
            if sender in self._roster and not isinstance(exc, AlreadyAnswered):
                self.excluded.add(sender)

    def close_phase(self) -> Outbox:
        """The deadline of the current phase has passed: compute and emit the next step."""
        if self.phase in (SPhase.START, SPhase.DONE):
            raise ConfigError(f"close_phase() in state '{self.phase.value}'")
        closer = getattr(self, closer_of(self.phase))
        return closer()

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

    # ------------------------------------------------------------------ #
    # §5 step 1: setup
    def _on_advertise(self, sender: int, a: msg.Advertise) -> None:
        if sender in self._adverts:
            raise AlreadyAnswered(f"second advertisement from {sender}")
        if a.global_hash != self._hash:
            raise Refused(f"advertisement of {sender} signs another global model")
        self._adverts[sender] = a

    def _close_adverts(self) -> Outbox:
        ids = self._need(self._adverts, "setup (advertisements)")
        self._adverts = {i: self._adverts[i] for i in ids}
        self._advertisers = ids
        relay = msg.AdvertiseList(self.T, 0, SERVER_ID, tuple(msg.relay_bytes(self._adverts[i]) for i in ids))
        self._tx.absorb("adverts", relay.body())
        self._bundles: dict[int, dict[int, bytes]] = {}
        self._dealer_bundles: dict[int, msg.ShareBundle] = {}
        self.phase = SPhase.BUNDLES
        return self._broadcast(ids, relay)

    def _on_share_bundle(self, sender: int, b: msg.ShareBundle) -> None:
        if sender not in self._adverts:
            raise UnexpectedMessage(f"share bundle from {sender}, who did not advertise")
        if sender in self._bundles:
            raise AlreadyAnswered(f"second share bundle from {sender}")
        want = set(self._advertisers) - {sender}
        got = {r for r, _ in b.ciphertexts}
        if got != want:
            raise DecodeError(f"share bundle of {sender} addresses {sorted(got)}, expected {sorted(want)}")
        self._bundles[sender] = dict(b.ciphertexts)
        self._dealer_bundles[sender] = b

    def _close_bundles(self) -> Outbox:
        U0 = self._need(self._bundles, "setup (share bundles)")
        self.online[0] = tuple(U0)
        table, commit = self._new_slot_phase()
        self._dealers = {
            d: cpl.Dealer(self._adverts[d], self._dealer_bundles[d].digest(), self._dealer_bundles[d].combined)
            for d in U0
        }
        dealers = tuple((d, self._dealers[d].digest, self._dealers[d].combined) for d in U0)
        self._tx.absorb("setup", msg.ShareDelivery(self.T, 0, SERVER_ID, tuple(U0), table, commit, dealers, ()).common())
        self._vectors: dict[int, dict[int, bytes]] = {}  # m -> sender -> signed count vector (for the audit)
        self._seeds: dict[int, dict[int, int]] = {}
        self._dropped_x: dict[int, dict[int, int]] = {}
        out = []
        for j in U0:
            cts = tuple((s, self._bundles[s][j]) for s in U0 if s != j)
            out.append((j, msg.ShareDelivery(self.T, 0, SERVER_ID, tuple(U0), table, commit, dealers, cts)
                        .encode(self._sk)))
        self._ot_answers: dict[int, msg.OTResponseMsg] = {}
        self._complaints: dict[int, set[int]] = {}  # dealer -> complainers
        # §5a: every member answers the delivery with its OT request and its first reservation vector.
        self._prepare_invocation(1, U0, ())
        self.phase = SPhase.OT
        return out

    def _new_slot_phase(self) -> tuple[bytes, bytes]:
        """A fresh OT key β with its table, and decoys from a seed committed to before anyone picks (§8.2)."""
        p = self.params
        self._ot = OTSender(self.group, self.T, p.n, p.k, self._rng)
        self._decoy_seed = self._rng.bytes(32)
        self._decoys = Decoys(self._decoy_seed, self.T, p.n, p.k, p.decoys)
        return self._ot.table.encode(), commitment(self.T, self._decoy_seed)

    @property
    def culprits(self) -> dict:
        """Participants named so far with their evidence (§6.4; the blame step adds at the end)."""
        return dict(self._share_evidence)

    def _name(self, pid: int, ev) -> None:
        """Record a culprit with its evidence (first evidence stands)."""
        self._share_evidence.setdefault(pid, ev)

    # §5 step 2, §7.1–7.2: slot tokens with a proof, and one credential per participant.
    def _on_ot_request(self, sender: int, m: msg.OTRequestMsg) -> None:
        if sender not in self.online[0]:
            raise UnexpectedMessage(f"OT request from {sender}, who is not in U_0")
        if not set(m.complaints) <= set(self.online[0]) - {sender}:
            raise Refused(f"complaints of {sender} name {list(m.complaints)}, not all other members of U_0")
        req = OTRequest.decode(self.group, m.request, self.params.k)
        answer = self._ot.answer(sender, req)
        for dealer in m.complaints:
            self._complaints.setdefault(dealer, set()).add(sender)
        g = self.group
        proof = self._ot.prove(req, answer, ot_proof_context(self.T), self._rng)
        (cred_eval,), cred_proof = voprf.blind_evaluate(
            credential.suite(g), self._gamma, [m.cred_request], self.cred_key, self._rng
        )
        self._ot_answers[sender] = msg.OTResponseMsg(
            self.T, 0, SERVER_ID, answer.encode(), proof.encode(g), cred_eval, cred_proof.encode(g)
        )

    def _close_ot(self) -> Outbox:
        self._answers: dict[int, bytes] = {}
        accused = {d: c for d, c in self._complaints.items() if d not in self.excluded and c - self.excluded}
        for d in sorted(accused):
            # A wrong Ĉ fails every recipient's check; it names its dealer from signed messages alone,
            # whatever the dealer answers (S·t exponentiations, only for an accused dealer).
            try:
                cpl.check_combined(self._dealers[d])
            except InvalidShare as exc:
                self._name(d, cpl.ShareEvidence(cpl.KIND_BAD_COMMITMENT, d, msg.relay_bytes(self._adverts[d]),
                                                msg.relay_bytes(self._dealer_bundles[d])))
                self.errors.append(ErrorRecord(self.phase_name, d, exc))
                self.excluded.add(d)
        if not accused:
            # The OT answers come first: every member checks their proofs before it consents to U_1.
            return self._ot_answers_out(set()) + self._close_masked()
        # §6.4: every accused dealer must publish the disputed shares before anything is unmasked. The
        # first iteration was masked under a U_0 that may lose a dealer: it is abandoned, never unmasked,
        # and the slot phase starts at invocation 2 (its decoys start afresh from the committed seed).
        if self.params.R_max < 2:
            raise BelowThreshold("complaints abandon the first reservation iteration and R_max=1 leaves no other")
        self._vectors.pop(1, None)
        self.m = 0  # back to the setup's invocation: the complaint answers carry 0
        self._decoys = Decoys(self._decoy_seed, self.T, self.params.n, self.params.k, self.params.decoys)
        self._phase_start = 2
        self.phase = SPhase.COMPLAINTS
        return [(d, msg.Complaints(self.T, 0, SERVER_ID, tuple(sorted(c))).encode(self._sk))
                for d, c in sorted(accused.items()) if d not in self.excluded]

    def _on_complaint_answer(self, sender: int, a: msg.ComplaintAnswer) -> None:
        want = self._complaints.get(sender, set())
        if not want or sender in self._answers:
            raise AlreadyAnswered(f"complaint answer from {sender}, who was not asked (again)")
        got = dict(a.shares)
        if set(got) != want:
            raise Refused(f"answer of {sender} covers {sorted(got)}, complaints came from {sorted(want)}")
        for j, ys in sorted(got.items()):
            try:
                cpl.check_shares(self._dealers[sender], j + 1, ys)
            except InvalidShare:
                self._name(sender, cpl.ShareEvidence(cpl.KIND_BAD_ANSWER, sender, msg.relay_bytes(self._adverts[sender]),
                                                      msg.relay_bytes(self._dealer_bundles[sender]), msg.relay_bytes(a),
                                                      subject=j))
                raise
        self._answers[sender] = msg.relay_bytes(a)

    def _close_complaints(self) -> Outbox:
        # A dealer that answered badly is named (and excluded by receive()); one that is silent is a dropout.
        silent = {d for d in self._complaints if d not in self._answers}  # complaints only name members of U_0
        out = self._ot_answers_out(silent)
        gone = silent | (set(self.online[0]) & self.excluded)
        return out + self._open_invocation(2, sorted(set(self.online[0]) - gone), (), tuple(sorted(gone)))

    def _ot_answers_out(self, silent: set[int]) -> Outbox:
        """Each member's OT answer with the dealers' answers to its complaints; none to ``silent`` dealers."""
        out = []
        for i, a in sorted(self._ot_answers.items()):
            if i in self.excluded or i in silent:
                continue
            resolved = tuple((d, self._answers[d]) for d in sorted(self._answers) if i in self._complaints[d])
            a = msg.OTResponseMsg(a.T, a.m, a.sender, a.response, a.ot_proof, a.cred_eval, a.cred_proof, resolved)
            out.append((i, a.encode(self._sk)))
        return out

    # §6: one MaskedSum invocation
    def _open_invocation(self, m: int, mask_set, counts: tuple[int, ...], excluded: tuple[int, ...] = ()) -> Outbox:
        live = self._prepare_invocation(m, mask_set, counts, excluded)
        self.phase = SPhase.MASKED
        return self._broadcast(live, msg.MaskRequest(self.T, m, SERVER_ID, counts, excluded))

    def _prepare_invocation(self, m: int, mask_set, counts: tuple[int, ...], excluded: tuple[int, ...] = ()) -> list[int]:
        """Ready the accumulator of invocation m and absorb its counts; returns the live members to ask."""
        p = self.params
        self.m = m
        # Participants mask against the whole list U_{m-1}; members excluded since
        # are simply not asked, and count as dropped when unmasking.
        self._mask_set = sorted(mask_set)
        if m == self._phase_start:
            self._phase_members = len(self._mask_set)
        live = self._need(mask_set, f"invocation {m}")
        # A count vector is one row of n words; the model list one row per settled slot.
        positions = 0 if m <= p.R_max else len(settled_slots(self._phase_counts))
        self._n_rows = max(positions, 1)
        length = p.n if m <= p.R_max else positions * p.row_words
        self._acc = np.zeros(length, dtype=np.dtype(f"<u{p.vector_bits(m) // 8}"))
        # np.zeros maps zero pages lazily; writing them now keeps the page faults out of the first upload's add.
        self._acc.fill(0)
        self._uploaded: set[int] = set()
        self._objections: dict[int, bytes] = {}
        if m <= p.R_max:
            self._vectors[m] = {}  # a reused invocation keeps nothing of its discarded attempt
            self._decoy_picks = self._decoys.picks()
        else:
            self._decoy_pos = decoy_positions(self._phase_counts, self._decoys.slots)
            self._blame = BlameCollector(self, self._decoy_pos)
        self._h = self._tx.absorb_counts(m, counts, excluded)
        return live

    def _on_masked_input(self, sender: int, mi: msg.MaskedInput) -> None:
        if sender not in self._mask_set:
            raise UnexpectedMessage(f"masked input from {sender}, who is not in U_{self.m - 1}")
        if sender in self._uploaded:
            raise AlreadyAnswered(f"second masked input from {sender} in invocation {self.m}")
        if len(mi.words) != self._acc.nbytes or mi.rows != self._n_rows:
            raise DecodeError(
                f"masked input of {sender} has {len(mi.words)} bytes in {mi.rows} rows, "
                f"expected {self._acc.nbytes} in {self._n_rows}"
            )
        self._check_view(sender, mi)
        # Only the rows blame may ever show a third party are hashed: a count vector whole, an
        # upload's decoy rows (the sender cannot tell them from the others).
        msg.check_rows(mi, None if self.m <= self.params.R_max else self._decoy_pos)
        # Streamed into the running sum: the PS never holds N vectors at once; it keeps what
        # blame may need: count vectors (short) and each upload's decoy rows with its signature.
        words = np.frombuffer(mi.words, dtype=self._acc.dtype)
        t0, c0 = time.perf_counter(), time.thread_time()
        np.add(self._acc, words, out=self._acc)
        if self.m == self.params.upload_m:
            self.timings["ps_sum_s"] += time.perf_counter() - t0
            self.timings["ps_sum_cpu_s"] += time.thread_time() - c0
        if self.m <= self.params.R_max:
            self._vectors.setdefault(self.m, {})[sender] = msg.relay_bytes(mi)
        else:
            self._blame.keep_upload(sender, mi, words.reshape(self._n_rows, -1))
        self._uploaded.add(sender)

    def _on_objection(self, sender: int, o: msg.Objection) -> None:
        """§8.2: a member's pick of the last iteration shows count 0; checked only by opening it."""
        if sender not in self._mask_set or self.m == self._phase_start:
            raise UnexpectedMessage(f"objection from {sender} to invocation {self.m}, which follows no counts")
        if sender in self._uploaded or sender in self._objections:
            raise AlreadyAnswered(f"objection from {sender}, who already answered invocation {self.m}")
        if o.h != self._h:
            raise Refused(f"objection of {sender} was made under another transcript h_{self.m}")
        self._objections[sender] = msg.relay_bytes(o)

    def _check_view(self, sender: int, mi: msg.MaskedInput) -> None:
        """A vector masked under another h_m would only randomise the sum: refuse it."""
        if mi.h != self._h:
            raise Refused(f"masked input of {sender} was made under another transcript h_{self.m}")

    def _close_masked(self) -> Outbox:
        if self._objections:
            r = self._phase_start + len(self._phase_counts) - 1  # the iteration whose counts were objected to
            return self._open(r, f"{len(self._objections)} objection(s) to the counts of iteration {r}")
        # U_m is exactly what was added, even if a member is excluded later (§8 item 7).
        Um = sorted(self._uploaded)
        if len(Um) < self.params.t:
            raise BelowThreshold(f"invocation {self.m} uploads: {len(Um)} participants, threshold t={self.params.t}")
        self.online[self.m] = tuple(Um)
        self._dropped = sorted(set(self._mask_set) - set(Um))
        self._consents: dict[int, bytes] = {}
        self._statement = msg.consent_statement(self.T, self.m, Um, self._h)
        self.phase = SPhase.CONSENT
        return self._broadcast(self._live(Um), msg.UnmaskRequest(self.T, self.m, SERVER_ID, tuple(Um)))

    # §6.2–6.3: collect t signatures on (T, m, U_m, h_m) before anyone reveals anything.
    def _on_consent(self, sender: int, c: msg.Consent) -> None:
        if sender not in self.online[self.m]:
            raise UnexpectedMessage(f"consent from {sender}, who is not in U_{self.m}")
        if sender in self._consents:
            raise AlreadyAnswered(f"second consent from {sender}")
        self._roster[sender].key.verify(CONSENT_CONTEXT, self._statement, c.consent)
        self._consents[sender] = c.consent

    def _close_consent(self) -> Outbox:
        Um = self.online[self.m]
        signers = self._need(self._consents, f"invocation {self.m} consent")
        sigs = tuple((i, self._consents[i]) for i in signers)
        self._start_unmask()
        return self._broadcast(signers, msg.CertificateMsg(self.T, self.m, SERVER_ID, Um, sigs))

    def _start_unmask(self) -> None:
        self._tx.absorb_certified(self.m, self.online[self.m])
        self._shares: dict[tuple[int, ShareKind], dict[int, Share]] = {}
        self._answered: set[int] = set()
        self._responses: dict[int, msg.UnmaskResponse] = {}
        self.phase = SPhase.UNMASK

    def _on_unmask_response(self, sender: int, r: msg.UnmaskResponse) -> None:
        Um = set(self.online[self.m])
        if sender not in Um:
            raise UnexpectedMessage(f"unmask response from {sender}, who is not in U_{self.m}")
        if sender in self._answered:
            raise AlreadyAnswered(f"second unmask response from {sender}")
        seen = set()
        for owner, kind, share in r.shares:
            want = ShareKind.SELF_SEED if owner in Um else ShareKind.DH_SECRET if owner in self._dropped else None
            if kind is not want:
                raise InvalidShare(f"share of kind {kind.name} for participant {owner} was not requested")
            if share.x != sender + 1:
                raise InvalidShare(f"share index {share.x} does not belong to participant {sender}")
            if owner in seen:
                raise InvalidShare(f"two shares for participant {owner}")
            seen.add(owner)
        self._answered.add(sender)
        self._responses[sender] = r
        for owner, kind, share in r.shares:
            self._shares.setdefault((owner, kind), {})[sender] = share

    def _recover(self, owner: int, kind: ShareKind) -> int:
        """Reconstruct and check against g^b or X (§6.3). Only on a mismatch: check the owner's Ĉ
        (a wrong one names the owner, §6.4) and each share against its commitments, and rebuild from
        t shares that pass. A share that fails is dropped; its revealer is not named, since it could
        not show what the dealer sent it."""
        p, g = self.params, self.group
        adv = self._adverts[owner]
        row = adv.commitments[cpl.secret_index(self.m, kind)]
        held = sorted(self._shares.get((owner, kind), {}).items())
        what = f"{kind.name} of participant {owner} (invocation {self.m})"
        shamir = Shamir(g.order, p.t)
        if len(held) >= p.t:
            secret = shamir.reconstruct([sh for _, sh in held[: p.t]], check=False)
            if g.base_mul(secret) == row[0]:
                return secret
        try:
            cpl.check_combined(self._dealers[owner])
        except InvalidShare:
            self._name(owner, cpl.ShareEvidence(cpl.KIND_BAD_COMMITMENT, owner, msg.relay_bytes(adv),
                                                msg.relay_bytes(self._dealer_bundles[owner])))
        good = []
        for revealer, sh in held:
            try:
                feldman.verify_share(sh.x, sh.y, row)
                good.append(sh)
            except InvalidShare as exc:
                self.errors.append(ErrorRecord(self.phase_name, revealer, InvalidShare(f"{what}: {exc}")))
        if len(good) < p.t:
            raise BelowThreshold(f"{what}: {len(good)} valid shares, threshold t={p.t}")
        return shamir.reconstruct(good[: p.t], check=False)

    def _close_unmask(self) -> Outbox:
        p, m = self.params, self.m
        Um = self.online[m]
        seeds = {i: self._recover(i, ShareKind.SELF_SEED) for i in Um}
        secrets = {j: self._recover(j, ShareKind.DH_SECRET) for j in self._dropped}
        keys = {k: self._adverts[k].mask_keys[m - 1] for k in Um}
        t0, c0 = time.perf_counter(), time.thread_time()
        unmask_in_place(self._acc, self.group, self.T, m, Um, seeds, secrets, keys, self._h, self._n_rows)
        if m == p.upload_m:
            self.timings["ps_unmask_s"] += time.perf_counter() - t0
            self.timings["ps_unmask_cpu_s"] += time.thread_time() - c0
        self._seeds[m], self._dropped_x[m] = seeds, secrets
        if m <= p.R_max:
            self._acc += self._decoy_picks
            bound = opening.count_bound(len(Um), p.decoys, len(settled_slots(self._phase_counts)),
                                        self._phase_members - len(Um))
            reason = opening.check_counts(self._acc, bound)
            if reason is not None:
                return self._open(m, f"counts of iteration {m}: {reason}")
            counts = tuple(int(c) for c in self._acc)
            self.counts.append(counts)
            self._phase_counts.append(counts)
            self._decoys.observe(counts)
            # Once no party can still pick, the remaining iterations would be all zeros: go to the upload.
            # Members missing from the phase's first U never submitted in it, so own no settled slot.
            done = opening.slots_done(len(Um), p.decoys, len(settled_slots(self._phase_counts)),
                                      len(self.online[self._phase_start]) - len(Um))
            return self._open_invocation(p.upload_m if done else m + 1, Um, counts)
        self._check_rows()
        if not self._blame.needed(self._failed):
            self._finish()
            return []
        # §9: open the decoys; every live member audits and opens its keys of the decoy rows.
        req = msg.BlameRequest(
            self.T, m, SERVER_ID, self._decoy_seed, tuple(self._decoy_pos),
            tuple(tuple(v for _, v in sorted(self._vectors.get(r, {}).items())) for r in self._slot_iterations()),
            tuple(tuple(sorted(self._seeds[r].items())) for r in self._slot_iterations()),
            tuple(tuple(sorted(self._dropped_x[r].items())) for r in self._slot_iterations()),
        )
        self.phase = SPhase.BLAME
        return self._broadcast(self._live(Um), req)

    def _slot_iterations(self) -> range:
        """The iterations the final slot phase ran (it ends early once every party has settled)."""
        return range(self._phase_start, self._phase_start + len(self._phase_counts))

    # §8.2: open a failed iteration, name who broke it, restart the slot phase without them.
    def _open(self, r: int, reason: str) -> Outbox:
        objections = dict(self._objections)
        # The slot phase restarts at the first invocation whose keys masked nothing: r + 1 after a failed
        # count check, r + 2 after objections (members sent their vectors of r + 1 beside them).
        self._resume = self.m + 1
        Ur = self.online[r]
        # After the reservation ended the upload followed: only the objectors open (their own picks);
        # a member that sent its model list reveals nothing of its slot phase, and the round ends.
        ask = sorted(objections) if self.m == self.params.upload_m else self._live(Ur)
        self._opening = opening.OpeningCollector(
            self.group, self.params, r, ask, self._adverts, self._vectors[r], self._seeds[r], objections,
            self._phase_counts[-1] if objections else (), Ur,
        )
        self.m = r
        self._tx.absorb_open(r, reason)
        self.phase = SPhase.OPEN
        return self._broadcast(ask, msg.OpenRequest(self.T, r, SERVER_ID, reason))

    def _on_open_reveal(self, sender: int, rv: msg.OpenReveal) -> None:
        self._opening.on_reveal(sender, rv)

    def _close_open(self) -> Outbox:
        p, r = self.params, self._opening.r
        evidence, silent = self._opening.result()
        for pid, ev in evidence.items():
            self._name(pid, ev)
        self.excluded |= set(evidence) | set(silent)
        # The mask set every member computes: U_r without the named and the silent (members excluded
        # earlier for other reasons stay in it and count as dropped, as in any invocation).
        remaining = sorted(set(self.online[r]) - set(evidence) - set(silent))
        if self._resume > p.R_max:
            why = ("an objection came after the reservation had ended (the upload followed its counts)"
                   if self._resume > p.upload_m else f"no iteration is left to restart the slot phase (R_max={p.R_max})")
            raise BelowThreshold(f"reservation iteration {r} was opened and {why}; the round ends; "
                                 f"named: {sorted(evidence)}")
        live = self._need(remaining, f"restart after iteration {r}")
        table, commit = self._new_slot_phase()
        self.m, self._phase_start, self._phase_counts = self._resume, self._resume, []
        self._restart_set = remaining
        rs = msg.Restart(self.T, self.m, SERVER_ID, r, table, commit,
                         tuple(evidence[i].encode() for i in sorted(evidence)), tuple(silent))
        self._tx.absorb("restart", rs.body())
        self._slot_answers: dict[int, msg.SlotResponse] = {}
        self.phase = SPhase.SLOTS
        return self._broadcast(live, rs)

    def _on_slot_request(self, sender: int, sr: msg.SlotRequest) -> None:
        if sender not in self._restart_set:
            raise UnexpectedMessage(f"slot request from {sender}, who is not in the restarted slot phase")
        if sender in self._slot_answers:
            raise AlreadyAnswered(f"second slot request from {sender}")
        req = OTRequest.decode(self.group, sr.request, self.params.k)
        answer = self._ot.answer(sender, req)
        proof = self._ot.prove(req, answer, ot_proof_context(self.T), self._rng)
        self._slot_answers[sender] = msg.SlotResponse(self.T, self.m, SERVER_ID, answer.encode(),
                                                      proof.encode(self.group))

    def _close_slots(self) -> Outbox:
        self.excluded |= set(self._restart_set) - set(self._slot_answers)
        out = [(i, a.encode(self._sk)) for i, a in sorted(self._slot_answers.items()) if i not in self.excluded]
        # Members that did not ask are dropouts of the next invocation, like any silent member.
        return out + self._open_invocation(self.m, self._restart_set, ())

    def _on_opening(self, sender: int, op: msg.Opening) -> None:
        self._blame.on_opening(sender, op)

    def _close_blame(self) -> Outbox:
        out = self._blame.disputes()
        if out:
            self.phase = SPhase.DISPUTE
            return [(i, d.encode(self._sk)) for i, d in out]
        return self._close_dispute()

    def _on_dispute_answer(self, sender: int, a: msg.DisputeAnswer) -> None:
        self._blame.on_dispute_answer(sender, a)

    def _close_dispute(self) -> Outbox:
        self._finish()
        return []

    # §5 steps 5–6 with §7.2: the rows whose token, credential and tag pass.
    def _check_rows(self) -> None:
        p = self.params
        S = settled_slots(self._phase_counts)
        lw = self._acc.reshape(len(S), p.row_words)
        d_bytes = p.d * lw.dtype.itemsize
        self._valid, failed = credential.check_rows(
            lw, d_bytes, [self._ot.tokens[slot] for slot in S], self.T, self._gamma, self.group
        )
        # An all-zero row is what a settled owner that dropped (or a decoy) leaves: empty, not tampered.
        self._failed = {c.position: ("empty" if not lw[c.position].any() else c.reason) for c in failed}

    def _finish(self) -> None:
        p = self.params
        lw = self._acc.reshape(-1, p.row_words)
        models = [p.codec.decode(lw[pos, : p.d].copy()) for pos in self._valid]
        blame = self._blame.result() if self.phase in (SPhase.BLAME, SPhase.DISPUTE) else None
        self.output = RoundOutput(
            models, self._valid, lw.shape[0], list(self.counts), dict(self.online), self.errors,
            rejected_rows=dict(self._failed),
            blamed={i: str(e) for i, e in {**self._share_evidence, **(blame.evidence if blame else {})}.items()},
            evidence={**self._share_evidence, **(blame.evidence if blame else {})},
            suspects=blame.suspects if blame else [],
            decoy_positions=list(self._decoy_pos),
            timings=dict(self.timings),
        )
        self.phase = SPhase.DONE
