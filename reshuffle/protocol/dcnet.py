"""The round of a stable group as a DC-net (docs/protocol.md, "The DC-net round").

Inside a stable group of g members every pair (i, j) shares an epoch secret
``K_ij = DH(y_i, Y_j)``, where ``y_i`` is derived from i's signing key and the
group's assignment digest (:func:`epoch_secret`): the same key in every round of
the epoch, with nothing to store. Each round derives one key per pair, invocation
and row from it, bound to T and to the transcript h (which holds every member's
fresh nonce of the round, so no two rounds, and no replayed round, share a key)::

    k_{ij,m,ρ} = HKDF(K_ij, label("dc/pair", T, m, min(i,j), max(i,j), ρ) ‖ h_m)

and member i uploads ``v_i + Σ_{j≠i} s(i,j)·PRG(k_{ij,m,ρ})`` with s(i,j) = +1 if
i < j else −1. There are no self masks and no shares: the masks cancel only in
the sum of **every** member's upload, so a missing upload leaves noise (all or
none by arithmetic), and the PS with any set of colluders reads a subset's sum
only if every member outside the subset colludes. A sender is hidden among the
honest members of its group, whatever their number, as long as there are two.

Steps (each one round trip):

1. ``keys``: DC_START → DC_KEY (epoch key, nonce, credential and pseudonym requests);
2. ``reserve``: DC_KEYS (every key relayed, the member's credential answer) →
   the count vector of iteration 1 (MASKED_INPUT, one-hot at a free slot);
3. ``reserve`` again only if a pick collided (DC_COUNTS → the next vector);
4. ``upload`` (the only step after training): DC_UPLOAD_REQUEST with the final
   counts → the masked model list, one row per settled party (members and decoys);
5. ``blame``, only if a nonzero row fails its checks or a decoy row is nonzero:
   DC_BLAME (decoy seed, every signed count vector) → DC_OPENING, each member's
   pairwise keys of the decoy rows alone. A member's plaintext at a decoy row is
   its signed upload minus its own opened keys: nonzero names it
   (:class:`DCEvidence`, checked by :func:`verify_dc_evidence` from roster keys).

Rows are those of the Shamir-shared round (docs/protocol.md §7.2–7.3: credential,
pseudonym, tag), with a zero token: a second row of one member is caught by its
credential, a row written over another's breaks the tag, a row in a decoy slot
shows in the opening.
"""

from __future__ import annotations

import collections
import copy
import enum
import hashlib
import hmac
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

import numpy as np

from reshuffle.crypto import voprf
from reshuffle.crypto.channel import dh_shared
from reshuffle.crypto.domain import label
from reshuffle.crypto.group import Element, Group
from reshuffle.crypto.prg import CHUNK_BYTES, KeyDeriver, accumulate_streams, mask_rows
from reshuffle.crypto.rand import RandomSource, SeededRandom, as_source, substream
from reshuffle.crypto.signatures import ROLE_SERVER, SERVER_ID, Certificate, CertificateAuthority, SigningKey
from reshuffle.errors import (
    AlreadyAnswered,
    BelowThreshold,
    ConfigError,
    EncodingError,
    ProtocolError,
    Refused,
    UnexpectedMessage,
)
from reshuffle.protocol import credential, pseudonym
from reshuffle.protocol import messages as msg
from reshuffle.protocol.messages import Context, MsgType
from reshuffle.protocol.params import RoundParams, TrustFloors
from reshuffle.protocol.participant import ParticipantView
from reshuffle.protocol.schedule import Step
from reshuffle.protocol.server import ErrorRecord, RoundOutput, admit
from reshuffle.protocol.transcript import Transcript

Outbox = list[tuple[int, bytes]]
ZERO_TOKEN = bytes(16)  # the row's token field: the DC-net round hands out no OT tokens
SLOTS_PER_PARTY = 1024  # n = 1024·(g + d_y): a collision (a second iteration) in about 0.25 % of groups of 5
KEEP_UPLOAD_BYTES = 1 << 23  # the PS keeps a whole upload only below this (blame needs its decoy rows alone)
PS_TYPES = frozenset({MsgType.DC_START, MsgType.DC_KEYS, MsgType.DC_COUNTS, MsgType.DC_UPLOAD_REQUEST,
                      MsgType.DC_BLAME})


class InvalidEvidence(ProtocolError):
    """A DC-net blame evidence that does not show what it claims."""


# --------------------------------------------------------------------------------------------- parameters
def dc_params(g: int, d: int, **overrides) -> RoundParams:
    """A stable group's parameters: those of a Shamir-shared round of g (``c`` and ``t`` are carried, not used:
    the round has no threshold), with n = :data:`SLOTS_PER_PARTY`·(g + d_y) unless given."""
    decoys = overrides.get("decoys")
    if decoys is None:
        from reshuffle.protocol.params import default_decoys

        decoys = default_decoys(g)
    overrides = dict(overrides, decoys=decoys)
    overrides["n"] = overrides.get("n") or SLOTS_PER_PARTY * (g + decoys)
    return RoundParams.default(g, d, **overrides)


def parties(p: RoundParams) -> int:
    """Members and decoys: every one settles exactly one slot."""
    return p.N + p.decoys


# ------------------------------------------------------------------------------------------------- keys
def epoch_id(p: RoundParams) -> bytes:
    """What an epoch key is bound to: the group's assignment digest and its index."""
    return label("dc/epoch", p.cohort, p.cohorts) + bytes(p.assignment)


def epoch_secret(sk: SigningKey, group: Group, p: RoundParams) -> int:
    """y_i: derived from the member's signing key and the group's assignment, so every round of the epoch uses
    the same key pair without any stored state (a new assignment is a new epoch)."""
    return voprf.hash_to_scalar(group, sk.derive_secret(label("dc/epoch-key") + epoch_id(p)), b"reshuffle-dc-epoch")


_PAIRS: dict[tuple[int, bytes], bytes] = {}
_PAIRS_MAX = 1 << 14


def pair_secret(y: int, Y_peer: Element) -> bytes:
    """K_ij = DH(y_i, Y_j), computed once per epoch and pair in a process."""
    key = (y, Y_peer.to_bytes())
    K = _PAIRS.get(key)
    if K is None:
        if len(_PAIRS) >= _PAIRS_MAX:
            _PAIRS.clear()
        K = _PAIRS[key] = dh_shared(y, Y_peer)
    return K


def pair_sign(i: int, j: int) -> int:
    return 1 if i < j else -1


