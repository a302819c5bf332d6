"""What the project's Flower ServerApp and ClientApp share: record keys and run-config parsing."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from reshuffle.errors import ConfigError
from reshuffle.protocol.params import smallest_round
from reshuffle.run.config import SimConfig, from_mapping

ARRAYS, CONFIG, METRICS = "arrays", "config", "metrics"
ATTACKER_METRIC = "reshuffle-attacker"  # only in replies of nodes whose own node_config enables scoring

# Keys a server might send to make a node attack or score; a node refuses them (docs/security/threat-model.md).
FORBIDDEN_CONFIG = ("attack", "score", "score-detection", "malicious", "attack-options")

# Run-config keys that are not SimConfig settings.
FLOWER_KEYS = {"out-dir", "phase-timeout", "train-timeout", "round-timeout", "key-dir", "r-max", "resume",
               "overwrite"}


@dataclass(frozen=True)
class FlowerSettings:
    sim: SimConfig
    out_dir: str
    phase_timeout: float
    train_timeout: float
    round_timeout: float
    key_dir: str
    r_max: int | None = None  # reservation iterations (RoundParams.R_max); None: the protocol's default
    resume: str = ""  # output folder of an earlier run to continue from its checkpoint; "": a new run
    overwrite: bool = False  # a new run may replace the run in out_dir


def _positive(run_config: dict[str, Any], key: str, default: float) -> float:
    v = float(run_config.get(key, default))
    if v <= 0:
        raise ConfigError(f"{key} must be positive, got {v}")
    return v


def settings(run_config: dict[str, Any]) -> FlowerSettings:
    """Split Flower's run config into SimConfig keys (names as in ``reshuffle simulate``) and ours."""
    if str(run_config.get("attack", "none")) != "none" or float(run_config.get("malicious", 0.0) or 0.0):
        raise ConfigError(
            "on Flower, only a node's own node_config enables an attack (attack=\"sign-flip\"); "
            "the run config, which the server side chooses, cannot: keep attack = \"none\" and malicious = 0"
        )
    sim_values = {k: v for k, v in run_config.items() if k not in FLOWER_KEYS and v != ""}
    if "clients" in sim_values:
        raise ConfigError("clients is the number of connected nodes on Flower; sample them with fraction "
                          "or clients-per-round")
    # A stand-in for the nodes that connect: the fewest for which the sampling settings give the smallest round.
    least = smallest_round()
    per_round, frac = sim_values.get("clients-per-round"), sim_values.get("fraction", 1.0)
    stand_in = per_round if isinstance(per_round, int) and per_round > least else least
    if isinstance(frac, (int, float)) and not isinstance(frac, bool) and 0 < frac < 1:
        stand_in = max(stand_in, math.ceil(least / frac))
    sim_values["clients"] = stand_in
    sim = from_mapping(sim_values, source="run config")
    if sim.shuffle != "real":
        raise ConfigError("the Flower apps always run the real protocol; set shuffle = \"real\"")
    if sim.stable_sets and sim.group_size is not None:
        raise ConfigError("group-size and stable sets both size the anonymity groups: set set-size "
                          "(stable groups, the default) or stable-sets = false with group-size")
    r_max = run_config.get("r-max", "")
    if r_max != "":
        if isinstance(r_max, bool) or not isinstance(r_max, int) or not 1 <= r_max <= 64:
            raise ConfigError(f"r-max must be an integer in 1..64 (reservation iterations), got {r_max!r}")
    phase = _positive(run_config, "phase-timeout", 60.0)
    train = _positive(run_config, "train-timeout", 600.0)
    return FlowerSettings(
        sim, str(run_config.get("out-dir", "")), phase, train,
        _positive(run_config, "round-timeout", train + 30 * phase), str(run_config.get("key-dir", "")),
        None if r_max == "" else r_max, str(run_config.get("resume", "")), _flag(run_config, "overwrite"),
    )


def _flag(run_config: dict[str, Any], key: str) -> bool:
    v = run_config.get(key, False)
    if not isinstance(v, bool):
        raise ConfigError(f"{key} must be true or false, got {v!r}")
    return v


def resume_identity(s: FlowerSettings) -> dict[str, Any]:
    """The settings a resumed run must share with the run it continues.

    Everything that shapes the model's trajectory; not the output folder, the timeouts
    or the number of nodes, which a restarted deployment may change.
    """
    ident = {k: v for k, v in s.sim.as_dict().items() if k not in ("out", "clients")}
    ident["r_max"] = s.r_max
    return ident
