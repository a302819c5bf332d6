r"""Rules that remember: a history per pseudonym, across rounds.

Every per-round rule sees one round, so a push held to a small share of each
round, on the same coordinates, adds up unseen. The rules here keep, for each
pseudonym (an opaque label per row, stable for an epoch and unlinkable to an
identity beyond its anonymity set), what it sent before, and judge the round's
rows by it. They take ``pseudonyms`` (one label per row, in row order) in
``decide`` and refuse rows that come without.

State lives in a :class:`History` (the rows of per-pseudonym arrays and their
labels). ``decide`` computes the next history without changing the rule's;
:meth:`~reshuffle.server.rules.base.Rule.commit` adopts it (the deployed step
does so once per round), so the attackers' copy may be probed as often as they
like. A pseudonym that misses rounds (dropouts, sampling) keeps its history,
aged by the rounds it missed (``decay`` per round); one seen for the first
time starts empty. ``epoch`` (rounds; 0: the run) clears every history when a
new epoch begins, as new epoch pseudonyms would. Two rows under one pseudonym
in a round are both rejected (weight 0); the history does not take them.
``ban_after`` (0: never) bans a pseudonym for the rest of its epoch once the
rule has flagged its rows in that many consecutive rounds it sent one: its
later rows get weight 0 and its history stays as it was.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, Rule, check_f, check_positive, check_pseudonyms, check_round, check_updates, clip_factors,
    column_median,
)
from reshuffle.server.rules.coordinate import trim_columns
from reshuffle.server.rules.flame import norms_and_cosines
from reshuffle.server.rules.registry import register_rule


def check_share(v: object, name: str, low_open: bool = False) -> float:
    """A number in [0, 1] ((0, 1] when ``low_open``)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (0 < v <= 1 if low_open else 0 <= v <= 1)
    if not ok:
        raise ConfigError(f"{name} must be a number in {'(0, 1]' if low_open else '[0, 1]'}, got {v!r}")
    return float(v)


