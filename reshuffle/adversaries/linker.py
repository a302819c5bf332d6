"""The PS as a linking attacker: unmask and link from everything it holds (docs/security/threat-model.md).

:class:`PSView` collects what a PS legitimately holds at any point of a round: every
signed message the participants sent it, its own OT tokens (it drew them), the mask
sets it announced, and the secrets of the participants that collude with it. :func:`link`
then does what an attacker would do with it:

1. **Secrets.** Every ``b_{i,m}`` and ``x_{i,m}`` it can get: from colluders, from an
   OPEN_REVEAL, or by Shamir reconstruction from the shares revealed in any
   UNMASK_RESPONSE of any certificate (the shares of one secret are the same whatever
   h_m they were revealed under), each checked against the owner's commitment.
2. **Plaintexts.** For every masked vector whose self seed and own DH secret it knows,
   the vector itself; for every set of vectors of one (m, h_m) whose self seeds it
   knows and whose pairwise masks cancel (with the DH secrets of the members that did
   not upload), their sum. A guess is kept only if it decodes as the protocol's
   plaintext would: counts no larger than the parties, a model list whose rows carry
   one of its tokens.
3. **Links.** A participant's own model list names its row directly. Otherwise a pick
   of a participant (a count vector it can read) is a slot; the row of a model list
   that carries that slot's token is the participant's, if no other participant is
   known to have picked that slot.

It is an attacker, so it only ever helps the PS: a link it reports is one the PS can
compute. Tests and the explorer compare the links with the truth.
"""

from __future__ import annotations

import copy
import hashlib
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from reshuffle.crypto.shamir import Shamir, Share
from reshuffle.errors import ProtocolError
from reshuffle.protocol import credential
from reshuffle.protocol import messages as msg
from reshuffle.protocol.complaints import secret_index
from reshuffle.protocol.masking import mask_in_place, unmask_in_place
from reshuffle.protocol.messages import ShareKind
from reshuffle.protocol.params import RoundParams


