"""The grid's summary math on hand-made cell files: seeds, impact, harmless, worst case, goal, staleness."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reshuffle.evaluation.cell import reduce_metrics, write_atomic
from reshuffle.evaluation.grid import Cell, Grid, Partition, Selection, Setting
from reshuffle.evaluation.report import summary_markdown, worst_case_tables
from reshuffle.evaluation.summary import load_records, summarize

SETTING = Setting("digits", Partition("iid"), "logreg")
GRID = Grid(datasets=("digits",), partitions=(Partition("iid"),), models=("logreg",),
            attacks=("alie", "badnets", "sign-flip"), rules=("fedavg", "multi-krum", "median"), seeds=(1, 2),
            long_rounds=0)
BACKDOORS = {"badnets"}
# (attack, rule) → per seed (accuracy, backdoor success, fpr)
HAND = {
    ("none", "fedavg"): [(0.90, None, 0.0), (0.92, None, 0.0)],
    ("none", "multi-krum"): [(0.89, None, 0.2), (0.92, None, 0.2)],
    ("none", "median"): [(0.90, None, 0.0), (0.92, None, 0.0)],
    ("alie", "fedavg"): [(0.85, None, 0.0), (0.89, None, 0.0)],
    ("alie", "multi-krum"): [(0.87, None, 0.25), (0.86, None, 0.25)],
    ("alie", "median"): [(0.89, None, 0.0), (0.91, None, 0.0)],
    ("badnets", "fedavg"): [(0.90, 0.90, 0.0), (0.915, 0.80, 0.0)],
    ("badnets", "multi-krum"): [(0.895, 0.02, 0.0), (0.92, 0.06, 0.0)],
    ("badnets", "median"): [(0.90, 0.01, 0.0), (0.92, 0.01, 0.0)],
    ("sign-flip", "fedavg"): [(0.895, None, 0.0), (0.915, None, 0.0)],
    ("sign-flip", "multi-krum"): [(0.90, None, 0.0), (0.92, None, 0.0)],
    ("sign-flip", "median"): [(0.90, None, 0.0), (0.92, None, 0.0)],
}


def _record(cell: Cell, acc: float, success, fpr: float, rounds: int = 2) -> dict:
    return {"format": 1, "status": "done", "cell": {}, "config": GRID.cell_settings(cell) | {"rounds": rounds},
            "final_accuracy": acc, "final_attack_success": success, "tpr": None if cell.attack == "none" else 1.0,
            "fpr": fpr, "diverged_at": None, "backdoor": cell.attack in BACKDOORS, "cpu_seconds": 10.0,
            "rounds": []}


def _write_hand_cells(out):
    for (attack, rule), seeds in HAND.items():
        for seed, (acc, success, fpr) in zip((1, 2), seeds):
            cell = Cell(SETTING, attack, rule, seed)
            write_atomic(out / cell.relpath, _record(cell, acc, success, fpr))


def _by(summary: dict, attack: str, rule: str) -> dict:
    return next(c for c in summary["cells"] if c["attack"] == attack and c["rule"] == rule)


def _worst(summary: dict, rule: str) -> dict:
    return next(w for w in summary["worst_case"] if w["rule"] == rule)


def test_summary_math_on_hand_made_cells(tmp_path):
    # Prepare
    _write_hand_cells(tmp_path)
    # Execute
    s = summarize(GRID, load_records(GRID.cells(), tmp_path))
    # Assert: min–max and mean over seeds
    alie_mk = _by(s, "alie", "multi-krum")
    assert alie_mk["accuracy"] == pytest.approx({"mean": 0.865, "min": 0.86, "max": 0.87, "n": 2})
    # impact = clean FedAvg − FedAvg under the attack, per seed then averaged: (0.05 + 0.03) / 2
    assert _by(s, "alie", "median")["impact"]["mean"] == pytest.approx(0.04)
    assert _by(s, "alie", "fedavg")["harmless"] is False
    # sign-flip costs FedAvg 0.5 points: harmless; badnets costs less but its backdoor works against FedAvg
    assert _by(s, "sign-flip", "multi-krum")["harmless"] is True
    assert _by(s, "badnets", "multi-krum")["harmless"] is False
    assert _by(s, "none", "multi-krum")["harmless"] is None
    # worst case of Multi-Krum: mean drop (0.03 + 0.06) / 2 by ALIE, worst seed 6 points (ALIE, seed 2)
    w = _worst(s, "multi-krum")
    assert w["worst_drop"]["attack"] == "alie" and w["worst_drop"]["value"] == pytest.approx(0.045)
    assert w["worst_drop_seed"] == {"value": pytest.approx(0.06), "attack": "alie", "seed": 2}
    assert w["worst_backdoor"] == {"value": pytest.approx(0.04), "attack": "badnets"}
    assert w["clean_fpr"] == pytest.approx(0.2)
    assert w["checks"] == {"backdoor": True, "accuracy": False, "clean_fpr": False, "class_drop": None}
    assert w["goal_met"] is False
    f = _worst(s, "fedavg")
    assert f["worst_backdoor"]["value"] == pytest.approx(0.85) and f["goal_met"] is False
    m = _worst(s, "median")
    assert m["worst_drop"]["value"] == pytest.approx(0.01) and m["goal_met"] is True
    assert s["counts"] == {"total": 24, "done": 24, "failed": 0, "missing": 0}
    assert s["cost"]["core_seconds"] == pytest.approx(240.0) and s["cost"]["remaining_cells"] == 0
    # the tables carry the same numbers
    md = "\n".join(worst_case_tables(s))
    assert "| multi-krum | 4.5 (alie) |" in md and "| multi-krum | 6.0 (alie, seed 2) |" in md
    assert "| median | met |" in md and "| multi-krum | not met: accuracy, clean fpr |" in md
    text = summary_markdown(s, {})
    assert "| sign-flip (impact 0.5) harmless | 90.5 [89.5–91.5] | 91.0 [90.0–92.0] | 91.0 [90.0–92.0] |" in text


def test_a_missing_cell_leaves_the_goal_open_and_a_failed_one_is_listed(tmp_path):
    # Prepare: one of median's cells missing, one of Multi-Krum's failed
    _write_hand_cells(tmp_path)
    (tmp_path / Cell(SETTING, "badnets", "median", 2).relpath).unlink()
    failed = Cell(SETTING, "alie", "multi-krum", 1)
    write_atomic(tmp_path / failed.relpath, {"format": 1, "status": "failed", "cell": {}, "config": {},
                                             "error": "RuntimeError: boom", "cpu_seconds": 1.0})
    # Execute
    s = summarize(GRID, load_records(GRID.cells(), tmp_path))
    # Assert
    m = _worst(s, "median")
    assert m["cells_not_done"] == 1 and m["goal_met"] is None
    assert _by(s, "badnets", "median")["missing_seeds"] == [2]
    assert _by(s, "alie", "multi-krum")["failed"] == [{"seed": 1, "error": "RuntimeError: boom"}]
    assert s["counts"] == {"total": 24, "done": 22, "failed": 1, "missing": 1}
    assert "alie × multi-krum seed 1: RuntimeError: boom" in summary_markdown(s, {})
    # the two cells not done are estimated at the measured 10 s each; the failed one's second counts as spent
    assert s["cost"]["remaining_core_hours"] == pytest.approx(20 / 3600)
    assert s["cost"]["core_seconds"] == pytest.approx(221.0) and s["cost"]["core_seconds_failed"] == 1.0
    assert s["cost"]["per_setting"]["digits-iid-logreg"]["cells"] == 22


def test_a_cell_run_with_other_settings_is_stale(tmp_path):
    # Prepare: the hand cells were stored with rounds = 2; the grid now asks for 3
    _write_hand_cells(tmp_path)
    now = Selection(rounds=3).apply_base(GRID)
    expected = {c: now.cell_settings(c) | {"data_dir": "/elsewhere"} for c in now.cells()}
    # Execute
    stale = load_records(now.cells(), tmp_path, expected)
    fresh = load_records(GRID.cells(), tmp_path, {c: _record(c, 0, None, 0)["config"] for c in GRID.cells()})
    # Assert: none counts as done under the new settings; where the data lies does not matter
    assert all(r is None for r in stale.values())
    assert all(r is not None for r in fresh.values())
    # A setting the stored cells predate counts as its default (root_samples: 100), any other value is stale
    same = {c: _record(c, 0, None, 0)["config"] | {"root_samples": 100} for c in GRID.cells()}
    other = {c: _record(c, 0, None, 0)["config"] | {"root_samples": 50} for c in GRID.cells()}
    assert all(r is not None for r in load_records(GRID.cells(), tmp_path, same).values())
    assert all(r is None for r in load_records(GRID.cells(), tmp_path, other).values())


ACC = st.floats(0.0, 1.0, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(st.lists(ACC, min_size=len(GRID.cells()), max_size=len(GRID.cells())))
def test_worst_case_properties(accs):
    # Prepare: arbitrary accuracies for every cell
    records = {c: _record(c, a, 0.5 if c.attack in BACKDOORS else None, 0.0) for c, a in zip(GRID.cells(), accs)}
    acc = {c: a for c, a in zip(GRID.cells(), accs)}
    # Execute
    s = summarize(GRID, records)
    # Assert: the worst mean drop is the largest cell mean; no seed is better than the mean; spreads are ordered
    for w in s["worst_case"]:
        mine = [c for c in s["cells"] if c["rule"] == w["rule"]]
        assert w["worst_drop"]["value"] == pytest.approx(max(c["drop"]["mean"] for c in mine))
        assert w["worst_drop_seed"]["value"] >= w["worst_drop"]["value"] - 1e-12
        a, seed = w["worst_drop_seed"]["attack"], w["worst_drop_seed"]["seed"]
        base = acc[Cell(SETTING, "none", "fedavg", seed)]
        assert w["worst_drop_seed"]["value"] == pytest.approx(base - acc[Cell(SETTING, a, w["rule"], seed)])
    for c in s["cells"]:
        assert c["accuracy"]["min"] <= c["accuracy"]["mean"] + 1e-12 <= c["accuracy"]["max"] + 2e-12
        if c["attack"] != "none":
            assert c["impact"] == pytest.approx(_by(s, c["attack"], "fedavg")["drop"])


def test_pooled_rates_from_per_round_fields():
    # Prepare: a simulator result without the pooled keys; 2 attackers (ids 0, 1); client 1 lost in round 2
    data = {"config": {"attack": "alie"}, "malicious_clients": [0, 1], "final_accuracy": 0.5, "rounds": [
        {"round": 1, "accuracy": 0.4, "attack_success": None, "tpr": 0.5, "fpr": 0.125, "models_received": 10,
         "models_accepted": 8, "diverged": False, "lost": {}, "seconds": {"training": 1.0, "training_total": 2.0}},
        {"round": 2, "accuracy": 0.5, "attack_success": None, "tpr": 1.0, "fpr": 0.0, "models_received": 9,
         "models_accepted": 8, "diverged": True, "lost": {"1": "dropout at setup"}, "seconds": {}},
    ]}
    # Execute
    m = reduce_metrics(data)
    # Assert: TPR = (1 + 1) / (2 + 1); FPR = (1 + 0) / (8 + 8); the first diverged round
    assert m["tpr"] == pytest.approx(2 / 3) and m["fpr"] == pytest.approx(1 / 16)
    assert m["diverged_at"] == 2 and m["final_accuracy"] == 0.5
    assert [r["malicious_rows"] for r in m["rounds"]] == [2, 1]
    # the simulator's own pooled keys win when present
    assert reduce_metrics(data | {"tpr": 0.9, "fpr": 0.01})["tpr"] == 0.9


def test_the_long_horizon_counts_in_the_worst_case_against_clean_fedavg_over_as_many_rounds(tmp_path):
    # Prepare: the hand cells, then BadNets and the clean run over 30 rounds, where median lets the backdoor in
    grid = GRID.__class__(**{**GRID.__dict__, "long_rounds": 30, "long_rules": None})
    assert grid.long_attacks == ("none", "badnets")
    _write_hand_cells(tmp_path)
    long = {("none", "fedavg"): (0.95, None), ("none", "multi-krum"): (0.94, None), ("none", "median"): (0.94, None),
            ("badnets", "fedavg"): (0.95, 0.99), ("badnets", "multi-krum"): (0.93, 0.03),
            ("badnets", "median"): (0.92, 0.60)}
    for (attack, rule), (acc, success) in long.items():
        for seed in (1, 2):
            cell = Cell(SETTING, attack, rule, seed, 30)
            rec = _record(cell, acc, success, 0.15 if (attack, rule) == ("none", "median") else 0.0, rounds=30)
            rec["malicious_share"] = None if attack == "none" else 0.25
            write_atomic(tmp_path / cell.relpath, rec)
    # Execute
    s = summarize(grid, load_records(grid.cells(), tmp_path))
    # Assert: 24 base cells and 12 long ones; the long cells' paths differ from the base ones'
    assert s["counts"]["total"] == 36 and s["counts"]["done"] == 36
    assert len({c.relpath for c in grid.cells()}) == 36
    m = _worst(s, "median")
    # median: 60 % backdoor success over 30 rounds; drop 3 points against clean FedAvg over 30 rounds (0.95 − 0.92);
    # the long clean run's FPR (0.15) is the larger one
    assert m["worst_backdoor"] == {"value": pytest.approx(0.60), "attack": "badnets, 30 rounds"}
    assert m["worst_drop"] == {"value": pytest.approx(0.03), "attack": "badnets, 30 rounds"}
    assert m["clean_fpr"] == pytest.approx(0.15) and m["goal_met"] is False
    assert _by(s, "badnets", "median")["share"] is None  # the 10-round hand cells carry no share
    long_row = next(c for c in s["cells"] if c["rounds"] == 30 and c["attack"] == "badnets" and c["rule"] == "median")
    assert long_row["share"]["mean"] == pytest.approx(0.25)
    text = summary_markdown(s, {})
    assert "## digits-iid-logreg, 30 rounds" in text
    assert "| badnets (impact 0.0) | 95.0 [95.0–95.0] | 93.0 [93.0–93.0] | 92.0 [92.0–92.0] |" in text


def test_the_class_an_attack_costs_most_is_measured_against_the_same_rule_without_attackers(tmp_path):
    import json

    _write_hand_cells(tmp_path)
    # median: class 2 falls from 0.9 to 0.8 under alie (10 points); multi-krum: no class moves more than 3 points
    classes = {("none", "median"): [0.9, 0.9, 0.9], ("alie", "median"): [0.9, 0.92, 0.8],
               ("none", "multi-krum"): [0.5, 0.9, 0.9], ("alie", "multi-krum"): [0.47, 0.9, 0.91]}
    for (attack, rule), acc in classes.items():
        for seed in (1, 2):
            path = tmp_path / Cell(SETTING, attack, rule, seed).relpath
            rec = json.loads(path.read_text())
            write_atomic(path, rec | {"class_accuracy": acc})
    s = summarize(GRID, load_records(GRID.cells(), tmp_path))
    assert _by(s, "alie", "median")["class_drop"]["mean"] == pytest.approx(0.1)
    m, k = _worst(s, "median"), _worst(s, "multi-krum")
    assert m["worst_class_drop"] == {"value": pytest.approx(0.1), "attack": "alie"} and m["checks"]["class_drop"] is False
    assert m["goal_met"] is False
    # multi-krum's class 0 is 40 points below clean FedAvg's without attackers: a clean cost, not the attack's
    assert k["worst_class_drop"]["value"] == pytest.approx(0.03) and k["checks"]["class_drop"] is True
    assert "| median | 10.0 (alie) |" in "\n".join(worst_case_tables(s))


def test_a_class_loss_is_measured_against_the_attackers_idle_where_the_grid_has_that_run(tmp_path):
    import json

    grid = GRID.__class__(**{**GRID.__dict__, "attacks": ("alie", "idle")})
    _write_hand_cells(tmp_path)
    # Class 2 is learned late: the idle attackers' missing share alone costs it 30 points; alie costs 2 more.
    classes = {"none": [0.9, 0.9, 0.9], "idle": [0.9, 0.9, 0.6], "alie": [0.9, 0.91, 0.58]}
    for attack, acc in classes.items():
        for seed in (1, 2):
            cell = Cell(SETTING, attack, "median", seed)
            path = tmp_path / cell.relpath
            rec = json.loads(path.read_text()) if path.exists() else _record(cell, 0.88, None, 0.0)
            write_atomic(path, rec | {"class_accuracy": acc})
    s = summarize(grid, load_records(grid.cells(), tmp_path))
    alie = _by(s, "alie", "median")
    assert alie["class_drop"]["mean"] == pytest.approx(0.02) and alie["class_reference"] == ["idle"]
    # The reference adds nothing by definition: what its missing rows cost is in its accuracy drop.
    assert _by(s, "idle", "median")["class_drop"] is None
    assert _worst(s, "median")["worst_class_drop"] == {"value": pytest.approx(0.02), "attack": "alie"}
    # Without the idle run, the same loss reads against the clean run.
    s = summarize(GRID, load_records(GRID.cells(), tmp_path))
    assert _by(s, "alie", "median")["class_drop"]["mean"] == pytest.approx(0.32)
    assert _by(s, "alie", "median")["class_reference"] == ["none"]


def test_the_choice_is_the_rule_whose_worst_miss_is_the_smallest_multiple_of_its_goal():
    from reshuffle.evaluation.summary import choose

    def wc(rule, setting, backdoor, drop, fpr, not_done=0, clean=0.01):
        return {"rule": rule, "setting": setting, "cells_not_done": not_done, "clean_fpr": fpr, "clean_drop": clean,
                "worst_backdoor": None if backdoor is None else {"value": backdoor, "attack": "badnets"},
                "worst_drop": {"value": drop, "attack": "alie"}, "worst_class_drop": None}

    worst = [wc("a", "s1", 0.04, 0.01, 0.0), wc("a", "s2", 0.10, 0.01, 0.0),   # backdoor 10 %: 2× its goal
             wc("b", "s1", 0.01, 0.03, 0.05), wc("b", "s2", None, 0.01, 0.0)]  # drop 3 points: 1.5×
    c = choose(worst, ["a", "b"])
    assert c["rule"] == "b" and c["complete"] is True
    assert [(r["rule"], r["entry"], r["setting"]) for r in c["ranking"]] == [
        ("b", "worst_drop", "s1"), ("a", "worst_backdoor", "s2")]
    assert c["ranking"][1]["ratio"] == pytest.approx(2.0) and c["ranking"][0]["ratio"] == pytest.approx(1.5)
    # An exact tie goes to the smaller clean cost; cells not done leave the choice incomplete
    tie = [wc("a", "s1", 0.10, 0.0, 0.0, clean=0.02), wc("b", "s1", 0.10, 0.0, 0.0, not_done=3, clean=0.01)]
    c = choose(tie, ["a", "b"])
    assert c["rule"] == "b" and c["complete"] is False


def test_the_summary_chooses_among_the_rules_not_fedavg(tmp_path):
    _write_hand_cells(tmp_path)
    s = summarize(GRID, load_records(GRID.cells(), tmp_path))
    assert {r["rule"] for r in s["choice"]["ranking"]} == {"multi-krum", "median"}
    # median's worst is its drop under alie (1 point: 0.5× the goal); multi-krum's too (4.5 points: 2.25×)
    assert s["choice"]["rule"] == "median"
    assert [(r["rule"], r["entry"], r["attack"]) for r in s["choice"]["ranking"]] == [
        ("median", "worst_drop", "alie"), ("multi-krum", "worst_drop", "alie")]
    assert s["choice"]["ranking"][1]["ratio"] == pytest.approx(2.25)
    from reshuffle.evaluation.report import brief_table
    assert any(line.startswith("By worst case") and "`median`" in line for line in brief_table(s))
