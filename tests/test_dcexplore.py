"""The explorer of PS schedules over the DC-net round: every order it finds is safe; weak members are caught."""

from __future__ import annotations

from reshuffle.adversaries.dcexplore import DCExploreConfig, explore_dc
from reshuffle.protocol import dcnet

SMALL = DCExploreConfig(budget=120, depth=9)


def test_no_schedule_of_the_ps_breaks_the_dcnet_round():
    r = explore_dc(SMALL)
    assert not r.violations, r.violations
    assert r.uploads > 0 and r.links == 0
    assert {"DC_START", "DC_KEYS", "DC_UPLOAD_REQUEST", "DC_BLAME"} <= set(r.kinds)


class _OpensAnyRow(dcnet.DCParticipant):
    """Weak: opens whatever rows it is asked for (no audit)."""

    def _on_blame(self, m):
        self.res_positions = m.positions
        p = self.params
        entries = sorted((pos, j, dcnet.row_keys(K, self.T, p.upload_m, self.pid, j, self._hM, dcnet.parties(p))[pos])
                         for j, K in self._pairs.items() for pos in m.positions)
        self.state = dcnet.DCState.ENDED
        from reshuffle.protocol import messages as msg

        return [msg.DCOpening(self.T, p.upload_m, self.pid, self._hM, tuple(entries))]


class _CrashesOnForgedCounts(dcnet.DCParticipant):
    """Weak: meets counts that are no reservation with an uncaught error instead of a refusal."""

    def _absorb_counts(self, counts):
        if self.res.check(counts) is not None:
            raise ValueError("unexpected counts")
        super()._absorb_counts(counts)


def test_a_member_that_opens_any_row_is_caught():
    r = explore_dc(SMALL, _OpensAnyRow)
    assert any("opening never touches a real row" in v for v in r.violations)


def test_a_member_that_crashes_on_bad_input_is_caught():
    r = explore_dc(SMALL, _CrashesOnForgedCounts)
    assert any("refuses, never crashes" in v for v in r.violations)
