"""What a person sees of a run: headline figures, notices for options ignored or rounded, the plots, refusals
with their real reason, progress lines of long commands, and `make run` run twice."""

from __future__ import annotations

import csv
import json
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest

from reshuffle.cli import main

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--rounds", "2", "--shuffle", "none", "--quiet"]


def _simulate(tmp_path, capsys, *args, name="out"):
    out = tmp_path / name
    code = main(["simulate", *FAST, "--out", str(out), *args])
    o, e = capsys.readouterr()
    return code, out, o, e


# ------------------------------------------------------------------ headline figures (console and CSV)
def test_a_dp_run_with_the_linker_prints_its_privacy_figures_and_plots_them(tmp_path, capsys, monkeypatch):
    import matplotlib.axes
    import matplotlib.figure

    titles, legends = [], []
    set_title = matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title",
                        lambda self, text, *a, **k: titles.append(text) or set_title(self, text, *a, **k))
    savefig = matplotlib.figure.Figure.savefig

    def check(fig, path, *a, **k):
        fig.canvas.draw()
        for ax in fig.axes:
            leg = ax.get_legend()
            if leg is not None:  # a legend off the data: its box and the axes' do not meet
                legends.append((Path(path).name, not leg.get_window_extent().overlaps(ax.get_window_extent())))
        return savefig(fig, path, *a, **k)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", check)
    code, out, o, e = _simulate(tmp_path, capsys, "--linker", "--dp-clip", "1", "--dp-noise", "1",
                                "--attack", "sign-flip", "--malicious", "0.2", "--rule", "median", "--seed", "3")
    assert code == 0
    m = json.loads((out / "metrics.json").read_text())
    last = m["rounds"][-1]
    # The console names the figures metrics.json holds.
    assert f"DP: ε = {last['dp_epsilon']:.3g} at δ = 1e-05" in o
    link = last["linking"]
    assert f"linker: named the sender of {link['linker_correct']} of {link['models']} rows correctly" in o
    assert "cohort: 10 clients sampled per round (2 attackers), 10 models delivered" in o
    assert "attackers: 20.0% of the rows delivered" in o
    # Noise of 1 × the clip on each of ~55,000 coordinates drowns 8 honest updates: one warning line says so.
    warnings = [line for line in e.splitlines() if line.startswith("reshuffle: warning: ")]
    assert len(warnings) == 1 and "with DP (clip 1, noise 1) accuracy ended at" in warnings[0]
    assert m["headline"]["dp_noise_to_signal"] > 10
    assert m["headline"]["warnings"] == [warnings[0].removeprefix("reshuffle: warning: ")]
    # metrics.csv carries the same per-round figures.
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    for r, rec in zip(rows, m["rounds"]):
        assert float(r["dp_epsilon"]) == pytest.approx(rec["dp_epsilon"])
        assert int(r["linker_correct"]) == rec["linking"]["linker_correct"]
        assert int(r["linker_models"]) == rec["linking"]["models"]
        assert float(r["malicious_share"]) == pytest.approx(rec["malicious_share"])
        assert (int(r["sampled"]), int(r["malicious_sampled"])) == (rec["sampled"], rec["malicious_sampled"])
    # Every plot names the run, keeps its legend off the data; privacy.png draws the linker and ε.
    label = "digits, mlp, rule median, attack sign-flip 20%, shuffle none, seed 3"
    assert len(titles) == 4 and all(t.endswith("\n" + label) for t in titles)
    assert sorted(n for n, _ in legends) == ["accuracy.png", "detection.png", "privacy.png", "time.png"]
    assert all(ok for _, ok in legends), legends


def test_a_clean_run_leaves_privacy_columns_blank_and_warns_of_nothing(tmp_path, capsys):
    code, out, o, e = _simulate(tmp_path, capsys, "--rounds", "3")
    assert code == 0 and "warning" not in e and "linker:" not in o and "DP:" not in o
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert len(rows) == 3 and all(r["dp_epsilon"] == r["linker_correct"] == r["malicious_share"] == "" for r in rows)
    assert not (out / "privacy.png").exists()
    # metrics.json and metrics.csv get the mode the plots get (not a temporary file's 0600).
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes["metrics.json"] == modes["metrics.csv"] == modes["accuracy.png"], modes


def test_the_headline_warns_of_a_run_that_fell_far_below_its_best_or_learned_nothing():
    from reshuffle.sim.headline import headline

    def data(accs, **cfg):
        rounds = [{"round": i + 1, "accuracy": a, "honest_rows": 8, "malicious_rows": 0, "models_received": 8,
                   "models_accepted": 8, "sampled": 8} for i, a in enumerate(accs)]
        return {"config": {"attack": "none", **cfg}, "rounds": rounds}

    assert headline(data([0.5, 0.8, 0.9]), 10, 100)["warnings"] == []
    fell = headline(data([0.5, 0.9, 0.7]), 10, 100)["warnings"]
    assert fell == ["accuracy ended at 0.7000, 0.20 below its best (0.9000 in round 2)"]
    flat = headline(data([0.11, 0.12, 0.1]), 10, 100)["warnings"]
    assert flat == ["accuracy ended at 0.1000, chance level for 10 classes: the run learned nothing"]


