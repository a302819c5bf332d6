"""The decision grid as data: settings × attacks × rules × seeds, one simulation per cell.

A *setting* is (dataset, partition, model); a *cell* is one simulated federation
(setting, attack, rule, seed). The default grid needs no file: ``DEFAULT`` below.
A TOML file (``reshuffle grid --config grid.toml``) overrides any of its fields::

    datasets = ["mnist"]
    partitions = ["iid", "dirichlet:0.3"]
    attacks = "all"            # every registered attack
    rules = ["fedavg", "multi-krum"]
    seeds = [1, 2]
    models = ["mlp"]
    plugins = ["mymodule"]     # modules that register more attacks or rules
    [base]                     # SimConfig settings shared by every cell
    rounds = 5

Every grid also holds the cells its comparisons need: the clean run (attack
``none``) under every rule, and every attack under FedAvg (the impact of the
attack without defense).

Backdoor attacks also run over ``long_rounds`` rounds (30 by default; 0 turns
it off), with the clean run beside them, under ``long_rules`` (by default
``default`` alone; None: every rule of the grid) and clean FedAvg, against
which the long horizon's drops are measured: a backdoor that gets only a small
weight per round may still accumulate once the model converges, which a
10-round horizon hides. A grid file sets them as ``long_rounds = 30`` and
``long_rules = ["flame", "default"]``.

Attacks that spread their push over rounds (``slow-drift``, ``sleeper``)
may also run over an extended horizon: ``extended_rounds = 60`` with
``extended_attacks = ["slow-drift", "sleeper"]`` adds their cells (and the
clean run's) under the long horizon's rules; ``long_also = ["frame-class"]``
runs attacks that plant no backdoor over the long horizon too. ``extra_settings`` adds single
settings beside the product of the axes, as ``"fashion-mnist:dirichlet:0.3:lenet5"``
(dataset, partition, model).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from reshuffle.errors import ConfigError

#: The decision set of rules; names the registry refuses are skipped with a warning. FLTrust assumes more
#: than the others (the server holds a small clean root set); it stands beside the data-free default.
DEFAULT_RULES = ("fedavg", "multi-krum", "flame", "fltrust", "default")
#: The rules of the long horizon (clean FedAvg always runs there too: every drop is measured against it).
LONG_RULES = ("default",)
#: The clean run and the rule every attack's impact is measured against.
CLEAN, REFERENCE_RULE = "none", "fedavg"
#: The run a class's loss to an attack is measured against, where the grid has it: the attackers upload zero
#: updates (they add nothing; their own data's share of a class is missing from it as from every attack's run).
CLASS_REFERENCE = "idle"
#: SimConfig settings shared by every cell of the default grid.
DEFAULT_BASE: dict[str, Any] = {
    "clients": 20, "malicious": 0.2, "rounds": 10, "shuffle": "ideal", "batch_size": 64, "lr": 0.1,
}
#: Evaluate on a fixed test subset of this size except in the last round (when the simulator offers it).
EVAL_SUBSET = 2000
#: The longer horizon of the backdoor cells (0: none).
LONG_ROUNDS = 30
#: Partitions whose clients' sizes differ widely: their cells train one client at a time.
SKEWED_SIZES = ("dirichlet", "dirichlet-legacy", "natural")
#: Keys of a grid TOML file.
_TOML_KEYS = {"datasets", "partitions", "attacks", "rules", "seeds", "models", "base", "plugins", "long_rounds",
              "long_rules", "extended_rounds", "extended_attacks", "extra_settings", "long_also"}


@dataclass(frozen=True, order=True)
class Partition:
    """How the training set is split: a partition of :mod:`reshuffle.clients.partitions` and its parameter.

    ``alpha`` is the Dirichlet concentration (``dirichlet``, ``dirichlet-legacy``);
    ``per_client`` the classes (``pathological``) or shards (``shard``) per client.
    """

    kind: str
    alpha: float | None = None
    per_client: int | None = None

    #: kind → label prefix; the label is the prefix and the parameter (``dir0.3``, ``path2``, ``natural``).
    PREFIX = {"iid": "iid", "dirichlet": "dir", "dirichlet-legacy": "ldir", "pathological": "path", "shard": "shard",
              "natural": "natural"}

    @classmethod
    def parse(cls, text: str) -> "Partition":
        """``iid``, ``natural``, ``dirichlet[:ALPHA]`` (0.3), ``dirichlet-legacy[:ALPHA]``, ``pathological[:K]``
        (2 classes per client) or ``shard[:K]`` (2 shards per client)."""
        kind, _, value = str(text).partition(":")
        if kind in ("iid", "natural") and not value:
            return cls(kind)
        if kind in ("dirichlet", "dirichlet-legacy"):
            try:
                a = float(value) if value else 0.3
            except ValueError:
                raise ConfigError(f"partition {text!r}: alpha {value!r} is not a number") from None
            if not a > 0:
                raise ConfigError(f"partition {text!r}: alpha must be positive")
            return cls(kind, a)
        if kind in ("pathological", "shard"):
            if value and not value.isdigit() or value and int(value) < 1:
                raise ConfigError(f"partition {text!r}: {value!r} is not a positive int")
            return cls(kind, per_client=int(value) if value else 2)
        raise ConfigError(f"unknown partition {text!r}; choose iid, natural, dirichlet[:ALPHA], "
                          f"dirichlet-legacy[:ALPHA], pathological[:K] or shard[:K]")

    @property
    def label(self) -> str:
        value = self.alpha if self.alpha is not None else self.per_client
        return self.PREFIX[self.kind] + ("" if value is None else f"{value:g}")

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"partition": self.kind}
        if self.alpha is not None:
            out["alpha"] = self.alpha
        if self.per_client is not None:
            out["classes_per_client" if self.kind == "pathological" else "shards_per_client"] = self.per_client
        return out


@dataclass(frozen=True, order=True)
class Setting:
    dataset: str
    partition: Partition
    model: str

    @property
    def label(self) -> str:
        return f"{self.dataset}-{self.partition.label}-{self.model}"


#: Settings ``--full`` runs besides its product: CIFAR-10 and FEMNIST (by writer) with the FedAvg CNN.
FULL_EXTRA = (Setting("cifar10", Partition("dirichlet", 0.3), "cnn"), Setting("femnist", Partition("natural"), "cnn"))


@dataclass(frozen=True, order=True)
class Cell:
    """One simulation: a setting, an attack, a rule, a seed; ``rounds`` set for the long horizon."""

    setting: Setting
    attack: str
    rule: str
    seed: int
    rounds: int | None = None

    @property
    def relpath(self) -> str:
        """Where the finished cell is stored, relative to the grid's folder."""
        s = self.setting
        tail = "" if self.rounds is None else f"__r{self.rounds}"
        return f"cells/{s.dataset}/{s.partition.label}/{s.model}/{self.attack}__{self.rule}__s{self.seed}{tail}.json"

    @property
    def base_twin(self) -> "Cell":
        """The cell of the same settings over the grid's base horizon."""
        return dataclasses.replace(self, rounds=None)

    @property
    def name(self) -> str:
        tail = "" if self.rounds is None else f", {self.rounds} rounds"
        return f"{self.setting.label} {self.attack} × {self.rule} seed {self.seed}{tail}"


