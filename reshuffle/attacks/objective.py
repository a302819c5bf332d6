r"""Objective-driven attacks: the rows that move the aggregate furthest, not the rows the rule accepts.

The acceptance-seeking attacks (``agr-tailored``, ``constrain-scale``) look for
the largest scale the deployed rule still *accepts*. Against a rule that
weights, clips or trusts its rows, acceptance is not what the attackers want:
they want the aggregate to move their way. The attacks here run the deployed
rule on their copy of the round (``view.decide``, at most ``max_calls`` calls
per round, 20 by default) and keep the candidate whose aggregate scores best
on their objective:

* ``projection``: :math:`\langle a, \hat b\rangle`, the aggregate a's projection
  on the payload direction (a backdoor's direction);
* ``deviation``: :math:`\langle a - \mu_H, \hat p\rangle`, the aggregate's
  deviation from the honest mean along the chosen direction p (untargeted);
* ``loss``: the cross-entropy of W_g + a on the attackers' own clean data
  (untargeted; needs ``view.lab``);
* ``success``: the backdoor success of W_g + a on the attackers' own
  triggered data, ties broken by the projection (needs ``view.lab``).

Candidates come from one declared parametric family (:class:`Family`).
Attacker k uploads

.. math:: r_k = \mathrm{base}_k + \lambda_k\, s\, \hat p_M,

with s the median honest norm, :math:`\hat p_M` the unit payload restricted to
a coordinate mask M, and then, optionally, its norm set to a quantile of the
honest norms. The family's axes:

* ``scale`` λ, searched multiplicatively in [``scale_min``, ``scale_max``];
* ``placement`` of the base: ``mean`` (the honest mean, all rows alike),
  ``lean`` (attacker k leans on the k-th most central honest row, so each row
  sits inside the rule's majority cluster beside a different honest row) or
  ``coord`` (coordinate by coordinate: the honest mean plus λ honest standard
  deviations σ_j in the payload's sign, as ALIE shifts; against coordinate-wise
  rules, which rank each coordinate's values, this is the most a row can move a
  coordinate while it stays inside the trimmed range);
* ``roles`` of the attackers: ``same`` (every attacker carries λ); ``chain``
  (all lean on one honest row, attacker k carries λ(k+1)/m: a chain of rows
  from that honest row to the payload, which single-linkage clustering links
  link by link); ``lift`` (half the attackers upload their base at the honest
  maximum norm, no payload, to raise norm-based bounds such as a median-norm
  clip; the others carry λ);
* ``norm``: None (as built) or the quantile q of the honest norms the rows are
  scaled to;
* ``mask``: the share of coordinates, those where the honest mean moves most,
  that the payload leaves out (Neurotoxin, Zhang et al., ICML 2022: the
  backdoor then lives where honest updates rarely write, and lasts longer);
* ``support``: the share of coordinates, those where the payload is largest,
  that it keeps (1: all). A sparse payload spends a row's norm where it
  matters: against a norm bound it carries more per coordinate, against a
  coordinate-wise rule it moves the coordinates that carry the backdoor.

The search is a pattern search from ``start``: each step tries λ times and
divided by the step factor and every other value of each discrete axis, moves
to the best candidate, and halves the step (in log λ) when nothing improves,
until the calls are spent. Each candidate costs one rule call (candidates
already scored are not scored again). The choices of the last round are in
``choices()`` (metrics.json's ``attack_choices``).

The payload of a backdoor is :math:`b = \frac1m \sum_k (x_k - c_k)`, x_k
attacker k's update on its poisoned data and c_k a clean update it trains from
W_g on its own clean data with the federation's hyper-parameters
(``view.lab.train``): the difference isolates the backdoor from the attackers'
own non-IID drift. With no lab, :math:`c_k` is the honest mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from reshuffle.attacks.adaptive import MAX_CALLS, Probe, RuleAware, _calls, _positive, perturbation
from reshuffle.attacks.backdoor import BadNets
from reshuffle.attacks.base import RoundView, check_view, register_attack
from reshuffle.attacks.omniscient import _PERTURBATIONS
from reshuffle.errors import ConfigError

PLACEMENTS = ("lean", "mean", "coord")
ROLES = ("same", "chain", "lift")
OBJECTIVES = ("projection", "deviation", "loss", "success")


@dataclass(frozen=True)
class Candidate:
    """One member of the family: where the rows sit, how far they carry the payload, and who does what."""

    scale: float
    placement: str = "lean"
    roles: str = "same"
    norm: float | None = None
    mask: float = 0.0
    support: float = 1.0

    def as_dict(self) -> dict:
        return {"scale": self.scale, "placement": self.placement, "roles": self.roles, "norm": self.norm,
                "mask": self.mask, "support": self.support}


@dataclass(frozen=True)
class Family:
    """The declared search space: the values each axis may take (``start`` is where the search begins)."""

    placements: tuple[str, ...] = PLACEMENTS
    roles: tuple[str, ...] = ("same", "chain")
    norms: tuple[float | None, ...] = (None, 0.5, 0.9)
    masks: tuple[float, ...] = (0.0,)
    supports: tuple[float, ...] = (1.0,)
    scale_min: float = 1 / 64
    scale_max: float = 64.0
    start: Candidate = field(default_factory=lambda: Candidate(1.0))

    def __post_init__(self) -> None:
        def check(name, values, ok):
            if not isinstance(values, tuple) or not values or not all(ok(v) for v in values):
                raise ConfigError(f"{name} must be a non-empty tuple of allowed values, got {values!r}")

        check("placements", self.placements, lambda v: v in PLACEMENTS)
        check("roles", self.roles, lambda v: v in ROLES)
        check("norms", self.norms, lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                             and 0 < v <= 1))
        check("masks", self.masks, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1)
        check("supports", self.supports, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
              and 0 < v <= 1)
        if not 0 < self.scale_min <= self.start.scale <= self.scale_max < math.inf:
            raise ConfigError(f"scales must satisfy 0 < scale_min <= start <= scale_max < inf, got "
                              f"{self.scale_min}, {self.start.scale}, {self.scale_max}")
        s = self.start
        if s.placement not in self.placements or s.roles not in self.roles or s.norm not in self.norms \
                or s.mask not in self.masks or s.support not in self.supports:
            raise ConfigError(f"the search's start {s} is not in the family")

    def neighbours(self, c: Candidate, step: float) -> list[Candidate]:
        """λ times and divided by ``step`` (within bounds), then every other value of each discrete axis."""
        out = [replace(c, scale=min(c.scale * step, self.scale_max)),
               replace(c, scale=max(c.scale / step, self.scale_min))]
        out += [replace(c, placement=v) for v in self.placements if v != c.placement]
        out += [replace(c, roles=v) for v in self.roles if v != c.roles]
        out += [replace(c, norm=v) for v in self.norms if v != c.norm]
        out += [replace(c, mask=v) for v in self.masks if v != c.mask]
        out += [replace(c, support=v) for v in self.supports if v != c.support]
        return [x for x in out if x != c]


def pattern_search(score: Callable[[Candidate], tuple], family: Family, calls: int,
                   step: float = 4.0, min_step: float = 1.05) -> tuple[Candidate, tuple, int]:
    """The best candidate found in at most ``calls`` scores, its score and the number of scores spent.

    From ``family.start``, try every neighbour (:meth:`Family.neighbours`), move
    to the best one that beats the current candidate, and take the square root
    of the λ step when none does; stop when the calls are spent or the step
    falls below ``min_step``. Scores are compared as tuples (larger is better).

    >>> fam = Family(placements=("lean",), roles=("same",), norms=(None,))
    >>> best, _, used = pattern_search(lambda c: (-abs(math.log(c.scale / 3.0)),), fam, calls=12)
    >>> round(best.scale, 2), used
    (3.08, 12)
    """
    seen: dict[Candidate, tuple] = {}

    def get(c: Candidate) -> tuple | None:
        if c not in seen:
            if len(seen) >= calls:
                return None
            seen[c] = score(c)
        return seen[c]

    best = family.start
    best_score = get(best)
    while len(seen) < calls and step >= min_step:
        moved = False
        for c in family.neighbours(best, step):
            s = get(c)
            if s is None:
                break
            if s > best_score:
                best, best_score, moved = c, s, True
        if not moved:
            step = math.sqrt(step)
    return best, best_score, len(seen)


def mask_of(mu: np.ndarray, share: float) -> np.ndarray:
    """Boolean mask leaving out the ``share`` of coordinates where |μ| is largest (Neurotoxin's top-k)."""
    keep = np.ones(mu.shape, dtype=bool)
    k = int(round(share * mu.size))
    if k > 0:
        keep[np.argpartition(-np.abs(mu), k - 1)[:k]] = False
    return keep


def support_of(v: np.ndarray, share: float) -> np.ndarray:
    """Boolean mask keeping the ``share`` of coordinates where |v| is largest (all of them for share 1)."""
    keep = np.zeros(v.shape, dtype=bool)
    k = max(1, int(round(share * v.size)))
    keep[np.argpartition(-np.abs(v), k - 1)[:k]] = True
    return keep


def central_rows(H: np.ndarray) -> np.ndarray:
    """Honest row indices, the most central first: by cosine to the mean of the honest unit rows."""
    norms = np.linalg.norm(H, axis=1)
    V = np.divide(H, norms[:, None], out=np.zeros_like(H), where=norms[:, None] > 0)
    c = V.mean(axis=0)
    return np.argsort(-(V @ c), kind="stable")


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


class Context:
    """What every candidate of one round shares: the honest statistics and the (masked) unit payloads."""

    def __init__(self, H: np.ndarray, payload: np.ndarray, m: int) -> None:
        self.H, self.payload, self.m = H, payload, m
        self.mu = H.mean(axis=0)
        self.norms = np.linalg.norm(H, axis=1)
        self.size = float(np.median(self.norms)) or 1.0
        self.order = central_rows(H)
        self.sigma = H.std(axis=0)
        self._units: dict = {}

    def direction(self, mask: float, support: float = 1.0) -> np.ndarray:
        """The unit payload without the ``mask`` share of coordinates where |μ| is largest, on its ``support``."""
        if (mask, support) not in self._units:
            p = self.payload * mask_of(self.mu, mask) if mask > 0 else self.payload
            self._units[mask, support] = _unit(p * support_of(p, support) if support < 1 else p)
        return self._units[mask, support]

    def shift(self, mask: float, support: float = 1.0) -> np.ndarray:
        """σ_j · sign(payload_j) on the payload's coordinates: one honest standard deviation per coordinate."""
        if ("shift", mask, support) not in self._units:
            self._units["shift", mask, support] = self.sigma * np.sign(self.direction(mask, support))
        return self._units["shift", mask, support]


class ObjectiveAttack(RuleAware):
    """Shared by the objective-driven attacks: build the family's rows, score aggregates, search, record."""

    uses_own_training = False
    objectives: tuple[str, ...] = OBJECTIVES

    def __init__(self, objective: str, family: Family, max_calls: int = 20) -> None:
        if objective not in self.objectives:
            raise ConfigError(f"{self.name} objective must be one of {', '.join(self.objectives)}, got {objective!r}")
        self.objective = objective
        self.family = family
        self.max_calls = _calls(self.name, max_calls)
        self._choices: dict | None = None

    # -- what the attack pushes along, per round --------------------------------------------------------------
    def payload(self, view: RoundView, own: np.ndarray, H: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def rows(self, c: Candidate, ctx: "Context") -> np.ndarray:
        """The (m, d) rows of candidate ``c`` (see the module docstring)."""
        m, norms = ctx.m, ctx.norms
        p = ctx.direction(c.mask, c.support)
        if c.roles == "chain":
            base = np.broadcast_to(ctx.H[ctx.order[0]], (m, ctx.H.shape[1]))
            lam = c.scale * (np.arange(m) + 1) / m
        else:
            base = np.broadcast_to(ctx.mu, (m, ctx.H.shape[1])) if c.placement in ("mean", "coord") \
                else ctx.H[ctx.order[np.arange(m) % len(ctx.order)]]
            lam = np.full(m, c.scale)
        if c.placement == "coord" and c.roles != "chain":
            R = base + lam[:, None] * ctx.shift(c.mask, c.support)
        else:
            R = base + (lam * ctx.size)[:, None] * p
        if c.norm is not None:
            target = float(np.quantile(norms, c.norm))
            rn = np.linalg.norm(R, axis=1)
            R *= np.divide(target, rn, out=np.ones_like(rn), where=rn > 0)[:, None]
        if c.roles == "lift":
            sup = np.arange(m) >= (m + 1) // 2  # the second half supports: their base, at the honest maximum norm
            bn = np.linalg.norm(base[sup], axis=1)
            R[sup] = base[sup] * np.divide(norms.max(), bn, out=np.ones_like(bn), where=bn > 0)[:, None]
        return R

    def scorer(self, view: RoundView, H: np.ndarray, payload: np.ndarray) -> Callable[[object], tuple]:
        """Decision → score tuple (larger is better) for this attack's objective."""
        p = _unit(payload)
        mu = H.mean(axis=0)
        if self.objective == "projection":
            return lambda d: (float(np.asarray(d.aggregate) @ p),)
        if self.objective == "deviation":
            return lambda d: (float((np.asarray(d.aggregate) - mu) @ p),)
        lab = view.lab
        if lab is None:
            raise ConfigError(f"{self.name}: objective {self.objective!r} needs the attackers' own model "
                              "(RoundView.lab), which this driver does not offer")
        if self.objective == "loss":
            return lambda d: (lab.score(np.asarray(d.aggregate)).loss,)
        x, y = self.triggered(lab)
        return lambda d: (float(np.mean(lab.logits(np.asarray(d.aggregate), x).argmax(axis=1) == y)),
                          float(np.asarray(d.aggregate) @ p))

    def triggered(self, lab) -> tuple[np.ndarray, np.ndarray]:
        raise ConfigError(f"{self.name}: objective 'success' needs a backdoor")

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        m = own.shape[0]
        payload = self.payload(view, own, H, rng)
        ctx = Context(H, payload, m)
        probe = Probe(view, H, m, rng, self.max_calls, self.name)
        score = self.scorer(view, H, payload)
        best, best_score, used = pattern_search(lambda c: score(probe.decision(self.rows(c, ctx))),
                                                self.family, self.max_calls)
        self._choices = {**best.as_dict(), "score": list(best_score), "calls": used}
        return self.rows(best, ctx)

    def choices(self) -> dict | None:
        return self._choices


def _family(name: str, *, placements=PLACEMENTS, roles=("same", "chain"), norms=(None, 0.5, 0.9), masks=(0.0,),
            supports=(1.0,), scale_max: float = 64.0) -> Family:
    """A :class:`Family` from user options (lists from TOML become tuples; "none" is a norm left as built)."""
    axes = {"placements": placements, "roles": roles, "norms": norms, "masks": masks, "supports": supports}
    bad = [k for k, v in axes.items() if not (isinstance(v, (list, tuple)) and v)]
    if bad:
        raise ConfigError(f"{name}: {', '.join(bad)} must be non-empty lists, got "
                          + ", ".join(repr(axes[k]) for k in bad))
    norms = tuple(None if v in (None, "none") else v for v in norms)
    # The search starts at λ = 1 on the first value of every axis.
    first = Candidate(1.0, placements[0], roles[0], norms[0], masks[0], supports[0])
    return Family(placements=tuple(placements), roles=tuple(roles), norms=norms, masks=tuple(masks),
                  supports=tuple(supports), scale_max=_positive(f"{name} scale_max", scale_max), start=first)


class BackdoorObjective(ObjectiveAttack, BadNets):
    """A BadNets backdoor whose rows maximise the aggregate's push along the backdoor (``projection``)."""

    uses_own_training = True
    objectives = ("projection", "success")

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, objective: str = "projection",
                 family: Family | None = None, max_calls: int = 20, reference: str = "trained") -> None:
        BadNets.__init__(self, target, poison_fraction)
        ObjectiveAttack.__init__(self, objective, family or Family(), max_calls)
        if reference not in ("trained", "honest-mean"):
            raise ConfigError(f"{self.name} reference must be 'trained' or 'honest-mean', got {reference!r}")
        self.reference = reference

    def payload(self, view, own, H, rng):
        lab = view.lab
        if self.reference == "trained" and lab is not None and lab.attackers == own.shape[0]:
            # Clean updates from W_g on each attacker's own data: what its poisoned update adds is the backdoor.
            seed = int(rng.integers(2**31))
            ref = np.stack([lab.train(*lab.data(k), seed=seed + k) for k in range(own.shape[0])])
            b = (own - ref).mean(axis=0)
            if np.isfinite(b).all():
                return b
            # Clean training from W_g diverged (a model already pushed far): fall back to the honest mean.
        return own.mean(axis=0) - H.mean(axis=0)

    def triggered(self, lab):
        keep = lab.y != self.target
        x = lab.x[keep].reshape((-1, *lab.x.shape[1:]))
        return self.stamp(x, self.global_pixels(x.shape[1:])), np.full(int(keep.sum()), self.target)


@register_attack("maxproj-backdoor")
class MaxProjBackdoor(BackdoorObjective):
    r"""BadNets rows chosen to maximise the aggregate's projection on the backdoor direction.

    The payload is the backdoor direction b (module docstring). The family
    searched (each axis an option): ``placements`` (lean, mean, coord),
    ``roles`` (same, chain), ``norms`` (as built, the honest median, the 0.9
    quantile), ``supports`` (all coordinates, the 5 % where b is largest) and
    λ up to ``scale_max``; no mask. ``max_calls`` rule calls per round (20).
    ``success`` is BadNets' backdoor success.
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, objective: str = "projection",
                 max_calls: int = 20, reference: str = "trained", placements=PLACEMENTS, roles=("same", "chain"),
                 norms=(None, 0.5, 0.9), supports=(1.0, 0.05), scale_max: float = 64.0) -> None:
        fam = _family(self.name, placements=placements, roles=roles, norms=norms, supports=supports,
                      scale_max=scale_max)
        super().__init__(target, poison_fraction, objective, fam, max_calls, reference)


@register_attack("neurotoxin-maxproj")
class NeurotoxinMaxProj(BackdoorObjective):
    r"""``maxproj-backdoor`` with Neurotoxin's mask (Zhang et al., ICML 2022).

    The payload leaves out the ``mask`` share (10 %) of coordinates where the
    honest mean moves most, so the backdoor lives in coordinates honest
    updates rarely overwrite and survives more rounds; the rest of the search
    is ``maxproj-backdoor``'s.
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, mask: float = 0.1, objective: str = "projection",
                 max_calls: int = 20, reference: str = "trained", placements=PLACEMENTS, roles=("same", "chain"),
                 norms=(None, 0.5, 0.9), supports=(1.0, 0.05), scale_max: float = 64.0) -> None:
        if isinstance(mask, bool) or not isinstance(mask, (int, float)) or not 0 < mask < 1:
            raise ConfigError(f"neurotoxin-maxproj mask must be a share in (0, 1), got {mask!r}")
        fam = _family(self.name, placements=placements, roles=roles, norms=norms, masks=(float(mask),),
                      supports=supports, scale_max=scale_max)
        super().__init__(target, poison_fraction, objective, fam, max_calls, reference)


