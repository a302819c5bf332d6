"""Keys and roster for Re-Shuffle on Flower.

Two sources, chosen on each side by its own configuration, never by the other side:

- **Deployment**: files made by ``reshuffle ca`` (``docs/crypto.md``). A SuperNode
  names them in its own ``node_config`` (``reshuffle-key-dir``,
  ``reshuffle-participant-id``); the ServerApp passes ``key_dir`` to
  :class:`~reshuffle.flower.grid.ReshuffleGrid`.
- **Simulation**: keys derived from the run id, so nothing has to be provisioned.
  Anyone who knows the run id can derive every key: they authenticate nothing and
  exist only so that the protocol can run. Anonymity does not rest on them (every
  participant's round secrets come from OS randomness), but a node holding key
  files never accepts a simulation round.

A node claims a participant id only by signing ``(run id, T, node id)`` with that
participant's key (:func:`claim` / :func:`verify_claim`), so a node cannot take
another's place in the roster, nor replay a claim into another round or run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Mapping

from reshuffle.crypto.domain import label
from reshuffle.crypto.signatures import (
    ROLE_SERVER, SERVER_ID, Certificate, CertificateAuthority, SigningKey, load_identity,
)
from reshuffle.errors import ConfigError

NODE_KEY_DIR = "reshuffle-key-dir"
NODE_PARTICIPANT_ID = "reshuffle-participant-id"
SIM_PARTITION_ID = "partition-id"  # set by Flower's simulation engine
MODE_FILES, MODE_SIMULATION = "files", "simulation"
CLAIM_CONTEXT = "flower-claim"


@dataclass(frozen=True)
class Identity:
    """A participant's id, signing key, certificate and the CA's verifier."""

    pid: int
    key: SigningKey = field(repr=False)
    cert: Certificate
    ca: CertificateAuthority


def _sim_ca(run_id: int) -> CertificateAuthority:
    return CertificateAuthority.from_seed(hashlib.sha256(label("flower/sim-ca", run_id)).digest())


def simulation_participant(run_id: int, pid: int) -> Identity:
    """Run-derived participant keys (simulation only: they authenticate nothing)."""
    ca = _sim_ca(run_id)
    sk = SigningKey.from_seed(hashlib.sha256(label("flower/sim-participant", run_id, pid)).digest())
    return Identity(pid, sk, ca.issue(pid, sk.verify_key), CertificateAuthority.verifier(ca.verify_key))


def simulation_server(run_id: int) -> tuple[SigningKey, Certificate, CertificateAuthority]:
    ca = _sim_ca(run_id)
    sk = SigningKey.from_seed(hashlib.sha256(label("flower/sim-server", run_id)).digest())
    return sk, ca.issue(SERVER_ID, sk.verify_key, ROLE_SERVER), CertificateAuthority.verifier(ca.verify_key)


def server_identity(key_dir: str | None, run_id: int) -> tuple[SigningKey, Certificate, CertificateAuthority]:
    """The PS key, certificate and CA verifier: from ``key_dir`` or, without it, simulation keys."""
    if not key_dir:
        return simulation_server(run_id)
    sk, cert = load_identity(key_dir, SERVER_ID, ROLE_SERVER)
    return sk, cert, CertificateAuthority.load(key_dir, public_only=True)


def node_mode(node_config: Mapping[str, object]) -> str:
    """``files`` if the node's own config names key files, else ``simulation``."""
    has_dir, has_id = NODE_KEY_DIR in node_config, NODE_PARTICIPANT_ID in node_config
    if has_dir != has_id:
        raise ConfigError(f"node config must set both {NODE_KEY_DIR} and {NODE_PARTICIPANT_ID}, or neither")
    return MODE_FILES if has_dir else MODE_SIMULATION


def node_identity(node_config: Mapping[str, object], run_id: int) -> Identity:
    """This node's participant identity, from its own ``node_config`` only."""
    if node_mode(node_config) == MODE_FILES:
        key_dir, pid = str(node_config[NODE_KEY_DIR]), int(node_config[NODE_PARTICIPANT_ID])  # type: ignore[arg-type]
        sk, cert = load_identity(key_dir, pid)
        return Identity(pid, sk, cert, CertificateAuthority.load(key_dir, public_only=True))
    if SIM_PARTITION_ID not in node_config:
        raise ConfigError(
            f"no Re-Shuffle keys: set {NODE_KEY_DIR} and {NODE_PARTICIPANT_ID} in the node config "
            f"(or run in Flower's simulation, which sets {SIM_PARTITION_ID})"
        )
    return simulation_participant(run_id, int(node_config[SIM_PARTITION_ID]))  # type: ignore[arg-type]


def _claim_bytes(run_id: int, T: int, node_id: int) -> bytes:
    return label("flower/claim", run_id, T, node_id)


def claim(identity: Identity, run_id: int, T: int, node_id: int) -> bytes:
    """The node's proof that it holds ``identity``'s key, bound to this run, round and node."""
    return identity.key.sign(CLAIM_CONTEXT, _claim_bytes(run_id, T, node_id))


def verify_claim(ca: CertificateAuthority, pid: int, cert: Certificate, proof: bytes,
                 run_id: int, T: int, node_id: int) -> None:
    """Raise a :class:`ProtocolError` unless ``cert`` certifies ``pid`` and ``proof`` signs (run, T, node)."""
    ca.verify(cert, subject=pid)
    cert.key.verify(CLAIM_CONTEXT, _claim_bytes(run_id, T, node_id), proof)
