"""Simulated federations: ``Simulation(SimConfig(...)).run()`` and the ``reshuffle simulate`` CLI.

Names resolve lazily: importing the settings does not import torch.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "SHUFFLES": "config", "SimConfig": "config", "from_mapping": "config", "load_toml": "config",
    "metrics": "report", "write_metrics": "report", "write_outputs": "report",
    "RoundRecord": "record", "Simulation": "simulator", "canonical_order": "simulator",
    "observed_updates": "simulator",
}


def simulate(cfg, out_dir=None, on_round=None, plots: bool = True) -> dict:
    """Run ``cfg``; return the metrics.json object.

    With ``out_dir``, metrics.json and metrics.csv are rewritten atomically
    after every round (a run stopped at any point keeps its finished rounds)
    and the plots are drawn at the end.
    """
    from reshuffle.sim.report import write_metrics, write_outputs
    from reshuffle.sim.simulator import Simulation

    sim = Simulation(cfg)
    records: list = []  # sim.run extends it before each callback

    def each(rec) -> None:
        if out_dir is not None:
            write_metrics(out_dir, sim.result(records))
        if on_round:
            on_round(rec)

    data = sim.result(sim.run(each, records))
    if out_dir is not None:
        write_outputs(out_dir, data, plots=plots)
    return data


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"reshuffle.sim.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'reshuffle.sim' has no attribute {name!r}")


__all__ = ["simulate", *_WHERE]
