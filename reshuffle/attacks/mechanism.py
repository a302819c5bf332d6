r"""Backdoors written against one mechanism each of the default rule: coordinate-wise trimming, norm clipping.

Both carry the backdoor payload b of :mod:`reshuffle.attacks.objective`
(BadNets training minus a clean reference trained from W_g on the attackers'
own data) on its *support*, the share of coordinates where |b| is largest,
and pick, among a declared grid of candidates (one rule call each, at most
``max_calls``), the one whose aggregate on their copy of the round has the
largest projection on b.

* ``trim-edge`` (against trimming, which ranks each coordinate's values and
  drops the f largest and f smallest): on the support, every attacker uploads
  the honest order statistic at quantile q in b's sign (q = 1: the honest
  extreme; q > 1: beyond it by q − 1 honest standard deviations), elsewhere
  the honest coordinate-wise median. A value just inside the kept range moves
  the trimmed mean most; a value beyond it is trimmed but drags the window
  (ALIE's effect): the search tries both.
* ``clip-sparse`` (against clipping to the median row norm, which counts the
  attackers' rows too): the rows are zero off the support and z honest
  standard deviations in b's sign on it, so they are short. Short rows pull
  the median norm down, which clips the honest rows harder, while the
  attackers' own rows stay below the bound and keep their full length.
"""

from __future__ import annotations

import itertools

import numpy as np

from reshuffle.attacks.adaptive import Probe
from reshuffle.attacks.base import RoundView, check_view, register_attack
from reshuffle.attacks.objective import BackdoorObjective, Family, support_of
from reshuffle.errors import ConfigError


def _levels(name: str, what: str, v: object, low: float, high: float, closed: bool = False) -> tuple[float, ...]:
    """A non-empty list of numbers in (low, high], or [low, high] where ``closed``, as floats."""
    ok = (isinstance(v, (list, tuple)) and 1 <= len(v)
          and all(isinstance(x, (int, float)) and not isinstance(x, bool) and (low <= x if closed else low < x)
                  and x <= high for x in v))
    if not ok:
        interval = f"[{low:g}, {high:g}]" if closed else f"({low:g}, {high:g}]"
        raise ConfigError(f"{name} {what} must be a non-empty list of numbers in {interval}, got {v!r}")
    return tuple(float(x) for x in v)


class GridBackdoor(BackdoorObjective):
    """A backdoor that scores a declared grid of (level, support) candidates, one rule call each.

    ``level_range`` is the open-closed interval a level must lie in.
    """

    level_range: tuple[float, float] = (0.0, 1e3)

    def __init__(self, target: int, poison_fraction: float, levels, supports, max_calls: int, reference: str) -> None:
        super().__init__(target, poison_fraction, "projection", Family(), max_calls, reference)
        self.levels = _levels(self.name, "levels", levels, *self.level_range)
        self.supports = _levels(self.name, "supports", supports, 0.0, 1.0)
        if len(self.levels) * len(self.supports) > self.max_calls:
            raise ConfigError(f"{self.name}: {len(self.levels)} levels × {len(self.supports)} supports exceed "
                              f"max_calls={self.max_calls}")

    def build(self, H: np.ndarray, sorted_h: np.ndarray, b: np.ndarray, level: float, support: float,
              m: int) -> np.ndarray:
        raise NotImplementedError

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        m = own.shape[0]
        b = self.payload(view, own, H, rng)
        unit = b / (np.linalg.norm(b) or 1.0)
        sorted_h = np.sort(H, axis=0)
        probe = Probe(view, H, m, rng, self.max_calls, self.name)
        best, best_score, best_at = None, -np.inf, None
        for level, support in itertools.product(self.levels, self.supports):
            rows = self.build(H, sorted_h, b, level, support, m)
            score = float(probe.decision(rows).aggregate @ unit)
            if score > best_score:
                best, best_score, best_at = rows, score, (level, support)
        self._choices = {"level": best_at[0], "support": best_at[1], "score": [best_score], "calls": probe.calls}
        return best


def _quantile_rows(sorted_h: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per coordinate, the honest order statistic at quantile q (linear interpolation; q in [0, 1])."""
    pos = q * (sorted_h.shape[0] - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, sorted_h.shape[0] - 1)
    cols = np.arange(sorted_h.shape[1])
    frac = pos - lo
    return sorted_h[lo, cols] * (1 - frac) + sorted_h[hi, cols] * frac


@register_attack("trim-edge")
class TrimEdge(GridBackdoor):
    r"""A backdoor at the edge of each coordinate's trimmed range (against coordinate-wise trimming).

    On the support (the ``supports`` share of coordinates where |b| is
    largest), every attacker uploads the honest order statistic at quantile q
    in b's sign (the q-quantile where b_j > 0, the (1 − q)-quantile where
    b_j < 0); q > 1 goes beyond the honest extreme by q − 1 honest standard
    deviations. Elsewhere: the honest coordinate-wise median. The candidates
    are ``levels`` (q) × ``supports``, one rule call each (at most
    ``max_calls``, 20).
    """

    level_range = (0.5, 4.0)

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, levels=(0.6, 0.75, 0.9, 1.0, 1.5),
                 supports=(1.0, 0.2, 0.05, 0.01), max_calls: int = 20, reference: str = "trained") -> None:
        super().__init__(target, poison_fraction, levels, supports, max_calls, reference)

    def build(self, H, sorted_h, b, level, support, m):
        up = b > 0
        q = min(level, 1.0)
        edge = np.where(up, _quantile_rows(sorted_h, np.full(b.size, q)),
                        _quantile_rows(sorted_h, np.full(b.size, 1.0 - q)))
        if level > 1:
            edge = edge + np.where(up, 1.0, -1.0) * (level - 1.0) * H.std(axis=0)
        row = np.where(support_of(b, support), edge, _quantile_rows(sorted_h, np.full(b.size, 0.5)))
        return np.tile(row, (m, 1))


@register_attack("clip-sparse")
class ClipSparse(GridBackdoor):
    r"""Short, sparse backdoor rows (against clipping to the median row norm).

    Each attacker uploads z honest standard deviations in b's sign on the
    support (the ``supports`` share of coordinates where |b| is largest) and
    zero elsewhere. The rows are short, so they pull the median norm (the
    clipping bound, over all rows) down and are not clipped themselves. The
    candidates are ``levels`` (z) × ``supports``, one rule call each (at most
    ``max_calls``, 20).
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, levels=(0.5, 1.0, 2.0, 4.0, 8.0),
                 supports=(0.2, 0.05, 0.01, 0.002), max_calls: int = 20, reference: str = "trained") -> None:
        super().__init__(target, poison_fraction, levels, supports, max_calls, reference)

    def build(self, H, sorted_h, b, level, support, m):
        row = np.where(support_of(b, support), level * H.std(axis=0) * np.sign(b), 0.0)
        return np.tile(row, (m, 1))
