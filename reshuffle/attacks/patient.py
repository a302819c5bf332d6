r"""Backdoors that spread their push over rounds, written against rules that remember.

Each carries the BadNets payload of :mod:`reshuffle.attacks.objective`, but
averaged over the rounds so far, :math:`\bar b_T = \frac1T \sum_{t \le T} b_t`
(b_t: the attackers' poisoned updates minus clean ones they train from W_g on
their own data, ``view.lab``): the same coordinates are pushed every round, so
bounded pushes add up. Each scores a declared set of candidates through the
documented hook (``view.decide``, at most ``max_calls`` rule calls a round) by
the aggregate's projection on :math:`\bar b_T`, and uploads the best. Where the
deployed rule keeps a history per pseudonym, ``view.decide`` runs it on the
attackers' copy of that history with every row's pseudonym
(``view.pseudonyms``): they replay the rule, as it stands, on each candidate.

* ``saturate``: all attackers upload alike, just above the median norm (the
  honest rows fix the median, so the attackers predict the clipping bound
  S). From the honest coordinate-wise median, payload coordinates are set,
  in the payload's sign, to the honest extreme (the order statistic at
  quantile q): the cheapest value that still fills the trimmed window.
  Coordinates are bought by gain per unit of norm, :math:`|\bar b_j|\,|e_j - m_j| / (e_j^2 - m_j^2)`,
  until the norm reaches (1 + ε)·S. Candidates: ε × q.
* ``saturate-cover``: ``saturate`` with a cover, against rules that compare
  histories (FoolsGold): attacker k adds δ times a deviation that is its own
  round after round, on the coordinates the payload leaves: its own clean
  update's deviation from the honest median (``own``: its history looks like
  an honest non-IID client's) or honest pseudonym k's (``honest``: its
  history then resembles that honest pseudonym's, which a similarity rule
  punishes too). The cover takes norm the payload no longer has: what
  diversifying costs. Candidates: ε × δ × cover.
* ``slow-drift``: each attacker uploads its own clean update (consistent with
  its own history, as an honest client's is) plus λ s :math:`\hat b` on the
  payload's support (s the median honest norm); λ from a declared grid.
  ``budget-edge`` is the same attack over a fine grid of λ: against a budget
  rule, the best λ spends the budget just under its bound.
* ``sleeper``: honest (its own clean update) for ``wake`` rounds, while it
  averages the payload, then ``saturate-cover``.
* ``concentration-edge`` (against an energy-concentration test) and
  ``label-mimic`` (against label-profile peers): ``slow-drift`` over a wide
  grid of supports, and with the output bias set to the honest median's.
"""

from __future__ import annotations

import itertools

import numpy as np

from reshuffle.attacks.adaptive import Probe
from reshuffle.attacks.base import RoundView, check_view, register_attack
from reshuffle.attacks.mechanism import _levels, _quantile_rows
from reshuffle.attacks.objective import BackdoorObjective, Family, support_of
from reshuffle.errors import ConfigError

COVERS = ("own", "honest")