# ------------------------------------------------------------------ options ignored, rounded, changed
def test_options_that_are_ignored_or_rounded_say_so_in_one_line(tmp_path, capsys):
    code, out, o, e = _simulate(tmp_path, capsys, "--set-size", "4", "--no-stable-sets", "--malicious", "0.25",
                                "--attack", "sign-flip", "--alpha", "0.3")
    assert code == 0
    notes = [line for line in e.splitlines() if line.startswith("reshuffle: note: ")]
    assert notes == ["reshuffle: note: --set-size 4 is ignored: --no-stable-sets samples and delivers each client "
                     "on its own",
                     "reshuffle: note: --alpha is ignored: it parametrises partition dirichlet or dirichlet-legacy, "
                     "not iid",
                     "reshuffle: note: --malicious 0.25 of 10 clients is 2.5: 2 attackers"]
    assert json.loads((out / "metrics.json").read_text())["notices"] == [n[len("reshuffle: note: "):] for n in notes]


def _notices(**settings) -> list[str]:
    """Every notice of a simulation built (not run) from ``settings``, all of them given by the user."""
    from reshuffle.run.config import SimConfig
    from reshuffle.sim.notices import option_notices
    from reshuffle.sim.simulator import Simulation

    sim = Simulation(SimConfig(shuffle="none", **settings))
    return option_notices(sim.cfg, settings) + sim.notices, sim


def test_clients_per_round_below_a_set_says_whole_sets_are_sampled():
    notes, sim = _notices(clients_per_round=3)
    assert notes == ["--clients-per-round 3 asks for 3 clients per round; stable sets are sampled whole: "
                     "1 of 2 sets, 5 clients per round"]
    assert len(sim.rounds.cohort(1, range(10))) == 5
    notes, _ = _notices(clients=11, fraction=0.5)
    assert notes == ["11 clients form 2 stable sets of 5 to 6 (set_size 5 is the least)",
                     "--fraction 0.5 asks for 6 clients per round; stable sets are sampled whole: 1 of 2 sets, "
                     "5 to 6 clients per round"]


def test_options_used_as_given_give_no_notice():
    assert _notices(clients_per_round=5, partition="dirichlet", alpha=0.5, malicious=0.2, attack="sign-flip",
                    set_size=5)[0] == []