def check_epoch(v: object, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{name} epoch must be a non-negative int (rounds; 0: the whole run), got {v!r}")
    return v


#: Prefix of a history's shared arrays in its state.
SHARED = "shared."
#: The per-pseudonym array of consecutive flagged rounds (bans).
STRIKES = "strikes"


@dataclass
class History:
    """Per-pseudonym arrays: row k of every array in ``arrays`` belongs to ``labels[k]``.

    ``seen[k]`` is the last round pseudonym k sent a row in, ``epoch`` the epoch
    the history belongs to, ``shared`` arrays that belong to no pseudonym (the
    global model's past), ``data`` a rule's JSON-ready extras.
    """

    labels: list[str] = field(default_factory=list)
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    epoch: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    shared: dict[str, np.ndarray] = field(default_factory=dict)

    def rows(self, labels: list[str], shapes: dict[str, tuple[int, ...]]) -> tuple["History", np.ndarray]:
        """A copy that holds every label in ``labels`` (new ones with zero arrays), and their indices in it."""
        out = History(list(self.labels), self.seen.copy(), {k: v.copy() for k, v in self.arrays.items()},
                      self.epoch, copy.deepcopy(self.data), {k: v.copy() for k, v in self.shared.items()})
        for name, shape in shapes.items():
            if name not in out.arrays:
                out.arrays[name] = np.zeros((len(out.labels), *shape))
        index = {lab: k for k, lab in enumerate(out.labels)}
        new = [lab for lab in dict.fromkeys(labels) if lab not in index]
        if new:
            for lab in new:
                index[lab] = len(out.labels)
                out.labels.append(lab)
            out.seen = np.concatenate([out.seen, np.zeros(len(new), dtype=np.int64)])
            for name, shape in shapes.items():
                out.arrays[name] = np.concatenate([out.arrays[name], np.zeros((len(new), *shape))])
        return out, np.array([index[lab] for lab in labels], dtype=np.int64)

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        arrays = {k: v.copy() for k, v in self.arrays.items()}
        arrays["seen"] = self.seen.copy()
        arrays.update({SHARED + k: v.copy() for k, v in self.shared.items()})
        return arrays, {"labels": list(self.labels), "epoch": self.epoch, "data": copy.deepcopy(self.data)}

    @classmethod
    def restored(cls, arrays: dict[str, np.ndarray], data: dict[str, Any], names: tuple[str, ...]) -> "History":
        if not data:
            return cls()
        labels = data.get("labels")
        want = set(names) | {"seen"}
        own = {k: v for k, v in arrays.items() if not k.startswith(SHARED)}
        if not isinstance(labels, list) or set(own) != want:
            raise ConfigError(f"a pseudonym history needs arrays {sorted(want)} and its labels, got {sorted(own)}")
        k = len(labels)
        if any(np.asarray(v).shape[:1] != (k,) for v in own.values()):
            raise ConfigError(f"a pseudonym history of {k} labels has arrays of other lengths")
        return cls(list(labels), np.asarray(arrays["seen"], dtype=np.int64).copy(),
                   {n: np.array(arrays[n], dtype=np.float64) for n in names}, int(data.get("epoch", 0)),
                   copy.deepcopy(data.get("data", {})),
                   {k[len(SHARED):]: np.array(v, dtype=np.float64) for k, v in arrays.items() if k.startswith(SHARED)})


class _Store:
    """The committed history and the one the last ``decide`` computed (shared by shallow copies of a rule)."""

    def __init__(self) -> None:
        self.history = History()
        self.pending: History | None = None


class HistoryRule(Rule):
    """Shared by the pseudonymous rules: label checks, epochs, ageing, duplicates, commit, checkpoint.

    A subclass lists its per-pseudonym arrays in ``arrays`` (name → shape
    beyond the pseudonym axis, given d) and implements :meth:`judge`.
    """

    context = frozenset({"pseudonyms"})

    def __init__(self, epoch: int = 0, decay: float = 1.0, ban_after: int = 0) -> None:
        self.epoch = check_epoch(epoch, self.name)
        self.decay = check_share(decay, f"{self.name} decay", low_open=True)
        if isinstance(ban_after, bool) or not isinstance(ban_after, int) or ban_after < 0:
            raise ConfigError(f"{self.name} ban_after must be a non-negative int (0: no bans), got {ban_after!r}")
        self.ban_after = ban_after
        self._store = _Store()

    def arrays(self, d: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def judge(self, U: np.ndarray, h: History, idx: np.ndarray, age: np.ndarray, round: int,
              **context: Any) -> Decision:
        """The decision on the rows U (all with distinct pseudonyms at ``idx`` of ``h``), updating ``h`` in place.

        ``age`` is each row's pseudonym's rounds since its last row (0: new).
        """
        raise NotImplementedError

    def epoch_of(self, round: int) -> int:
        return 0 if self.epoch == 0 else (max(round, 1) - 1) // self.epoch

    def decide(self, updates: np.ndarray, *, round: int = 0, pseudonyms=None, **context: Any) -> Decision:
        check_round(round)
        U = check_updates(updates)
        labels = check_pseudonyms(pseudonyms, len(U), self.name)
        base = self._store.history
        if base.labels and base.epoch != self.epoch_of(round):
            base = History(epoch=self.epoch_of(round))  # a new epoch: new pseudonyms, no history
        counts: dict[str, int] = {}
        for lab in labels:
            counts[lab] = counts.get(lab, 0) + 1
        banned = set(base.data.get("banned", []))
        single = np.array([counts[lab] == 1 and lab not in banned for lab in labels])
        rows = np.flatnonzero(single)
        shapes = {**self.arrays(U.shape[1]), STRIKES: (1,)}
        h, idx = base.rows([labels[i] for i in rows], shapes)
        h.epoch = self.epoch_of(round)
        age = np.where(h.seen[idx] > 0, round - h.seen[idx], 0)
        weights = np.zeros(len(U))
        accepted: tuple[int, ...] = ()
        agg = np.zeros(U.shape[1])
        self.judged = rows  # the rows judged, in the order of judge's arrays (for a rule built on this one)
        if rows.size:
            d = self.judge(_judged_rows(U, rows), h, idx, age, round, **context)
            weights[rows] = d.weights
            accepted = tuple(int(rows[i]) for i in d.accepted)
            agg = d.aggregate
            h.seen[idx] = round
            if self.ban_after:
                ok = np.zeros(rows.size, dtype=bool)
                ok[list(d.accepted)] = True
                strikes = np.where(ok, 0.0, h.arrays[STRIKES][idx, 0] + 1)
                h.arrays[STRIKES][idx, 0] = strikes
                out = sorted(set(h.data.get("banned", [])) | {h.labels[k] for k in idx[strikes >= self.ban_after]})
                h.data["banned"] = out
        self._store.pending = h
        return Decision(agg, accepted, weights)

    def aged(self, A: np.ndarray, age: np.ndarray, in_place: bool = False) -> np.ndarray:
        """Accumulated rows A decayed by ``decay`` per round since the pseudonym's last row (``in_place``: in A)."""
        if self.decay == 1.0:
            return A
        factor = (self.decay ** np.maximum(age - 1, 0))[:, None]
        if in_place:
            A *= factor
            return A
        return A * factor

    def commit(self) -> None:
        if self._store.pending is not None:
            self._store.history, self._store.pending = self._store.pending, None

    def state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        h = self._store.history
        return h.state() if h.labels else ({}, {})

    def restore(self, arrays: dict[str, np.ndarray], data: dict[str, Any]) -> None:
        names = (*self.arrays(1), STRIKES)
        self._store.history = History.restored(arrays, data, names)
        self._store.pending = None

    def banned(self, round: int) -> list[str]:
        """The (normalised) labels banned in round T's epoch, as the committed history stands."""
        h = self._store.history
        return list(h.data.get("banned", [])) if h.labels and h.epoch == self.epoch_of(round) else []

    def history(self) -> History:
        """The committed history (a copy)."""
        h = self._store.history
        return History.restored(*h.state(), (*self.arrays(1), STRIKES)) if h.labels else History()

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def _judged_rows(U: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``U[rows]`` for :meth:`HistoryRule.judge`; when that is every row of a C-ordered U, a read-only view of U
    (the same values in the same layout, without copying the round)."""
    if len(rows) == len(U) and U.flags.c_contiguous and (rows == np.arange(len(U))).all():
        V = U.view()
        V.flags.writeable = False
        return V
    return U[rows]


def _closest_kin(cos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cos with −∞ on the diagonal, each row's greatest similarity to another row)."""
    cs = cos.copy()
    np.fill_diagonal(cs, -np.inf)
    return cs, cs.max(axis=1)


def foolsgold_weights(cos: np.ndarray) -> np.ndarray:
    r"""FoolsGold's weights from the pairwise cosine similarities of the accumulated histories.

    With :math:`v_i = \max_{j \ne i} cs_{ij}`, pardoning
    :math:`cs_{ij} \leftarrow cs_{ij}\, v_i / v_j` where :math:`v_j > v_i`, then
    :math:`\alpha_i = 1 - \max_{j \ne i} cs_{ij}` clipped to [0, 1], divided by
    its maximum, and :math:`\alpha_i \leftarrow \ln(\alpha_i / (1 - \alpha_i)) + 0.5`
    clipped to [0, 1] (1 where :math:`\alpha_i = 1`).

    >>> import numpy as np
    >>> cos = np.array([[1.0, 0.99, 0.1], [0.99, 1.0, 0.1], [0.1, 0.1, 1.0]])
    >>> foolsgold_weights(cos).round(3).tolist()   # the two alike rows lose their weight
    [0.0, 0.0, 1.0]
    """
    n = cos.shape[0]
    if n == 1:
        return np.ones(1)
    cs, v = _closest_kin(cos)
    pardon = v[None, :] > v[:, None]  # [i, j]: j is more alike to some row than i is
    ratio = np.divide(v[:, None], v[None, :], out=np.ones_like(cs), where=pardon & (v[None, :] > 0))
    cs = np.where(pardon, cs * ratio, cs)
    alpha = np.clip(1.0 - cs.max(axis=1), 0.0, 1.0)
    top = alpha.max()
    if top <= 0:
        return np.zeros(n)
    alpha = alpha / top
    with np.errstate(divide="ignore"):
        logit = np.log(np.divide(alpha, 1.0 - alpha, out=np.full(n, np.inf), where=alpha < 1)) + 0.5
    return np.clip(np.where(alpha >= 1, 1.0, logit), 0.0, 1.0)


CENTERS = ("none", "median")


@register_rule("foolsgold")
class FoolsGold(HistoryRule):
    r"""FoolsGold (Fung, Yoon & Beschastnikh, RAID 2020) on per-pseudonym histories.

    Each pseudonym p accumulates :math:`H_p \leftarrow \gamma^{\Delta} H_p + (u_p - c)`
    (γ = ``decay`` per round since its last row; 1: the paper's plain sum),
    with c the round's centre: 0 (``center = "none"``, the paper's) or the
    coordinate-wise median of the round's rows (``"median"``): what every
    honest row shares then drops out, and what is left is each pseudonym's own
    drift, which differs between honest non-IID clients while colluders who
    push one payload share it. The weights are :func:`foolsgold_weights` of the
    cosine similarities of the histories of the round's pseudonyms, and

    .. math:: a = \sum_i \alpha_i u_i \Big/ \sum_i \alpha_i

    (the zero update when every α is 0). Accepted: rows with α ≥ ``accept``
    (0.5); the rest count as flagged.

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    >>> d = FoolsGold().decide(U, pseudonyms=["a", "b", "c", "d"], round=1)
    >>> d.weights.round(3).tolist(), d.accepted, d.aggregate.round(3).tolist()
    ([1.0, 1.0, 0.0, 0.0], (0, 1), [0.5, 0.5, 0.0])
    """

    def __init__(self, center: str = "none", decay: float = 1.0, accept: float = 0.5, epoch: int = 0,
                 ban_after: int = 0) -> None:
        super().__init__(epoch, decay, ban_after)
        if center not in CENTERS:
            raise ConfigError(f"foolsgold center must be one of {', '.join(CENTERS)}, got {center!r}")
        self.center = center
        self.accept = check_share(accept, "foolsgold accept")

    def arrays(self, d: int) -> dict[str, tuple[int, ...]]:
        return {"H": (d,)}

    def weights(self, U: np.ndarray, h: History, idx: np.ndarray, age: np.ndarray) -> np.ndarray:
        """α per row, updating the histories in ``h``."""
        c = column_median(U) if self.center == "median" else 0.0
        H = self.aged(h.arrays["H"][idx], age, in_place=True)  # a new array (fancy indexing), aged and added to in place
        H += U - c
        h.arrays["H"][idx] = H
        return self.similarity_weights(norms_and_cosines(H)[1])

    def similarity_weights(self, cos: np.ndarray) -> np.ndarray:
        return foolsgold_weights(cos)

    def judge(self, U, h, idx, age, round, **context):
        alpha = self.weights(U, h, idx, age)
        total = alpha.sum()
        agg = (alpha @ U) / total if total > 0 else np.zeros(U.shape[1])
        return Decision(agg, tuple(np.flatnonzero(alpha >= self.accept).tolist()), alpha)


def kinship_weights(cos: np.ndarray, floor: float = 0.5, kappa: float = 3.0) -> np.ndarray:
    r"""Weights from each row's closest kin: 1 up to an outlying similarity, falling to 0 at a copy.

    With :math:`v_i = \max_{j \ne i} cs_{ij}` and the threshold
    :math:`\tau = \min(0.999, \max(\text{floor}, \mathrm{med}(v) + \kappa\cdot 1.4826\,\mathrm{MAD}(v)))`,
    :math:`\alpha_i = \mathrm{clip}((1 - v_i)/(1 - \tau), 0, 1)`: a history no closer to another than the
    others are to theirs keeps weight 1, one that copies another's gets 0.

    >>> import numpy as np
    >>> cos = np.array([[1, .2, .1, .1, .3], [.2, 1, .3, .2, .1], [.1, .3, 1, .1, .2], [.1, .2, .1, 1, .99],
    ...                 [.3, .1, .2, .99, 1]])
    >>> kinship_weights(cos).round(3).tolist()   # v = (.3, .3, .3, .99, .99): τ = 0.5
    [1.0, 1.0, 1.0, 0.02, 0.02]
    """
    n = cos.shape[0]
    if n == 1:
        return np.ones(1)
    cs, v = _closest_kin(cos)
    med = float(np.median(v))
    tau = min(0.999, max(floor, med + kappa * 1.4826 * float(np.median(np.abs(v - med)))))
    return np.clip((1.0 - v) / (1.0 - tau), 0.0, 1.0)


def shared_kin_weights(cos: np.ndarray, floor: float = 0.5, kappa: float = 3.0) -> np.ndarray:
    r"""Weights by which alike rows share one row's weight: a copy and its original get 1/2 each, not 0.

    With τ as in :func:`kinship_weights` and kin strengths
    :math:`k_{ij} = \mathrm{clip}((cs_{ij} - \tau)/(1 - \tau), 0, 1)` (1 for a copy),
    :math:`\alpha_i = 1 / (1 + \sum_{j \ne i} k_{ij})`. A group of k copies weighs
    one row in all, whoever made them: an attacker who copies an honest row
    takes half its weight, never all of it, and what the pair carries (the
    honest row) still reaches the aggregate in full; colluders who push one
    payload weigh as one attacker.

    >>> import numpy as np
    >>> cos = np.array([[1, .2, .1, .1, .3], [.2, 1, .3, .2, .1], [.1, .3, 1, .1, .2], [.1, .2, .1, 1, 1.0],
    ...                 [.3, .1, .2, 1.0, 1]])
    >>> shared_kin_weights(cos).round(3).tolist()   # τ = 0.5: the two copies share one weight
    [1.0, 1.0, 1.0, 0.5, 0.5]
    """
    return 1.0 / (1.0 + kin_strength(cos, floor, kappa).sum(axis=1))


def kin_strength(cos: np.ndarray, floor: float = 0.5, kappa: float = 3.0, steep: float = 1.0) -> np.ndarray:
    """k_ij of :func:`shared_kin_weights`: 0 up to the outlier threshold τ, 1 for a copy (``steep`` = s > 1: from
    τ + (1 − τ)/s on), 0 on the diagonal."""
    n = cos.shape[0]
    if n == 1:
        return np.zeros((1, 1))
    cs, v = _closest_kin(cos)
    med = float(np.median(v))
    tau = min(0.999, max(floor, med + kappa * 1.4826 * float(np.median(np.abs(v - med)))))
    return np.clip((cs - tau) * steep / (1.0 - tau), 0.0, 1.0)


#: How kinship weighs alike histories: ``share`` (a group of alike rows weighs one row) or ``cut`` (each
#: alike row falls to 0, the original with its copy).
KIN_MODES = ("share", "cut")


@register_rule("kinship")
class Kinship(FoolsGold):
    r"""Colluders' histories agree: FoolsGold's per-pseudonym histories, judged by each one's closest kin.

    The histories are FoolsGold's (:class:`FoolsGold`; here ``center =
    "median"`` by default: each pseudonym's accumulated deviation from the
    round's median). FoolsGold's weights are relative (a row is cut once it is
    less unique than the most unique row by a factor), which on skewed data
    cuts honest rows whose drift happens to resemble another's. Here the cut is
    an outlier test on the closest-kin similarity :math:`v_i` (:func:`kinship_weights`:
    floor ``floor``, 0.5; κ = ``kappa``, 3), so honest histories keep weight 1
    and colluders who push one payload, whose histories converge, lose it.
    With ``mode = "cut"`` the weights are :func:`kinship_weights` (a copy and
    its original both fall to 0: attackers who copy honest rows aim the cut at
    them); with ``mode = "share"`` (the default) :func:`shared_kin_weights`
    (alike rows share one row's weight, so a copy takes half its original's
    weight and what the two carry still counts once in full).
    Aggregate :math:`\sum_i \alpha_i u_i / \sum_i \alpha_i`; accepted: α ≥ ``accept``.

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0],
    ...               [0.0, 0.0, 0.0, 1.0]])
    >>> Kinship(center="none", mode="cut").decide(U, pseudonyms=list("abcde"), round=1).accepted
    (0, 1, 2)
    >>> Kinship(center="none").decide(U, pseudonyms=list("abcde"), round=1).weights.tolist()
    [1.0, 1.0, 1.0, 0.5, 0.5]
    """

    def __init__(self, center: str = "median", decay: float = 0.9, floor: float = 0.5, kappa: float = 3.0,
                 accept: float = 0.5, epoch: int = 0, ban_after: int = 0, mode: str = "share",
                 steep: float = 1.0) -> None:
        super().__init__(center, decay, accept, epoch, ban_after)
        self.floor = check_share(floor, "kinship floor")
        self.kappa = check_positive(kappa, "kinship kappa")
        self.steep = check_positive(steep, "kinship steep")
        if self.steep < 1.0:
            raise ConfigError(f"kinship steep must be at least 1 (1: kin from the threshold to a copy), got {steep!r}")
        if mode not in KIN_MODES:
            raise ConfigError(f"kinship mode must be one of {', '.join(KIN_MODES)}, got {mode!r}")
        self.mode = mode

    def similarity_weights(self, cos: np.ndarray) -> np.ndarray:
        if self.mode == "cut":
            self.kin = None
            return kinship_weights(cos, self.floor, self.kappa)
        # Kept for a rule built on this one (hammer-anvil merges each group of kin into one row).
        self.kin = kin_strength(cos, self.floor, self.kappa, self.steep)
        return 1.0 / (1.0 + self.kin.sum(axis=1))


def solve_shrink(A: np.ndarray, x: np.ndarray, bound: np.ndarray) -> np.ndarray:
    r"""Per row, the largest c in [0, 1] with :math:`\lVert A_i + c\,x_i \rVert \le b_i` (0 when even c = 0 exceeds it).

    >>> import numpy as np
    >>> solve_shrink(np.array([[3.0, 0.0], [0.0, 0.0]]), np.array([[2.0, 0.0], [1.0, 0.0]]), np.array([4.0, 4.0]))
    array([0.5, 1. ])
    """
    a = np.einsum("ij,ij->i", x, x)
    b = 2.0 * np.einsum("ij,ij->i", A, x)
    c0 = np.einsum("ij,ij->i", A, A) - bound ** 2
    full = a + b + c0 <= 0
    disc = np.maximum(b * b - 4 * a * c0, 0.0)
    root = np.divide(-b + np.sqrt(disc), 2 * a, out=np.zeros_like(a), where=a > 0)
    return np.where(full, 1.0, np.where(c0 > 0, 0.0, np.clip(root, 0.0, 1.0)))


@register_rule("influence-budget")
class InfluenceBudget(HistoryRule):
    r"""A cumulative influence budget: each pseudonym's summed deviation, over a window, stays within the others'.

    Rows are clipped to S, the median row norm: :math:`v_i = u_i \min(1, S/\lVert u_i\rVert)`.
    With m the coordinate-wise median of the clipped rows and
    :math:`x_i = v_i - m` each row's deviation, each pseudonym's budget account
    is :math:`A_p \leftarrow \gamma^{\Delta} A_p + c_p x_p` (γ = ``decay``: a
    window of about 1/(1 − γ) rounds). The bound is
    :math:`B = \beta \cdot \mathrm{median}_p \lVert \gamma^{\Delta} A_p + x_p\rVert`
    (β = ``factor``), and :math:`c_p \in [0, 1]` is the largest share of its
    deviation that keeps :math:`\lVert A_p + c_p x_p\rVert \le B`
    (:func:`solve_shrink`): a pseudonym that pushes one way round after round
    spends its budget, and later rows reach the aggregate only as far as the
    median pseudonym's summed push does. The aggregate is the mean of
    :math:`m + c_i x_i`, and optionally the coordinate-wise trimmed mean of
    them (``trim``, the run's f; 0 by default). Weights: the clipping factor
    times :math:`c_i`; no row is flagged (``detects = False``).

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [3.0, 3.0]])
    >>> d = InfluenceBudget(factor=1.0).decide(U, pseudonyms=["a", "b", "c", "d"], round=1)
    >>> d.weights.round(3).tolist()   # S = 1.207, m = (0.854, 0.854), ‖x‖ = (0.866, 0.866, 0, 0): B = 0.433
    [0.5, 0.5, 0.854, 0.285]
    """

    detects = False
    f_param = "trim"

    def __init__(self, factor: float = 1.5, decay: float = 0.9, trim: int = 0, epoch: int = 0) -> None:
        super().__init__(epoch, decay)
        self.factor = check_positive(factor, "influence-budget factor")
        self.trim = check_f(trim, "influence-budget trim")

    def min_rows(self) -> int:
        return 2 * self.trim + 1

    def arrays(self, d: int) -> dict[str, tuple[int, ...]]:
        return {"A": (d,)}

    def judge(self, U, h, idx, age, round, **context):
        n = len(U)
        if n <= 2 * self.trim:
            raise ConfigError(f"influence-budget needs n > 2·trim rows; got n={n} with trim={self.trim}")
        norms = np.linalg.norm(U, axis=1)
        k = clip_factors(norms, float(np.median(norms)))
        V = U * k[:, None]
        m = column_median(V)
        X = V - m
        A = self.aged(h.arrays["A"][idx], age)
        bound = self.factor * float(np.median(np.linalg.norm(A + X, axis=1)))
        c = solve_shrink(A, X, np.full(n, bound))
        h.arrays["A"][idx] = A + c[:, None] * X
        rows = m + c[:, None] * X
        agg = trim_columns(rows, self.trim)[0] if self.trim else rows.mean(axis=0)
        return Decision(agg, tuple(range(n)), np.clip(k * c, 0.0, 1.0))


def lbfgs_product(S: np.ndarray, Y: np.ndarray, v: np.ndarray) -> np.ndarray:
    r"""B v for the L-BFGS approximation B of the Hessian from the pairs (s_k, y_k) (rows of S and Y, oldest first).

    Byrd, Nocedal & Schnabel's compact form, as FLDetector uses it:
    :math:`B v = \sigma v - [\sigma S^\top\ Y^\top]^\top M^{-1} [\sigma S v;\ Y v]` with
    :math:`\sigma = y_k^\top s_k / s_k^\top s_k` (the newest pair),
    :math:`M = \begin{pmatrix}\sigma S S^\top & L\\ L^\top & -D\end{pmatrix}`,
    L the strictly lower triangle of :math:`S Y^\top` and D its diagonal.
    On a quadratic with Hessian 2·I the product is exact:

    >>> import numpy as np
    >>> S = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    >>> lbfgs_product(S, 2 * S, np.array([1.0, 2.0, 3.0])).tolist()
    [2.0, 4.0, 6.0]
    """
    sy = float(S[-1] @ Y[-1])
    ss = float(S[-1] @ S[-1])
    sigma = sy / ss if ss > 0 and sy > 0 else 1.0
    SY = S @ Y.T
    L = np.tril(SY, -1)
    D = np.diag(np.diag(SY))
    M = np.block([[sigma * (S @ S.T), L], [L.T, -D]])
    rhs = np.concatenate([sigma * (S @ v), Y @ v])
    p = np.linalg.lstsq(M, rhs, rcond=None)[0]
    k = S.shape[0]
    return sigma * v - (sigma * (p[:k] @ S) + p[k:] @ Y)


def two_means_1d(x: np.ndarray) -> tuple[np.ndarray, float]:
    """The best split of 1-D values into two groups (k-means with k = 2 is a split of the sorted values):
    (mask of the upper group, within-group sum of squares)."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    n = len(xs)
    best, cut = np.inf, n
    for c in range(1, n):
        w = ((xs[:c] - xs[:c].mean()) ** 2).sum() + ((xs[c:] - xs[c:].mean()) ** 2).sum()
        if w < best:
            best, cut = w, c
    upper = np.zeros(n, dtype=bool)
    upper[order[cut:]] = True
    return upper, float(best)


def gap_says_two(x: np.ndarray, rng: np.random.Generator, draws: int = 10) -> bool:
    r"""Tibshirani's gap statistic on 1-D scores: True when two clusters fit better than one.

    Gap(k) = E*[log W_k] − log W_k, the expectation over ``draws`` uniform samples on
    [min x, max x]; two clusters when Gap(1) < Gap(2) − s_2, s_2 the reference's
    standard deviation times √(1 + 1/draws).
    """
    if len(x) < 3 or np.ptp(x) == 0:
        return False

    def logw(v: np.ndarray, k: int) -> float:
        w = ((v - v.mean()) ** 2).sum() if k == 1 else two_means_1d(v)[1]
        return float(np.log(max(w, 1e-300)))

    ref = rng.uniform(x.min(), x.max(), size=(draws, len(x)))
    r1 = np.array([logw(r, 1) for r in ref])
    r2 = np.array([logw(r, 2) for r in ref])
    gap1 = r1.mean() - logw(x, 1)
    gap2 = r2.mean() - logw(x, 2)
    return bool(gap1 < gap2 - r2.std() * np.sqrt(1 + 1 / draws))


@register_rule("fldetector")
class FLDetector(HistoryRule):
    r"""FLDetector (Zhang, Cao, Jia & Gong, KDD 2022): each pseudonym's update predicted from its own history.

    With :math:`\Delta w^t = W_g^t - W_g^{t-1}` and :math:`\Delta\bar u^t` the
    change of the aggregate between rounds, the last N = ``memory`` pairs
    :math:`(\Delta w, -\Delta \bar u)` give an L-BFGS Hessian approximation B
    (:func:`lbfgs_product`; rows are updates u ≈ −η∇f, so their changes carry
    the minus sign), and pseudonym p's update is predicted as
    :math:`\hat u_p^t = u_p^{t'} - B\,(W_g^t - W_g^{t'})` from its last row
    u_p^{t'} (round t'). Its distance :math:`d_p = \lVert \hat u_p^t - u_p^t\rVert`,
    normalised over the round (:math:`d / \sum d`), is averaged over its last
    ``window`` rows into a suspicion score. Once N pairs are known, the gap
    statistic (:func:`gap_says_two`) decides whether the scores form two
    groups; if so the upper group of the 1-D 2-means split is rejected. The
    aggregate is the mean of the accepted rows. A pseudonym seen for the first
    time has no prediction and is scored by the rows that have one.

    >>> import numpy as np
    >>> r = FLDetector(memory=1, window=1, seed=0)
    >>> W, names = np.zeros(2), ["a", "b", "c", "d", "e"]
    >>> U = np.array([[1.0, 0.0], [1.0, 0.1], [0.9, 0.0], [1.1, 0.0], [1.0, -0.1]])
    >>> for t in (1, 2):
    ...     _ = r.decide(U, round=t, pseudonyms=names, global_model=W); r.commit(); W = W + U.mean(axis=0)
    >>> V = U * 0.5; V[4] = [-3.0, 2.0]   # every row halves its step; row 4 turns
    >>> r.decide(V, round=3, pseudonyms=names, global_model=W).accepted
    (0, 1, 2, 3)
    """

    context = frozenset({"pseudonyms", "global_model"})
    randomized = True

    def __init__(self, memory: int = 5, window: int = 10, epoch: int = 0, ban_after: int = 0,
                 seed: int | None = None) -> None:
        from reshuffle.server.rules.base import check_positive_int, check_seed

        super().__init__(epoch, 1.0, ban_after)
        self.memory = check_positive_int(memory, "fldetector memory")
        self.window = check_positive_int(window, "fldetector window")
        self.seed = check_seed(seed)

    def arrays(self, d: int) -> dict[str, tuple[int, ...]]:
        return {"last": (d,), "at": (d,), "scores": (self.window,), "count": (1,)}

    def judge(self, U, h, idx, age, round, global_model=None, **context):
        from reshuffle.server.rules.base import round_rng

        if global_model is None:
            raise ConfigError("fldetector compares W_g across rounds and needs the global model")
        W = np.asarray(global_model, dtype=np.float64)
        g = h.shared
        S, Y = g.get("S", np.zeros((0, W.size))), g.get("Y", np.zeros((0, W.size)))
        n = len(U)
        known = age > 0
        dist = np.full(n, np.nan)
        if len(S) and known.any():
            steps = W - h.arrays["at"][idx[known]]
            pred = h.arrays["last"][idx[known]] - np.stack([lbfgs_product(S, Y, s) for s in steps])
            dist[known] = np.linalg.norm(pred - U[known], axis=1)
        scored = ~np.isnan(dist)
        total = dist[scored].sum()
        if scored.any() and total > 0:
            dist[scored] /= total
        sc, cnt = h.arrays["scores"][idx], h.arrays["count"][idx, 0]
        if scored.any():
            sc[scored] = np.concatenate([sc[scored][:, 1:], dist[scored][:, None]], axis=1)
            cnt = cnt + scored
        h.arrays["scores"][idx], h.arrays["count"][idx, 0] = sc, cnt
        filled = np.minimum(cnt, self.window)
        recent = np.arange(self.window)[None, :] >= (self.window - filled)[:, None]
        suspicion = np.divide((sc * recent).sum(axis=1), filled, out=np.full(n, np.nan), where=filled > 0)
        scored = ~np.isnan(suspicion)
        accepted = np.arange(n)
        if len(S) >= self.memory and scored.sum() >= 3:
            x = suspicion[scored]
            if gap_says_two(x, round_rng(self.seed, round, self.name)):
                bad = np.flatnonzero(scored)[two_means_1d(x)[0]]
                accepted = np.setdiff1d(accepted, bad)
        agg = U[accepted].mean(axis=0) if accepted.size else np.zeros(U.shape[1])
        # Remember this round: each row and the model it was trained from; the pair (Δw, −Δa) for B.
        if "w" in g:
            s, y = W - g["w"], -(agg - g["a"])
            if float(s @ s) > 0:
                g["S"], g["Y"] = np.vstack([S, s])[-self.memory:], np.vstack([Y, y])[-self.memory:]
        g["w"], g["a"] = W.copy(), agg.copy()
        h.arrays["last"][idx] = U
        h.arrays["at"][idx] = W
        w = np.zeros(n)
        w[accepted] = 1.0
        return Decision(agg, tuple(accepted.tolist()), w)