class Patient(BackdoorObjective):
    """Shared: the payload averaged over rounds, the clean updates of the round, scoring candidates."""

    def __init__(self, target: int, poison_fraction: float, max_calls: int) -> None:
        super().__init__(target, poison_fraction, "projection", Family(), max_calls, "trained")
        self._sum: np.ndarray | None = None
        self._rounds = 0
        self._clean: np.ndarray | None = None

    def round_payload(self, view: RoundView, own: np.ndarray, H: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """This round's payload folded into the running mean b̄; sets the round's clean updates."""
        lab = view.lab
        if lab is not None and lab.attackers == own.shape[0]:
            seed = int(rng.integers(2**31))
            self._clean = np.stack([lab.train(*lab.data(k), seed=seed + k) for k in range(own.shape[0])])
            b = (own - self._clean).mean(axis=0)
            if not np.isfinite(b).all():
                b, self._clean = own.mean(axis=0) - H.mean(axis=0), None
        else:
            b, self._clean = own.mean(axis=0) - H.mean(axis=0), None
        if self._sum is None or self._sum.shape != b.shape:
            self._sum, self._rounds = np.zeros_like(b), 0
        self._sum += b
        self._rounds += 1
        return self._sum / self._rounds

    def clean(self, own: np.ndarray, H: np.ndarray) -> np.ndarray:
        """The attackers' clean updates of the round (the honest median for each where no lab trained them)."""
        return self._clean if self._clean is not None else np.tile(np.median(H, axis=0), (own.shape[0], 1))

    def candidates(self, view: RoundView, H: np.ndarray, own: np.ndarray, bbar: np.ndarray):
        """(label, (m, d) rows) pairs to score."""
        raise NotImplementedError

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        m = own.shape[0]
        bbar = self.round_payload(view, own, H, rng)
        unit = bbar / (np.linalg.norm(bbar) or 1.0)
        probe = Probe(view, H, m, rng, self.max_calls, self.name)
        best, best_score, best_at = None, -np.inf, None
        for label, rows in self.candidates(view, H, own, bbar):
            if probe.calls >= self.max_calls:
                break
            score = float(probe.decision(rows).aggregate @ unit)
            if score > best_score:
                best, best_score, best_at = rows, score, label
        self._choices = {"choice": best_at, "score": [best_score], "calls": probe.calls, "rounds": self._rounds}
        return best


def saturated_row(H: np.ndarray, bbar: np.ndarray, level: float, target: float, free: np.ndarray | None = None,
                  base: np.ndarray | None = None) -> np.ndarray:
    r"""The honest median (or ``base``) with payload coordinates at the honest q-extreme, bought by gain per norm.

    Coordinate j moves from :math:`m_j` to :math:`e_j` (the honest order statistic
    at quantile q in :math:`\bar b_j`'s sign) for gain :math:`|\bar b_j|\,|e_j - m_j|`
    at a cost of :math:`e_j^2 - m_j^2` in squared norm; coordinates are taken in
    decreasing gain per cost (free ones first) while the row's norm stays within
    ``target``. ``free`` (bool, d) limits the coordinates that may be bought.

    >>> H = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, -1.0], [2.0, 4.0, -3.0]])
    >>> saturated_row(H, np.array([1.0, 1.0, -0.1]), 1.0, 4.5).tolist()   # m = (1, 2, −1): x₀ → ‖·‖² 9; x₁ would be 21
    [2.0, 2.0, -1.0]
    """
    return _Saturation(H, bbar, level).row(target, free, base)


class _Saturation:
    """What :func:`saturated_row` computes from the honest rows, the payload and q alone (the sorted columns,
    the q-extremes), once for every row of a round that shares them."""

    def __init__(self, H: np.ndarray, bbar: np.ndarray, level: float, sorted_h: np.ndarray | None = None) -> None:
        self.s = np.sort(H, axis=0) if sorted_h is None else sorted_h
        self.up, self.gain_weight = bbar > 0, np.abs(bbar)
        d = H.shape[1]
        self.e = np.where(self.up, _quantile_rows(self.s, np.full(d, level)), _quantile_rows(self.s, np.full(d, 1 - level)))
        self.e2 = self.e * self.e
        self._median: np.ndarray | None = None

    def row(self, target: float, free: np.ndarray | None = None, base: np.ndarray | None = None) -> np.ndarray:
        if base is None:
            if self._median is None:
                self._median = _quantile_rows(self.s, np.full(self.s.shape[1], 0.5))
            m = self._median
        else:
            m = base
        e, up = self.e, self.up
        gain = self.gain_weight * np.where(up, e - m, m - e)
        cost = self.e2 - m * m
        ok = gain > 0
        if free is not None:
            ok &= free
        rank = np.where(cost > 0, gain / np.where(cost > 0, cost, 1.0), np.inf)
        order = np.flatnonzero(ok)[np.argsort(-rank[ok], kind="stable")]
        spent = float(m @ m) + np.cumsum(cost[order])
        take = order[spent <= target * target]
        row = m.copy()
        row[take] = e[take]
        return row


def median_bound(H: np.ndarray, m: int) -> float:
    """The median norm of the round when the m attackers' rows are longer than every honest row's."""
    norms = np.sort(np.linalg.norm(H, axis=1))
    return float(np.median(np.concatenate([norms, np.full(m, np.inf)])))


@register_attack("saturate")
class Saturate(Patient):
    r"""Coordinate-by-coordinate saturation of the trimmed window within the clip bound (module docstring).

    Candidates: ``margins`` ε (0.02, 0.1) above the predicted median norm ×
    ``levels`` q (1.0, 0.95, 0.85); ``max_calls`` (20) rule calls a round.
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, margins=(0.02, 0.1), levels=(1.0, 0.95, 0.85),
                 max_calls: int = 20) -> None:
        super().__init__(target, poison_fraction, max_calls)
        self.margins = _levels(self.name, "margins", margins, 0.0, 4.0)
        self.levels = _levels(self.name, "levels", levels, 0.5, 1.0)

    def candidates(self, view, H, own, bbar):
        S = median_bound(H, own.shape[0])
        s = np.sort(H, axis=0)
        sat = {q: _Saturation(H, bbar, q, s) for q in self.levels}
        for eps, q in itertools.product(self.margins, self.levels):
            row = sat[q].row((1 + eps) * S)
            yield {"margin": eps, "level": q}, np.tile(row, (own.shape[0], 1))


@register_attack("saturate-cover")
class SaturateCover(Saturate):
    r"""``saturate`` with a per-attacker cover (module docstring), against rules that compare histories.

    Candidates: ``margins`` × ``covers`` δ (0, 0.5, 1, 2) × ``kinds`` (own,
    honest); the payload may use the share ``support`` (0.05) of coordinates
    where :math:`|\bar b|` is largest, the cover the others.
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, margins=(0.02, 0.1), covers=(0.0, 0.5, 1.0, 2.0),
                 kinds=COVERS, level: float = 1.0, support: float = 0.05, max_calls: int = 20) -> None:
        super().__init__(target, poison_fraction, margins, (level,), max_calls)
        self.covers = _levels(self.name, "covers", covers, 0.0, 100.0, closed=True)
        if not (isinstance(kinds, (list, tuple)) and kinds and all(k in COVERS for k in kinds)):
            raise ConfigError(f"{self.name} kinds must be a non-empty list of {', '.join(COVERS)}, got {kinds!r}")
        self.kinds = tuple(kinds)
        self.support = _levels(self.name, "support", [support], 0.0, 1.0)[0]
        per_margin = sum(1 if c == 0 else len(self.kinds) for c in self.covers)  # no cover: one candidate
        if len(self.margins) * per_margin > self.max_calls:
            raise ConfigError(f"{self.name}: {len(self.margins)} margins × {per_margin} covers and kinds exceed "
                              f"max_calls={self.max_calls}")

    def cover_rows(self, view: RoundView, H: np.ndarray, own: np.ndarray, kind: str) -> np.ndarray:
        """(m, d) deviations from the honest median, one per attacker, each its own from round to round."""
        med = np.median(H, axis=0)
        m = own.shape[0]
        if kind == "own" or view.pseudonyms is None:
            return self.clean(own, H) - med
        # Honest pseudonym k (in the order of their labels, so the same one every round it is sampled).
        labels = list(view.pseudonyms[1])
        order = sorted(range(len(labels)), key=lambda i: str(labels[i]))
        return np.stack([H[order[k % len(order)]] - med for k in range(m)])

    def candidates(self, view, H, own, bbar):
        m = own.shape[0]
        S = median_bound(H, m)
        payload = support_of(bbar, self.support)
        med = np.median(H, axis=0)
        sat = _Saturation(H, bbar, self.levels[0])
        covers: dict[str, np.ndarray] = {}  # each kind's cover rows, the same for every candidate of the round
        for kind, eps, delta in itertools.product(self.kinds, self.margins, self.covers):
            if delta == 0 and kind != self.kinds[0]:
                continue  # no cover: the same rows whatever its kind
            if delta > 0 and kind not in covers:
                covers[kind] = self.cover_rows(view, H, own, kind)
            C = covers[kind] if delta > 0 else np.zeros((m, H.shape[1]))
            rows = []
            for k in range(m):
                base = med + delta * np.where(payload, 0.0, C[k])
                rows.append(sat.row((1 + eps) * S, free=payload, base=base))
            R = np.stack(rows)
            # Rows longer than the bound (a large cover) are shortened to it: the payload pays for the cover.
            nr = np.linalg.norm(R, axis=1)
            R *= np.minimum(1.0, (1 + eps) * S / np.where(nr > 0, nr, 1.0))[:, None]
            yield {"cover": kind, "delta": delta, "margin": eps}, R


