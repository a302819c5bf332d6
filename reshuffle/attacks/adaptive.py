"""Rule-aware (adaptive) attacks: colluders who run the deployed rule on their copy of the round.

Threat model: omniscient colluders who know the honest updates of the round,
the deployed rule and its whole configuration (pre-aggregators, composition,
seed). Before they upload they may call ``view.decide`` (see
:class:`~reshuffle.attacks.base.RoundView`) on [honest rows + their rows], with
their rows at positions drawn once per round from ``rng`` (the rule sees
anonymous rows), and keep the strongest rows it still accepts. Each attack
bounds its calls by ``max_calls`` (default at most 16) and is deterministic for
a given ``rng`` and rule.

* ``agr-tailored``: μ + γp, the largest γ found by Shejwalkar & Houmansadr's
  halving search for which the rule accepts all m rows (NDSS 2021);
* ``sign-match``: ALIE's μ − zσ with each row's sign statistics set to those of
  an honest row, and the largest z accepted;
* ``constrain-scale``: BadNets training, then each attacker's update boosted
  by the largest factor the rule accepts (Bagdasaryan et al., AISTATS 2020);
* ``mimic-spread``: ``mimic`` with its own noise on each copy, at the level
  whose aggregate leans furthest towards the copied row (against rules that
  count near-copies once, as ``cone-clip`` does).

A plug-in becomes rule-aware by setting ``rule_aware = True`` and implementing
``craft(view, rng)`` instead of ``__call__``::

    import numpy as np
    from reshuffle.attacks import Attack, register_attack

    @register_attack("reverse-mean")
    class ReverseMean(Attack):
        '''Upload -s·mean(honest) for the largest s in (4, 2, 1, 0.5) the rule accepts.'''
        rule_aware = True
        omniscient = True
        uses_own_training = False

        def craft(self, view, rng):
            h, m = view.honest.shape[0], view.own.shape[0]
            mu = view.honest.mean(axis=0)
            for s in (4.0, 2.0, 1.0, 0.5):  # at most four calls to the rule
                bad = np.tile(-s * mu, (m, 1))
                accepted = set(view.decide(np.vstack([view.honest, bad])).accepted)
                if accepted >= set(range(h, h + m)):
                    return bad
            return np.tile(mu, (m, 1))
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from reshuffle.attacks.backdoor import ModelReplacement
from reshuffle.attacks.base import Attack, RoundView, check_view, register_attack
from reshuffle.attacks.mimic import Mimic
from reshuffle.attacks.omniscient import ALIE, _PERTURBATIONS
from reshuffle.errors import ConfigError
from reshuffle.server.rules.signguard import sign_statistics

#: The most ``decide`` calls any attack here may be configured to make in one round.
MAX_CALLS = 64


def _positive(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or not v > 0:
        raise ConfigError(f"{name} must be a positive number, got {v!r}")
    return float(v)


def _calls(name: str, v: object, least: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not least <= v <= MAX_CALLS:
        raise ConfigError(f"{name} max_calls must be an int in [{least}, {MAX_CALLS}], got {v!r}")
    return v


def _tolerance(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
        raise ConfigError(f"{name} tol must be a number in (0, 1), got {v!r}")
    return float(v)


class Probe:
    """The attackers' copy of one round: the honest rows, m malicious rows at fixed positions, a call budget.

    Positions are a uniform permutation of the n = h + m rows drawn from ``rng``
    once, so every call places row k at the same place. ``probe(M)`` runs the
    rule on the round with M (m, d) as the malicious rows and returns which of
    them it accepted; a call beyond ``budget`` raises ConfigError.
    """

    def __init__(self, view: RoundView, honest: np.ndarray, m: int, rng: np.random.Generator, budget: int,
                 name: str) -> None:
        h, d = honest.shape
        perm = rng.permutation(h + m)
        self._U = np.empty((h + m, d))
        self._U[perm[:h]] = honest
        self.rows = perm[h:]
        self._decide = view.decide
        self._labels = None
        if view.pseudonyms is not None:
            own, others = view.pseudonyms
            if len(own) != m or len(others) != h:
                raise ConfigError(f"{name}: {len(own)} + {len(others)} pseudonyms for {m} + {h} rows")
            labels: list = [None] * (h + m)
            for at, p in zip(perm, [*others, *own]):
                labels[at] = p
            self._labels = labels
        self.budget = budget
        self.calls = 0
        self._name = name

    def decision(self, M: np.ndarray):
        """The rule's Decision on the round with M as the malicious rows (one call)."""
        if self.calls >= self.budget:
            raise ConfigError(f"{self._name}: more than {self.budget} calls to the rule in one round")
        self.calls += 1
        self._U[self.rows] = M
        if self._labels is None:
            decision = self._decide(self._U.copy())
        else:
            decision = self._decide(self._U.copy(), pseudonyms=list(self._labels))
        if getattr(decision, "accepted", None) is None:
            raise ConfigError(f"{self._name}: view.decide must return a Decision, got {type(decision).__name__}")
        return decision

    def __call__(self, M: np.ndarray) -> np.ndarray:
        accepted = self.decision(M).accepted
        ok = np.zeros(self._U.shape[0], dtype=bool)
        ok[np.asarray(accepted, dtype=np.int64)] = True
        return ok[self.rows]


