"""Checkpoints: what a run needs to continue after its last finished round.

One file, ``checkpoint.npz`` in the run's output folder: the arrays (global model,
...) as ``.npy`` members and one JSON document (round, configuration and its hash,
metrics so far, the carried state) as the member ``meta``. It is loaded with
``allow_pickle=False``; nothing in it is executable.

A save is atomic: the new checkpoint is written to a temporary file in the same
folder, flushed to disk, then renamed over the old one, so the previous checkpoint
stays whole until the new one is complete, and a run killed at any instant leaves
one of the two. A loaded checkpoint is checked member by member (the zip's CRC, the
recorded SHA-256, dtype and shape of every array); a damaged or truncated file
raises :class:`CheckpointError`, never a partial state.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from reshuffle.crypto.domain import label
from reshuffle.errors import ConfigError

FILE = "checkpoint.npz"
FORMAT = "reshuffle-checkpoint/1"
META = "meta"
_ARRAY = "a."  # member-name prefix of the arrays


class CheckpointError(ConfigError):
    """A checkpoint is missing, damaged, truncated, or belongs to another configuration."""


@dataclass(frozen=True)
class Checkpoint:
    """The state after round ``round`` of a run of kind ``kind`` (``simulate``, ``flower``)."""

    kind: str
    round: int
    config: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def config_hash(self) -> str:
        return config_hash(self.config)


def _canonical(obj: Any) -> bytes:
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"checkpoint state is not JSON data: {exc}") from None


def config_hash(config: dict[str, Any]) -> str:
    """SHA-256 (hex) of the configuration's canonical JSON, domain-separated."""
    return hashlib.sha256(label("checkpoint/config") + _canonical(config)).hexdigest()


def path_of(folder: str | Path) -> Path:
    return Path(folder) / FILE


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(a.tobytes(order="C")).hexdigest()


