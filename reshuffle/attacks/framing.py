r"""Framing: attackers who aim a rule's similarity tests, bans and counts at honest clients.

A rule that compares rows (or pseudonyms' histories) cannot tell a copy from
its original. Attackers who upload exact copies of honest rows make those
honest pseudonyms look like colluders, so whatever the rule does to colluders
(a cut, a ban, a credit that trims less) it does to honest clients too.

* ``frame-ban`` (the ban lever): the first ⌊m/2⌋ attackers each copy one
  honest pseudonym's row every round (the same pseudonym all run: the first
  in label order that is present). A rule that bans both members of an alike
  pair, and trims f minus the banned count, soon trims nothing. The other
  attackers push the BadNets payload averaged over rounds (as
  :mod:`reshuffle.attacks.patient` does), each on its own share of the
  payload's largest coordinates, so that no two of their histories look
  alike, at λ times the median honest norm; λ from ``scales`` (1, 4, 64), one
  rule call each, the one whose aggregate moves furthest along the payload
  wins.
* ``frame-class``: no payload. Every attacker copies one of the m largest
  holders of class ``target``, which the attackers find from the honest rows
  themselves: a client with many samples of class c raises the output layer's
  bias for c (in the models here the last ``classes`` entries of a row), so
  the honest pseudonyms are ranked by their summed bias step for c relative to
  the other classes. A rule that cuts or bans alike pairs cuts the class's
  holders; success is the error rate on class ``target``'s test samples.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from reshuffle.attacks.adaptive import Probe
from reshuffle.attacks.base import Attack, RoundView, check_view, register_attack
from reshuffle.attacks.mechanism import _levels
from reshuffle.attacks.objective import support_of
from reshuffle.attacks.patient import Patient
from reshuffle.errors import ConfigError


def _labels_of(view: RoundView) -> list[str] | None:
    return None if view.pseudonyms is None else [str(p) for p in view.pseudonyms[1]]


def _positive_int(v: object, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ConfigError(f"{what} must be a non-negative int, got {v!r}")
    return v


@register_attack("frame-ban")
class FrameBan(Patient):
    r"""Copiers get honest pseudonyms judged alike with them; pushers carry the backdoor (module docstring).

    ``copiers`` attackers copy (0: ⌊m/2⌋); ``support`` is the share of the
    payload's coordinates the pushers split between them; ``scales`` λ are
    tried, one rule call each (``max_calls``, 20).
    """

    def __init__(self, target: int = 0, poison_fraction: float = 0.5, copiers: int = 0, support: float = 0.1,
                 scales=(1.0, 4.0, 64.0), max_calls: int = 20) -> None:
        super().__init__(target, poison_fraction, max_calls)
        self.copiers = _positive_int(copiers, "frame-ban copiers")
        self.support = _levels(self.name, "support", [support], 0.0, 1.0)[0]
        self.scales = _levels(self.name, "scales", scales, 0.0, 1e4)
        if len(self.scales) > self.max_calls:
            raise ConfigError(f"{self.name}: {len(self.scales)} scales exceed max_calls={self.max_calls}")
        self._targets: list[str] = []

    def copies(self, view: RoundView, H: np.ndarray, c: int) -> np.ndarray:
        """(c, d): the rows of the c honest pseudonyms copied, the same ones every round they are present."""
        labels = _labels_of(view)
        if labels is None:
            return H[:c].copy()  # no pseudonyms: copy the first honest rows of the round
        present = {lab: i for i, lab in enumerate(labels)}
        chosen = [t for t in self._targets if t in present][:c]
        for lab in sorted(present):
            if len(chosen) >= c:
                break
            if lab not in chosen:
                chosen.append(lab)
        self._targets = list(dict.fromkeys(self._targets + chosen))
        return np.stack([H[present[lab]] for lab in chosen])

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        m = own.shape[0]
        bbar = self.round_payload(view, own, H, rng)
        c = min(self.copiers or m // 2, m - 1, H.shape[0])
        pushers = m - c
        top = np.flatnonzero(support_of(bbar, self.support))
        top = top[np.argsort(-np.abs(bbar[top]), kind="stable")]
        s = float(np.median(np.linalg.norm(H, axis=1)))
        P = np.zeros((pushers, bbar.size))
        for k in range(pushers):
            part = top[k::pushers]  # interleaved by rank: every pusher gets large coordinates
            P[k, part] = bbar[part]
            P[k] /= np.linalg.norm(P[k]) or 1.0
        C = self.copies(view, H, c)
        unit = bbar / (np.linalg.norm(bbar) or 1.0)
        probe = Probe(view, H, m, rng, self.max_calls, self.name)
        best, best_score, best_at = None, -np.inf, None
        for lam in self.scales:
            rows = np.vstack([C, lam * s * P])
            score = float(probe.decision(rows).aggregate @ unit)
            if score > best_score:
                best, best_score, best_at = rows, score, lam
        self._choices = {"scale": best_at, "score": [best_score], "calls": probe.calls, "copied": len(C),
                         "rounds": self._rounds}
        return best


@register_attack("frame-class")
class FrameClass(Attack):
    r"""Every attacker copies one of the largest holders of class ``target`` (module docstring).

    The holders are ranked by their summed output-bias step for the class over
    the rounds so far (per pseudonym where the rule keeps them; per round
    otherwise); ``classes`` is the number of output entries at the end of a
    row. Success: the error rate on class ``target``'s test samples.
    """

    rule_aware = True
    uses_own_training = False

    def __init__(self, target: int = 0, classes: int = 10) -> None:
        self.target = _positive_int(target, "frame-class target")
        if isinstance(classes, bool) or not isinstance(classes, int) or classes < 2:
            raise ConfigError(f"frame-class classes must be an int >= 2, got {classes!r}")
        if self.target >= classes:
            raise ConfigError(f"frame-class target {target} is not one of {classes} classes")
        self.classes = classes
        self._score: dict[str, float] = {}
        self._chosen: list[str] = []

    def class_step(self, H: np.ndarray) -> np.ndarray:
        """Each row's output-bias step for the target class relative to the mean over the classes."""
        bias = H[:, -self.classes:]
        return bias[:, self.target] - bias.mean(axis=1)

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        own, H = check_view(view, self)
        m = own.shape[0]
        step = self.class_step(H)
        labels = _labels_of(view)
        if labels is None:
            order = np.argsort(-step, kind="stable")
        else:
            for lab, v in zip(labels, step):
                self._score[lab] = self._score.get(lab, 0.0) + float(v)
            at = {lab: i for i, lab in enumerate(labels)}
            ranked = sorted(at, key=lambda lab: -self._score[lab])
            order = np.array([at[lab] for lab in ranked])
            self._chosen = ranked[:m]
        picks = order[np.arange(m) % len(order)]
        return H[picks].copy()

    def choices(self) -> dict | None:
        return {"copied": list(self._chosen)} if self._chosen else None

    def success(self, predict: Callable[[np.ndarray], np.ndarray], x_test: np.ndarray, y_test: np.ndarray,
                num_classes: int) -> float | None:
        mine = y_test == self.target
        if not mine.any():
            return None
        return float(np.mean(predict(x_test[mine]) != self.target))
