"""The detection probe's command line (``python -m reshuffle.bench.probe``)."""

import re

import pytest

from reshuffle.bench.probe import SYNTHETIC_ATTACKS, main


def test_probe_prints_one_row_per_rule_with_every_attack(capsys):
    assert main(["--synthetic", "--rounds", "2", "--rules", "multi-krum", "fedavg"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(a in lines[0] for a in SYNTHETIC_ATTACKS)
    rows = {line.split("|")[1].strip(): re.findall(r"(\d\.\d\d) / (\d\.\d\d)", line) for line in lines[2:]}
    assert set(rows) == {"multi-krum", "fedavg"}
    assert all(len(cells) == len(SYNTHETIC_ATTACKS) for cells in rows.values())
    # FedAvg accepts every row, so it flags nothing; Multi-Krum removes the Gaussian rows.
    assert all(cell == ("0.00", "0.00") for cell in rows["fedavg"])
    assert rows["multi-krum"][SYNTHETIC_ATTACKS.index("gaussian")][0] == "1.00"


def test_probe_refuses_an_unknown_rule():
    from reshuffle.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown rule"):
        main(["--synthetic", "--rounds", "1", "--rules", "no-such-rule"])
