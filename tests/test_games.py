"""Security games: quick variants assert the expected relations; weak instances are caught."""

import dataclasses
import json
from fractions import Fraction

import pytest

from reshuffle.games.basic import ddh_game, ot_request_distance, shamir_view_distance
from reshuffle.games.framework import hoeffding, statistical_distance
from reshuffle.games.toy import ToyGroup, safe_prime


@pytest.fixture(scope="module")
def results():
    from reshuffle.games import run_games

    return run_games(quick=True)


def test_every_game_meets_its_expected_relation(results):
    failed = [r for r in results if not r.passed]
    assert not failed, failed
    names = " ".join(r.game for r in results)
    for needle in ("ddh", "ot receiver", "ot sender", "B^A vs CT-CDH", "shamir", "B^A vs PRG", "B^A vs DDH",
                   "source anonymity", "channel IND-CPA", "B_DDH^A + B_AEAD^A", "row credential", "epoch pseudonym",
                   "B^A vs one-more DH", "dleq soundness", "dleq special soundness",
                   "DC-net group", "PS picks the draw's candidates", "epoch pseudonyms"):
        assert needle in names


def test_weak_instances_show_a_clear_advantage(results):
    # Rows that play an adversary against a weak instance (reduction rows check a
    # relation instead, and their "bound" is that relation's slack).
    weak = [r for r in results if "weak" in r.game and (r.expected.startswith(">") or r.bound == 0)]
    assert len(weak) == 22
    assert all(r.advantage - r.bound > 0 if r.bound else r.advantage == 1 for r in weak)


def test_toy_group_is_a_real_group_and_validates():
    g = ToyGroup.schnorr(41)
    p = safe_prime(41)
    assert g.p == p and (p - 1) // 2 == g.order
    x = g.random_scalar()
    e = g.base_mul(x)
    assert e ** g.order == g.base_mul(0) or (e ** g.order).to_bytes() == (1).to_bytes(g.element_size, "big")
    from reshuffle.errors import InvalidElement

    non_residue = next(v for v in range(2, 100) if g.legendre(v) == -1)
    with pytest.raises(InvalidElement, match="subgroup"):
        g.element_from_bytes(non_residue.to_bytes(g.element_size, "big"))
    tiny = ToyGroup.schnorr(17)
    assert tiny.dlog(int.from_bytes(tiny.base_mul(12345).to_bytes(), "big")) == 12345


def test_exact_games_by_hand():
    assert shamir_view_distance(5, 2, 3, 1) == 0
    assert shamir_view_distance(5, 2, 3, 2) == 1
    g = ToyGroup(23)
    assert ot_request_distance(g, 3, 1) == 1 - Fraction(9, 10)
    assert statistical_distance({1: Fraction(1)}, {2: Fraction(1)}) == 1


def test_ddh_harness_separates_groups():
    assert abs(ddh_game(ToyGroup.schnorr(41), 1000).advantage) <= hoeffding(1000)
    assert ddh_game(ToyGroup.schnorr(41, full=True), 1000).above(0.1)


def test_cli_json(results, monkeypatch, capsys):
    # The CLI's output and exit code over the module's run (the games themselves are played once).
    import reshuffle.games
    from reshuffle.cli import main

    monkeypatch.setattr(reshuffle.games, "run_games", lambda quick, on_result=None: results)
    assert main(["games", "--quick", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(results)
    assert all(set(x) == {"game", "assumption", "advantage", "bound", "expected", "passed"} for x in rows)
    failing = [dataclasses.replace(results[0], passed=False)] + list(results[1:])
    monkeypatch.setattr(reshuffle.games, "run_games", lambda quick, on_result=None: failing)
    assert main(["games", "--quick"]) == 1


def test_the_progress_line_counts_every_row_the_games_return(results, monkeypatch, capsys):
    # GAME_ROWS is the progress line's total: it must be the number of rows run_games returns.
    import reshuffle.games
    from reshuffle.cli import main
    from reshuffle.games import GAME_ROWS

    assert len(results) == GAME_ROWS

    def replay(quick, on_result=None):
        for r in results:
            on_result(r)
        return results
    monkeypatch.setattr(reshuffle.games, "run_games", replay)
    assert main(["games", "--quick", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == GAME_ROWS  # stdout stays JSON; the progress is on stderr
    assert f"games {GAME_ROWS}/{GAME_ROWS}" in err
    assert main(["games", "--quick", "--json", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