@dataclass(frozen=True)
class Grid:
    """Axes of the grid; ``cells()`` is their product, with the clean run and FedAvg always in."""

    datasets: tuple[str, ...] = ("mnist", "fashion-mnist")
    partitions: tuple[Partition, ...] = (Partition("iid"), Partition("dirichlet", 0.3))
    attacks: tuple[str, ...] = ()
    rules: tuple[str, ...] = DEFAULT_RULES
    seeds: tuple[int, ...] = (1, 2, 3)
    models: tuple[str, ...] = ("mlp",)
    base: tuple[tuple[str, Any], ...] = tuple(DEFAULT_BASE.items())
    plugins: tuple[str, ...] = ()
    #: Rule names the registry refused (left out of the grid, reported in the summary).
    skipped_rules: tuple[str, ...] = ()
    #: Rounds of the backdoor cells' longer horizon (0: none) and the rules run there (None: ``rules``).
    long_rounds: int = LONG_ROUNDS
    long_rules: tuple[str, ...] | None = LONG_RULES

    #: Settings run besides the product of the three axes (``cifar10-dir0.3-cnn``, say).
    extra: tuple[Setting, ...] = ()
    #: A further horizon (0: none) for the attacks in ``extended_attacks`` (and the clean run), under the long rules.
    extended_rounds: int = 0
    extended_attacks: tuple[str, ...] = ()
    #: Attacks that are no backdoor but run over the long horizon too (``frame-class``: a class that loses its
    #: holders' weight loses accuracy slowly).
    long_also: tuple[str, ...] = ()
    #: The configuration file this grid was read from (None: the command line's), as given.
    config: str | None = None

    @property
    def settings_list(self) -> list[Setting]:
        product = [Setting(d, p, m) for d in self.datasets for p in self.partitions for m in self.models]
        return product + [s for s in self.extra if s not in product]

    def needs_data(self, data_root: Path | None = None) -> dict[Setting, str]:
        """The settings whose dataset files are missing under ``data_root``, with how to get them.

        Their cells are not run (nor counted as failed) until the data is there.
        A Hugging Face dataset downloads on first use and is never listed.
        """
        from reshuffle.clients.data import dataset_spec, default_data_root

        out = {}
        for s in self.settings_list:
            spec = dataset_spec(s.dataset)
            folder = spec.folder_in(default_data_root() if data_root is None else data_root)
            missing = spec.needs(folder)
            if missing and spec.num_classes is not None:
                how = (f"`reshuffle data fetch {s.dataset} --dir {folder.parent}`" if spec.download is not None
                       else spec.source)
                out[s] = f"{s.dataset} not in {folder} ({', '.join(missing)} missing): {how}"
        return out

    @property
    def all_attacks(self) -> tuple[str, ...]:
        return (CLEAN, *(a for a in self.attacks if a != CLEAN))

    @property
    def all_rules(self) -> tuple[str, ...]:
        return self.rules if REFERENCE_RULE in self.rules else (REFERENCE_RULE, *self.rules)

    @property
    def long_attacks(self) -> tuple[str, ...]:
        """The attacks of the long horizon: the clean run and the backdoors (none when it is off)."""
        if not self.long_rounds:
            return ()
        return (CLEAN, *(a for a in self.attacks if a != CLEAN and (a in self.long_also or is_backdoor(a))))

    @property
    def all_long_rules(self) -> tuple[str, ...]:
        """The long horizon's rules of the grid, FedAvg first (under the clean run at least)."""
        rules = tuple(r for r in self.all_rules if self.long_rules is None or r in self.long_rules)
        return rules if REFERENCE_RULE in rules else (REFERENCE_RULE, *rules)

    def long_rules_of(self, attack: str) -> tuple[str, ...]:
        """The rules ``attack`` meets over the long horizon: FedAvg only when it is a long rule or the clean run."""
        named = self.long_rules is None or REFERENCE_RULE in self.long_rules
        return tuple(r for r in self.all_long_rules if r != REFERENCE_RULE or named or attack == CLEAN)

    def cells(self) -> list[Cell]:
        """Every cell: settings × (``none`` + attacks) × (FedAvg + rules) × seeds, then the long horizon's."""
        cells = [Cell(s, a, r, seed) for s in self.settings_list for a in self.all_attacks for r in self.all_rules
                 for seed in self.seeds]
        if len(self.long_attacks) > 1:
            cells += [Cell(s, a, r, seed, self.long_rounds) for s in self.settings_list for a in self.long_attacks
                      for r in self.long_rules_of(a) for seed in self.seeds]
        if self.extended_rounds and self.extended_attacks:
            # Only attacks the grid runs (a narrowed selection narrows this horizon too).
            attacks = (CLEAN, *(a for a in self.extended_attacks if a != CLEAN and a in self.attacks))
            cells += [Cell(s, a, r, seed, self.extended_rounds) for s in self.settings_list for a in attacks
                      for r in self.long_rules_of(a) for seed in self.seeds]
        return cells

    def cell_settings(self, cell: Cell, data_root: Path | None = None) -> dict[str, Any]:
        """The SimConfig mapping of ``cell``."""
        s = {**dict(self.base), "dataset": cell.setting.dataset, "model": cell.setting.model,
             **cell.setting.partition.settings(), "attack": cell.attack, "rule": cell.rule, "seed": cell.seed}
        if cell.rounds is not None:
            s["rounds"] = cell.rounds
        if self.plugins:
            s["plugins"] = list(self.plugins)
        if cell.setting.partition.kind in SKEWED_SIZES and "training" not in s:
            # Stacked training runs as many steps as the largest client needs (2–2.6× the mean at α = 0.3):
            # on skewed partitions one client at a time costs less (MNIST, MLP: 18 against 29 CPU s).
            s["training"] = "sequential"
        if cell.attack == CLEAN:
            # The clean run: every row honest, so flagged rows give the clean FPR of the rule configured as
            # under attack (it still assumes the attacked runs' number of attackers f).
            if s.get("f") is None:
                from reshuffle.run.config import SimConfig

                # The attacked runs' f: the expected attackers in a round (its cohort, with sampling).
                sizes = {k: s[k] for k in ("clients", "malicious", "fraction", "clients_per_round") if k in s}
                s["f"] = dataclasses.replace(SimConfig(), **sizes).rule_f
            s["malicious"] = 0.0
        if data_root is not None:
            from reshuffle.clients.data import dataset_spec

            spec = dataset_spec(cell.setting.dataset)
            if spec.reads_files:
                s["data_dir"] = str(spec.folder_in(data_root))
        if "eval_subset" not in s and _has_sim_field("eval_subset"):
            s["eval_subset"] = EVAL_SUBSET
        return s

    def union(self, other: "Grid") -> "Grid":
        """A grid whose every axis holds this grid's values followed by ``other``'s new ones."""
        def merge(a: tuple, b: tuple) -> tuple:
            return (*a, *(x for x in b if x not in a))

        return dataclasses.replace(
            self, datasets=merge(self.datasets, other.datasets), partitions=merge(self.partitions, other.partitions),
            attacks=merge(self.attacks, other.attacks), rules=merge(self.rules, other.rules),
            seeds=merge(self.seeds, other.seeds), models=merge(self.models, other.models),
            skipped_rules=merge(self.skipped_rules, other.skipped_rules), extra=merge(self.extra, other.extra),
            long_rules=None if self.long_rules is None or other.long_rules is None
            else merge(self.long_rules, other.long_rules))

    def describe(self) -> dict[str, Any]:
        """The grid's axes and base settings, JSON-ready."""
        return {"datasets": list(self.datasets), "partitions": [p.label for p in self.partitions],
                "models": list(self.models), "extra_settings": [s.label for s in self.extra],
                "attacks": list(self.all_attacks), "rules": list(self.all_rules),
                "seeds": list(self.seeds), "base": dict(self.base), "skipped_rules": list(self.skipped_rules),
                "long_rounds": self.long_rounds, "long_attacks": list(self.long_attacks[1:]),
                "long_rules": list(self.long_rules_of(self.long_attacks[1])) if len(self.long_attacks) > 1 else [],
                "extended_rounds": self.extended_rounds, "extended_attacks": list(self.extended_attacks),
                "long_also": list(self.long_also), "config": self.config}


