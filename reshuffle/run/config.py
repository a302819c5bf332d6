"""Settings of a simulated federation: defaults, TOML files, CLI overrides, validation."""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from reshuffle.attacks import attack_names
from reshuffle.clients import OPTIMIZERS, PARTITIONS
from reshuffle.errors import ConfigError
from reshuffle.protocol.params import GROUPS
from reshuffle.server import check_pre_names, check_rule_name
from reshuffle.run.plugins import load_plugins
from reshuffle.run.sampling import UniformSampler, cohort_size

SHUFFLES = ("real", "ideal", "none")
TRAININGS = ("auto", "batched", "sequential")


@dataclass(frozen=True)
class SimConfig:
    """Every setting of a run; ``metrics.json`` records it whole.

    ``f`` is the number of attackers the rule assumes (None: the simulated number);
    ``rule`` may join rules with ``+`` (intersection); ``pre`` lists pre-aggregators
    run in front of the rule, ``pre_options`` one table per pre-aggregator;
    ``malicious`` and ``dropout`` are fractions of ``clients``; ``root_samples`` is
    the size of FLTrust's server root dataset. ``fraction`` or ``clients_per_round``
    samples each round's cohort (seeded by ``seed`` and the round): training, the
    attack, dropouts, the protocol, the rule and the metrics run over the cohort, and
    attackers are sampled like every other client. ``adversary`` names a protocol
    adversary of :mod:`reshuffle.adversaries` played in every real round (by the
    first malicious client, or client 0, unless ``adversary_options`` says
    otherwise): in the DC-net round of the stable sets where it has a form there,
    else in the Shamir-shared round; a participant it blames takes no part in later rounds. ``training`` is ``batched`` (all
    clients in one stacked computation), ``sequential``, or ``auto`` (batched
    when it is faster: models without convolutions, with SGD). ``server_opt`` is the
    server optimiser that steps from the rule's aggregate (:mod:`reshuffle.server.optimizers`),
    with step ``server_lr`` and ``server_options`` (``momentum``; ``beta1``, ``beta2``, ``tau``).
    ``model_clip`` (ρ) and ``model_noise`` (σ) are CRFL's step on the new global
    model in every round (:mod:`reshuffle.server.model_step`): its norm clipped
    to ρ, then N(0, σ²) added to every coordinate (None and 0: neither).
    ``dataset`` and ``model`` name registered ones (plug-ins too) or ``hf:NAME``;
    ``classes_per_client`` and ``shards_per_client`` parametrise the ``pathological``
    and ``shard`` partitions. ``device`` is where local training and evaluation
    run (``auto``: the best available). ``local_bn`` keeps every BatchNorm entry
    with its client (FedBN) instead of federating it. ``linker`` scores the passive
    cross-round linker every round (:mod:`reshuffle.sim.linking`). ``dp_clip`` and
    ``dp_noise`` are client-side DP (:mod:`reshuffle.privacy.dp`): every honest client
    clips its update to ``dp_clip`` and adds Gaussian noise of ``dp_noise`` times it;
    each round records ε at ``dp_delta``. ``stable_sets`` (the default) partitions
    the clients once into stable anonymity sets of at least ``set_size``
    (:mod:`reshuffle.run.sets`): sampling draws whole sets and a set delivers all its
    members' models or none; ``stable_sets=false`` samples and delivers each client
    on its own, which lets the rosters name senders across rounds
    (docs/security/linking.md).
    """

    dataset: str = "digits"
    data_dir: str | None = None
    model: str = "mlp"
    clients: int = 10
    fraction: float = 1.0  # clients sampled per round, as a fraction of ``clients``
    clients_per_round: int | None = None  # or as a number; None: from ``fraction``
    rounds: int = 20
    local_epochs: int = 1
    batch_size: int = 16
    lr: float = 0.1
    optimizer: str = "sgd"
    partition: str = "iid"
    alpha: float = 0.5
    classes_per_client: int = 2
    shards_per_client: int = 2
    device: str = "auto"
    local_bn: bool = False
    attack: str = "none"
    malicious: float = 0.0
    rule: str = "fedavg"
    pre: list[str] = field(default_factory=list)
    f: int | None = None
    dropout: float = 0.0
    shuffle: str = "real"
    training: str = "auto"
    group: str = "ristretto255"
    group_size: int | None = None  # anonymity groups of about this size (real shuffle); None: one group
    stable_sets: bool = True  # partition the clients once into stable anonymity sets, sampled and delivered whole
    set_size: int = 5  # the least members of a stable set
    seed: int = 0
    root_samples: int = 100
    out: str | None = None
    attack_options: dict[str, Any] = field(default_factory=dict)
    rule_options: dict[str, Any] = field(default_factory=dict)
    pre_options: dict[str, Any] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)
    adversary: str = "none"
    adversary_options: dict[str, Any] = field(default_factory=dict)
    eval_subset: int | None = None  # test samples evaluated in every round but the last; None: all
    server_opt: str = "sgd"
    server_lr: float | None = None  # None: the optimiser's default (1 for sgd and momentum)
    server_options: dict[str, Any] = field(default_factory=dict)
    model_clip: float | None = None  # CRFL's ρ: the global model's norm after every round; None: no clipping
    model_noise: float = 0.0  # CRFL's σ: Gaussian noise per coordinate on the global model; 0: none
    linker: bool = False  # score the cross-round linker every round (RoundRecord.linking)
    dp_clip: float | None = None  # client-side DP: each honest client clips its update to this norm; None: no DP
    dp_noise: float = 0.0  # ... and adds N(0, (dp_noise·dp_clip)²) per coordinate (noise multiplier z)
    dp_delta: float = 1e-5  # δ of the ε each round records

    @property
    def n_malicious(self) -> int:
        return int(round(self.malicious * self.clients))

    @property
    def cohort_size(self) -> int:
        """Clients sampled per round: ``clients_per_round``, else ``fraction`` of ``clients`` (rounded)."""
        return cohort_size(self.clients, self.fraction, self.clients_per_round)

    def sampler(self) -> UniformSampler:
        """The run's cohort sampler (the same in every driver): ``fraction`` or ``clients_per_round``, seeded."""
        return UniformSampler(self.seed, self.fraction, self.clients_per_round)

    @property
    def n_dropout(self) -> int:
        """Clients of a round's cohort that drop out."""
        return int(self.dropout * self.cohort_size)

    @property
    def rule_f(self) -> int:
        """The attackers the rule assumes among a round's rows: ``f``, else the expected number in a cohort."""
        if self.f is not None:
            return self.f
        if self.cohort_size == self.clients:
            return self.n_malicious
        return math.floor(self.malicious * self.cohort_size + 0.5)

    def validated(self) -> "SimConfig":
        from reshuffle.clients.data import dataset_spec
        from reshuffle.clients.device import resolve_device
        from reshuffle.clients.catalog import check_model_name

        load_plugins(self.plugins)  # first: plug-ins register datasets, models, attacks and rules
        spec = dataset_spec(self.dataset)
        check_model_name(self.model)
        _choice("optimizer", self.optimizer, OPTIMIZERS)
        _choice("partition", self.partition, PARTITIONS)
        if self.partition == "natural" and not spec.natural and spec.num_classes is not None:
            raise ConfigError(f"partition 'natural' splits by writer: dataset {self.dataset!r} has no natural ids")
        self._check_dp()
        if not isinstance(self.local_bn, bool):
            raise ConfigError(f"local_bn must be true or false, got {self.local_bn!r}")
        resolve_device(self.device)  # refuses a device this machine lacks, before any data is loaded
        if isinstance(self.rule, str) and "+" in self.rule and not all(self.rule.split("+")):
            raise ConfigError(f"rule {self.rule!r} has an empty part: join rule names with + (e.g. signguard+flame)")
        check_rule_name(self.rule)
        check_pre_names(self.pre)
        _choice("shuffle", self.shuffle, SHUFFLES)
        _choice("training", self.training, TRAININGS)
        _choice("group", self.group, GROUPS)
        _choice("attack", self.attack, attack_names())
        from reshuffle.server.optimizers import make_server_optimizer

        make_server_optimizer(self.server_opt, self.server_lr, **self.server_options)
        from reshuffle.run.options import (
            check_adversary_options, check_attack_options, check_pre_options, check_rule_options,
        )

        check_rule_options(self.rule, self.rule_options)
        check_pre_options(self.pre, self.pre_options)
        check_attack_options(self.attack, self.attack_options)
        from reshuffle.adversaries import adversary_names

        _choice("adversary", self.adversary, ["none", *adversary_names()])
        check_adversary_options(self.adversary, self.adversary_options)
        if self.adversary != "none" and self.shuffle != "real":
            raise ConfigError(f"adversary {self.adversary!r} deviates from the protocol: it needs shuffle='real'")
        for name in ("clients", "rounds", "local_epochs", "batch_size", "root_samples", "classes_per_client",
                     "shards_per_client"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"{name} must be a positive int, got {v!r}")
        if self.eval_subset is not None and (not isinstance(self.eval_subset, int) or isinstance(self.eval_subset, bool)
                                             or self.eval_subset < 1):
            raise ConfigError(f"eval_subset must be a positive int or absent, got {self.eval_subset!r}")
        if self.clients < 2:
            raise ConfigError(f"a federation needs at least 2 clients, got {self.clients}")
        self._check_sampling()
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be a non-negative int, got {self.seed!r}")
        if self.model_clip is not None and self.model_clip == math.inf:
            raise ConfigError("model_clip must be finite (metrics.json records it); leave it out for no clipping")
        self.model_step()
        for name in ("lr", "alpha"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not v > 0:
                raise ConfigError(f"{name} must be a positive finite number, got {v!r}")
        for name in ("malicious", "dropout"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ConfigError(f"{name} must be a fraction in [0, 1), got {v!r}")
        if self.f is not None and (not isinstance(self.f, int) or self.f < 0):
            raise ConfigError(f"f must be a non-negative int, got {self.f!r}")
        from reshuffle.protocol.params import colluders, smallest_round, threshold

        if self.group_size is not None:
            from reshuffle.protocol.groups import check_group_size

            check_group_size(self.group_size)
            if self.shuffle != "real":
                raise ConfigError("group_size splits the real protocol's round: it needs shuffle='real'")
        self._check_sets()
        m = self.cohort_size
        if self.shuffle == "real" and m < smallest_round():
            raise ConfigError(f"a round of the real protocol needs at least {smallest_round()} clients (one "
                              f"colluder tolerated, two honest), the cohort has {m}")
        t = threshold(m, colluders(m))
        # In groups a group below its threshold loses its models and the others deliver (stable sets too).
        if self.group_size is None and not self.stable_sets and m - self.n_dropout < t:
            raise ConfigError(
                f"dropout={self.dropout} drops {self.n_dropout} of the {m} clients of a round; "
                f"the shuffle needs t={t} survivors"
            )
        if self.attack != "none" and self.n_malicious == 0 and self.malicious > 0:
            raise ConfigError(f"malicious={self.malicious} of {self.clients} clients rounds to 0 attackers")
        return self

    def _check_sets(self) -> None:
        from reshuffle.protocol.params import MAX_PARTICIPANTS
        from reshuffle.run.sets import check_set_size

        if not isinstance(self.stable_sets, bool):
            raise ConfigError(f"stable_sets must be true or false, got {self.stable_sets!r}")
        if self.stable_sets and isinstance(self.set_size, int) and not isinstance(self.set_size, bool) \
                and self.set_size > max(self.clients, MAX_PARTICIPANTS):
            return  # too few clients is the reason to give: the simulator says so (run.sets.check_simulation)
        check_set_size(self.set_size)

    def _check_dp(self) -> None:
        if not isinstance(self.linker, bool):
            raise ConfigError(f"linker must be true or false, got {self.linker!r}")
        if self.dp_clip is None:
            if self.dp_noise:
                raise ConfigError(f"dp_noise={self.dp_noise} needs dp_clip: the noise is a multiple of the clip norm")
            return
        from reshuffle.privacy.dp import ClientDP, epsilon

        ClientDP(self.dp_clip, self.dp_noise)
        epsilon(self.dp_noise, 0, self.dp_delta)

    def model_step(self):
        """CRFL's step on the global model (:class:`reshuffle.server.model_step.CRFL`), seeded by the run's seed."""
        from reshuffle.server.model_step import CRFL

        return CRFL(self.model_clip, self.model_noise, seed=self.seed)

    def _check_sampling(self) -> None:
        frac, per_round = self.fraction, self.clients_per_round
        if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac <= 1:
            raise ConfigError(f"fraction must be a number in (0, 1], got {frac!r}")
        if per_round is not None:
            if not isinstance(per_round, int) or isinstance(per_round, bool) or not 2 <= per_round <= self.clients:
                raise ConfigError(f"clients_per_round must be an int in [2, clients={self.clients}], got {per_round!r}")
            if frac != 1:
                raise ConfigError(f"give fraction ({frac}) or clients_per_round ({per_round}), not both")
        if self.cohort_size < 2:
            raise ConfigError(f"fraction={frac} of {self.clients} clients samples {self.cohort_size} per round; "
                              f"a round needs 2: use fraction >= {2 / self.clients:g} "
                              f"or clients_per_round = 2")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _choice(name: str, value: str, options) -> None:
    if value not in options:
        raise ConfigError(f"unknown {name} {value!r}; choose one of {', '.join(options)}")


_FIELDS = {f.name: f for f in fields(SimConfig)}

#: Settings whose default is newer than the setting's effect: a run recorded before the setting existed ran
#: with this value (clients sampled and delivered one by one), not with today's default.
PREDATED = {"stable_sets": False}


def recorded_defaults() -> dict[str, Any]:
    """The value of every setting for a recorded run that does not name it."""
    return {**SimConfig().as_dict(), **PREDATED}


def from_mapping(values: dict[str, Any], base: SimConfig | None = None, source: str = "config") -> SimConfig:
    """Apply ``values`` (keys with ``-`` or ``_``) over ``base``; unknown keys and wrong types are errors."""
    clean: dict[str, Any] = {}
    for key, v in values.items():
        name = key.replace("-", "_")
        if name not in _FIELDS:
            raise ConfigError(f"{source}: unknown setting {key!r}; known: {', '.join(sorted(_FIELDS))}")
        clean[name] = _coerce(name, v, source)
    return replace(base or SimConfig(), **clean).validated()


def _coerce(name: str, v: Any, source: str) -> Any:
    expected = {"lr": float, "alpha": float, "malicious": float, "dropout": float, "server_lr": float,
                "fraction": float, "model_clip": float, "model_noise": float,
                "dp_clip": float, "dp_noise": float, "dp_delta": float}
    if name in expected and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if name == "pre" and isinstance(v, str):
        v = [p for p in v.split(",") if p]
    if name == "pre" and not (isinstance(v, list) and all(isinstance(p, str) for p in v)):
        raise ConfigError(f"{source}: pre must be a list of pre-aggregator names")
    if name in ("attack_options", "rule_options", "pre_options", "server_options") and not isinstance(v, dict):
        raise ConfigError(f"{source}: {name} must be a table, got {type(v).__name__}")
    if name == "plugins" and not (isinstance(v, list) and all(isinstance(p, str) for p in v)):
        raise ConfigError(f"{source}: plugins must be a list of module names")
    return v


def read_toml(path: str | Path, what: str = "config file") -> dict[str, Any]:
    """The parsed TOML file at ``path``; a missing or invalid file is a ConfigError naming it."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what} {p} is a folder; give the path of a TOML file")
    if not p.is_file():
        raise ConfigError(f"{what} {p} not found")
    try:
        return tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: not valid TOML ({exc})") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    """The settings of a simulate TOML file: its top-level keys and those of its ``[simulate]`` table.

    Either layout works, and both together (``[rule_options]`` beside ``[simulate]``, say); a
    setting given in both places is refused, and every key is then checked by :func:`from_mapping`.
    """
    data = read_toml(path)
    if "simulate" not in data:
        return data
    table = data["simulate"]
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: simulate must be a table of settings, got {type(table).__name__}")
    rest = {k: v for k, v in data.items() if k != "simulate"}
    both = sorted(set(rest) & set(table))
    if both:
        raise ConfigError(f"{path}: {', '.join(both)} set both at top level and in [simulate]; keep one")
    return {**rest, **table}
