"""What the Flower ServerApp and ClientApp share: message types, record keys, run config."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from reshuffle.crypto.signatures import CertificateAuthority, SigningKey
from reshuffle.errors import ConfigError
from reshuffle.sim.config import SimConfig, from_mapping

# Message types: one for local training, one for every protocol message.
MSG_LOCAL = "train.local"
MSG_PROTOCOL = "train.reshuffle"
RECORD = "reshuffle"  # the ConfigRecord holding our fields in every message
STATE = "reshuffle-state"  # the ConfigRecord in the ClientApp's Context

# Run-config keys that are not SimConfig settings.
FLOWER_KEYS = {"out-dir", "phase-timeout", "train-timeout", "key-dir", "sim-key-seed", "score-detection"}


@dataclass(frozen=True)
class FlowerSettings:
    sim: SimConfig
    out_dir: str
    phase_timeout: float
    train_timeout: float
    key_dir: str
    sim_key_seed: str
    score_detection: bool


def settings(run_config: dict[str, Any]) -> FlowerSettings:
    """Split Flower's run config into SimConfig keys (names as in ``reshuffle simulate``) and ours."""
    sim_values = {k: v for k, v in run_config.items() if k not in FLOWER_KEYS}
    sim_values.setdefault("clients", 2)  # replaced by the number of nodes that answer
    sim = from_mapping({k: v for k, v in sim_values.items() if v != ""}, source="run config")
    if sim.shuffle != "real":
        raise ConfigError("the Flower apps always run the real protocol; set shuffle = \"real\"")
    timeout = float(run_config.get("phase-timeout", 60.0))
    if timeout <= 0:
        raise ConfigError(f"phase-timeout must be positive, got {timeout}")
    return FlowerSettings(
        sim, str(run_config.get("out-dir", "")), timeout, float(run_config.get("train-timeout", 600.0)),
        str(run_config.get("key-dir", "")), str(run_config.get("sim-key-seed", "")),
        bool(run_config.get("score-detection", True)),
    )


def simulation_identity(seed: str, pid: int) -> tuple[CertificateAuthority, SigningKey]:
    """Keys derived from a shared seed, for simulations only: anyone with the seed has every key."""
    if not seed:
        raise ConfigError("set key-dir (CA files) or, for simulations only, sim-key-seed")
    ca = CertificateAuthority.from_seed(hashlib.sha256(b"reshuffle/flower/ca" + seed.encode()).digest())
    sk = SigningKey.from_seed(hashlib.sha256(b"reshuffle/flower/participant" + seed.encode() + pid.to_bytes(4, "big")).digest())
    return ca, sk


def model_digest(W: np.ndarray) -> bytes:
    """Digest of Dec(Enc(W)), the form in which the PS recovers a model (for scoring only)."""
    from reshuffle.crypto.encoding import FixedPoint

    return hashlib.sha256(FixedPoint().roundtrip(np.asarray(W, np.float32)).tobytes()).digest()