def parse_setting(text: str) -> Setting:
    """``dataset:partition[:param]:model``, e.g. ``fashion-mnist:dirichlet:0.3:lenet5`` or ``mnist:iid:mlp``."""
    parts = str(text).split(":")
    if len(parts) < 3:
        raise ConfigError(f"setting {text!r}: expected dataset:partition[:param]:model")
    return Setting(parts[0], Partition.parse(":".join(parts[1:-1])), parts[-1])


def is_backdoor(attack: str) -> bool:
    """True when the registered attack ``attack`` plants a backdoor (its success is a backdoor's)."""
    from reshuffle.attacks import Backdoor, make_attack

    return isinstance(make_attack(attack), Backdoor)


def _has_sim_field(name: str) -> bool:
    from reshuffle.run.config import SimConfig

    return any(f.name == name for f in dataclasses.fields(SimConfig))


def registered_attacks() -> list[str]:
    from reshuffle.attacks import attack_names

    return attack_names()


def registered_rules() -> list[str]:
    from reshuffle.server import rule_names

    return list(rule_names())


def usable_rules(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """(rules the registry accepts, names it refuses)."""
    from reshuffle.server import check_rule_name

    ok, refused = [], []
    for r in names:
        try:
            check_rule_name(r)
        except ConfigError:
            refused.append(r)
        else:
            ok.append(r)
    return ok, refused


def default_grid(full: bool = False) -> Grid:
    """The default decision grid; ``full`` adds every registered rule, Flower's Dir(0.5), LeNet-5, CIFAR-10 with the
    CNN under Flower's Dir(0.3), FEMNIST with the CNN by writer, and 20 rounds.

    The default grid's Dirichlet partition is ``dirichlet-legacy`` (α = 0.3), the split its published results
    were computed with (label ``ldir0.3``).
    """
    rules = list(DEFAULT_RULES)
    partitions: tuple[Partition, ...] = (Partition("iid"), Partition("dirichlet-legacy", 0.3))
    models, base, extra = ("mlp",), dict(DEFAULT_BASE), ()
    if full:
        rules += [r for r in registered_rules() if r not in rules]
        partitions += (Partition("dirichlet", 0.5),)
        models += ("lenet5",)
        base["rounds"] = 20
        extra = FULL_EXTRA
    ok, refused = usable_rules(rules)
    return Grid(partitions=partitions, attacks=tuple(registered_attacks()), rules=tuple(ok), models=models,
                base=tuple(base.items()), skipped_rules=tuple(refused), extra=extra)


def check_names(kind: str, names: Iterable[str], known: Iterable[str]) -> None:
    bad = [n for n in names if n not in set(known)]
    if bad:
        raise ConfigError(f"unknown {kind}(s) {', '.join(bad)}; registered: {', '.join(sorted(set(known)))}")


def load_grid_toml(path: str | Path, base: Grid) -> Grid:
    """``base`` with the fields a grid TOML file sets."""
    from reshuffle.run.config import read_toml

    p = Path(path)
    spec = read_toml(p, "grid config")
    unknown = set(spec) - _TOML_KEYS
    if unknown:
        raise ConfigError(f"{p}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_TOML_KEYS))}")
    over: dict[str, Any] = {}
    for key in ("datasets", "attacks", "rules", "models", "plugins"):
        if key in spec:
            v = spec[key]
            if v == "all" and key in ("attacks", "rules"):
                continue  # resolved after the plugins are loaded
            if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
                raise ConfigError(f"{p}: {key} must be a list of names")
            over[key] = tuple(v)
    if "partitions" in spec:
        over["partitions"] = tuple(Partition.parse(x) for x in spec["partitions"])
    if "seeds" in spec:
        over["seeds"] = tuple(spec["seeds"])
    if "long_rounds" in spec:
        v = spec["long_rounds"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{p}: long_rounds must be a non-negative int (0: no long horizon), got {v!r}")
        over["long_rounds"] = v
    if "extended_rounds" in spec:
        v = spec["extended_rounds"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{p}: extended_rounds must be a non-negative int (0: none), got {v!r}")
        over["extended_rounds"] = v
    if "extended_attacks" in spec:
        v = spec["extended_attacks"]
        if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise ConfigError(f"{p}: extended_attacks must be a list of names")
        over["extended_attacks"] = tuple(v)
    if "long_also" in spec:
        v = spec["long_also"]
        if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise ConfigError(f"{p}: long_also must be a list of attack names")
        over["long_also"] = tuple(v)
    if "extra_settings" in spec:
        v = spec["extra_settings"]
        if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise ConfigError(f"{p}: extra_settings must be a list of \"dataset:partition[:param]:model\" strings")
        over["extra"] = tuple(parse_setting(x) for x in v)
    if "long_rules" in spec:
        v = spec["long_rules"]
        if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise ConfigError(f"{p}: long_rules must be a list of names")
        over["long_rules"] = tuple(v)
    if "base" in spec:
        if not isinstance(spec["base"], dict):
            raise ConfigError(f"{p}: [base] must be a table of simulate settings")
        over["base"] = tuple({**dict(base.base), **spec["base"]}.items())
    grid = dataclasses.replace(base, **over, config=str(path))
    if grid.plugins:
        from reshuffle.run.config import load_plugins

        load_plugins(list(grid.plugins))
    if spec.get("attacks") == "all":
        grid = dataclasses.replace(grid, attacks=tuple(registered_attacks()))
    if spec.get("rules") == "all":
        grid = dataclasses.replace(grid, rules=tuple(registered_rules()))
    stray = [r for r in spec.get("long_rules", ()) if r not in grid.all_rules]
    if stray:
        raise ConfigError(f"{p}: long_rules {', '.join(stray)} are not rules of the grid ({', '.join(grid.all_rules)})")
    return grid


def validate(grid: Grid) -> Grid:
    """Check every axis (names, seeds, base settings through SimConfig); return ``grid``."""
    from reshuffle.clients.data import dataset_names, dataset_spec
    from reshuffle.clients.catalog import model_names

    check_names("dataset", [d for d in grid.datasets if not d.startswith("hf:")], dataset_names())
    for d in grid.datasets:
        dataset_spec(d)
    check_names("model", [*grid.models, *(s.model for s in grid.extra)], model_names())
    check_names("attack", grid.attacks, registered_attacks())
    check_names("extended attack", grid.extended_attacks, registered_attacks())
    check_names("long attack", grid.long_also, registered_attacks())
    _, refused = usable_rules(grid.rules)
    if refused:
        raise ConfigError(f"unknown rule(s) {', '.join(refused)}; registered: {', '.join(registered_rules())}")
    for name, axis in (("datasets", grid.datasets), ("partitions", grid.partitions), ("attacks", grid.all_attacks),
                       ("rules", grid.rules), ("seeds", grid.seeds), ("models", grid.models)):
        if not axis:
            raise ConfigError(f"the grid has no {name}")
    for s in grid.seeds:
        if not isinstance(s, int) or isinstance(s, bool) or s < 0:
            raise ConfigError(f"seeds must be non-negative ints, got {s!r}")
    from reshuffle.run.config import from_mapping

    # One representative cell per setting checks the base settings before anything runs.
    for setting in grid.settings_list:
        from_mapping(grid.cell_settings(Cell(setting, grid.all_attacks[-1], grid.rules[0], grid.seeds[0])),
                     source="grid")
    return grid


@dataclass
class Selection:
    """Command-line narrowing of a grid (None: keep the grid's axis)."""

    datasets: list[str] | None = None
    partitions: list[str] | None = None
    attacks: list[str] | None = None
    rules: list[str] | None = None
    seeds: list[int] | None = None
    models: list[str] | None = None
    rounds: int | None = None
    long_rounds: int | None = None
    #: Base settings every cell takes (None: the grid's): client sampling and the server optimiser.
    fraction: float | None = None
    server_opt: str | None = None
    server_lr: float | None = None

    def apply(self, grid: Grid) -> Grid:
        over: dict[str, Any] = {}
        if self.datasets:
            over["datasets"] = tuple(self.datasets)
        if self.partitions:
            over["partitions"] = tuple(Partition.parse(p) for p in self.partitions)
        if self.attacks:
            over["attacks"] = tuple(self.attacks)
        if self.rules:
            over["rules"] = tuple(self.rules)
            over["skipped_rules"] = ()
        if self.seeds:
            over["seeds"] = tuple(self.seeds)
        if self.models:
            over["models"] = tuple(self.models)
        # An extra setting stays when the narrowed axes still hold its dataset, partition and model.
        keep = {"datasets": lambda s: s.dataset, "partitions": lambda s: s.partition, "models": lambda s: s.model}
        over["extra"] = tuple(s for s in grid.extra if all(get(s) in over[axis] for axis, get in keep.items()
                                                           if axis in over))
        return dataclasses.replace(grid, **over)

    def apply_base(self, grid: Grid) -> Grid:
        """``grid`` with the base settings this selection changes (they change every cell)."""
        given = {"rounds": self.rounds, "fraction": self.fraction, "server_opt": self.server_opt,
                 "server_lr": self.server_lr}
        base = dict(grid.base) | {k: v for k, v in given.items() if v is not None}
        long = grid.long_rounds if self.long_rounds is None else self.long_rounds
        return dataclasses.replace(grid, base=tuple(base.items()), long_rounds=long)