def row_keys(K: bytes, T: int, m: int, i: int, j: int, h: bytes, rows: int) -> list[bytes]:
    """k_{ij,m,ρ} for ρ = 0..rows−1: symmetric in (i, j), bound to T, m and h_m."""
    kd = KeyDeriver(K)
    head = label("dc/pair", T, m, min(i, j), max(i, j), 0)[:-8]
    return [kd.key(head + ρ.to_bytes(8, "big") + h) for ρ in range(rows)]


def mask_in_place(v: np.ndarray, T: int, m: int, i: int, pairs: Mapping[int, bytes], h: bytes, rows: int) -> None:
    """``v += Σ_{j≠i} s(i,j)·PRG(k_{ij,m,ρ})`` row by row; ``pairs[j] = K_ij`` (one fused pass per row)."""
    parts = v.reshape(rows, -1)
    keyed = [(row_keys(K, T, m, i, j, h, rows), pair_sign(i, j)) for j, K in sorted(pairs.items()) if j != i]
    scratch = bytearray(CHUNK_BYTES + 15)
    for ρ, part in enumerate(parts):
        accumulate_streams(part, [(keys[ρ], s) for keys, s in keyed], scratch=scratch)


def row_pad(keys: Mapping[int, bytes], i: int, length: int, dtype: np.dtype) -> np.ndarray:
    """Σ_j s(i,j)·PRG(k_{ij,ρ}) of one row from i's per-row keys ``{j: k_{ij,ρ}}`` (the blame step)."""
    out = np.zeros(length, dtype=dtype)
    accumulate_streams(out, [(k, pair_sign(i, j)) for j, k in sorted(keys.items())])
    return out


def plain_model_list(model: np.ndarray, p: RoundParams, pos: int, cred: credential.Credential,
                     nym: pseudonym.Pseudonym, K: bytes, T: int) -> tuple[np.ndarray, int, bytes]:
    """The unmasked model list of a member at ``pos``, built in separate passes (encode, row, list): what a
    deviating member rewrites before masking, and the reference :func:`masked_upload` equals.
    Returns (list, clipped coordinates, row tag)."""
    lw = np.zeros((parties(p), p.row_words), dtype=p.codec.dtype)
    enc = p.codec.encode(model)
    row = credential.build_row(enc.words, ZERO_TOKEN, cred, nym, K, T, pos)
    lw[pos] = np.frombuffer(row, dtype=p.codec.dtype)
    return lw, enc.clipped, row[-credential.TAG_BYTES:]


def masked_upload(model: np.ndarray, p: RoundParams, pos: int, cred: credential.Credential,
                  nym: pseudonym.Pseudonym, K: bytes, T: int, i: int, pairs: Mapping[int, bytes], h: bytes,
                  chunk_bytes: int = CHUNK_BYTES, overlap: bool | None = None
                  ) -> tuple[np.ndarray, list[bytes], int, bytes]:
    """Member i's masked model list in one pass per chunk: encode (its own row), the row tag, the pairwise
    keystreams and the row hashes, with no temporary beyond one chunk. Returns (masked list, SHA-256 of each
    row, clipped coordinates, row tag): bit for bit :func:`plain_model_list`, then :func:`mask_in_place`, then
    the rows' hashes. ``overlap``: the row hashes on a helper thread (:func:`~reshuffle.crypto.prg.mask_rows`)."""
    if model.ndim != 1 or model.size != p.d:
        raise EncodingError(f"a model of shape {model.shape} for a round of d={p.d}")
    rows = parties(p)
    lw = np.zeros((rows, p.row_words), dtype=p.codec.dtype)
    writer = credential.RowWriter(model, p.codec, ZERO_TOKEN, cred, nym, K, T, pos)
    if writer.row_bytes != lw[pos].nbytes:
        raise EncodingError(f"a row of {writer.row_bytes} bytes for rows of {lw[pos].nbytes}")
    keyed = [(row_keys(K_j, T, p.upload_m, i, j, h, rows), pair_sign(i, j)) for j, K_j in sorted(pairs.items())
             if j != i]
    streams = [[(keys[ρ], s) for keys, s in keyed] for ρ in range(rows)]

    def fill(row: int, first_word: int, part: np.ndarray) -> bool:
        if row != pos:
            return False  # a zero row: it carries the pairwise keystreams alone
        writer.write(first_word, part)
        return True

    hashes = mask_rows(lw, streams, fill, chunk_bytes, overlap=overlap)
    return lw, hashes, writer.clipped, writer.tag


def decoy_commit(T: int, seed: bytes) -> bytes:
    return hashlib.sha256(label("dc/decoy-commit", T) + seed).digest()


def _below(rng: RandomSource, n: int) -> int:
    """Uniform in [0, n) by rejection (no modulo bias)."""
    bound = (1 << 64) - (1 << 64) % n
    while True:
        x = int.from_bytes(rng.bytes(8), "big")
        if x < bound:
            return x % n


def decoy_pick(seed: bytes, T: int, j: int, r: int, free: list[int]) -> int:
    """Decoy j's pick of iteration r among the free slots, from the committed seed."""
    return free[_below(SeededRandom(seed, label("dc/decoy", T, j, r)), len(free))]


# -------------------------------------------------------------------------------------------- reservation
@dataclass
class Reservation:
    """The public reservation state both sides compute from the published counts."""

    n: int
    parties: int
    settled: list[int] = field(default_factory=list)  # slots settled so far (each by one party)
    history: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return len(self.settled) == self.parties

    def free(self) -> list[int]:
        taken = set(self.settled)
        return [s for s in range(self.n) if s not in taken]

    def check(self, counts) -> str | None:
        """Why ``counts`` cannot be an iteration's honest counts (every unsettled party picks one free slot),
        or None."""
        if len(counts) != self.n:
            return f"{len(counts)} counts for n={self.n}"
        want = self.parties - len(self.settled)
        if sum(counts) != want:
            return f"counts sum to {sum(counts)}, {want} parties are still picking"
        if any(counts[s] for s in self.settled):
            return "a count at a slot settled in an earlier iteration"
        return None

    def absorb(self, counts) -> None:
        self.history.append(tuple(counts))
        self.settled += [s for s, c in enumerate(counts) if c == 1]

    def position(self, slot: int) -> int:
        return sorted(self.settled).index(slot)


