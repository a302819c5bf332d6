"""`reshuffle simulate --adversary NAME`: protocol adversaries in a federation; the named one is banned."""

import json

from reshuffle.cli import main
from reshuffle.run.config import SimConfig
from reshuffle.run.sets import INCOMPLETE
from reshuffle.sim.simulator import Simulation


def test_jammer_is_named_then_banned_and_training_goes_on():
    # Per client: the ban's own mechanics (with stable sets, below, the banned member's set stops too).
    cfg = SimConfig(clients=8, rounds=3, model="logreg", attack="sign-flip", malicious=0.25, rule="multi-krum",
                    adversary="jam", seed=1, stable_sets=False)
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


def test_a_banned_members_stable_set_delivers_nothing_after_the_ban_and_the_other_sets_go_on():
    # A departure for good: no roster without the banned member is run, so its set's chains all end together.
    cfg = SimConfig(clients=10, rounds=3, model="logreg", attack="sign-flip", malicious=0.2, rule="multi-krum",
                    adversary="jam", seed=1)
    sim = Simulation(cfg)
    jammer = sim.malicious[0]
    mine = set(sim.sets.sets[sim.sets.of(jammer)])
    recs = sim.run()
    assert set(recs[0].blamed) == {jammer}
    for r in recs[1:]:
        assert r.blamed == {} and r.lost[jammer].startswith("banned: blamed in round 1")
        assert {i for i, why in r.lost.items() if why.startswith(INCOMPLETE)} == mine - {jammer}
        assert r.models_received == cfg.clients - len(mine)


def test_cli_records_blamed_in_metrics(tmp_path):
    out = tmp_path / "run"
    rc = main(["simulate", "--clients", "6", "--rounds", "2", "--model", "logreg", "--adversary", "bad-share",
               "--no-stable-sets", "--out", str(out), "--quiet"])
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["rounds"][0]["blamed"] == {"0": "published a share that fails its own Feldman commitments"}
    assert m["rounds"][1]["blamed"] == {} and m["rounds"][1]["models_received"] == 5
    assert main(["simulate", "--adversary", "no-such", "--rounds", "1", "--quiet", "--out", str(tmp_path / "x")]) == 2
    assert main(["simulate", "--adversary", "jam", "--shuffle", "none", "--rounds", "1", "--quiet",
                 "--out", str(tmp_path / "y")]) == 2
