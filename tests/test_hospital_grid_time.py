"""benchmarks/hospital_grid_time.py: the hospital grid's wall time from the cells that ran. It reads
committed JSON only (no torch), so the committed table is recomputed here in full."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
grid_time = load_script("benchmarks/hospital_grid_time.py")


def test_results_hospital_is_the_sections_cells_at_the_configs_recipe() -> None:
    """`make results-hospital`: the headline at ε = 8 (pooled DP-SGD, its noise-free reference,
    distributed FedAvg and FedTAR), the non-private references and FedAvg and FedTAR without DP, at
    the configs' ten passes."""
    site, own, distributed = grid_time.grid()
    assert site["config"] == own["config"] == "configs/hospital-scale.toml" and site["seeds"] == 3
    assert site["methods"] == ["base", "central", "central-clip"] and site["epsilons"] == [None, 8.0]
    assert own["methods"] == ["fedavg", "fedtar"] and own["epsilons"] == [None] and own["seeds"] == 3
    assert distributed["config"] == "configs/hospital-scale-distributed.toml"
    assert distributed["methods"] == ["fedavg", "fedtar"] and distributed["epsilons"] == [8.0]
    assert grid_time.config_passes(site["config"]) == grid_time.config_passes(distributed["config"]) == 10
    est = grid_time.estimate()
    cells = [(s["target"], s["cells"]) for s in est["sweeps"]]
    # base, central at ∞, central at 8, central-clip at ∞ only; FedAvg and FedTAR at ∞, then at 8
    assert cells == [
        ("results-hospital-site", 3 * 4),
        ("results-hospital-site", 3 * 2),
        ("results-hospital-distributed", 3 * 2),
    ]


def test_the_grid_target_is_the_whole_grid() -> None:
    site, distributed = grid_time.grid(target="results-hospital-grid")
    assert None in site["epsilons"] and 16.0 in site["epsilons"]
    est = grid_time.estimate(target="results-hospital-grid")
    cells = {s["target"]: s["cells"] for s in est["sweeps"]}
    # base and local at ∞ only; every other method at each of the six ε (site) or four (distributed)
    n_site = 3 * (2 + 6 * (len(site["methods"]) - 2))
    assert cells == {"results-hospital-grid-site": n_site, "results-hospital-grid-distributed": 3 * 4 * 3}
    with pytest.raises(ValueError, match="unknown target"):
        grid_time.grid(target="results")


@pytest.mark.parametrize("target", sorted(grid_time.TARGETS))
def test_committed_table_is_what_the_committed_wall_tables_give(target: str) -> None:
    committed_path = ROOT / "docs" / "results" / grid_time.OUTPUT[target]
    committed = json.loads(committed_path.read_text(encoding="utf-8"))
    fresh = grid_time.table(
        grid_time.estimate(target=target), committed["source"]["commit"], committed["source"]["date"]
    )
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
        grid_time,
        "WALL_TABLES",
        {"a.toml": [("new.json", 5), ("old.json", 5)], "b.toml": [("dist.json", 5)]},
    )

    est = grid_time.estimate(tmp_path, make, passes=5)

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
    monkeypatch.setattr(grid_time, "WALL_TABLES", {"a.toml": [("t.json", 5)]})
    with pytest.raises(ValueError, match="fedtar ε=∞: no wall time in t.json"):
        grid_time.estimate(tmp_path, make, passes=5)


def test_passes_rescale_only_the_training_share() -> None:
    """A cell measured at P0 passes, at P: its minutes m become m·(r·P + 1)/(r·P0 + 1), r its kind's
    training time per pass over its scoring time; base and the fine-tuned cells do not train the
    passes, and the noise-free reference trains DP-SGD's steps."""
    rates = grid_time.training_rates()
    assert rates["dp"] > 0 and rates["non_private"] > 0
    r = rates["dp"]
    assert grid_time.rescale(10.0, "central", 8.0, 5, 10, rates) == pytest.approx(
        10 * (10 * r + 1) / (5 * r + 1)
    )
    assert grid_time.rescale(10.0, "central-clip", None, 5, 10, rates) == pytest.approx(
        10 * (10 * r + 1) / (5 * r + 1)
    )
    n = rates["non_private"]
    assert grid_time.rescale(10.0, "central", None, 5, 10, rates) == pytest.approx(
        10 * (10 * n + 1) / (5 * n + 1)
    )
    assert grid_time.rescale(10.0, "base", None, 5, 10, rates) == 10.0
    assert grid_time.rescale(10.0, "fedavg-ft", 8.0, 5, 10, rates) == 10.0
    assert grid_time.rescale(10.0, "fedavg", 8.0, 10, 10, rates) == 10.0
    # the configs' recipe: a row measured at other passes says so in its source, one measured at
    # the recipe's does not
    rows = {r["cell"]: r for s in grid_time.estimate()["sweeps"] for r in s["rows"]}
    assert rows["central ε=∞"]["source"].endswith("rescaled from 5 passes"), rows["central ε=∞"]
    assert rows["central ε=8"]["source"] == "hospital-retuned-site-wall.json", rows["central ε=8"]
    doubled = grid_time.estimate(passes=20)
    assert doubled["j2_hours"] > grid_time.estimate()["j2_hours"]


def test_each_recipe_line_is_a_sweep_and_worker_two_keeps_a_sub_targets_lines_in_order(
    tmp_path: Path,
) -> None:
    """A sub-target whose recipe has two sweep lines runs them one after the other on either worker:
    worker 2 starts with the other sub-target, then runs this one's lines in their own order."""
    makefile = tmp_path / "Makefile"
    makefile.write_text(
        "results-hospital-site: $(STAMP)\n"
        "\t$(SWEEP) --config a.toml --methods central --seeds 0,1 --epsilons inf -o runs/x\n"
        "\t$(SWEEP) --config a.toml --methods fedavg --seeds 0 --epsilons inf -o runs/x\n"
        "\n"
        "results-hospital-distributed: $(STAMP)\n"
        "\t$(SWEEP) --config b.toml --methods fedtar --seeds 0 --epsilons 8 -o runs/y\n"
    )
    first, second, distributed = grid_time.grid(makefile)
    assert [first["methods"], second["methods"], distributed["methods"]] == [
        ["central"],
        ["fedavg"],
        ["fedtar"],
    ]
    assert first["target"] == second["target"] == "results-hospital-site" and first["seeds"] == 2
    for sw, cell, minutes in (
        (first, "central ε=∞", 5.0),
        (second, "fedavg ε=∞", 3.0),
        (distributed, "fedtar ε=8", 1.0),
    ):
        sw["rows"] = [{"cell": cell, "min_per_cell": minutes}]
    # w1: central s0 [0, 5], fedavg [5, 8]; w2: fedtar [0, 1], central s1 [1, 6], then nothing left.
    # Had worker 2 run the site lines reversed, it would take fedavg [1, 4] and central s1 [4, 9].
    assert grid_time.two_workers([first, second, distributed]) == ([8.0, 6.0], 0.0)