def halving_search(accepts: Callable[[np.ndarray], np.ndarray], hi: np.ndarray, calls: int,
                   tol: float) -> tuple[np.ndarray, np.ndarray]:
    r"""The largest accepted value in (0, hi_k] for each of k entries, all probed by one call each step.

    Shejwalkar & Houmansadr's search, started at the cap: ``accepts(x)`` (one
    rule call) says for each entry whether value :math:`x_k` is accepted. Every
    entry first tries :math:`hi_k`; an accepted entry keeps it, a rejected
    one goes on at :math:`hi_k/2` with step :math:`hi_k/4`, moving up by the
    step after an acceptance and down after a rejection, the step halving each
    call, until the step falls below ``tol``·hi_k or ``calls`` are spent.
    Entries that are done keep their best value in later calls.

    Returns (best, smallest): per entry the largest accepted value (nan when
    none was) and the smallest value tried.

    >>> best, smallest = halving_search(lambda x: x <= 3.0, np.array([8.0]), calls=6, tol=1e-3)
    >>> best.tolist(), smallest.tolist()   # tried 8, 4, 2, 3, 3.5, 3.25
    ([3.0], [2.0])
    """
    hi = np.asarray(hi, dtype=np.float64)
    x = hi.copy()
    best = np.full(hi.shape, np.nan)
    smallest = hi.copy()
    step = hi / 2
    active = np.ones(hi.shape, dtype=bool)
    for _ in range(calls):  # one rule call per step; each step is vectorized over the k entries
        smallest = np.minimum(smallest, x)
        ok = np.asarray(accepts(x), dtype=bool)
        took = ok & active
        best = np.where(took & ~(best >= x), x, best)
        active &= ~(took & (x >= hi)) & (step >= tol * hi)
        x = np.where(active, x + np.where(ok, step, -step), np.where(np.isnan(best), x, best))
        step = step / 2
        if not active.any():
            break
    return best, smallest


def match_signs(r: np.ndarray, target: tuple[int, int, int]) -> np.ndarray:
    """A copy of r with exactly ``target`` = (positive, zero, negative) coordinate counts.

    Coordinates change where |r| is smallest, so most of r is kept: missing
    zeros come from the smallest nonzero entries; surplus zeros (lowest indices
    first) take the smallest nonzero magnitude of r; then the smallest entries of
    the surplus sign are mirrored, r_j → −r_j, which keeps their magnitude.

    >>> match_signs(np.array([-3.0, -1.0, 2.0, -0.5]), (2, 1, 1)).tolist()
    [-3.0, 1.0, 2.0, 0.0]
    """
    r = np.asarray(r, dtype=np.float64)
    pos_t, zero_t, neg_t = (int(c) for c in target)
    if min(pos_t, zero_t, neg_t) < 0 or pos_t + zero_t + neg_t != r.size:
        raise ConfigError(f"sign counts {target} do not split {r.size} coordinates")
    out = r.copy()
    zeros = np.flatnonzero(out == 0)
    if zeros.size < zero_t:
        nz = np.flatnonzero(out != 0)
        out[nz[np.argsort(np.abs(out[nz]), kind="stable")[: zero_t - zeros.size]]] = 0.0
    elif zeros.size > zero_t:
        mags = np.abs(out[out != 0])
        out[zeros[: zeros.size - zero_t]] = -(mags.min() if mags.size else 1e-12)
    pos, neg = np.flatnonzero(out > 0), np.flatnonzero(out < 0)
    surplus, k = (neg, pos_t - pos.size) if pos.size < pos_t else (pos, pos.size - pos_t)
    pick = surplus[np.argsort(np.abs(out[surplus]), kind="stable")[:k]]
    out[pick] = -out[pick]
    return out


