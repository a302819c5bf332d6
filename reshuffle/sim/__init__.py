"""Simulated federations: ``Simulation(SimConfig(...)).run()`` and the ``reshuffle simulate`` CLI.

Names resolve lazily: importing the settings does not import torch.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "SHUFFLES": "config", "SimConfig": "config", "from_mapping": "config", "load_toml": "config",
    "metrics": "report", "write_outputs": "report",
    "RoundRecord": "simulator", "Simulation": "simulator", "canonical_order": "simulator",
    "observed_updates": "simulator",
}


def simulate(cfg, out_dir=None, on_round=None, plots: bool = True) -> dict:
    """Run ``cfg``; write outputs to ``out_dir`` if given; return the metrics.json object."""
    from reshuffle.sim.report import write_outputs
    from reshuffle.sim.simulator import Simulation

    sim = Simulation(cfg)
    data = sim.result(sim.run(on_round))
    if out_dir is not None:
        write_outputs(out_dir, data, plots=plots)
    return data


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"reshuffle.sim.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'reshuffle.sim' has no attribute {name!r}")


__all__ = ["simulate", *_WHERE]
