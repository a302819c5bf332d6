"""A PS that reorders or replays legal steps links nothing (docs/protocol.md §8.2, §10).

Each attack is played with nothing but what the PS holds (its own state and the
participants' messages) and the shipped participant code; the linker
(:mod:`reshuffle.adversaries.linker`) then tries, as the attacker would, to unmask
and link. Before the fix each linked every honest model.
"""

from __future__ import annotations

import numpy as np
import pytest

import reshuffle
from reshuffle.adversaries import make_adversary
from reshuffle.errors import UnexpectedMessage
from reshuffle.protocol.params import RoundParams

N = 10
# The default slot count of a LeNet-sized model: one reservation iteration settles everyone with
# chance 0.9, so the upload follows iteration 1 and the reservation ends early.
N_SLOTS = RoundParams.default(N, 61_706).n


def _updates(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)  # model values only
    return [rng.normal(size=16).astype(np.float32) for _ in range(N)]


def _play(name: str, seed: int):
    b = make_adversary(name)
    r = reshuffle.shuffle(_updates(seed), seed=seed, adversaries=[b], raise_on_failure=False, n=N_SLOTS)
    honest = [i for i in range(N) if i not in b.colluders]
    return b, r, honest


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_ps_that_opens_the_last_iteration_after_the_upload_links_nothing(seed):
    # The five steps: the reservation ends early; the PS collects every masked model list, asks
    # for an opening of the last iteration instead of U_M, restarts the slot phase and finishes a
    # second upload, whose reveal would strip the first upload's self masks.
    b, r, honest = _play("open-after-upload", seed)
    assert b.links(r, honest) == []
    uploaded = [i for i in honest if r.params.upload_m in r.views[i].uploaded]
    assert uploaded, "the attack needs members that uploaded"
    for i in uploaded:
        # Each refuses the opening: a member that sent its model list reveals nothing about its picks.
        errs = r.views[i].errors
        assert errs and isinstance(errs[0], UnexpectedMessage) and "OPEN_REQUEST" in str(errs[0])
        assert len([m for m in r.views[i].uploaded if m == r.params.upload_m]) == 1
    assert not set(r.blamed) & set(honest)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_false_objection_at_the_upload_ends_the_round_and_names_the_objector(seed):
    # The shipped PS with one colluder that objects to the counts that ended the reservation,
    # though its pick settled: before the fix the PS opened the iteration, restarted and linked all.
    b, r, honest = _play("object-at-upload", seed)
    assert b.links(r, honest) == []
    assert r.failure is not None and "reservation" in r.failure
    assert list(r.blamed) == [1], r.blamed
    # No honest member revealed anything of the iteration whose picks are its upload's slots.
    for i in honest:
        assert not any(type(e).__name__ == "Refused" for e in r.views[i].errors), r.views[i].errors


def test_the_attacks_linked_every_model_on_the_protocol_they_were_found_on():
    # The linker is the attacker: on a round where the PS learns both the picks and the first model
    # list's self seeds it must link every honest model (a blind linker would pass the tests above).
    from reshuffle.adversaries.linker import PSView, correct_links, link
    from reshuffle.adversaries.ps import CuriousServer
    from reshuffle.protocol.messages import ShareKind

    class Omniscient(CuriousServer):
        """An honest round whose PS is also handed every participant's secrets."""

    from reshuffle.adversaries.ps import LinkingPS

    class Everyone(LinkingPS):
        server_class = Omniscient
        colluders = tuple(range(N))

    b = Everyone()
    r = reshuffle.shuffle(_updates(4), seed=4, adversaries=[b], n=N_SLOTS)
    view: PSView = b.server.view
    for pid, p in b.coalition.items():
        keys = p.state.session.keys
        view.colluders[pid] = {(m + 1, ShareKind.SELF_SEED): s for m, s in enumerate(keys.seeds)}
        view.colluders[pid].update({(m + 1, ShareKind.DH_SECRET): k.secret for m, k in enumerate(keys.mask)})
    truth = {i: r.views[i].row_tags for i in range(N)}
    assert correct_links(link(view), truth) == list(range(N))


def test_a_flower_ps_that_replays_a_round_gets_no_answer_from_nodes_that_took_part():
    # Round 1 runs with 5 nodes; then the PS runs round 1 again (the grid's counter set back), to
    # difference the two sums or to find the row that a node's absence removes.
    from flower_helpers import LoopbackGrid, toy_client_app
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

    from reshuffle.flower.grid import ReshuffleGrid

    def reply(msg, ctx):  # deterministic per node: a replay would return the same rows
        p = int(ctx.node_config["partition-id"])
        arrs = [a + p for a in msg.content["arrays"].to_numpy_ndarrays()]
        return RecordDict({"arrays": ArrayRecord(arrs), "metrics": MetricRecord({"num-examples": 10})})

    lg = LoopbackGrid(toy_client_app(reply), 5, ungrouped=True)
    grid = ReshuffleGrid(lg, phase_timeout=10, group_size=None)
    content = RecordDict({"arrays": ArrayRecord([np.zeros(4, np.float32)]), "config": ConfigRecord({})})
    nodes = list(grid.get_node_ids())

    def train(to):
        return [Message(content, dst_node_id=n, message_type="train", group_id="1") for n in to]

    assert len(list(grid.send_and_receive(train(nodes), timeout=60))) == 5
    grid._T = 0  # the PS replays round 1 without the first node
    assert list(grid.send_and_receive(train(nodes[1:]), timeout=60)) == []
    assert len(lg.errors) >= 4 and all("round 1" in why and "took part" in why for _, why in lg.errors[-4:])


def test_a_ps_that_complains_in_everyone_s_name_gets_no_secret():
    # Before: each dealer answered the PS's complaint list with every complainer's shares in the
    # clear, so one COMPLAINTS message per dealer gave the PS t shares of all its b and x.
    b, r, honest = _play("complain-for-shares", 1)
    assert b.links(r, honest) == []
    from reshuffle.adversaries.linker import secrets_of

    assert not [k for k in secrets_of(b.server.view) if k[0] in honest and k[1] == r.params.upload_m
                and k[2].name == "DH_SECRET"]
    assert not set(r.blamed) & set(honest)