@dataclass
class PSView:
    """What a PS holds: the participants' messages, its tokens, its announced mask sets, colluders' secrets.

    :meth:`absorb` never changes a container in place (it builds new tuples and dicts), so a
    shallow copy (:meth:`fork`) is an independent view for the explorer of PS schedules.
    """

    params: RoundParams
    T: int
    adverts: dict[int, msg.Advertise] = field(default_factory=dict)
    bundles: dict[int, msg.ShareBundle] = field(default_factory=dict)
    ot_requests: dict[int, msg.OTRequestMsg] = field(default_factory=dict)
    vectors: tuple[msg.MaskedInput, ...] = ()
    consents: tuple[msg.Consent, ...] = ()
    shares: tuple[msg.UnmaskResponse, ...] = ()
    reveals: tuple[msg.OpenReveal, ...] = ()
    answers: tuple[msg.ComplaintAnswer, ...] = ()  # shares published against complaints
    slot_requests: tuple[msg.SlotRequest, ...] = ()
    openings: tuple[msg.Opening, ...] = ()  # signed openings of decoy rows (blame step)
    objections: tuple[msg.Objection, ...] = ()
    #: every OT table it drew: the tokens by slot (the PS is the OT sender)
    tables: tuple[tuple[bytes, ...], ...] = ()
    #: h_m of a reservation iteration -> index in ``tables`` of its slot phase's table
    table_of: dict[bytes, int] = field(default_factory=dict)
    #: (sender, m, h) -> the mask set that sender was led to use
    mask_sets: dict[tuple[int, int, bytes], tuple[int, ...]] = field(default_factory=dict)
    #: colluding participant -> {(m, kind): its secret, "held": {(owner, m, kind): its share of owner's secret}}
    colluders: dict[int, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.group = self.params.group_obj()
        self._ctx = msg.Context(self.group, self.params)
        self.known: frozenset[bytes] = frozenset()  # digests of every message filed (the PS's knowledge)

    def fork(self) -> "PSView":
        return copy.copy(self)

    def absorb(self, sender: int, data: bytes, decoded: msg.Message | None = None) -> msg.Message | None:
        """File one participant message (bytes as received, or already ``decoded`` from them); returns it
        decoded, or None if it does not decode or names another sender."""
        m = decoded
        if m is None:
            try:
                m = msg.decode(data, self._ctx)
            except ProtocolError:
                return None
        if m.sender != sender:
            return None
        self.known = self.known | {hashlib.sha256(data).digest()}
        if isinstance(m, msg.Advertise):
            self.adverts = {sender: m, **self.adverts}
        elif isinstance(m, msg.ShareBundle):
            self.bundles = {sender: m, **self.bundles}
        elif isinstance(m, msg.OTRequestMsg):
            self.ot_requests = {sender: m, **self.ot_requests}
        else:
            name = _FILED.get(type(m))
            if name is not None:
                setattr(self, name, (*getattr(self, name), m))
        return m


_FILED = {msg.MaskedInput: "vectors", msg.Consent: "consents", msg.UnmaskResponse: "shares",
          msg.OpenReveal: "reveals", msg.ComplaintAnswer: "answers", msg.SlotRequest: "slot_requests",
          msg.Opening: "openings", msg.Objection: "objections"}


@dataclass
class Links:
    """What the attacker obtained: plaintext vectors it read, and participant → linked row."""

    secrets: dict[tuple[int, int, ShareKind], int]
    picks: list[tuple[int, int, int]]  # (participant, table index, slot)
    rows: dict[int, bytes]  # participant -> the row (model words and trailer) linked to it
    direct: set[int]  # participants whose own model list it read


def secrets_of(view: PSView) -> dict[tuple[int, int, ShareKind], int]:
    """Every b_{i,m} and x_{i,m} the PS can get: colluders', opened, or rebuilt from t shares (checked)."""
    g, p = view.group, view.params
    out: dict[tuple[int, int, ShareKind], int] = {}
    for pid, known in view.colluders.items():
        for key, s in known.items():
            if isinstance(key, tuple):
                m, kind = key
                out[(pid, m, kind)] = s
    for rv in view.reveals:
        adv = view.adverts.get(rv.sender)
        if adv is not None and 1 <= rv.m <= p.M and g.base_mul(rv.x) == adv.mask_keys[rv.m - 1]:
            out[(rv.sender, rv.m, ShareKind.DH_SECRET)] = rv.x
    pooled: dict[tuple[int, int, ShareKind], dict[int, int]] = defaultdict(dict)
    for resp in view.shares:
        for owner, kind, sh in resp.shares:
            pooled[(owner, resp.m, kind)][sh.x] = sh.y
    for ans in view.answers:
        # A dealer's published shares at complainer j's point, in commitment order b_1, x_1, b_2, ...
        for j, ys in ans.shares:
            for idx, y in enumerate(ys[: 2 * p.M]):
                kind = ShareKind.DH_SECRET if idx % 2 else ShareKind.SELF_SEED
                pooled[(ans.sender, idx // 2 + 1, kind)][j + 1] = y
    for pid, known in view.colluders.items():
        # A colluder's shares of everyone's secrets: what it holds at its own point (not revealed).
        for (owner, m, kind), y in known.get("held", {}).items():
            pooled[(owner, m, kind)][pid + 1] = y
    shamir = Shamir(g.order, p.t)
    for (owner, m, kind), ys in pooled.items():
        adv = view.adverts.get(owner)
        if (owner, m, kind) in out or len(ys) < p.t or adv is None or not 1 <= m <= p.M:
            continue
        secret = shamir.reconstruct([Share(x, y) for x, y in sorted(ys.items())[: p.t]], check=False)
        if g.base_mul(secret) == adv.commitments[secret_index(m, kind)][0]:
            out[(owner, m, kind)] = secret
    return out


def _plausible_counts(v: np.ndarray, p: RoundParams) -> bool:
    return bool(v.size == p.n and int(v.max(initial=0)) <= p.N + p.decoys and int(v.sum()) <= p.N + p.decoys)


def _token_of(row: np.ndarray, p: RoundParams) -> bytes:
    d_bytes = p.d * row.dtype.itemsize
    off = d_bytes + credential.pad_bytes(d_bytes)
    return row.tobytes()[off: off + credential.TRAILER_BYTES][: 16]


def _groups(view: PSView) -> dict[tuple[int, bytes], dict[int, msg.MaskedInput]]:
    """The masked vectors by (m, h_m), one per sender (its first)."""
    groups: dict[tuple[int, bytes], dict[int, msg.MaskedInput]] = defaultdict(dict)
    for v in view.vectors:
        groups[(v.m, bytes(v.h))].setdefault(v.sender, v)
    return groups


def read_sum(view: PSView, secrets, m: int, h: bytes, members: dict[int, msg.MaskedInput] | None = None
             ) -> np.ndarray | None:
    """The plaintext sum of the vectors of (m, h) if the PS can remove their masks: every sender's self
    seed and, for each member of the mask set that did not upload, its DH secret. Count vectors must come
    out plausible and model lists must hold a row with one of the PS's tokens; else None."""
    p, g = view.params, view.group
    members = members if members is not None else _groups(view).get((m, bytes(h)), {})
    ids = sorted(members)
    if not ids or not all((i, m, ShareKind.SELF_SEED) in secrets for i in ids):
        return None
    dtype = np.dtype(f"<u{p.vector_bits(m) // 8}")
    rows = members[ids[0]].rows
    for mask_set in _sum_sets(view, ids, m, h, secrets):
        dropped = {j: secrets[(j, m, ShareKind.DH_SECRET)] for j in set(mask_set) - set(ids)}
        acc = np.zeros(len(members[ids[0]].words) // dtype.itemsize, dtype=dtype)
        for i in ids:
            acc += np.frombuffer(members[i].words, dtype=dtype)
        keys = {j: view.adverts[j].mask_keys[m - 1] for j in ids if j in view.adverts}
        unmask_in_place(acc, g, view.T, m, ids, {i: secrets[(i, m, ShareKind.SELF_SEED)] for i in ids}, dropped,
                        keys, h, rows)
        if m <= p.R_max and _plausible_counts(acc, p):
            return acc
        if m > p.R_max and _model_rows(view, acc, rows):
            return acc
    return None


def _model_rows(view: PSView, plain: np.ndarray, rows: int) -> list[np.ndarray]:
    """The nonzero rows of a model list that carry a token of one of the PS's tables."""
    tokens = {tok for table in view.tables for tok in table}
    return [row for row in plain.reshape(rows, -1) if row.any() and _token_of(row, view.params) in tokens]


def link(view: PSView) -> Links:
    """Every link the PS can compute from ``view`` (see the module docstring)."""
    p, g, T = view.params, view.group, view.T
    secrets = secrets_of(view)
    picks: list[tuple[int, int, int]] = []
    found_rows: dict[bytes, np.ndarray] = {}  # token -> a row read from some model list
    direct: dict[int, bytes] = {}

    def keys_of(m: int, ids) -> dict[int, object]:
        return {j: view.adverts[j].mask_keys[m - 1] for j in ids if j in view.adverts}

    for (m, h), members in _groups(view).items():
        upload = m > p.R_max
        dtype = np.dtype(f"<u{p.vector_bits(m) // 8}")
        # 1. Each vector alone: its self seed and its own DH secret.
        for i, v in members.items():
            b = secrets.get((i, m, ShareKind.SELF_SEED))
            x = secrets.get((i, m, ShareKind.DH_SECRET))
            if b is None or x is None:
                continue
            for mask_set in _candidate_sets(view, i, m, h, members, secrets):
                y = np.frombuffer(v.words, dtype=dtype).copy()
                neg = np.zeros_like(y)
                mask_in_place(neg, g, T, m, i, b, x, keys_of(m, set(mask_set) - {i}), h, v.rows)
                plain = y - neg
                if not upload and _plausible_counts(plain, p):
                    tables = [view.table_of[h]] if h in view.table_of else range(len(view.tables))
                    picks.extend((i, ti, s) for s in np.flatnonzero(plain == 1).tolist() for ti in tables)
                    break
                if upload:
                    own = _model_rows(view, plain, v.rows)
                    if len(own) == 1:
                        direct[i] = own[0].tobytes()
                        break
        # 2. Their sum, where the pairwise masks cancel or are known.
        if upload:
            acc = read_sum(view, secrets, m, h, members)
            if acc is not None:
                for row in _model_rows(view, acc, members[min(members)].rows):
                    found_rows[_token_of(row, p)] = row
    # 3. Picks to rows through the tokens; a slot picked by two participants links neither.
    pickers: dict[bytes, set[int]] = defaultdict(set)
    for i, ti, s in picks:
        if ti < len(view.tables):
            pickers[view.tables[ti][s]].add(i)
    rows: dict[int, bytes] = dict(direct)
    for tok, who in pickers.items():
        if len(who) == 1 and tok in found_rows:
            (i,) = who
            rows.setdefault(i, found_rows[tok].tobytes())
    unique_picks = sorted({(i, ti, s) for i, ti, s in picks if ti < len(view.tables)})
    return Links(secrets, unique_picks, rows, set(direct))


def _candidate_sets(view: PSView, i: int, m: int, h: bytes, members, secrets):
    """Mask sets participant i may have used for (m, h): the announced one, else the senders."""
    seen = []
    for s in (view.mask_sets.get((i, m, h)), tuple(sorted(members)), tuple(sorted(view.adverts))):
        if s is not None and s not in seen:
            seen.append(s)
    return seen


def _sum_sets(view: PSView, ids, m: int, h: bytes, secrets):
    """Mask sets under which the sum of ``ids`` can be unmasked: every member not in ``ids`` must have a
    known DH secret (its pairwise masks with the senders are then computable)."""
    out = []
    for i in ids:
        s = view.mask_sets.get((i, m, h))
        if s is not None and tuple(s) not in out:
            out.append(tuple(s))
    out.append(tuple(ids))
    return [s for s in out if all((j, m, ShareKind.DH_SECRET) in secrets for j in set(s) - set(ids))]


def correct_links(links: Links, truth: dict[int, tuple[bytes, ...]]) -> list[int]:
    """Participants whose linked row is a row they wrote (``truth``: pid -> the tags of its rows, as
    :attr:`~reshuffle.protocol.participant.ParticipantView.row_tags` records them; a tag is unique per row)."""
    return sorted(i for i, row in links.rows.items() if row[-credential.TAG_BYTES:] in truth.get(i, ()))