def decoy_slots(seed: bytes, T: int, decoys: int, n: int, history) -> tuple[list[tuple[int, ...]], list[int]]:
    """Per iteration the decoys' pick vector, and the slots the decoys settled, replayed from the published
    counts."""
    res = Reservation(n, 0)
    picking = list(range(decoys))
    vectors, slots = [], []
    for r, counts in enumerate(history, start=1):
        free = res.free()
        vec = [0] * n
        picks = {j: decoy_pick(seed, T, j, r, free) for j in picking}
        for s in picks.values():
            vec[s] += 1
        vectors.append(tuple(vec))
        picking = [j for j in picking if counts[picks[j]] != 1]
        slots += [s for j, s in picks.items() if counts[s] == 1]
        res.settled += [s for s, c in enumerate(counts) if c == 1]
    return vectors, slots


# ---------------------------------------------------------------------------------------------- evidence
@dataclass(frozen=True)
class DCEvidence:
    """A member's nonzero plaintext in a decoy row: its signed upload statement (header, h_M, row hashes), the
    row, and its signed opening of that row's pairwise keys."""

    culprit: int
    position: int
    header: bytes
    h: bytes
    hashes: tuple[bytes, ...]
    signature: bytes
    row: bytes
    opening: bytes

    def __str__(self) -> str:
        return f"nonzero plaintext in decoy row {self.position} (its signed upload and opening)"


def plaintext_at(row: bytes, i: int, keys: Mapping[int, bytes], dtype: np.dtype) -> np.ndarray:
    """Member i's plaintext of one row: its masked row minus the pads its own opened keys give."""
    y = np.frombuffer(row, dtype=dtype).copy()
    return y - row_pad(keys, i, y.size, dtype)


def verify_dc_evidence(ev: DCEvidence, keys: Mapping, p: RoundParams, T: int) -> None:
    """Check ``ev`` with the roster's verify keys alone; :class:`InvalidEvidence` unless it shows the culprit's
    own signed upload and opening give a nonzero plaintext at a decoy row it opened."""
    vk = keys.get(ev.culprit)
    if vk is None:
        raise InvalidEvidence(f"participant {ev.culprit} is not in the roster")
    hdr = msg.peek_header(ev.header)
    if hdr is None or len(ev.header) != msg.HEADER_BYTES or hdr.type is not MsgType.MASKED_INPUT \
            or (hdr.T, hdr.m, hdr.sender) != (T, p.upload_m, ev.culprit):
        raise InvalidEvidence("the header is not the culprit's upload of this round")
    try:
        vk.verify("msg", ev.header + ev.h + msg.digest_of_row_hashes(ev.hashes), ev.signature)
        op = msg.decode(ev.opening, Context(p.group_obj(), p))
        msg.verify(op, vk)
    except ProtocolError as exc:
        raise InvalidEvidence(f"a signature does not hold: {exc}") from None
    if not 0 <= ev.position < len(ev.hashes) or hashlib.sha256(ev.row).digest() != ev.hashes[ev.position]:
        raise InvalidEvidence("the row is not the one the upload signs")
    if op.TYPE is not MsgType.DC_OPENING or (op.T, op.sender) != (T, ev.culprit) or op.h != ev.h:
        raise InvalidEvidence("the opening is not the culprit's, of this round and upload")
    mine = {j: k for pos, j, k in op.keys if pos == ev.position}
    if set(mine) != {j for j in keys if j != ev.culprit}:
        raise InvalidEvidence("the opening does not cover every partner at that row")
    if not plaintext_at(ev.row, ev.culprit, mine, p.codec.dtype).any():
        raise InvalidEvidence("the culprit's plaintext at that row is zero")