class RuleAware(Attack):
    """Shared by the rule-aware attacks: they need the round's :class:`RoundView`, so plain calls are refused."""

    rule_aware = True
    omniscient = True

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        raise ConfigError(f"{self.name} is rule-aware: it needs the deployed rule, through craft(RoundView, rng)")


def _spread(H: np.ndarray) -> float:
    """‖σ‖, the honest coordinate-wise standard deviation's norm (1 when the honest rows coincide)."""
    s = float(np.linalg.norm(H.std(axis=0)))
    return s if s > 0 else 1.0


def perturbation(H: np.ndarray, kind: str) -> np.ndarray:
    r"""Shejwalkar & Houmansadr's perturbation, scaled to norm ‖σ‖ (``std`` is −σ itself).

    ``std``: −σ; ``unit-vec``: −μ/‖μ‖; ``sign``: −sign(μ); σ and μ the honest
    coordinate-wise standard deviation and mean. A zero direction stays zero.
    """
    mu = H.mean(axis=0)
    if kind == "std":
        return -H.std(axis=0)
    p = -mu if kind == "unit-vec" else -np.sign(mu)
    norm = float(np.linalg.norm(p))
    return p * (_spread(H) / norm) if norm > 0 else p


@register_attack("agr-tailored")
class AGRTailored(RuleAware):
    r"""AGR-tailored attack (Shejwalkar & Houmansadr, NDSS 2021): all m rows are :math:`\mu + \gamma p`.

    p is the ``direction`` (``std``: −σ; ``unit-vec``: −μ/‖μ‖; ``sign``:
    −sign(μ)), scaled to norm ‖σ‖ so that γ counts honest standard deviations
    for every direction (for ``std`` it is the paper's p, and ALIE is γ = z).
    γ is the largest value in (0, ``gamma_max``] for which the deployed rule
    accepts all m rows, found by :func:`halving_search` in at most
    ``max_calls`` calls to the rule (relative resolution ``tol``). A rule that
    accepts every row (FedAvg, median, trimmed mean) gets γ = ``gamma_max``
    after one call. When no γ is accepted the rows use the smallest γ tried
    (close to μ).
    """

    uses_own_training = False

    def __init__(self, direction: str = "std", gamma_max: float = 20.0, max_calls: int = 12,
                 tol: float = 1e-3) -> None:
        if direction not in _PERTURBATIONS:
            raise ConfigError(f"agr-tailored direction must be one of {', '.join(_PERTURBATIONS)}, got {direction!r}")
        self.direction = direction
        self.gamma_max = _positive("agr-tailored gamma_max", gamma_max)
        self.max_calls = _calls("agr-tailored", max_calls)
        self.tol = _tolerance("agr-tailored", tol)
        self.last_gamma: float | None = None
        self._calls_used = 0

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        m = own.shape[0]
        mu, p = H.mean(axis=0), perturbation(H, self.direction)
        probe = Probe(view, H, m, rng, self.max_calls, self.name)
        best, smallest = halving_search(lambda g: np.array([probe(np.tile(mu + g[0] * p, (m, 1))).all()]),
                                        np.array([self.gamma_max]), self.max_calls, self.tol)
        self.last_gamma = float(smallest[0] if np.isnan(best[0]) else best[0])
        self._calls_used = probe.calls
        return np.tile(mu + self.last_gamma * p, (m, 1))

    def choices(self) -> dict | None:
        return None if self.last_gamma is None else {"gamma": self.last_gamma, "calls": self._calls_used}


