"""The red team's small form: every registered protocol adversary, every row must hold."""

import json
import re

import pytest

from reshuffle.adversaries import adversary_names, make_adversary
from reshuffle.adversaries.redteam import LINKER, run_redteam
from reshuffle.cli import main
from reshuffle.errors import ConfigError


def test_every_registered_behaviour_holds():
    rows = run_redteam(rounds=1, N=6)
    names = adversary_names()
    assert {r.behaviour for r in rows} == {*names, *(f"dcnet-{n}" for n in names), LINKER, "dcnet-colluders"}
    bad = [r for r in rows if not r.holds]
    assert not bad, bad
    assert all(r.wrong == 0 for r in rows)  # no honest participant is ever named
    # The passive linker: stable sets (the default) leave it nobody to name; the same federation sampled
    # client by client names most senders.
    linker = next(r for r in rows if r.behaviour == LINKER)
    m = re.search(r"names (\d+) of (\d+) senders.*one by one instead: names (\d+) of (\d+)", linker.detail)
    after, n_after, before, n_before = map(int, m.groups())
    assert after <= 0.1 * n_after and before >= 0.8 * n_before, linker.detail


def test_registry_rejects_unknown_and_bad_options():
    with pytest.raises(ConfigError, match="unknown adversary"):
        make_adversary("no-such-thing")
    with pytest.raises(ConfigError, match="pids"):
        make_adversary("multi-slot", pids=())
    with pytest.raises(ConfigError, match="rounds"):
        run_redteam(rounds=0)


def test_cli_json_and_exit_code(capsys):
    assert main(["redteam", "--rounds", "1", "--N", "6", "--only", "replay", "tagged-ot", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["behaviour"] for r in rows] == ["replay", "dcnet-replay", "tagged-ot", "dcnet-tagged-ot"]
    assert all(r["holds"] for r in rows) and [r["round"] for r in rows] == ["shamir", "dcnet"] * 2


def test_a_marked_global_model_is_refused_before_anything_is_revealed():
    # The PS gives P0 another global model and a matching RoundStart: the signed advertisements
    # carry H(W_g), so the honest members refuse the fork at setup and nothing is revealed.
    import reshuffle
    from tests.protocol_helpers import make_updates

    b = make_adversary("different-global-model")
    r = reshuffle.shuffle(make_updates(6, d=8, seed=3), seed=3, adversaries=[b], raise_on_failure=False)
    assert r.models == [] and r.failure is not None
    assert all(not v.revealed for v in r.views.values())
    assert any("another round, model" in str(e) for i in range(1, 6) for e in r.views[i].errors)
