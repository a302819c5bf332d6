"""Simulated federations: ``Simulation(SimConfig(...)).run()`` and the ``reshuffle simulate`` CLI."""

from reshuffle.sim.config import SHUFFLES, SimConfig, from_mapping, load_toml
from reshuffle.sim.report import metrics, write_outputs
from reshuffle.sim.simulator import RoundRecord, Simulation, canonical_order, observed_updates


def simulate(cfg: SimConfig, out_dir=None, on_round=None, plots: bool = True) -> dict:
    """Run ``cfg``; write outputs to ``out_dir`` if given; return the metrics.json object."""
    sim = Simulation(cfg)
    data = sim.result(sim.run(on_round))
    if out_dir is not None:
        write_outputs(out_dir, data, plots=plots)
    return data


__all__ = [
    "SHUFFLES", "RoundRecord", "SimConfig", "Simulation", "canonical_order", "from_mapping", "load_toml",
    "metrics", "observed_updates", "simulate", "write_outputs",
]
