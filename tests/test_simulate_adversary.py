"""`reshuffle simulate --adversary NAME`: protocol adversaries in a federation; the named one is banned."""

import json

from reshuffle.cli import main
from reshuffle.run.config import SimConfig
from reshuffle.sim.simulator import Simulation


def test_jammer_is_named_then_banned_and_training_goes_on():
    cfg = SimConfig(clients=8, rounds=3, model="logreg", attack="sign-flip", malicious=0.25, rule="multi-krum",
                    adversary="jam", seed=1)
    sim = Simulation(cfg)
    jammer = sim.malicious[0]
    recs = sim.run()
    # Round 1: the jam destroys every row and names the jammer, with nothing delivered (W_g kept).
    assert set(recs[0].blamed) == {jammer} and recs[0].models_received == 0
    # Later rounds run without it: every other client is delivered, nobody else is ever named.
    for r in recs[1:]:
        assert r.blamed == {}
        assert r.lost[jammer].startswith("banned: blamed in round 1")
        assert r.models_received == cfg.clients - 1
    assert recs[-1].accuracy > recs[0].accuracy


def test_cli_records_blamed_in_metrics(tmp_path):
    out = tmp_path / "run"
    rc = main(["simulate", "--clients", "6", "--rounds", "2", "--model", "logreg", "--adversary", "bad-share",
               "--out", str(out), "--quiet"])
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["rounds"][0]["blamed"] == {"0": "published a share that fails its own Feldman commitments"}
    assert m["rounds"][1]["blamed"] == {} and m["rounds"][1]["models_received"] == 5
    assert main(["simulate", "--adversary", "no-such", "--rounds", "1", "--quiet", "--out", str(tmp_path / "x")]) == 2
    assert main(["simulate", "--adversary", "jam", "--shuffle", "none", "--rounds", "1", "--quiet",
                 "--out", str(tmp_path / "y")]) == 2