# ------------------------------------------------------------------------------------------------ the pool
class GroupPool:
    """Runs the PS's groups side by side on ``workers`` threads, each group's work in the order it was handed.

    The byte work of a group's upload step (summing, hashing, row tags: numpy, hashlib and AES release the GIL)
    runs while other groups' runs; within a group nothing is reordered, so every group ends in the state the
    serial path leaves. :meth:`submit` queues one call for group j; :meth:`wait` returns once every queued call
    ran and raises the first error (in group order) a call raised; :meth:`run` runs one call per group at once
    and returns each one's result or exception, by group. At most ``backlog`` calls (default 2·workers) wait or
    run at a time: :meth:`submit` blocks beyond that, so queued uploads never hold more memory than the serial
    path's one plus that many.
    """

    def __init__(self, workers: int, backlog: int | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        if workers < 2:
            raise ConfigError(f"a pool needs at least 2 workers, got {workers}")
        self.workers = workers
        self._slots = threading.Semaphore(backlog or 2 * workers)
        self._ex = ThreadPoolExecutor(workers, thread_name_prefix="reshuffle-group")
        self._lock = threading.Lock()
        self._queues: dict[int, collections.deque] = {}
        self._running: set[int] = set()
        self._futures: list = []
        self._errors: dict[int, BaseException] = {}

    def submit(self, j: int, fn: Callable, *args) -> None:
        self._slots.acquire()  # released once the call ran (or was dropped after its group's error)
        with self._lock:
            self._queues.setdefault(j, collections.deque()).append((fn, args))
            if j in self._running:
                return
            self._running.add(j)
        self._futures.append(self._ex.submit(self._drain, j))

    def _drain(self, j: int) -> None:
        while True:
            with self._lock:
                q = self._queues[j]
                if not q or j in self._errors:
                    for _ in range(len(q)):
                        self._slots.release()
                    q.clear()
                    self._running.discard(j)
                    return
                fn, args = q.popleft()
            try:
                fn(*args)
            except BaseException as exc:  # handed to wait(), in the caller's thread
                with self._lock:
                    self._errors[j] = exc
            finally:
                self._slots.release()

    def wait(self) -> None:
        futures, self._futures = self._futures, []
        for f in futures:
            f.result()
        if self._errors:
            errors, self._errors = self._errors, {}
            raise errors[min(errors)]

    def run(self, calls: Mapping[int, Callable]) -> dict[int, tuple[object, BaseException | None]]:
        self.wait()
        futures = {j: self._ex.submit(fn) for j, fn in sorted(calls.items())}
        out = {}
        for j, f in futures.items():
            try:
                out[j] = (f.result(), None)
            except Exception as exc:
                out[j] = (None, exc)
        return out

    def close(self) -> None:
        self._ex.shutdown(wait=True)


# ------------------------------------------------------------------------------------------------ server
class DCPhase(enum.Enum):
    KEYS = "keys"
    VECTORS = "reserve"
    UPLOAD = "upload"
    BLAME = "blame"
    DONE = "done"


T_ = MsgType
STEPS = {
    DCPhase.KEYS: Step("dc-keys", DCPhase.KEYS, "setup", (T_.DC_START,), (T_.DC_KEY,), "_close_keys", True),
    DCPhase.VECTORS: Step("dc-reserve", DCPhase.VECTORS, "reserve", (T_.DC_KEYS, T_.DC_COUNTS),
                          (T_.MASKED_INPUT,), "_close_vectors", True, per_iteration=True),
    DCPhase.UPLOAD: Step("dc-upload", DCPhase.UPLOAD, "upload", (T_.DC_UPLOAD_REQUEST,), (T_.MASKED_INPUT,),
                         "_close_upload", False),
    DCPhase.BLAME: Step("dc-blame", DCPhase.BLAME, "upload", (T_.DC_BLAME,), (T_.DC_OPENING,), "_close_blame",
                        False, when="a nonzero row fails a check or a decoy row is nonzero"),
}


class DCServer:
    """The PS of one stable group's DC-net round (the driver contract of :mod:`reshuffle.protocol.driver`).

    ``params`` is the group's (:func:`dc_params`); ``roster`` its members. A member missing at any step ends the
    group's round (BelowThreshold): nothing of an incomplete group can be unmasked anyway.
    """

    def __init__(self, params: RoundParams, T: int, roster: dict[int, Certificate], signing_key: SigningKey,
                 cert: Certificate, ca: CertificateAuthority, global_hash: bytes,
                 rng: RandomSource | int | None = None, *, pseudonyms: pseudonym.EpochIssuer | None = None,
                 identities: Mapping[int, int] | None = None) -> None:
        self.params = params.validated()
        if len(roster) != params.N:
            raise ConfigError(f"roster has {len(roster)} members, params say N={params.N}")
        for pid, c in roster.items():
            ca.verify(c, subject=pid)
        ca.verify(cert, subject=SERVER_ID, role=ROLE_SERVER)
        if cert.key != signing_key.verify_key:
            raise ConfigError("the PS certificate does not certify its signing key")
        self.T, self._roster, self._sk, self._cert, self._hash = T, dict(roster), signing_key, cert, global_hash
        self._rng = as_source(rng)
        self.group = params.group_obj()
        self._ctx = Context(self.group, params)
        self.phase = DCPhase.KEYS
        self.m = 0
        self.errors: list[ErrorRecord] = []
        self.output: RoundOutput | None = None
        self.culprits: dict[int, DCEvidence] = {}
        self._gamma = self.group.random_scalar(self._rng)
        self.cred_key = self.group.base_mul(self._gamma)
        self.nyms = pseudonyms if pseudonyms is not None else pseudonym.EpochIssuer(
            params.group, T, rng=substream(self._rng, b"dc-server/pseudonym"))
        self._identity = {i: (identities[i] if identities is not None else i) for i in roster}
        self._nym_sent: set[int] = set()  # evaluations sent, recorded as issued at the member's first vector
        self._seed = self._rng.bytes(32)
        self.res = Reservation(params.n, parties(params))
        self._tx = Transcript(T)
        self.keys: dict[int, msg.DCKey] = {}
        self.vectors: dict[int, dict[int, msg.MaskedInput]] = {}  # iteration -> member -> signed vector
        self.uploads: dict[int, msg.MaskedInput | None] = {}
        self._kept: dict[int, tuple] = {}  # member -> (header, h_M, row hashes, signature, {decoy row: bytes})
        self._sum: np.ndarray | None = None
        self.decoy_positions: list[int] = []
        self.openings: dict[int, msg.DCOpening] = {}
        self._h = b""
        self._got: dict[int, object] = {}
        self.timings = {"ps_sum_s": 0.0, "ps_unmask_s": 0.0, "ps_sum_cpu_s": 0.0, "ps_unmask_cpu_s": 0.0}
        self.silent: list[int] = []  # the members whose silence ended the group's round

    # -- the driver contract -- #
    POOLED = frozenset({DCPhase.UPLOAD, DCPhase.BLAME})

    @property
    def pooled(self) -> bool:
        """Whether this step's work touches the group's own state alone, so that a :class:`GroupPool` may run it
        beside other groups' (the key and reservation steps draw on the epoch issuer that groups share, so they
        run in order)."""
        return self.phase in self.POOLED

    @property
    def done(self) -> bool:
        return self.phase is DCPhase.DONE

    @property
    def step(self) -> Step:
        return STEPS.get(self.phase, STEPS[DCPhase.UPLOAD])

    @property
    def stage_name(self) -> str:
        return "done" if self.done else self.step.stage

    def needs_model(self, pid: int) -> bool:
        return not self.done and not self.step.offline

    def failed_output(self) -> RoundOutput:
        return self.output or RoundOutput([], [], 0, [], {}, list(self.errors), evidence=dict(self.culprits))

    def start(self) -> Outbox:
        start = msg.DCStart(self.T, 0, SERVER_ID, self.params, self._hash, self._cert,
                            tuple(sorted(self._roster.items())), self.cred_key, self.nyms.epoch, self.nyms.key,
                            decoy_commit(self.T, self._seed))
        data = start.encode(self._sk)
        self._tx.absorb("dc/start", start.body())
        return [(i, data) for i in sorted(self._roster)]

    def receive(self, sender: int, data: bytes) -> None:
        try:
            m = admit(sender, data, self._roster, set(), self.T, self._ctx)
            want = {DCPhase.KEYS: MsgType.DC_KEY, DCPhase.VECTORS: MsgType.MASKED_INPUT,
                    DCPhase.UPLOAD: MsgType.MASKED_INPUT, DCPhase.BLAME: MsgType.DC_OPENING}.get(self.phase)
            if m.TYPE is not want:
                raise UnexpectedMessage(f"{m.TYPE.name} while collecting {want.name if want else 'nothing'}")
            if sender in self._got:
                raise AlreadyAnswered(f"participant {sender} already answered this step")
            getattr(self, "_on_" + self.phase.name.lower())(sender, m)
            self._got[sender] = m
        except ProtocolError as exc:
            self.errors.append(ErrorRecord(self.stage_name, sender, exc))

    def close_phase(self) -> Outbox:
        got, self._got = self._got, {}
        missing = sorted(set(self._roster) - set(got))
        if missing and self.phase is not DCPhase.BLAME:
            step, self.phase = STEPS[self.phase].name, DCPhase.DONE
            self.silent = missing
            raise BelowThreshold(f"member(s) {missing} sent nothing at step {step}: the group "
                                 "delivers nothing this round (its masks cancel only in the full sum)")
        return getattr(self, STEPS[self.phase].closer)(got)

    # -- handlers: check one message -- #
    def _on_keys(self, sender: int, m: msg.DCKey) -> None:
        if (m.global_hash, m.params_hash) != (self._hash, self.params.digest()):
            raise Refused(f"participant {sender} takes part with another model or other parameters")
        if m.epoch_key != pseudonym.key_digest(self.nyms.epoch, self.nyms.key):
            raise pseudonym.EpochKeyMismatch(f"participant {sender} signs another epoch key")
        if m.nym_request is not None and m.nym_commit != pseudonym.request_digest(self.nyms.epoch,
                                                                                   m.nym_request.to_bytes()):
            raise Refused(f"participant {sender} asks for a pseudonym its key does not commit to")

    def _on_vectors(self, sender: int, m: msg.MaskedInput) -> None:
        if m.m != self.m or m.h != self._h or m.rows != 1 or len(m.words) != 4 * self.params.n:
            raise UnexpectedMessage(f"count vector of {sender}: invocation {m.m}, expected {self.m}, under another "
                                    "view or of another length")
        if sender in self._nym_sent:
            # A member sends its first vector only after it checked and unblinded its pseudonym: it holds it.
            self.nyms.confirm([self._identity[sender]])
            self._nym_sent.discard(sender)

    def _on_upload(self, sender: int, m: msg.MaskedInput) -> None:
        """Check an upload, add it to the running sum, and keep what blame may need: its signed statement and its
        decoy rows (checked against their signed hashes now, so a jammer cannot disown them later)."""
        p = self.params
        item = p.codec.dtype.itemsize
        if m.m != p.upload_m or m.h != self._h or m.rows != parties(p) or len(m.words) != m.rows * p.row_words * item:
            raise UnexpectedMessage(f"upload of {sender}: another invocation, view or length")
        msg.check_rows(m, self.decoy_positions)
        t0, c0 = time.perf_counter(), time.thread_time()
        up = np.frombuffer(m.words, dtype=p.codec.dtype)
        if self._sum is None:
            self._sum = up.copy()  # the first upload starts the sum: one pass, no zeros to add to
        else:
            self._sum += up
        self.timings["ps_sum_s"] += time.perf_counter() - t0
        self.timings["ps_sum_cpu_s"] += time.thread_time() - c0
        size = len(m.words) // m.rows
        words = memoryview(m.words).cast("B")
        self._kept[sender] = (m.header(), m.h, tuple(m._hashes()), msg.signature_of(m)[1],
                              {pos: bytes(words[pos * size:(pos + 1) * size]) for pos in self.decoy_positions})
        # A copy of every upload only where it is small (tests and games read it; blame needs the above alone).
        self.uploads[sender] = m if len(m.words) <= KEEP_UPLOAD_BYTES else None

    def _on_blame(self, sender: int, m: msg.DCOpening) -> None:
        if m.h != self._h:
            raise UnexpectedMessage(f"opening of {sender} under another h_M")

    # -- closers -- #
    def _close_keys(self, got) -> Outbox:
        self.keys = {i: got[i] for i in sorted(got)}
        relayed = tuple(msg.relay_bytes(k) for k in self.keys.values())
        s = credential.suite(self.group)
        out = []
        common = None
        for i, k in self.keys.items():
            (ev,), proof = voprf.blind_evaluate(s, self._gamma, [k.cred_request], self.cred_key, self._rng)
            nym_eval, nym_proof = None, b""
            if k.nym_request is not None:
                try:
                    # Its B recorded now (a re-ask gets the same); noted as held at its first count vector.
                    nym_eval, nym_proof = self.nyms.evaluate(self._identity[i], k.nym_request)
                    self._nym_sent.add(i)
                except ProtocolError as exc:
                    # Another B than the identity's first of the epoch: no pseudonym, so the member refuses.
                    self.errors.append(ErrorRecord("setup", i, exc))
            reply = msg.DCKeys(self.T, 1, SERVER_ID, relayed, ev, proof.encode(self.group), nym_eval, nym_proof)
            if common is None:
                common = reply.common()
            out.append((i, reply.encode(self._sk)))
        self._h = self._tx.absorb("dc/keys", common)
        self.phase, self.m = DCPhase.VECTORS, 1
        return out

    def _close_vectors(self, got) -> Outbox:
        p = self.params
        self.vectors[self.m] = dict(sorted(got.items()))
        real = np.zeros(p.n, dtype=np.uint32)
        for v in got.values():
            real += np.frombuffer(v.words, dtype=np.uint32)
        pub = tuple(int(x) for x in real.astype(np.int64) + np.asarray(self._decoy_vector(), dtype=np.int64))
        why = self.res.check(pub)
        if why is not None:
            self.phase = DCPhase.DONE
            raise BelowThreshold(f"iteration {self.m}'s counts are not a reservation ({why}): a member jammed the "
                                 "count vector; the group delivers nothing this round")
        self.res.absorb(pub)
        if self.res.done:
            _, dslots = decoy_slots(self._seed, self.T, p.decoys, p.n, self.res.history)
            self.decoy_positions = sorted(self.res.position(s) for s in dslots)
            self.phase, self.m = DCPhase.UPLOAD, p.upload_m
            self._h = self._tx.absorb_counts(p.upload_m, pub)
            data = msg.DCUploadRequest(self.T, p.upload_m, SERVER_ID, pub).encode(self._sk)
        elif self.m >= p.R_max:
            self.phase = DCPhase.DONE
            raise BelowThreshold(f"the reservation did not settle every party within R_max={p.R_max} iterations")
        else:
            self.m += 1
            self._h = self._tx.absorb_counts(self.m, pub)
            data = msg.DCCounts(self.T, self.m, SERVER_ID, pub).encode(self._sk)
        return [(i, data) for i in sorted(self._roster)]

    def _decoy_vector(self) -> list[int]:
        """The decoys' pick vector of the iteration being closed."""
        p = self.params
        vecs, _ = decoy_slots(self._seed, self.T, p.decoys, p.n, self.res.history + [tuple([1] * p.n)])
        return list(vecs[-1])

    def _close_upload(self, got) -> Outbox:
        p = self.params
        self.uploads = {i: self.uploads[i] for i in sorted(got)}
        self._rows = self._sum.reshape(parties(p), p.row_words)
        d_bytes = p.d * p.codec.dtype.itemsize
        valid, failed, names = credential.check_rows(self._rows, d_bytes, [ZERO_TOKEN] * parties(p), self.T,
                                                     self._gamma, self.group, self.nyms)
        self._valid = [pos for pos in valid if pos not in self.decoy_positions]
        self._names = names
        self._rejected = {c.position: c.reason for c in failed if self._rows[c.position].any()}
        self._rejected.update({pos: "decoy row written" for pos in self.decoy_positions if self._rows[pos].any()})
        if self._rejected and self.decoy_positions:
            self.phase = DCPhase.BLAME
            vectors = tuple(msg.relay_bytes(v) for r in sorted(self.vectors) for v in self.vectors[r].values())
            data = msg.DCBlame(self.T, p.upload_m, SERVER_ID, self._seed, tuple(self.decoy_positions),
                               vectors).encode(self._sk)
            return [(i, data) for i in sorted(self._roster)]
        return self._finish([])

    def _close_blame(self, got) -> Outbox:
        p = self.params
        self.openings = dict(sorted(got.items()))
        partners = {i: sorted(j for j in self._roster if j != i) for i in self._roster}
        suspects: set[int] = set(self._roster) - set(got)
        claimed: dict[tuple[int, int, int], bytes] = {}
        for i, op in self.openings.items():
            by_pos: dict[int, dict[int, bytes]] = {}
            for pos, j, k in op.keys:
                by_pos.setdefault(pos, {})[j] = k
                claimed[(pos, i, j)] = k
            if sorted(by_pos) != self.decoy_positions or any(sorted(ks) != partners[i] for ks in by_pos.values()):
                suspects.add(i)
                continue
            header, h, hashes, sig, rows = self._kept[i]
            for pos in self.decoy_positions:
                if plaintext_at(rows[pos], i, by_pos[pos], p.codec.dtype).any():
                    self.culprits[i] = DCEvidence(i, pos, header, h, hashes, sig, rows[pos], msg.relay_bytes(op))
                    break
        # Two openings of one pair that differ: one side masked with another key than it opened. Without a
        # proof of the pair key neither is named; both are suspects.
        for (pos, i, j), k in claimed.items():
            other = claimed.get((pos, j, i))
            if other is not None and not hmac.compare_digest(k, other):
                suspects.update({i, j})
        return self._finish(sorted(suspects - set(self.culprits)))

    def _finish(self, suspects) -> Outbox:
        p = self.params
        codec = p.codec
        models, names = [], []
        for pos in self._valid:
            models.append(codec.decode(self._rows[pos, : p.d]))
            names.append(self._names[pos])
        members = tuple(sorted(self._roster))
        self.output = RoundOutput(
            models, list(self._valid), parties(p), list(self.res.history), {0: members, p.upload_m: members},
            list(self.errors), rejected_rows=dict(self._rejected),
            blamed={i: str(e) for i, e in self.culprits.items()}, evidence=dict(self.culprits),
            suspects=list(suspects), decoy_positions=list(self.decoy_positions), timings=dict(self.timings),
            pseudonyms=names)
        self.phase = DCPhase.DONE
        return []


# ------------------------------------------------------------------------------------------- participant
class DCState(enum.Enum):
    AWAIT_START = "await-start"
    AWAIT_KEYS = "await-keys"
    RESERVING = "reserving"
    UPLOADED = "uploaded"
    ENDED = "ended"
    ABORTED = "aborted"


class DCParticipant:
    """A member's side of the DC-net round: a phase table from state to the messages it accepts.

    ``members`` is the stable group it belongs to (the DC_START roster must be exactly it); ``model_of``
    returns its trained model when the upload is asked for (None: still training, it then refuses).
    """

    TABLE = {
        DCState.AWAIT_START: {MsgType.DC_START: "_on_start"},
        DCState.AWAIT_KEYS: {MsgType.DC_KEYS: "_on_keys"},
        DCState.RESERVING: {MsgType.DC_COUNTS: "_on_counts", MsgType.DC_UPLOAD_REQUEST: "_on_upload_request"},
        DCState.UPLOADED: {MsgType.DC_BLAME: "_on_blame"},
        DCState.ENDED: {},
        DCState.ABORTED: {},
    }

    def __init__(self, pid: int, T: int, signing_key: SigningKey, cert: Certificate, ca: CertificateAuthority,
                 global_hash: bytes, rng: RandomSource | int | None, members: tuple[int, ...],
                 model_of: Callable[[], np.ndarray | None], *, floors: TrustFloors | None = None,
                 min_group: int = 2, nym: pseudonym.Pseudonym | None = None) -> None:
        self.pid, self.T, self._sk, self._cert, self._ca, self._hash = pid, T, signing_key, cert, ca, global_hash
        self._rng = as_source(rng)
        self._nym_rng = substream(self._rng, b"dc-participant/pseudonym")
        self.members = tuple(sorted(members))
        self._model_of = model_of
        self.floors = floors if floors is not None else TrustFloors()
        self.min_group = min_group
        self.state = DCState.AWAIT_START
        self.view = ParticipantView()
        self.opened: tuple[int, ...] = ()
        self.params: RoundParams | None = None
        self.ctx = Context()
        self.nym = nym
        self.nym_issued = False  # an evaluation arrived in this round

    @property
    def pseudonym(self) -> pseudonym.Pseudonym | None:
        """Its pseudonym record of the epoch, to keep for the epoch's next rounds (§7.3): one it held, or the
        request drawn at DC_START (kept before the DC_KEY that carries it leaves), with z once the PS's
        evaluation verified, and with its group mates' signed commitments."""
        return self.nym

    def fork(self) -> "DCParticipant":
        """An independent copy in the same state, for the explorer of PS schedules (needs seeded randomness)."""
        if not hasattr(self._rng, "copy"):
            raise ConfigError("only a member with a seeded randomness source can be forked")
        out = copy.copy(self)
        out._rng = self._rng.copy()
        out._nym_rng = self._nym_rng.copy() if hasattr(self._nym_rng, "copy") else self._nym_rng
        v = self.view
        out.view = replace(v, uploaded=set(v.uploaded), errors=list(v.errors))
        if hasattr(self, "res"):
            out.res = Reservation(self.res.n, self.res.parties, list(self.res.settled), list(self.res.history))
            out._hs = dict(self._hs)
        if hasattr(self, "_tx"):
            out._tx = Transcript.at(self._tx.h)
        return out

    @property
    def uploaded(self) -> bool:
        return bool(self.view.uploaded)

    def handle(self, data: bytes) -> list[bytes]:
        """One PS message; the replies. A check that fails aborts the member (a REFUSAL is sent)."""
        if self.state is DCState.ABORTED:
            return []
        try:
            m = msg.decode(data, self.ctx)
            name = self.TABLE[self.state].get(m.TYPE)
            if name is None:
                raise UnexpectedMessage(f"{m.TYPE.name} in state '{self.state.value}' (expects "
                                        f"{', '.join(t.name for t in self.TABLE[self.state]) or 'nothing'})")
            if m.sender != SERVER_ID or m.T != self.T:
                raise UnexpectedMessage(f"{m.TYPE.name} not from the PS of round {self.T}")
            msg.verify(m, self._server_vk if m.TYPE is not MsgType.DC_START else m.server_cert.key)
            return [r.encode(self._sk) for r in getattr(self, name)(m)]
        except ProtocolError as exc:
            self.view.errors.append(exc)
            self.state = DCState.ABORTED
            return [msg.Refusal(self.T, 0, self.pid, type(exc).__name__, str(exc)).encode(self._sk)]

    # -- handlers -- #
    def _on_start(self, m: msg.DCStart) -> list:
        p = m.params
        self._ca.verify(m.server_cert, subject=SERVER_ID, role=ROLE_SERVER)
        if m.global_hash != self._hash:
            raise Refused("DC_START announces another global model than the one this member received")
        roster = tuple(pid for pid, _ in m.roster)
        if roster != self.members:
            raise Refused(f"DC_START roster {list(roster)} is not this member's stable group {list(self.members)}")
        if len(roster) < max(self.min_group, 2):
            raise Refused(f"a group of {len(roster)} is below this member's floor {self.min_group}")
        for pid, c in m.roster:
            self._ca.verify(c, subject=pid)
        if dict(m.roster)[self.pid] != self._cert:
            raise Refused("DC_START lists another certificate for this member")
        floor_decoys = self.floors.decoys if self.floors.decoys is not None else 1
        if p.decoys < floor_decoys:
            raise Refused(f"decoys={p.decoys} below this member's floor {floor_decoys}")
        if p.N - 1 < 1 or p.R_max > 16:
            raise Refused("parameters out of range")
        # §7.3: the record of this epoch (a request drawn now if it holds none), kept before DC_KEY leaves.
        self.nym = pseudonym.record_for(self.nym, p.group_obj(), m.epoch, m.nym_key, self._nym_rng)
        self.params, self.ctx = p, Context(p.group_obj(), p)
        self._server_vk = m.server_cert.key
        self._roster_keys = {pid: c.key for pid, c in m.roster}
        self._start = m
        g = p.group_obj()
        self._y = epoch_secret(self._sk, g, p)
        self._Y = g.base_mul(self._y)
        self._tx = Transcript(self.T)
        self._tx.absorb("dc/start", m.body())
        s = credential.suite(g)
        self._cred_r = self._rng.bytes(credential.R_BYTES)
        self._cred_blind, B = voprf.blind(s, credential.cred_input(self.T, self._cred_r), self._rng)
        self._cred_B = B
        ek, commit = pseudonym.key_digest(m.epoch, m.nym_key), self.nym.commitment()
        key = msg.DCKey(self.T, 0, self.pid, self._hash, p.digest(), ek, self._Y, self._rng.bytes(msg.DC_NONCE_BYTES),
                        B, self.nym.blinded_element() if self.nym.pending else None, commit,
                        pseudonym.sign_commitment(self._sk, self.pid, ek, commit))
        self._key = key
        self.state = DCState.AWAIT_KEYS
        return [key]

    def _on_keys(self, m: msg.DCKeys) -> list:
        p, g = self.params, self.params.group_obj()
        keys = {}
        for blob in m.keys:
            k = msg.decode(blob, self.ctx)
            if k.TYPE is not MsgType.DC_KEY or k.sender not in self._roster_keys or k.sender in keys:
                raise Refused("the relayed keys hold a message that is not one member's DC_KEY")
            msg.verify(k, self._roster_keys[k.sender])
            mine = (self.T, self._hash, p.digest(), self._key.epoch_key)
            if (k.T, k.global_hash, k.params_hash, k.epoch_key) != mine:
                raise Refused(f"member {k.sender}'s key is of another round, model, parameters or epoch key")
            if k.nym_request is not None and k.nym_commit != pseudonym.request_digest(self._start.epoch,
                                                                                       k.nym_request.to_bytes()):
                raise Refused(f"member {k.sender} asks for a pseudonym its key does not commit to")
            keys[k.sender] = k
        if sorted(keys) != list(self.members):
            raise Refused(f"keys of {sorted(keys)} relayed, the group is {list(self.members)}: all or none")
        if keys[self.pid].header() + keys[self.pid].body() != self._key.header() + self._key.body():
            raise Refused("the PS relayed another key in this member's name")
        # The credential (and pseudonym) are checked before any vector leaves.
        s = credential.suite(g)
        (y,) = voprf.finalize(s, [credential.cred_input(self.T, self._cred_r)], [self._cred_blind], [m.cred_eval],
                              [self._cred_B], self._start.cred_key, voprf.Proof.decode(g, m.cred_proof))
        self._cred = credential.Credential(self._cred_r, y)
        # §7.3: a group mate that signs another pseudonym request than earlier in the epoch was issued (or asks)
        # twice: the group is not continued (IssuanceChanged, with both signed commitments).
        nym = pseudonym.check_mates(self.nym, self._key.epoch_key, dict(self._start.roster),
                                    {j: (k.nym_commit, k.nym_sig) for j, k in keys.items()},
                                    set(self.members) - {self.pid})
        asked = nym.pending
        if asked:
            if m.nym_eval is None:
                raise Refused("the PS answered without the pseudonym this member asked for")
            nym = pseudonym.finish(g, nym, self._start.nym_key, m.nym_eval, m.nym_proof)
        elif m.nym_eval is not None:
            raise UnexpectedMessage("a pseudonym evaluation this member did not ask for")
        self._pairs = {j: pair_secret(self._y, k.dh_key) for j, k in keys.items() if j != self.pid}
        self._h = self._tx.absorb("dc/keys", m.common())
        self.res = Reservation(p.n, parties(p))
        self.m = 1
        self.state = DCState.RESERVING
        self._hs = {1: self._h}
        vector = self._vector()
        # Kept from here on: every member's key signed the same P, and the vector it answers with is what the
        # PS records the issuance at.
        self.nym, self.nym_issued = nym, asked
        return [vector]

    def _vector(self) -> msg.MaskedInput:
        p = self.params
        v = np.zeros(p.n, dtype=np.uint32)
        if self.view.slot is None:
            free = self.res.free()
            self._pick = free[_below(self._rng, len(free))]
            v[self._pick] = 1
        else:
            self._pick = None
        mask_in_place(v, self.T, self.m, self.pid, self._pairs, self._h, 1)
        return msg.MaskedInput(self.T, self.m, self.pid, self._h, 1, v.tobytes())

    def _absorb_counts(self, counts) -> None:
        why = self.res.check(counts)
        if why is not None:
            raise Refused(f"counts of iteration {self.m}: {why}")
        if self._pick is not None:
            if counts[self._pick] == 0:
                raise Refused(f"this member's pick shows count 0 in iteration {self.m}")
            if counts[self._pick] == 1:
                self.view.slot = self._pick
        self.res.absorb(counts)

    def _on_counts(self, m: msg.DCCounts) -> list:
        if m.m != self.m + 1 or m.m > self.params.R_max:
            raise Refused(f"asked for iteration {m.m} after iteration {self.m}")
        self._absorb_counts(m.counts)
        if self.res.done:
            raise Refused("asked for another iteration though every party settled")
        self.m = m.m
        self._h = self._tx.absorb_counts(self.m, m.counts)
        self._hs[self.m] = self._h
        return [self._vector()]

    def _on_upload_request(self, m: msg.DCUploadRequest) -> list:
        p = self.params
        if m.m != p.upload_m:
            raise Refused(f"upload asked for as invocation {m.m}, expected {p.upload_m}")
        self._absorb_counts(m.counts)
        if not self.res.done or self.view.slot is None:
            raise Refused("upload asked for before every party settled")
        model = self._model_of()
        if model is None:
            raise UnexpectedMessage(f"participant {self.pid} has no model yet: the upload is asked for before "
                                    "training ended")
        self._h = self._tx.absorb_counts(p.upload_m, m.counts)
        self._hM = self._h
        if self.nym is None:
            raise Refused(f"participant {self.pid} holds no pseudonym of the epoch")
        rows = parties(p)
        pos = self.res.position(self.view.slot)
        self.view.position = pos
        K = self._rng.bytes(credential.K_BYTES)
        if type(self)._deviate is DCParticipant._deviate:
            # The fused pass: encode, tag, pairwise keystreams and row hashes while each chunk is in cache.
            lw, hashes, clipped, tag = masked_upload(model, p, pos, self._cred, self.nym, K, self.T, self.pid,
                                                     self._pairs, self._h)
        else:  # a deviating member rewrites the plain list before it is masked
            lw, clipped, tag = plain_model_list(model, p, pos, self._cred, self.nym, K, self.T)
            lw = self._deviate(lw)
            mask_in_place(lw.reshape(-1), self.T, p.upload_m, self.pid, self._pairs, self._h, rows)
            hashes = msg.row_hashes(lw.reshape(-1).view(np.uint8).data, rows)
        self.view.clipped = clipped
        self.view.row_tags = (tag,)
        flat = lw.reshape(-1)
        self.state = DCState.UPLOADED
        self.view.uploaded.add(p.upload_m)
        # The masked words travel as a view of the array (no copy before the message's own).
        return [msg.MaskedInput.hashed(self.T, p.upload_m, self.pid, self._h, rows, flat.view(np.uint8).data,
                                       hashes)]

    def _deviate(self, lw: np.ndarray) -> np.ndarray:
        """Hook: the model list as written (a jammer's subclass writes other words)."""
        return lw

    def _on_blame(self, m: msg.DCBlame) -> list:
        p = self.params
        if decoy_commit(self.T, m.decoy_seed) != self._start.decoy_commit:
            raise Refused("the opened decoy seed does not match its commitment")
        # The audit: every iteration's real counts are the sum of the members' signed vectors, and the
        # published counts are real counts plus the decoys' picks; the rows to open are the decoys' alone.
        by_iter: dict[int, dict[int, msg.MaskedInput]] = {}
        for blob in m.vectors:
            v = msg.decode(blob, self.ctx)
            if v.TYPE is not MsgType.MASKED_INPUT or v.sender not in self._roster_keys:
                raise Refused("the audit holds a message that is not a member's count vector")
            msg.verify(v, self._roster_keys[v.sender])
            msg.check_rows(v)
            if v.T != self.T or v.m not in self._hs or v.h != self._hs[v.m] or v.rows != 1:
                raise Refused(f"member {v.sender}'s vector is not of an iteration this member took part in")
            if v.sender in by_iter.setdefault(v.m, {}):
                raise Refused(f"two vectors of member {v.sender} in iteration {v.m}")
            by_iter[v.m][v.sender] = v
        if sorted(by_iter) != sorted(self._hs) or any(sorted(vs) != list(self.members) for vs in by_iter.values()):
            raise Refused("the audit does not hold every member's vector of every iteration")
        dvecs, dslots = decoy_slots(m.decoy_seed, self.T, p.decoys, p.n, self.res.history)
        for r, counts in enumerate(self.res.history, start=1):
            real = np.zeros(p.n, dtype=np.uint32)
            for v in by_iter[r].values():
                real += np.frombuffer(v.words, dtype=np.uint32)
            if not np.array_equal(real.astype(np.int64) + np.asarray(dvecs[r - 1]), np.asarray(counts)):
                raise Refused(f"iteration {r}'s published counts are not the real counts plus the decoys' picks")
        positions = sorted(self.res.position(s) for s in dslots)
        if list(m.positions) != positions or self.view.position in positions:
            raise Refused(f"asked to open rows {list(m.positions)}; the decoys' rows are {positions}")
        rows = parties(p)
        entries = []
        for j, K in sorted(self._pairs.items()):
            ks = row_keys(K, self.T, p.upload_m, self.pid, j, self._hM, rows)
            entries += [(pos, j, ks[pos]) for pos in positions]
        entries.sort()
        self.opened = tuple(positions)
        self.state = DCState.ENDED
        return [self._opening(msg.DCOpening(self.T, p.upload_m, self.pid, self._hM, tuple(entries)))]

    def _opening(self, op: msg.DCOpening) -> msg.DCOpening:
        """Hook: the opening as sent."""
        return op


__all__ = [
    "DCEvidence", "DCParticipant", "DCServer", "GroupPool", "InvalidEvidence", "PS_TYPES", "Reservation", "dc_params",
    "decoy_slots", "epoch_secret", "mask_in_place", "pair_secret", "row_keys", "verify_dc_evidence",
]
