"""examples/flower-dropin with probes: what each node's handler replied, what the strategy received.

The client probe sits between ``reshuffle_mod`` and the example's handler; the
server probe is a ``ReshuffleGrid`` subclass put where the example wraps its grid.
Both write SHA-256 digests of the reply content (never the content) to ``probe-dir``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

from dropin import client_app as example_client
from dropin import server_app as example_server
from reshuffle.flower import ReshuffleGrid, reshuffle_mod
from reshuffle.flower.records import encode_content
from reshuffle.flower.reserved import is_train


def _digest(content) -> str:
    return hashlib.sha256(encode_content(content)).hexdigest()


def _client_probe(msg, ctx, call_next):
    reply = call_next(msg, ctx)
    if is_train(msg.metadata.message_type) and not reply.has_error():
        rnd = int(msg.content["config"]["server-round"])
        out = Path(str(ctx.run_config["probe-dir"])) / f"client-{rnd}-{ctx.node_id}.json"
        out.write_text(json.dumps({"round": rnd, "node": ctx.node_id, "digest": _digest(reply.content)}))
    return reply


clientapp = ClientApp(mods=[reshuffle_mod, _client_probe])
clientapp.train()(example_client.train)
clientapp.evaluate()(example_client.evaluate)


class ProbeGrid(ReshuffleGrid):
    probe_dir = ""
    phase_timeout = 60.0  # ReshuffleGrid's default; the run config's probe-phase-timeout sets it

    def __init__(self, grid, **kwargs):
        super().__init__(grid, **{"phase_timeout": type(self).phase_timeout, **kwargs})

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        replies = list(super().send_and_receive(messages, timeout=timeout))
        if messages and is_train(messages[0].metadata.message_type):
            rnd = int(messages[0].content["config"]["server-round"])
            seen = [{"node": r.metadata.src_node_id, "digest": _digest(r.content)} for r in replies]
            report = self.rounds[-1]
            (Path(self.probe_dir) / f"server-{rnd}.json").write_text(json.dumps(
                {"round": rnd, "replies": seen, "sent": report.sent, "roster": report.roster,
                 "dropouts": report.dropouts, "failed": report.failed}))
        return replies


serverapp = ServerApp()


@serverapp.main()
def main(grid, context):
    ProbeGrid.probe_dir = str(context.run_config["probe-dir"])
    ProbeGrid.phase_timeout = float(context.run_config["probe-phase-timeout"])
    os.chdir(ProbeGrid.probe_dir)  # the example writes results.json and final_model.pt to its folder
    example_server.ReshuffleGrid = ProbeGrid
    example_server.main(grid, context)
