import json

import pytest

from reshuffle.cli import main


@pytest.mark.slow
def test_bench_crypto_json_keys(capsys):
    assert main(["bench", "crypto", "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["prg"]["words_per_s"] > 0
    assert out["prg"]["ratio_to_keystream"] > 0  # a ratio of two timings: the benchmark prints it
    assert out["upload"]["fused_over_keystream"] > 0 and out["upload"]["unfused_over_keystream"] > 0
    for backend in ("ristretto255", "secp256k1"):
        assert out["group"][backend]["mul_per_s"] > 0
    for key in ("ps_table_s", "ps_per_request_s", "receiver_s"):
        assert out["ot"][key] >= 0
    for n in ("100", "1000"):
        assert out["shamir"][n]["split_s"] > 0 and out["shamir"][n]["reconstruct_s"] > 0


def test_bad_subcommand_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "nothing"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
