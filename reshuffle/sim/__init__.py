"""Simulated federations: ``Simulation(SimConfig(...)).run()`` and the ``reshuffle simulate`` CLI.

The settings, records, outputs and checkpoints of a run are :mod:`reshuffle.run`'s
(the Flower apps share them); they are named here too. Names resolve lazily:
importing the settings does not import torch.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "SHUFFLES": "reshuffle.run.config", "SimConfig": "reshuffle.run.config", "from_mapping": "reshuffle.run.config",
    "load_toml": "reshuffle.run.config", "metrics": "reshuffle.run.report", "write_metrics": "reshuffle.run.report",
    "write_outputs": "reshuffle.run.report", "RoundRecord": "reshuffle.run.record",
    "Simulation": "reshuffle.sim.simulator", "canonical_order": "reshuffle.sim.simulator",
    "observed_updates": "reshuffle.sim.attackers",
}


def simulate(cfg, out_dir=None, on_round=None, plots: bool = True) -> dict:
    """Run ``cfg``; return the metrics.json object.

    With ``out_dir``, metrics.json and metrics.csv are rewritten atomically
    after every round (a run stopped at any point keeps its finished rounds)
    and the plots are drawn at the end.
    """
    from reshuffle.run.report import write_metrics, write_outputs
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
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'reshuffle.sim' has no attribute {name!r}")


__all__ = ["simulate", *_WHERE]
