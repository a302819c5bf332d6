"""The attack interface and its registry.

One signature for every attack (as in ByzFL): observed update vectors in,
malicious update vectors out. ``observed`` is what the attackers can see:

* non-omniscient attacks get the m malicious clients' own updates, one row each,
  trained on their own (possibly poisoned) data;
* omniscient attacks (``omniscient = True``: ALIE, IPM, min-max, min-sum) get the
  honest clients' updates of the round. Only the simulator can hand these over,
  through its explicit hook (:func:`reshuffle.sim.attackers.observed_updates`); in
  a real deployment they model colluders who know the honest distribution.

Updates are U = W_i − W_g; the simulator uploads W_g + attack output.

Three hooks besides ``__call__`` (all optional):

* :meth:`Attack.prepare` is called once before round 1 with the federation's
  size and training inputs (model replacement needs n, triggers the pixel range);
* :meth:`Attack.poison_data` changes a malicious client's local data once, before
  training (label flipping, backdoor triggers); honest data is never passed in;
* :meth:`Attack.success` scores the attack on the current global model, given as
  a ``predict`` callable, so backdoors can evaluate triggered inputs.

Rule-aware attacks (``rule_aware = True``) implement :meth:`Attack.craft`
instead of ``__call__``: they receive a :class:`RoundView` with the attackers'
own updates, the honest updates of the round and ``decide``, the deployed rule
(its configuration, pre-aggregators and seed included) run on the attackers'
own copy of the round. This models omniscient colluders who know the rule and
may run it as often as they like before they upload.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar

import numpy as np

from reshuffle.errors import ConfigError
from reshuffle.registry import Registry

if TYPE_CHECKING:
    from reshuffle.attacks.lab import Lab


@dataclass(frozen=True)
class RoundView:
    """What rule-aware colluders see of one round before they upload.

    ``own``
        (m, d) the attackers' own updates, trained on their (possibly poisoned) data.
    ``honest``
        (h, d) the honest clients' updates of this round.
    ``decide``
        the deployed rule on an (n, d) array of updates, returning its
        :class:`~reshuffle.server.rules.base.Decision` (``accepted`` row
        indices, ``aggregate``); the attackers' copy, so calls have no effect
        on the real round. It should judge the rows as the PS recovers them
        (after the upload's float32 cast and fixed-point encoding): rounding
        moves small coordinates to or from zero, which sign-statistics rules
        see, so a row accepted unrounded may be rejected in the round.
    ``round``
        the round number T.
    ``global_model``
        W_g, the model every participant receives (None where a driver does
        not hand it over).
    ``lab``
        the colluders' own copy of the model and their own clean data
        (:class:`~reshuffle.attacks.lab.Lab`): accuracy, loss and backdoor
        success of W_g + a candidate aggregate on their data, and updates
        trained from W_g with hyper-parameters of their choosing. None where a
        driver does not offer it; attacks that need it say so.
    ``pseudonyms``
        (own, honest): the pseudonym of each row of ``own`` and of ``honest``,
        where the deployed rule keeps a history per pseudonym (None
        otherwise). ``decide`` then takes ``pseudonyms=``, one per row of the
        array it judges, and runs the rule on the attackers' copy of its
        history as it stands before this round: the attackers know the rule,
        replay it, and know which pseudonyms are theirs.
    """

    own: np.ndarray
    honest: np.ndarray
    decide: Callable[..., object]
    round: int = 0
    global_model: np.ndarray | None = None
    lab: "Lab | None" = None
    pseudonyms: tuple[tuple, tuple] | None = None


class Attack:
    """Base class. Subclasses set ``name`` and implement ``__call__`` (or ``craft`` when rule-aware)."""

    name: ClassVar[str] = "attack"
    omniscient: ClassVar[bool] = False
    #: True when the attack crafts its rows against the deployed rule through :meth:`craft`.
    rule_aware: ClassVar[bool] = False
    #: False when the attack ignores the attackers' own training (saves the simulator the work).
    uses_own_training: ClassVar[bool] = True

    def prepare(self, n_clients: int, x_train: np.ndarray) -> None:
        """Called once before round 1: ``n_clients`` in the federation, the training inputs."""

    def poison_labels(self, y: np.ndarray, num_classes: int) -> np.ndarray:
        """Labels a malicious client trains on (data poisoning); unchanged by default."""
        return y

    def poison_data(
        self, x: np.ndarray, y: np.ndarray, rank: int, m: int, num_classes: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """The local data of malicious client ``rank`` (0 ≤ rank < m) after poisoning.

        The default keeps the inputs and applies :meth:`poison_labels`. Returns new
        arrays; ``x`` and ``y`` are left untouched.
        """
        return x, self.poison_labels(y, num_classes)

    def success(
        self, predict: Callable[[np.ndarray], np.ndarray], x_test: np.ndarray, y_test: np.ndarray, num_classes: int
    ) -> float | None:
        """The attack's own success metric on the test set, or None when it has none.

        ``predict`` maps inputs to the current global model's predicted labels.
        """
        return None

    def __call__(self, observed: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        """Return the (m, d) malicious updates."""
        raise NotImplementedError

    def craft(self, view: RoundView, rng: np.random.Generator) -> np.ndarray:
        """Rule-aware attacks: the (m, d) malicious updates, given the round's :class:`RoundView`."""
        raise NotImplementedError(f"{self.name} is not rule-aware")

    def choices(self) -> dict | None:
        """What the attack chose in the round it last crafted (JSON-ready), or None.

        A simulation records it per round in metrics.json (``attack_choices``).
        """
        return None

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def check_observed(observed: np.ndarray, m: int, attack: Attack) -> np.ndarray:
    """Normalise the attack input once: an (r, d) float64 array of the shape the attack needs."""
    X = np.asarray(observed, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] < 1:
        raise ConfigError(f"{attack.name}: observed updates must be an (r, d) array, got shape {X.shape}")
    if not isinstance(m, int) or m < 1:
        raise ConfigError(f"{attack.name}: number of malicious rows must be a positive int, got {m!r}")
    if attack.omniscient and X.shape[0] < 2:
        raise ConfigError(f"{attack.name} needs at least 2 honest updates, got {X.shape[0]}")
    if not attack.omniscient and X.shape[0] != m:
        raise ConfigError(f"{attack.name}: expected the {m} attackers' own updates, got {X.shape[0]} rows")
    return X


def check_view(view: RoundView, attack: Attack) -> tuple[np.ndarray, np.ndarray]:
    """Normalise a rule-aware attack's input once: (own (m, d), honest (h, d)) as finite float64."""
    if not isinstance(view, RoundView):
        raise ConfigError(f"{attack.name}: craft() needs a RoundView, got {type(view).__name__}")
    own = np.asarray(view.own, dtype=np.float64)
    honest = np.asarray(view.honest, dtype=np.float64)
    if own.ndim != 2 or own.shape[0] < 1 or own.shape[1] < 1:
        raise ConfigError(f"{attack.name}: the attackers' own updates must be an (m, d) array, m >= 1, got {own.shape}")
    if honest.ndim != 2 or honest.shape[1] != own.shape[1]:
        raise ConfigError(f"{attack.name}: honest updates must be an (h, {own.shape[1]}) array, got {honest.shape}")
    if attack.omniscient and honest.shape[0] < 2:
        raise ConfigError(f"{attack.name} needs at least 2 honest updates, got {honest.shape[0]}")
    if not (np.isfinite(own).all() and np.isfinite(honest).all()):
        raise ConfigError(f"{attack.name}: the round's updates must be finite")
    if not callable(view.decide):
        raise ConfigError(f"{attack.name}: RoundView.decide must be callable, got {view.decide!r}")
    return own, honest


ATTACKS: Registry = Registry("attack")


def register_attack(name: str):
    """Class decorator: make an :class:`Attack` subclass selectable by ``name``."""
    return ATTACKS.register(name)


def attack_names() -> list[str]:
    return ATTACKS.names()


def make_attack(name: str, **options) -> Attack:
    """The attack registered as ``name``, configured with ``options``."""
    return ATTACKS.make(name, **options)