def save(folder: str | Path, ckpt: Checkpoint) -> Path:
    """Write ``ckpt`` to ``folder/checkpoint.npz`` atomically; return the path."""
    folder = Path(folder)
    for name, a in ckpt.arrays.items():
        if not isinstance(a, np.ndarray) or a.dtype == object:
            raise ConfigError(f"checkpoint array {name!r} must be a numeric numpy array")
    meta = {
        "format": FORMAT, "kind": ckpt.kind, "round": int(ckpt.round), "config": ckpt.config,
        "config_hash": ckpt.config_hash, "state": ckpt.state, "order": list(ckpt.arrays),
        "arrays": {n: {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": _digest(a)}
                   for n, a in ckpt.arrays.items()},
    }
    members = {META: np.frombuffer(_canonical(meta), dtype=np.uint8)}
    members.update({_ARRAY + n: a for n, a in ckpt.arrays.items()})
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create checkpoint folder {folder}: {exc}") from None
    final = path_of(folder)
    tmp = folder / f".{FILE}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **members)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    # The rename itself reaches the disk with the folder's entry.
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return final


def load(folder: str | Path, kind: str | None = None) -> Checkpoint:
    """The checkpoint in ``folder``, checked whole; ``kind`` must match if given."""
    p = path_of(folder)
    if not p.is_file():
        raise CheckpointError(f"no checkpoint in {Path(folder)} (expected {p})")
    try:
        with np.load(p, allow_pickle=False) as z:
            names = set(z.files)
            if META not in names:
                raise CheckpointError(f"{p} is not a Re-Shuffle checkpoint (no {META!r} member)")
            meta = json.loads(z[META].tobytes())
            arrays = {n[len(_ARRAY):]: z[n] for n in names if n.startswith(_ARRAY)}
    except CheckpointError:
        raise
    except Exception as exc:  # zipfile and numpy raise many types for damaged bytes (even NotImplementedError)
        raise CheckpointError(f"{p} is damaged or truncated ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{p}: unknown checkpoint format {meta.get('format') if isinstance(meta, dict) else meta!r}")
    for key, typ in (("kind", str), ("round", int), ("config", dict), ("state", dict), ("arrays", dict),
                     ("config_hash", str)):
        if not isinstance(meta.get(key), typ) or isinstance(meta.get(key), bool):
            raise CheckpointError(f"{p}: field {key!r} missing or not a {typ.__name__}")
    if meta["round"] < 0:
        raise CheckpointError(f"{p}: round {meta['round']} is negative")
    if kind is not None and meta["kind"] != kind:
        raise CheckpointError(f"{p} is a checkpoint of a {meta['kind']!r} run, not of a {kind!r} run")
    order = meta.get("order")
    if not isinstance(order, list) or set(order) != set(meta["arrays"]) or set(order) != set(arrays):
        raise CheckpointError(f"{p}: arrays {sorted(arrays)} do not match the recorded {sorted(meta['arrays'])}")
    arrays = {n: arrays[n] for n in order}  # the saver's order (an ArrayRecord's layers, say)
    for n, a in arrays.items():
        want = meta["arrays"][n]
        if (a.dtype.str, list(a.shape), _digest(a)) != (want.get("dtype"), want.get("shape"), want.get("sha256")):
            raise CheckpointError(f"{p}: array {n!r} does not match its recorded dtype, shape or SHA-256")
    ckpt = Checkpoint(meta["kind"], meta["round"], meta["config"], arrays, meta["state"])
    if ckpt.config_hash != meta["config_hash"]:
        raise CheckpointError(f"{p}: the configuration does not match its recorded hash")
    return ckpt


def check_config(ckpt: Checkpoint, config: dict[str, Any], where: str, defaults: dict[str, Any] | None = None,
                 exempt: frozenset[str] = frozenset()) -> None:
    """Raise :class:`CheckpointError` naming every setting in which ``config`` differs from the checkpoint's.

    A setting the checkpoint predates counts as its value in ``defaults`` (this version's default);
    settings in ``exempt`` may differ.
    """
    if config_hash(config) == ckpt.config_hash:
        return
    defaults = defaults or {}
    recorded = {**{k: v for k, v in defaults.items() if k in config}, **ckpt.config}
    keys = sorted((set(config) | set(recorded)) - exempt)
    diff = [f"{k}: {recorded.get(k)!r} in the checkpoint, {config.get(k)!r} now" for k in keys
            if _canonical(config.get(k)) != _canonical(recorded.get(k))]
    if diff:
        raise CheckpointError(f"{where} was checkpointed with another configuration ({'; '.join(diff)}); "
                              "a run resumes only with the settings it started with")


# --- reshuffle simulate --------------------------------------------------------------
SIMULATE = "simulate"


#: Settings a resumed simulation takes from its command line, not from the checkpoint: where the data
#: lies (a checkpoint never names a path that is read), the plug-ins (never a module that is imported:
#: they are checked against the recorded hashes), and the rounds (a finished run may be extended).
RESUME_GIVEN = frozenset({"data_dir", "plugins", "rounds"})


def run_identity(cfg) -> dict[str, Any]:
    """A simulation's settings as a checkpoint records them: all but the output folder."""
    return {k: v for k, v in cfg.as_dict().items() if k != "out"}


def simulation_checkpoint(sim, records: list) -> Checkpoint:
    """The checkpoint of ``sim`` after its last round, with ``records`` (every round so far)."""
    from dataclasses import asdict

    arrays, state = sim.state()
    return Checkpoint(SIMULATE, state["round"], run_identity(sim.cfg), arrays,
                      {"simulation": state, "rounds": [asdict(r) for r in records], "plugins": dict(sim.plugins)})


def load_simulation(folder: str | Path, plugins: list[str] = (), data_dir: str | None = None,
                    rounds: int | None = None) -> tuple[Any, Checkpoint]:
    """(configuration, checkpoint) of the simulation whose output folder is ``folder``.

    The checkpoint's settings are taken but for :data:`RESUME_GIVEN`: ``plugins`` must be
    the plug-ins the run recorded, with the same source files (checked by hash before any is
    imported; the checkpoint's own list is never imported), ``data_dir`` is where the data
    lies now (None: the default), and ``rounds`` extends a run (None: the recorded rounds).
    The configuration is rebuilt and validated by this version of Re-Shuffle; one it reads
    differently (a setting added, removed or changed) is refused.
    """
    from reshuffle.run.config import PREDATED, SimConfig, from_mapping, recorded_defaults
    from reshuffle.run.plugins import check_recorded

    ck = load(folder, kind=SIMULATE)
    names, hashes = ck.config.get("plugins", []), ck.state.get("plugins", {})
    if not isinstance(names, list) or not isinstance(hashes, dict) or set(names) != set(hashes) \
            or not all(isinstance(h, str) for h in hashes.values()):
        raise CheckpointError(f"{path_of(folder)}: the plug-ins it names have no recorded source hashes "
                              "(a checkpoint of an older version); start the run again")
    try:
        check_recorded(hashes, list(plugins), f"resuming {folder}")
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from None
    recorded_rounds = ck.config.get("rounds")
    if rounds is not None and isinstance(recorded_rounds, int) and rounds < ck.round:
        raise CheckpointError(f"--rounds {rounds}: the run in {folder} has finished {ck.round} rounds already")
    given = {"plugins": list(plugins), "data_dir": data_dir,
             "rounds": recorded_rounds if rounds is None else rounds, "out": str(folder)}
    try:
        recorded = {**PREDATED, **{k: v for k, v in ck.config.items() if k not in RESUME_GIVEN}}
        cfg = from_mapping({**recorded, **given}, SimConfig(), source=f"checkpoint in {folder}")
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from None
    check_config(ck, run_identity(cfg), f"the simulation in {folder}", recorded_defaults(), RESUME_GIVEN)
    return cfg, ck


def round_record(d: Any, where: Path):
    """The :class:`~reshuffle.run.record.RoundRecord` stored as ``d`` (``asdict``) in the checkpoint at ``where``."""
    from reshuffle.run.record import RoundRecord

    try:
        r = RoundRecord(**d)
        # JSON object keys are strings; the records use client numbers.
        r.lost = {int(k): v for k, v in r.lost.items()}
        r.blamed = {int(k): v for k, v in r.blamed.items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{where}: a round record does not match this version ({exc})") from None
    return r


def restore_simulation(sim, ck: Checkpoint) -> list:
    """Put ``sim`` (built from the checkpoint's configuration) after the checkpoint's round; return its records."""
    where = Path("checkpoint") if sim.cfg.out is None else path_of(sim.cfg.out)
    from reshuffle.run.config import recorded_defaults

    check_config(ck, run_identity(sim.cfg), "this simulation", recorded_defaults(), RESUME_GIVEN)
    state, rounds = ck.state.get("simulation"), ck.state.get("rounds")
    if (not isinstance(state, dict) or state.get("round") != ck.round or not isinstance(state.get("banned"), dict)
            or not isinstance(rounds, list) or len(rounds) != ck.round):
        raise CheckpointError(f"{where}: simulation state incomplete for round {ck.round}")
    if ck.round > sim.cfg.rounds:
        raise CheckpointError(f"{where}: round {ck.round} is past the run's {sim.cfg.rounds} rounds")
    if dict(ck.state.get("plugins", {})) != dict(sim.plugins):
        raise CheckpointError(f"{where}: the simulation's plug-ins {sim.plugins} are not the checkpoint's "
                              f"{ck.state.get('plugins', {})}")
    records = [round_record(r, where) for r in rounds]
    if [r.round for r in records] != list(range(1, ck.round + 1)):
        raise CheckpointError(f"{where}: the round records are not rounds 1..{ck.round}")
    try:
        sim.restore(dict(ck.arrays), state)
    except ConfigError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    return records