def sign_targets(H: np.ndarray, m: int) -> np.ndarray:
    """(m, 3) (positive, zero, negative) counts: attacker k takes those of the k-th most central honest row.

    Central: nearest to the coordinate-wise median of the honest rows' sign shares
    (ties to the lower index); with m > h the targets repeat.
    """
    F = sign_statistics(H)
    order = np.argsort(np.linalg.norm(F - np.median(F, axis=0), axis=1), kind="stable")
    rows = H[order[np.arange(m) % H.shape[0]]]
    return np.stack([(rows > 0).sum(axis=1), (rows == 0).sum(axis=1), (rows < 0).sum(axis=1)], axis=1)


@register_attack("sign-match")
class SignMatch(RuleAware):
    r"""ALIE with honest sign statistics: row k is ALIE's :math:`\mu - z\sigma` after :func:`match_signs`.

    SignGuard and ``signstat`` test each row's shares of positive, zero and
    negative coordinates; ALIE's shift makes most coordinates negative. Row k
    gets exactly the counts of the k-th most central honest row
    (:func:`sign_targets`) by mirroring the smallest entries of the surplus sign,
    so it keeps its norm and most of the shift. z is the largest value in
    (0, ``z_max``] for which the rule accepts all m rows (:func:`halving_search`,
    at most ``max_calls`` calls, relative resolution ``tol``); with none
    accepted, the smallest z tried.
    """

    uses_own_training = False

    def __init__(self, z_max: float = 20.0, max_calls: int = 12, tol: float = 1e-3) -> None:
        self.z_max = _positive("sign-match z_max", z_max)
        self.max_calls = _calls("sign-match", max_calls)
        self.tol = _tolerance("sign-match", tol)
        self.last_z: float | None = None
        self._calls_used = 0

    @staticmethod
    def rows(H: np.ndarray, z: float, targets: np.ndarray) -> np.ndarray:
        """The (m, d) rows for scale z: ALIE's row, its signs matched to each target."""
        alie = ALIE(z=z)(H, 1, None)[0]
        return np.stack([match_signs(alie, tuple(t)) for t in targets])  # one row per attacker

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        targets = sign_targets(H, own.shape[0])
        probe = Probe(view, H, own.shape[0], rng, self.max_calls, self.name)
        best, smallest = halving_search(lambda z: np.array([probe(self.rows(H, z[0], targets)).all()]),
                                        np.array([self.z_max]), self.max_calls, self.tol)
        self.last_z = float(smallest[0] if np.isnan(best[0]) else best[0])
        self._calls_used = probe.calls
        return self.rows(H, self.last_z, targets)

    def choices(self) -> dict | None:
        return None if self.last_z is None else {"z": self.last_z, "calls": self._calls_used}


