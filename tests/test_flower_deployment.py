"""A real deployment: SuperLink and SuperNodes as separate processes, a node killed mid-round.

The run starts a real SuperLink and three SuperNodes on loopback (Flower 1.41's
Fleet API, which is HTTP only), with ``reshuffle ca`` key files named in each
node's config, kills a node in the middle of a round's protocol, and reads
``metrics.json`` (``flwr run`` exits 0 even when the ServerApp raised). It is a
module of its own so that pytest-xdist schedules it last (``--dist loadscope``),
while conftest has started the run with the session.
"""

from __future__ import annotations

from flower_helpers import DeploymentRun


def test_real_deployment_with_a_node_killed_mid_round(request):
    # conftest starts the run with the session (in whichever xdist worker claims it); this reads its outcome.
    killed, text, m = DeploymentRun.load(request.config.reshuffle_background / "DeploymentRun")
    assert killed and m is not None, text[-3000:]
    # both surviving models reached the PS after the kill
    rep = m["reshuffle"][0]
    assert [r["models_received"] for r in m["rounds"]] == [2], text[-3000:]
    assert rep["roster"] == 3 and sum(rep["dropouts"].values()) >= 1 and rep["blamed"] == {}
    assert m["rounds"][0]["accuracy"] > m["initial_accuracy"] + 0.3
    assert {"train", "setup"} <= set(m["rounds"][0]["seconds"])