@register_attack("slow-drift")
class SlowDrift(Patient):
    r"""Each attacker's own clean update plus a small, steady push along the averaged payload (module docstring).

    Rows :math:`c_k + \lambda s \hat b_M`, with c_k attacker k's clean update,
    s the median honest norm, :math:`\hat b_M` the unit averaged payload on its
    ``supports`` share of largest coordinates; candidates ``scales`` λ ×
    ``supports``, one rule call each (``max_calls``, 20).
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, scales=(1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0),
                 supports=(1.0, 0.05), max_calls: int = 20) -> None:
        super().__init__(target, poison_fraction, max_calls)
        self.scales = _levels(self.name, "scales", scales, 0.0, 64.0)
        self.supports = _levels(self.name, "supports", supports, 0.0, 1.0)
        if len(self.scales) * len(self.supports) > self.max_calls:
            raise ConfigError(f"{self.name}: {len(self.scales)} scales × {len(self.supports)} supports exceed "
                              f"max_calls={self.max_calls}")

    def candidates(self, view, H, own, bbar):
        c = self.clean(own, H)
        s = float(np.median(np.linalg.norm(H, axis=1)))
        for support, lam in itertools.product(self.supports, self.scales):
            p = bbar * support_of(bbar, support) if support < 1 else bbar
            p = p / (np.linalg.norm(p) or 1.0)
            yield {"scale": lam, "support": support}, c + lam * s * p


@register_attack("kin-spread")
class KinSpread(SlowDrift):
    r"""``slow-drift`` against a rule that weighs alike histories as one (``kinship``): attacker k adds
    :math:`\sigma s n_k`, a direction of its own fixed for the whole run (orthogonal to the payload), so that
    the colluders' histories agree less; the spread σ costs push, since clipping bounds the row. Candidates
    ``scales`` λ × ``spreads`` σ, one rule call each."""

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, scales=(1 / 4, 1 / 2, 1.0),
                 spreads=(0.0, 0.5, 1.0, 2.0), max_calls: int = 20) -> None:
        super().__init__(target, poison_fraction, scales, (1.0,), max_calls)
        self.spreads = _levels(self.name, "spreads", spreads, 0.0, 16.0, closed=True)
        if len(self.scales) * len(self.spreads) > self.max_calls:
            raise ConfigError(f"{self.name}: {len(self.scales)} scales × {len(self.spreads)} spreads exceed "
                              f"max_calls={self.max_calls}")
        self._own: np.ndarray | None = None

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, _ = check_view(view, self)
        if self._own is None or self._own.shape != own.shape:
            # Drawn once: a history that must look like its own pseudonym's needs the same direction every round.
            self._own = rng.standard_normal(own.shape)
        return super().craft(view, rng)

    def candidates(self, view, H, own, bbar):
        c = self.clean(own, H)
        s = float(np.median(np.linalg.norm(H, axis=1)))
        p = bbar / (np.linalg.norm(bbar) or 1.0)
        n = self._own - np.outer(self._own @ p, p)
        n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-12)
        for sigma, lam in itertools.product(self.spreads, self.scales):
            yield {"scale": lam, "spread": sigma}, c + lam * s * p + sigma * s * n


@register_attack("budget-edge")
class BudgetEdge(SlowDrift):
    """``slow-drift`` over a fine geometric grid of λ (19 values from 1/64 to 4, full support): against a budget,
    the best λ spends it just under the bound."""

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, scales=tuple(2.0 ** (k / 2) for k in range(-12, 5)),
                 supports=(1.0,), max_calls: int = 20) -> None:
        super().__init__(target, poison_fraction, scales, supports, max_calls)


@register_attack("sleeper")
class Sleeper(SaturateCover):
    r"""Honest for ``wake`` rounds (each attacker uploads its own clean update, while it averages the payload),
    then ``saturate-cover`` with its history all honest so far."""

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, wake: int = 10, margins=(0.02, 0.1),
                 covers=(0.0, 0.5, 1.0, 2.0), kinds=COVERS, level: float = 1.0, support: float = 0.05,
                 max_calls: int = 20) -> None:
        super().__init__(target, poison_fraction, margins, covers, kinds, level, support, max_calls)
        if isinstance(wake, bool) or not isinstance(wake, int) or wake < 0:
            raise ConfigError(f"sleeper wake must be a non-negative int of rounds, got {wake!r}")
        self.wake = wake

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        if view.round > self.wake:
            return super().craft(view, rng)
        own, H = check_view(view, self)
        self.round_payload(view, own, H, rng)
        self._choices = {"choice": "asleep", "rounds": self._rounds}
        return self.clean(own, H)


@register_attack("concentration-edge")
class ConcentrationEdge(SlowDrift):
    r"""``slow-drift`` against an energy-concentration test (``concentration``): the payload spread over a wide
    grid of supports (1 to 0.03 of its coordinates) on top of each attacker's own clean update, so some
    candidate's deviation is as spread as an honest one; ``scales`` × ``supports`` rule calls (16)."""

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, scales=(0.25, 0.5, 1.0, 2.0),
                 supports=(1.0, 0.3, 0.1, 0.03), max_calls: int = 20) -> None:
        super().__init__(target, poison_fraction, scales, supports, max_calls)


@register_attack("label-mimic")
class LabelMimic(SlowDrift):
    r"""``slow-drift`` against label-profile peers (``label-groups``): every candidate row's last ``classes``
    entries (the output bias) are the honest coordinate-wise median's, so the attackers' label profile is
    the typical client's and their peers are the most common honest rows; the payload rides on the rest."""

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, classes: int = 10,
                 scales=(1 / 8, 1 / 4, 1 / 2, 1.0, 2.0), supports=(1.0, 0.05), max_calls: int = 20) -> None:
        super().__init__(target, poison_fraction, scales, supports, max_calls)
        if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
            raise ConfigError(f"label-mimic classes must be an int >= 2, got {classes!r}")
        self.classes = classes

    def candidates(self, view, H, own, bbar):
        med = np.median(H[:, -self.classes:], axis=0)
        for label, rows in super().candidates(view, H, own, bbar):
            rows = np.array(rows, dtype=np.float64)
            rows[:, -self.classes:] = med
            yield label, rows