@pytest.mark.parametrize("args, needle", [
    (["--set-size", "1000000"], "10 clients cannot form one stable anonymity set of set_size=1000000"),
    (["--set-size", "70000", "--clients", "70001"], "set_size must be at most 65536"),
    (["--set-size", "2"], "set_size must be an int of at least 3"),
    (["--rule", "krum+"], "rule 'krum+' has an empty part"),
])
def test_refusals_give_the_real_reason(args, needle, capsys):
    assert main(["simulate", "--quiet", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_a_config_folder_is_said_to_be_a_folder(tmp_path, capsys):
    assert main(["simulate", "--quiet", "--config", str(tmp_path)]) == 2
    assert f"config file {tmp_path} is a folder; give the path of a TOML file" in capsys.readouterr().err


def test_resnet18_on_8x8_digits_is_warned_of():
    from reshuffle.run.config import SimConfig
    from reshuffle.sim.simulator import Simulation

    sim = Simulation(SimConfig(model="resnet18", shuffle="none", rounds=1))
    assert any(n.startswith("model resnet18 is built for 32×32 images: its stages shrink 8×8 inputs to 1×1")
               for n in sim.notices)
    assert not any("resnet18" in n for n in Simulation(SimConfig(shuffle="none", rounds=1)).notices)


# ------------------------------------------------------------------ plots and files
# ------------------------------------------------------------------ make run, twice
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_runs_twice_in_a_row(tmp_path, monkeypatch, capsys):
    # The command `make run` runs (make -n prints it), run twice in process from a folder of its own: each run
    # gets a new output folder; OUT= names one.
    # A set-up stamp newer than its prerequisites: make sees the set-up done and runs nothing (a stamp that is a
    # makefile would be remade even under -n).
    stamp = tmp_path / "stamp"
    stamp.touch()

    def command(*extra):
        r = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "run", f"STAMP={stamp}",
                            "ARGS=--rounds 1 --shuffle none --quiet", *extra],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        words = shlex.split(r.stdout.strip().splitlines()[-1])
        assert Path(words[0]).name == "reshuffle" and words[1] == "simulate"
        return words[2:]

    monkeypatch.chdir(tmp_path)
    argv = command()
    assert "--out" not in argv
    assert [main(["simulate", *argv]) for _ in range(2)] == [0, 0]
    outs = sorted(p.parent for p in (tmp_path / "outputs" / "simulate").glob("*/metrics.json"))
    assert len(outs) == 2  # a fresh folder per run
    argv = command(f"OUT={tmp_path / 'mine'}")
    assert argv[argv.index("--out") + 1] == str(tmp_path / "mine")


def test_the_default_output_folder_is_new_for_each_run(tmp_path, monkeypatch):
    import time

    from reshuffle.run.report import default_out_dir

    monkeypatch.setattr(time, "strftime", lambda fmt: "20260101-000000")
    first = default_out_dir(tmp_path)
    first.mkdir(parents=True)
    (first / "metrics.json").write_text("{}")
    second = default_out_dir(tmp_path)
    assert second == tmp_path / "20260101-000000-2"


# ------------------------------------------------------------------ leftovers
def test_a_plugin_datasets_bad_arrays_are_named_by_its_name(tmp_path):
    from reshuffle.clients.data import DataError, Dataset, load_dataset, register_dataset

    @register_dataset("test-journeys-unnamed", classes=3, input_shape=(1, 2, 2), source="made up")
    def _load(folder):
        x = np.zeros((4, 1, 2, 2))
        return Dataset.from_arrays(x, np.array([0, 1, 2, 7]), x, np.array([0, 1, 2, 0]), 3)  # no name given
    with pytest.raises(DataError, match=r"^dataset 'test-journeys-unnamed': labels must lie in \[0, 3\)"):
        load_dataset("test-journeys-unnamed")


def test_a_failed_fetch_leaves_no_folder_it_made(tmp_path, monkeypatch):
    from reshuffle.clients import fetch
    from reshuffle.clients.fetch import FetchError

    def offline(url, *a, **k):
        raise FetchError(f"{url}: cannot reach the server (no network)")
    monkeypatch.setattr(fetch, "download", offline)
    root = tmp_path / "new" / "data"
    with pytest.raises(FetchError):
        fetch.fetch("mnist", root)
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    (kept / "mnist").mkdir(parents=True)
    with pytest.raises(FetchError):
        fetch.fetch("mnist", kept)
    assert (kept / "mnist").is_dir()  # a folder that was there stays


def test_an_unreachable_hub_switches_hugging_face_to_offline_and_back(monkeypatch):
    import logging

    from reshuffle.clients import data

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with data._quiet_hub(offline=True):
        assert os.environ["HF_HUB_OFFLINE"] == "1"
        assert logging.getLogger("huggingface_hub").level == logging.ERROR
    assert "HF_HUB_OFFLINE" not in os.environ


def test_bench_tables_keep_metric_names_whole(capsys, monkeypatch):
    from reshuffle.bench.common import print_table

    monkeypatch.setenv("COLUMNS", "40")
    name = "participant_after_training_critical_s_with_a_long_tail"
    print_table("t", {"10": {name: 0.5, "steps": ["advertise", "share", "ot", "reserve-consent"]}})
    assert f"10.{name}" in capsys.readouterr().out


def test_bench_round_runs_the_simulators_stable_sets(capsys):
    from reshuffle.bench import round as round_bench

    parts = []
    out = round_bench.run(Ns=[6], d=64, quick=True, set_size=3, on_step=parts.append)["6"]
    assert parts == ["N=6"] and out["set_size"] == 3 and out["groups"] == 2


# ------------------------------------------------------------------ progress of long commands
def test_redteam_and_the_explorer_show_progress_on_stderr(capsys):
    assert main(["redteam", "--only", "jam", "--rounds", "1", "--json"]) == 0
    o, e = capsys.readouterr()
    assert [r["behaviour"] for r in json.loads(o)] == ["jam", "dcnet-jam"] and "rows 2/2" in e
    assert "jam: holds" in e and "dcnet-jam: holds" in e
    assert main(["redteam", "--explore", "--budget", "120", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["redteam", "--explore", "--budget", "120"]) == 0
    assert "states" in capsys.readouterr().err


def test_benches_show_each_part_on_stderr(capsys, monkeypatch):
    from reshuffle.bench import crypto

    def fake(quick=False, on_step=None):
        for name in ("prg", "group", "ot", "shamir", "voprf", "feldman", "signatures"):
            on_step(name)
        return {"prg": 1.0}
    monkeypatch.setattr(crypto, "run", fake)
    assert main(["bench", "crypto", "--json"]) == 0
    o, e = capsys.readouterr()
    assert json.loads(o) == {"prg": 1.0} and "bench crypto 7/7" in e
