r"""Two defences of orthogonal principle in one rule: a history that removes, then clipping and trimming that bound.

Hammer and Anvil (Fenaux, Wang, Yan, Chung & Kerschbaum, 2025) sort backdoor
updates by their deviation δ from the mean update. Large-δ rows are what
outlier removal and robust aggregation (the *anvil*) stop; a row of small δ
passes them, and only a defence that removes it by another principle (the
*hammer*) does. A defence of one type leaves the other regime open to an
attacker who knows it; the principled combination applies both, so that no δ
is left to choose.

Here the anvil is clip-trim (clipping to the median norm, then the
coordinate-wise trimmed mean): it bounds what any row, however large, does in
one round. The hammer is a per-pseudonym history: a push small enough to pass
the anvil must be repeated, round after round, on the same coordinates to add
up, and colluders who must all push one payload accumulate alike; the history
(FoolsGold on each pseudonym's accumulated deviation from the round's median)
sees what no round shows (``kinship``: FoolsGold's histories, judged by each
pseudonym's closest kin). The paper's hammer (clipped super fine-tuning) needs
data on the server, which the PS has not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.server.rules.base import (
    Decision, check_f, check_pseudonyms, check_round, check_updates, clip_factors, decide_in_context,
)
from reshuffle.server.rules.compose import Composite
from reshuffle.server.rules.coordinate import trim_columns
from reshuffle.server.rules.registry import make_rule, register_rule

#: The hammer's defaults: kinship (FoolsGold's histories of deviations from the round's median, remembered over
#: about 10 rounds, judged by each one's closest kin); a pseudonym removed in 3 consecutive rounds is banned
#: for its epoch.
HAMMER = ("kinship", {"ban_after": 3})
#: Which removed rows the anvil stops expecting among the f attackers.
CREDITS = ("banned", "removed")


@register_rule("hammer-anvil")
class HammerAnvil(Composite):
    r"""A pseudonymous hammer that removes, then clip-trim (the anvil) on what is left, trimming what it did not remove.

    1. The hammer (``hammer``, a pseudonymous rule; by default ``kinship``
       with ``ban_after = 3``, options in ``hammer_options``) gives each row a weight :math:`\alpha_i` and a set of
       accepted rows; optionally a per-round filter (``filter``, e.g.
       ``alignins`` or ``freqfed``) must accept a row too. R: the rows removed.
    2. The anvil, on the kept rows K: each clipped to S, the median norm of K,
       and scaled by its hammer weight, :math:`v_i = \alpha_i u_i \min(1, S/\lVert u_i\rVert)`;
       then the coordinate-wise trimmed mean of the :math:`v_i` with
       :math:`t = \max(0, f - |B|)` trimmed at each end (fewer if |K| ≤ 2t),
       B the rows of pseudonyms the hammer has banned for the epoch
       (``credit = "banned"``, the default: a pseudonym removed round after
       round is an attacker the anvil no longer expects, while a row removed
       once may be an honest one, and trimming stays as it was) or every
       removed row (``credit = "removed"``). Honest rows, among them those who
       alone hold a class, are trimmed only as far as attackers may remain.

    Weights: :math:`\alpha_i` times the clipping factor times the share of
    coordinates kept; 0 for removed rows. Accepted: K. The hammer's history
    is this rule's state.

    >>> import numpy as np
    >>> U = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    >>> r = HammerAnvil(f=2, hammer_options={"center": "none", "decay": 1.0}, credit="removed")
    >>> d = r.decide(U, pseudonyms=["a", "b", "c", "d", "e"], round=1)   # c and d alike: removed, t = 0
    >>> d.accepted, d.aggregate.round(3).tolist()
    ((0, 1, 4), [0.569, 0.569, 0.0])
    """

    f_param = "f"

    def __init__(self, f: int = 0, hammer: str = HAMMER[0], hammer_options: dict | None = None,
                 filter: str | None = None, filter_options: dict | None = None, credit: str = "banned",
                 seed: int | None = None) -> None:
        self.f = check_f(f)
        if credit not in CREDITS:
            raise ConfigError(f"hammer-anvil credit must be one of {', '.join(CREDITS)}, got {credit!r}")
        self.credit = credit
        opts = {**HAMMER[1], **(hammer_options or {})} if hammer == HAMMER[0] else dict(hammer_options or {})
        self.hammer = make_rule(hammer, f, seed=seed, **opts)
        if "pseudonyms" not in self.hammer.context:
            raise ConfigError(f"hammer-anvil's hammer must keep a history per pseudonym; {hammer!r} does not")
        self.filter = None if filter is None else make_rule(filter, f, seed=seed, **(filter_options or {}))
        if self.filter is not None and not self.filter.detects:
            raise ConfigError(f"hammer-anvil's filter must remove rows; {filter!r} accepts every row")
        self._set_parts([self.hammer] + ([self.filter] if self.filter is not None else []))

    def min_rows(self) -> int:
        return 1

    def decide(self, updates: np.ndarray, *, round: int = 0, **context: Any) -> Decision:
        check_round(round)
        U = check_updates(updates)
        n = len(U)
        check_pseudonyms(context.get("pseudonyms"), n, self.name)
        hd = decide_in_context(self.hammer, U, round, **context)
        keep = np.zeros(n, dtype=bool)
        keep[list(hd.accepted)] = True
        if self.filter is not None:
            ok = np.zeros(n, dtype=bool)
            ok[list(decide_in_context(self.filter, U, round, **context).accepted)] = True
            keep &= ok
        K = np.flatnonzero(keep)
        w = np.zeros(n)
        if K.size == 0:
            return Decision(np.zeros(U.shape[1]), (), w)
        if self.credit == "removed":
            credited = n - K.size
        else:
            # Rows the hammer gave weight 0 without judging them: their pseudonyms are banned (or sent twice).
            labels = check_pseudonyms(context.get("pseudonyms"), n, self.name)
            banned = set(getattr(self.hammer, "banned", lambda T: ())(round))
            credited = sum(lab in banned for lab in labels)
        t = max(0, self.f - credited)
        t = min(t, (K.size - 1) // 2)
        norms = np.linalg.norm(U[K], axis=1)
        k = clip_factors(norms, float(np.median(norms))) * hd.weights[K]
        agg, kept = trim_columns(U[K] * k[:, None], t)
        w[K] = np.clip(k * kept.mean(axis=1), 0.0, 1.0)
        return Decision(agg, tuple(K.tolist()), w)