@register_attack("constrain-scale")
class ConstrainScale(RuleAware, ModelReplacement):
    r"""Constrain-and-scale (Bagdasaryan et al., AISTATS 2020) against the deployed rule.

    Attackers train on BadNets-poisoned data (``target``, ``poison_fraction``,
    as :class:`~reshuffle.attacks.backdoor.BadNets`); attacker i uploads
    :math:`s_i x_i`, :math:`x_i` its own update. Each :math:`s_i` is the
    largest value in (0, hi_i] the rule accepts, hi_i = ``scale_max`` (default
    model replacement's n/η, n the number of clients) and, with
    ``norm_quantile`` = q, at most the factor that brings :math:`\lVert s_i x_i \rVert`
    to the q-quantile of the honest norms (the constraint). All rows are
    searched together by :func:`halving_search`, each on its own scale (a row
    accepted at no scale tried falls back to min(1, hi_i), its unboosted
    update); then the chosen scales are checked jointly, and rows rejected
    together are halved and checked again. ``max_calls`` bounds the rule calls (a quarter of
    them, at least one, is kept for the joint checks). ``success`` is the
    backdoor success.
    """

    uses_own_training = True

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, eta: float = 1.0,
                 scale_max: float | None = None, norm_quantile: float | None = None, max_calls: int = 16,
                 tol: float = 1e-3) -> None:
        super().__init__(target, poison_fraction, eta)
        self.scale_max = None if scale_max is None else _positive("constrain-scale scale_max", scale_max)
        if norm_quantile is not None and (isinstance(norm_quantile, bool) or not isinstance(norm_quantile, (int, float))
                                          or not 0 < norm_quantile <= 1):
            raise ConfigError(f"constrain-scale norm_quantile must lie in (0, 1] or be None, got {norm_quantile!r}")
        self.norm_quantile = None if norm_quantile is None else float(norm_quantile)
        self.max_calls = _calls("constrain-scale", max_calls, least=2)
        self.tol = _tolerance("constrain-scale", tol)
        self.last_scales: np.ndarray | None = None
        self._calls_used = 0

    def caps(self, own: np.ndarray, H: np.ndarray) -> np.ndarray:
        """hi_i per attacker: ``scale_max`` (or n/η), lowered by the norm constraint when set."""
        n = self._n if self._n is not None else H.shape[0] + own.shape[0]
        hi = np.full(own.shape[0], self.scale_max if self.scale_max is not None else n / self.eta)
        if self.norm_quantile is not None:
            bound = float(np.quantile(np.linalg.norm(H, axis=1), self.norm_quantile))
            norms = np.linalg.norm(own, axis=1)
            hi = np.minimum(hi, np.divide(bound, norms, out=hi.copy(), where=norms > 0))
        return np.maximum(hi, np.finfo(np.float64).tiny)

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        probe = Probe(view, H, own.shape[0], rng, self.max_calls, self.name)
        checks = max(1, self.max_calls // 4)
        hi = self.caps(own, H)
        best, _ = halving_search(lambda s: probe(s[:, None] * own), hi, self.max_calls - checks, self.tol)
        # A row accepted at no scale tried falls back to its unboosted update (within the constraint).
        s = np.where(np.isnan(best), np.minimum(hi, 1.0), best)
        for k in range(checks):  # joint checks: rows rejected together shrink; s is always the last checked
            ok = probe(s[:, None] * own)
            if ok.all() or k == checks - 1:
                break
            s = np.where(ok, s, s / 2)
        self.last_scales = s
        self._calls_used = probe.calls
        return s[:, None] * own

    def choices(self) -> dict | None:
        return None if self.last_scales is None else {"scales": self.last_scales.tolist(), "calls": self._calls_used}


@register_attack("mimic-spread")
class MimicSpread(RuleAware):
    r"""``mimic`` against rules that count near-copies once: every copy carries its own noise.

    Row k is :math:`u^\star + \rho \lVert u^\star\rVert z_k`, :math:`u^\star` the
    honest row ``mimic`` copies and :math:`z_k` independent uniform unit
    directions from ``rng``. ρ is the entry of ``levels`` (one rule call each)
    whose aggregate, on the attackers' copy of the round, leans furthest
    towards :math:`u^\star` (largest :math:`\langle \mathrm{aggregate}, u^\star\rangle`).
    ρ = 0 is ``mimic`` itself, so the attack picks exact copies wherever they
    lean further. ``last_rho`` is the level chosen in the last round.
    """

    uses_own_training = False

    def __init__(self, levels: tuple[float, ...] = (0.0, 0.125, 0.25, 0.5, 0.75, 1.0, 1.5)) -> None:
        ok = (isinstance(levels, (list, tuple)) and 1 <= len(levels) <= MAX_CALLS
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) and x >= 0
                      for x in levels))
        if not ok:
            raise ConfigError(f"mimic-spread levels must be 1 to {MAX_CALLS} finite numbers >= 0, got {levels!r}")
        self.levels = tuple(float(x) for x in levels)
        self.last_rho: float | None = None

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        m = own.shape[0]
        target = H[Mimic().choose(H)]
        size = float(np.linalg.norm(target))
        Z = rng.standard_normal((m, H.shape[1]))
        Z /= np.linalg.norm(Z, axis=1, keepdims=True)
        probe = Probe(view, H, m, rng, len(self.levels), self.name)
        best, best_lean = None, -np.inf
        for rho in self.levels:
            rows = target + rho * size * Z
            lean = float(np.asarray(probe.decision(rows).aggregate) @ target)
            if best is None or lean > best_lean:
                best, best_lean, self.last_rho = rows, lean, rho
        return best

    def choices(self) -> dict | None:
        return None if self.last_rho is None else {"rho": self.last_rho, "calls": len(self.levels)}