@register_attack("maxdev")
class MaxDev(ObjectiveAttack):
    r"""Untargeted: rows that push the aggregate furthest from the honest mean along a direction.

    The payload is Shejwalkar & Houmansadr's perturbation (``direction``:
    ``unit-vec`` −μ/‖μ‖ by default, ``std`` −σ, ``sign`` −sign μ); the
    objective ``deviation`` is the aggregate's deviation from the honest mean
    along it, or ``loss``, the attackers' own clean-data loss after the step.
    The family searched is ``maxproj-backdoor``'s on every coordinate
    (``supports`` (1,)); ``max_calls`` rule calls per round (20).
    """

    objectives = ("deviation", "loss")

    def __init__(self, direction: str = "unit-vec", objective: str = "deviation", max_calls: int = 20,
                 placements=PLACEMENTS, roles=("same", "chain"), norms=(None, 0.5, 0.9), supports=(1.0,),
                 scale_max: float = 64.0) -> None:
        if direction not in _PERTURBATIONS:
            raise ConfigError(f"maxdev direction must be one of {', '.join(_PERTURBATIONS)}, got {direction!r}")
        self.direction = direction
        super().__init__(objective, _family(self.name, placements=placements, roles=roles, norms=norms,
                                            supports=supports, scale_max=scale_max), max_calls)

    def payload(self, view, own, H, rng):
        return perturbation(H, self.direction)


__all__ = ["BackdoorObjective", "Candidate", "Family", "MAX_CALLS", "MaxDev", "MaxProjBackdoor", "NeurotoxinMaxProj",
           "ObjectiveAttack", "central_rows", "mask_of", "pattern_search", "support_of"]
