"""The explorer of PS schedules: it finds the known breaks on weakened participants, nothing on ours.

Each exploration plays a PS that sends any message a participant's table accepts,
in every order, over a real round of 4 participants (one colluding with the PS).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.adversaries.explorer import _BUILDERS, NOT_BUILT, ExploreConfig, explore
from reshuffle.adversaries.weak import (
    AnswersEveryComplaint,
    OpensWithoutView,
    ReopensAfterUpload,
    TrustsAnnouncedParameters,
)
from reshuffle.cli import main
from reshuffle.errors import ConfigError
from reshuffle.protocol.schedule import PS_SENDS

# Every kind of PS message the schedule sends and the explorer builds; an exploration that never delivered
# one of them would not have tried the orders it takes part in.
KINDS = {t.name for t in PS_SENDS if t not in NOT_BUILT}


def test_it_finds_the_opening_after_the_upload_on_the_participant_before_the_fix():
    # The participant as it was: a member that uploaded still opened its last iteration, and a restarted
    # slot phase uploaded again under the same keys. The explorer must find every consequence.
    r = explore(ExploreConfig(announce=False, forge=False), ReopensAfterUpload)
    found = {v.check for v in r.violations}
    assert found == {"one key, one plaintext", "no reveal about an uploaded slot", "no link"}, r.violations
    assert r.links == 3  # every honest model
    reveal = next(v for v in r.violations if v.check == "no reveal about an uploaded slot")
    # The schedule it reports is the attack: an upload, then an opening of the iteration before it.
    up = reveal.schedule.index(next(s for s in reveal.schedule if s.startswith("MASK_REQUEST 3")))
    assert any(s.startswith("OPEN_REQUEST") for s in reveal.schedule[up:])


def test_stopping_at_the_first_full_link_finds_the_same_best_in_fewer_states():
    # The anonymity game's adversary wants the best schedule: once every honest model is linked, no
    # schedule does better, and the search may stop there; on the fixed participant it never stops early.
    full = explore(ExploreConfig(announce=False, forge=False), ReopensAfterUpload)
    early = explore(ExploreConfig(announce=False, forge=False, until_all_linked=True), ReopensAfterUpload)
    assert early.best == full.best == (3, 3)
    assert early.states < full.states and not early.complete
    honest = explore(ExploreConfig(announce=False, forge=False, until_all_linked=True, budget=400))
    assert honest.best[0] == 0 and honest.states == 400


def test_it_finds_the_complaint_extraction_on_the_dealer_before_the_fix():
    r = explore(ExploreConfig(budget=400, announce=False, forge=False), AnswersEveryComplaint)
    link = [v for v in r.violations if v.check == "no link"]
    assert link and r.links == 3
    assert any("COMPLAINTS (in everyone's name)" in step for step in link[0].schedule)


@pytest.mark.parametrize("R_max", [2, 3])
def test_every_order_of_broadcast_moves_is_safe(R_max):
    # All reachable states of the broadcast search: every message kind was delivered on some path,
    # uploads happened, and no check failed anywhere.
    r = explore(ExploreConfig(R_max=R_max, budget=50_000))
    assert r.complete and not r.violations, r.violations
    assert KINDS <= set(r.kinds), KINDS - set(r.kinds)
    assert r.uploads > 0 and r.max_depth >= 3 * R_max + 8
    assert any(k.startswith("replay") for k in r.kinds)


def test_showing_participants_different_messages_is_safe():
    # Each message also to each recipient alone: forks, partial deliveries and dropouts.
    r = explore(ExploreConfig(split=True, budget=8000))
    assert not r.violations, r.violations
    assert r.states >= 8000 and r.uploads > 0


def test_it_finds_the_announced_c_attack_on_the_participant_before_the_fix():
    # The participant as it was: it took the c the PS announced. The PS announces c = 0 and complains
    # in t − 1 names: the dealers' answers and the colluder's share give t shares of every secret.
    r = explore(ExploreConfig(forge=False), TrustsAnnouncedParameters)
    link = [v for v in r.violations if v.check == "no link"]
    assert link and r.links == 3
    assert link[0].schedule[0].startswith("ROUND_START (c=0")
    assert any("COMPLAINTS (in 2 names)" in step for step in link[0].schedule)


def test_our_participant_refuses_every_announcement_below_its_floors():
    # N = 4: c >= 1 and two honest members; (c, t) in {(1, 3), (1, 4), (2, 4)} are taken, c = 0 and c = 3 are not.
    r = explore(ExploreConfig(forge=False, budget=400))
    assert r.announced == [(1, 3), (1, 4), (2, 4)]


def test_it_finds_forged_evidence_on_the_opening_before_the_fix():
    # An opening that signs no h_M: at a leaf after the blame step, the PS (with its colluder's DLEQ proof)
    # writes false-opening evidence under another h that the checker accepts.
    r = explore(ExploreConfig(announce=False), OpensWithoutView)
    named = [v for v in r.violations if v.check == "nobody honest named"]
    assert named and {v.pid for v in named} == {1, 2, 3} and r.evidence_tried > 0
    assert any(step.startswith("BLAME_REQUEST") for step in named[0].schedule)


def test_it_refuses_rounds_it_cannot_play():
    for bad in ({"N": 9}, {"colluders": (0, 1)}, {"budget": 0}, {"depth": 0}, {"k": 9}):
        with pytest.raises(ConfigError):
            explore(ExploreConfig(**bad))


def test_the_cli_reports_states_schedules_and_the_exit_code(capsys):
    assert main(["redteam", "--explore", "--budget", "40"]) == 0
    out = capsys.readouterr().out
    assert "states" in out and "schedules" in out and "no violation" in out
    assert "round parameters accepted (c, t): (1, 3), (1, 4), (2, 4)" in out and "forged evidence" in out
    assert main(["redteam", "--explore", "--weak", "reopens-after-upload", "--no-forge", "--fixed-params"]) == 1
    assert "VIOLATION" in capsys.readouterr().out


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 12), st.integers(0, 2**16))
def test_a_forked_participant_is_independent_of_its_original(cut, seed):
    # The explorer branches participants by fork(): after the cut, the copy and the original receive the
    # same messages and must answer the same bytes, and what one handles must not move the other.
    from reshuffle.harness.api import build_round
    from reshuffle.harness.runner import InProcessRunner
    from reshuffle.protocol.params import RoundParams

    ups = [np.full(3, float(i), np.float32) for i in range(4)]
    server, parts = build_round(ups, RoundParams.default(4, 3, R_max=2), seed=seed)
    inbox: list[bytes] = []

    def tap(env):
        if env.recipient == 1:
            inbox.append(env.data)
        return [env]

    InProcessRunner(server, parts, None, [tap]).run()
    cut = min(cut, len(inbox))
    _, fresh = build_round(ups, RoundParams.default(4, 3, R_max=2), seed=seed)
    p = fresh[1]
    for data in inbox[:cut]:
        p.handle(data)
    q = p.fork()
    rest_p = [p.handle(d) for d in inbox[cut:]]
    assert [q.handle(d) for d in inbox[cut:]] == rest_p
    assert p.phase is q.phase and p.view.uploaded == q.view.uploaded


def test_every_message_the_schedule_sends_has_a_builder_or_a_reason():
    assert set(_BUILDERS) | set(NOT_BUILT) == PS_SENDS
    assert not set(_BUILDERS) & set(NOT_BUILT)
    assert all(reason for reason in NOT_BUILT.values())
