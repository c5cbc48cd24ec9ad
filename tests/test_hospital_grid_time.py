"""benchmarks/hospital_grid_time.py: the hospital grid's wall time from the cells that ran. It reads
committed JSON only (no torch), so the committed table is recomputed here in full."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
grid_time = load_script("benchmarks/hospital_grid_time.py")

COMMITTED = ROOT / "docs" / "results" / "hospital-grid-time.json"


def test_the_grid_is_the_makefiles_two_hospital_sweeps() -> None:
    site, distributed = grid_time.grid()
    assert site["config"] == "configs/hospital-scale.toml" and site["seeds"] == 3
    assert None in site["epsilons"] and 16.0 in site["epsilons"]
    assert distributed["config"] == "configs/hospital-scale-distributed.toml"
    est = grid_time.estimate()
    cells = {s["target"]: s["cells"] for s in est["sweeps"]}
    # base and local at ∞ only; every other method at each of the six ε (site) or four (distributed)
    n_site = 3 * (2 + 6 * (len(site["methods"]) - 2))
    assert cells == {"results-hospital-site": n_site, "results-hospital-distributed": 3 * 4 * 3}


def test_committed_table_is_what_the_committed_wall_tables_give() -> None:
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    fresh = grid_time.table(grid_time.estimate(), committed["source"]["commit"], committed["source"]["date"])
    assert fresh == committed, "stale: run python benchmarks/hospital_grid_time.py --write"


def _wall(path: Path, rows: list[list[str]]) -> None:
    path.write_text(json.dumps({"columns": ["method", "cells", "min per cell", "longest"], "rows": rows}))


def test_each_cell_takes_the_newest_measurement_and_a_missing_kind_is_imputed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make = tmp_path / "Makefile"
    make.write_text(
        "results-hospital-site: x\n\t$(SWEEP) --config a.toml --methods base,fedavg --seeds 0,1 "
        "--epsilons inf,8,4 -o runs/a\n\n"
        "results-hospital-distributed: x\n\t$(SWEEP) --config b.toml --methods fedavg --seeds 0 "
        "--epsilons 8 -o runs/b\n"
    )
    _wall(tmp_path / "new.json", [["fedavg ε=8", "2", "10.0 ± 1.0", "11"]])
    _wall(
        tmp_path / "old.json",
        [
            ["fedavg ε=8", "2", "99.0 ± 1.0", "99"],
            ["fedavg ε=∞", "2", "6.0", "6"],
            ["base ε=∞", "2", "1.5 ± 0.1", "2"],
        ],
    )
    _wall(tmp_path / "dist.json", [["fedavg ε=8", "1", "30.0", "30"]])
    monkeypatch.setattr(
        grid_time, "WALL_TABLES", {"a.toml": ["new.json", "old.json"], "b.toml": ["dist.json"]}
    )

    est = grid_time.estimate(tmp_path, make)

    site, dist = est["sweeps"]
    rows = {r["cell"]: r for r in site["rows"]}
    assert rows["fedavg ε=8"]["min_per_cell"] == 10.0 and rows["fedavg ε=8"]["source"] == "new.json"
    assert rows["fedavg ε=4"]["min_per_cell"] == 10.0 and rows["fedavg ε=4"]["source"].startswith("imputed")
    assert "base ε=8" not in rows and rows["base ε=∞"]["min_per_cell"] == 1.5
    # 2 seeds × (1.5 + 6 + 10 + 10) min
    assert site["hours"] == pytest.approx(2 * 27.5 / 60, abs=0.01)
    assert dist["hours"] == pytest.approx(0.5)
    # two workers share the 9 cells: worker 1 takes site cells in order (base, fedavg ∞, …), worker 2
    # starts on the 30-min distributed cell and then takes the site cells worker 1 has not started
    assert est["one_after_the_other_hours"] == pytest.approx(1.42, abs=0.01)
    assert est["j2_hours"] == pytest.approx(max(est["workers_hours"]))
    assert est["j2_hours"] < site["hours"] + 0.01 and est["j2_hours"] >= 1.42 / 2 - 0.01


def test_two_workers_share_the_cells_and_a_fine_tuned_cell_waits_for_its_federated_one() -> None:
    """The Makefile's -j2 schedule: worker 1 runs site mode then distributed, worker 2 the reverse,
    each taking the next cell no one has started; a fine-tuned cell runs only once its federated
    cell has finished (the sweep leaves it otherwise), so it goes to whoever reaches it after."""
    site = {
        "methods": ["fedavg", "fedavg-ft"],
        "seeds": 2,
        "epsilons": [8.0],
        "rows": [
            {"cell": "fedavg ε=8", "min_per_cell": 10.0},
            {"cell": "fedavg-ft ε=8", "min_per_cell": 1.0},
        ],
    }
    dist = {
        "methods": ["fedavg"],
        "seeds": 1,
        "epsilons": [8.0],
        "rows": [{"cell": "fedavg ε=8", "min_per_cell": 2.0}],
    }
    assert grid_time.sweep_order(site) == [
        ("fedavg", 8.0, 0),
        ("fedavg", 8.0, 1),
        ("fedavg-ft", 8.0, 0),
        ("fedavg-ft", 8.0, 1),
    ]
    # w1: fedavg s0 [0, 10], ft s0 [10, 11], passes ft s1 (fedavg s1 runs until 12): ends at 11;
    # w2: distributed [0, 2], fedavg s1 [2, 12], ft s1 [12, 13]
    clocks, left = grid_time.two_workers([site, dist])
    assert clocks == [11.0, 13.0] and left == 0.0
    # alone, a worker would take 10 + 10 + 1 + 1 + 2 = 24 min
    only = {**site, "seeds": 1}
    assert grid_time.two_workers([only, {**dist, "seeds": 0}]) == ([11.0, 0.0], 0.0)


def test_a_kind_no_table_has_is_refused_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make = tmp_path / "Makefile"
    line = "\t$(SWEEP) --config a.toml --methods fedtar --seeds 0 --epsilons inf -o r\n"
    make.write_text(f"results-hospital-site: x\n{line}results-hospital-distributed: x\n{line}")
    _wall(tmp_path / "t.json", [["fedavg ε=∞", "1", "5.0", "5"]])
    monkeypatch.setattr(grid_time, "WALL_TABLES", {"a.toml": ["t.json"]})
    with pytest.raises(ValueError, match="fedtar ε=∞: no wall time in t.json"):
        grid_time.estimate(tmp_path, make)


def test_passes_rescale_only_the_training_share() -> None:
    """`--passes P`: a training cell's measured minutes m become m·(s·P/5 + 1 − s), s its kind's
    training share from the per-unit costs; base and the fine-tuned cells do not train the passes."""
    shares = grid_time.training_shares()
    assert 0 < shares["dp"] < 1 and 0 < shares["non_private"] < 1
    same = grid_time.estimate(passes=grid_time.PASSES)
    assert same["j2_hours"] == grid_time.estimate()["j2_hours"]
    measured = {r["cell"]: r["min_per_cell"] for s in grid_time.estimate()["sweeps"] for r in s["rows"]}
    doubled = grid_time.estimate(passes=2 * grid_time.PASSES)
    rows = {r["cell"]: r["min_per_cell"] for s in doubled["sweeps"] for r in s["rows"]}
    s = shares["dp"]
    assert rows["central ε=8"] == pytest.approx(measured["central ε=8"] * (1 + s), abs=1e-3)
    assert rows["central ε=∞"] == pytest.approx(
        measured["central ε=∞"] * (1 + shares["non_private"]), abs=1e-3
    )
    assert rows["base ε=∞"] == measured["base ε=∞"] and rows["fedavg-ft ε=8"] == measured["fedavg-ft ε=8"]
    assert doubled["j2_hours"] > same["j2_hours"]
