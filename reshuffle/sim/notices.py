"""One line for every setting a simulation ignores, rounds or changes, said before the first round.

:func:`option_notices` reads the settings alone (``given``: the ones the user set,
on the command line or in a config file); :func:`run_notices` what the built
simulation knows besides (its stable sets, its model and its data).
"""

from __future__ import annotations

import math
from typing import Iterable

from reshuffle.run.config import SimConfig

#: partition → the setting that parametrises it (the others ignore it).
_PARTITION_OPTIONS = {"alpha": ("dirichlet", "dirichlet-legacy"), "classes_per_client": ("pathological",),
                      "shards_per_client": ("shard",)}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _whole(x: float) -> bool:
    return math.isclose(x, round(x), abs_tol=1e-9)


def option_notices(cfg: SimConfig, given: Iterable[str]) -> list[str]:
    """The settings of ``cfg`` that are ignored or rounded, one line each; ``given`` names those set by the user."""
    given = set(given)
    out = []
    if "set_size" in given and not cfg.stable_sets:
        out.append(f"{_flag('set_size')} {cfg.set_size} is ignored: --no-stable-sets samples and delivers each "
                   f"client on its own")
    for name, partitions in _PARTITION_OPTIONS.items():
        if name in given and cfg.partition not in partitions:
            out.append(f"{_flag(name)} is ignored: it parametrises partition {' or '.join(partitions)}, "
                       f"not {cfg.partition}")
    if "dp_delta" in given and cfg.dp_clip is None:
        out.append(f"{_flag('dp_delta')} is ignored without --dp-clip (no DP, no ε)")
    if "group" in given and cfg.shuffle != "real":
        out.append(f"{_flag('group')} {cfg.group} is ignored: shuffle {cfg.shuffle!r} runs no protocol")
    exact = cfg.malicious * cfg.clients
    if not _whole(exact):
        out.append(f"--malicious {cfg.malicious:g} of {cfg.clients} clients is {exact:g}: {cfg.n_malicious} "
                   f"attackers")
    if cfg.clients_per_round is None and not cfg.stable_sets and not _whole(cfg.fraction * cfg.clients):
        out.append(f"--fraction {cfg.fraction:g} of {cfg.clients} clients is {cfg.fraction * cfg.clients:g}: "
                   f"{cfg.cohort_size} sampled per round")
    if cfg.dropout and not cfg.stable_sets and not _whole(cfg.dropout * cfg.cohort_size):
        out.append(f"--dropout {cfg.dropout:g} of a round's {cfg.cohort_size} clients is "
                   f"{cfg.dropout * cfg.cohort_size:g}: {cfg.n_dropout} drop out per round")
    return out


def run_notices(sim) -> list[str]:
    """What the built :class:`~reshuffle.sim.simulator.Simulation` changes: whole stable sets sampled instead of
    the count asked for, sets larger than ``set_size``, settings its model or data make moot."""
    cfg, out = sim.cfg, []
    if sim.sets is not None:
        sizes = sorted(len(s) for s in sim.sets.sets)
        if sizes[-1] != cfg.set_size:
            out.append(f"{cfg.clients} clients form {len(sizes)} stable sets of {_sizes(sizes)} (set_size "
                       f"{cfg.set_size} is the least)")
        if cfg.cohort_size < cfg.clients:
            g = sim.rounds.sampler.count(cfg.clients)
            drawn = sizes[:g] if sizes[0] == sizes[-1] else None
            per = f"{sum(drawn)} clients" if drawn else f"{g * sizes[0]} to {sum(sizes[-g:])} clients"
            asked = (f"--clients-per-round {cfg.clients_per_round}" if cfg.clients_per_round is not None
                     else f"--fraction {cfg.fraction:g}")
            if drawn is None or sum(drawn) != cfg.cohort_size:
                out.append(f"{asked} asks for {cfg.cohort_size} clients per round; stable sets are sampled whole: "
                           f"{g} of {len(sizes)} sets, {per} per round")
        if cfg.dropout:
            out.append(f"--dropout {cfg.dropout:g}: a set that loses a member delivers none of its models")
    if cfg.local_bn and not sim.training.layout.local:
        out.append(f"--local-bn is ignored: model {cfg.model} has no BatchNorm layer")
    shape = sim.data.input_shape
    if cfg.model == "resnet18" and len(shape) == 3 and min(shape[1:]) < 32:
        out.append(f"model resnet18 is built for 32×32 images: its stages shrink {shape[1]}×{shape[2]} inputs to "
                   f"{max(shape[1] // 8, 1)}×{max(shape[2] // 8, 1)}; it trains, but lenet5 or cnn suit "
                   f"{cfg.dataset} better")
    if cfg.eval_subset is not None and cfg.eval_subset >= len(sim.data.y_test):
        out.append(f"--eval-subset {cfg.eval_subset} is ignored: the test set holds {len(sim.data.y_test)} samples, "
                   f"all evaluated")
    return out


def _sizes(sizes: list[int]) -> str:
    lo, hi = sizes[0], sizes[-1]
    return str(lo) if lo == hi else f"{lo} to {hi}"
