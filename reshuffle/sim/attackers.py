"""The simulated attackers: who they are, and the rows they send in place of their models.

The attackers are drawn once (``seed_of(seed, SETUP)``) and sampled into cohorts like
every other client. Each round the sampled attackers replace their update
U_i = W_i − W_g with the attack's output; what the attack sees is the simulation's
one explicit hook, :func:`observed_updates`.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Callable

import numpy as np

from reshuffle.attacks import Attack, Lab, RoundView
from reshuffle.crypto.encoding import FixedPoint
from reshuffle.errors import ConfigError
from reshuffle.run.round import non_finite
from reshuffle.run.sampling import ATTACK, seed_of
from reshuffle.server import Rule
from reshuffle.run.pseudonyms import run_pseudonym
from reshuffle.server.rules.base import decide_in_context

if TYPE_CHECKING:
    from reshuffle.sim.training import Training


def observed_updates(attack: Attack, own: np.ndarray, honest: np.ndarray) -> np.ndarray:
    """The simulation hook through which attacks see updates.

    Omniscient attacks get the honest clients' updates of this round (what
    colluders who know the honest distribution would have); all others get only
    the attackers' own updates.
    """
    return honest if attack.omniscient else own


def unencodable(models: dict[int, np.ndarray], why: str) -> dict[int, str]:
    """client → cause, for the models in ``models`` (client → model) that hold NaN/Inf values."""
    out = {}
    for i, W in models.items():
        k = non_finite(W)
        if k:
            out[i] = f"{why}: {k} of {W.size} values non-finite, not encodable"
    return out


class Attackers:
    """The run's attack and its clients; ``apply`` forms their rows in a round."""

    def __init__(self, attack: Attack, name: str, malicious: list[int], seed: int) -> None:
        self.attack, self.name, self.malicious, self.seed = attack, name, malicious, seed
        #: client → the pseudonym its rows carry to the deployed rule (the simulator sets its own source)
        self.names: Callable[[int], bytes] = lambda i: run_pseudonym(seed, i)
        self.choices: dict | None = None  # what a rule-aware attack chose in the last round

    @property
    def attacked(self) -> bool:
        return bool(self.malicious) and self.name != "none"

    def ground_truth(self) -> frozenset[int]:
        """The clients whose rows count as malicious (none without an attack: clean runs measure the FPR)."""
        return frozenset(self.malicious) if self.attacked else frozenset()

    def trained(self, cohort: list[int]) -> list[int]:
        """The clients of ``cohort`` that train locally (attackers whose attack ignores its own training do not)."""
        skip = set(self.malicious) if self.attacked and not self.attack.uses_own_training else set()
        return [i for i in cohort if i not in skip]

    def apply(self, models: dict[int, np.ndarray], T: int, W_g: np.ndarray, broken: dict[int, str],
              rule: Rule, codec: FixedPoint, training: "Training") -> dict[int, str]:
        """Replace the sampled attackers' models by the attack's; return client → cause for those it cannot form.

        The attack sees the updates of this round's cohort (the keys of ``models``)
        only. Clients in ``broken`` (their training diverged) take no part: the
        attack sees neither their updates nor runs for them. An attack output
        that is non-finite in float32 (e.g. a scaled update beyond its range)
        is reported, like a diverged model, as not encodable.
        """
        self.choices = None
        if not self.attacked:
            return {}
        mal = [i for i in self.malicious if i in models and i not in broken]
        honest = [i for i in models if i not in set(self.malicious) and i not in broken]
        if not mal:
            return {}
        if self.attack.omniscient and len(honest) < 2:
            return {i: f"attack not run: {len(honest)} finite honest updates to observe" for i in mal}
        U_own = np.stack([models[i] - W_g for i in mal])
        U_honest = np.stack([models[i] - W_g for i in honest]) if honest else U_own[:0]
        rng = np.random.default_rng(seed_of(self.seed, T, ATTACK))
        try:
            if self.attack.rule_aware:
                view = self.round_view(U_own, U_honest, T, mal, W_g, rule, codec, training, honest)
                bad = self.attack.craft(view, rng)
                self.choices = self.attack.choices()
            else:
                bad = self.attack(observed_updates(self.attack, U_own, U_honest), len(mal), rng)
        except ConfigError as exc:
            # The round's rows do not fit the attack's assumptions (e.g. Fang's Krum attack needs n > 2f + 2).
            return {i: f"attack not run: {exc}" for i in mal}
        if bad.shape != (len(mal), W_g.size):
            raise ConfigError(f"attack {self.name!r} returned {bad.shape} (need {(len(mal), W_g.size)})")
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is recorded as a cause below
            for row, i in enumerate(mal):
                models[i] = (W_g + bad[row]).astype(np.float32)
        return {i: c for i, c in unencodable(models, "attack output").items() if i in set(mal)}

    @staticmethod
    def lab(mal: list[int], W_g: np.ndarray, training: "Training") -> Lab:
        """The colluders' model copy and their own clean data (what they hold in a deployment)."""
        data = training.data
        idx = [training.parts[i] for i in mal]
        owner = np.concatenate([np.full(len(p), k) for k, p in enumerate(idx)]) if idx else np.zeros(0, np.int64)
        pool = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        return Lab(copy.deepcopy(training.model), W_g.copy(), data.x_train[pool], data.y_train[pool], owner,
                   data.num_classes, training.train_cfg, training.layout)

    def round_view(self, U_own: np.ndarray, U_honest: np.ndarray, T: int, mal: list[int], W_g: np.ndarray,
                   rule: Rule, codec: FixedPoint, training: "Training", honest: list[int]) -> RoundView:
        """What rule-aware colluders see: both sets of updates and the deployed rule, on their own copy.

        The copy is the run's rule with its configuration, pre-aggregators,
        seed and history (the strongest colluders know all of it); the rows they
        test pass through the same fixed-point encoding as real uploads. A rule
        that keeps a history per pseudonym also gets every row's pseudonym
        (``RoundView.pseudonyms``: the attackers' and the honest clients').
        """
        rule = copy.deepcopy(rule)
        last: dict[str, np.ndarray] = {}

        def decide(U: np.ndarray, pseudonyms=None):
            U = np.asarray(U, dtype=np.float64)
            # Rows equal to the previous call's keep their rounded form (searches vary a few rows per call).
            prev = last.get("in")
            again = prev is not None and prev.shape == U.shape
            todo = ~(U == prev).all(axis=1) if again else np.ones(len(U), bool)
            rows = last["out"] if again else np.empty_like(U)
            if todo.any():
                W = U[todo] + W_g
                # The encoding clips to ±clip anyway; clipping first keeps float32 from overflowing.
                W = np.clip(W, -codec.clip, codec.clip, out=W).astype(np.float32)
                rows[todo] = codec.roundtrip(W.ravel()).reshape(W.shape).astype(np.float64) - W_g
            # Our own copy of the rows: only the changed ones are copied (an unchanged row compares equal either way).
            if again:
                prev[todo] = U[todo]
            else:
                last["in"] = np.array(U)
            last["out"] = rows
            return decide_in_context(rule, rows.copy(), T, pseudonyms=pseudonyms, global_model=W_g,
                                     layout=training.layout.entries)

        names = None
        if "pseudonyms" in rule.context:
            names = ([self.names(i) for i in mal], [self.names(i) for i in honest])
        return RoundView(own=U_own, honest=U_honest, decide=decide, round=T, global_model=W_g.copy(),
                         lab=self.lab(mal, W_g, training), pseudonyms=names)
