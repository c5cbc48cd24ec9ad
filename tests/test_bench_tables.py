"""tools/bench_tables.py's distributed-DP shapers on the committed raw outputs
(docs/results/distributed-*.json): the docs' tables are those files shaped, figure for figure.
Files only, no benchmark run: well under a second in all."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
_spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "tools" / "bench_tables.py")
assert _spec is not None and _spec.loader is not None
bench_tables = importlib.util.module_from_spec(_spec)
sys.modules["bench_tables"] = bench_tables
_spec.loader.exec_module(bench_tables)


def _raw(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def test_distributed_noise_rows_are_the_measured_ratios() -> None:
    raw = _raw("distributed-noise")
    table = bench_tables.shape("distributed-noise", raw, "cmd", "machine", None, "0" * 40)
    rows = {r[0]: r for r in table["rows"]}
    assert list(rows) == [f"h = {h}, c = {c}" for h in (3, 5, 10) for c in (0, 1)]
    h3 = raw["output"]["noise"][0]
    assert h3["h"] == 3
    # site std, distributed std, ratio, goal, met: from the measured fields, not the plan's
    assert rows["h = 3, c = 0"][1:6] == [
        f"{h3['site_mode_std']:.3f}",
        f"{h3['c0']['std']:.3f}",
        f"{h3['c0']['ratio']:.3f}",
        f"{h3['goal_ratio']:.3f}",
        "no" if not h3["c0"]["ratio_le_goal"] else "yes",
    ]
    assert rows["h = 10, c = 1"][3] == f"{raw['output']['noise'][2]['c1']['ratio']:.3f}"
    assert "σ = 1.1188" in table["notes"][0] and "1.2518" in table["notes"][0]


def test_distributed_cost_rows_are_the_cpu_and_wall_ratios() -> None:
    raw = _raw("distributed-cost")
    table = bench_tables.shape("distributed-cost", raw, "cmd", "machine", None, "0" * 40)
    assert [r[0] for r in table["rows"]] == [
        "5 sites, default graph",
        "50 sites, complete graph",
        "50 sites, SecAgg+ graph",
    ]
    five, complete, sparse = raw["output"]["results"]
    cols = table["columns"]
    row = dict(zip(cols, table["rows"][0], strict=True))
    assert row["ratio, CPU"] == f"{five['ratio_cpu']:.2f}"
    assert row["ratio with setup, CPU"] == f"{five['cpu']['ratio_with_round_setup']:.2f}"
    assert table["rows"][1][cols.index("h (c)")] == f"{complete['honest_min']} (1)"
    assert table["rows"][2][cols.index("ratio, wall")] == f"{sparse['ratio_wall']:.2f}"


@pytest.mark.parametrize("name", ["distributed-noise", "distributed-cost"])
def test_committed_table_is_the_raw_output_shaped_with_its_source(name: str, tmp_path: Path) -> None:
    # the CLI, given only the raw file, takes command, commit, date and machine from it
    assert bench_tables.main([name, str(RESULTS / f"{name}.json"), "--results", str(tmp_path)]) == 0
    fresh = json.loads((tmp_path / f"bench-{name}.json").read_text(encoding="utf-8"))
    committed = json.loads((RESULTS / f"bench-{name}.json").read_text(encoding="utf-8"))
    assert fresh == committed
    raw_source = _raw(name)["source"]
    for key in ("command", "commit", "date", "machine"):
        assert committed["source"][key] == raw_source[key]


def test_an_output_that_states_no_command_is_refused(tmp_path: Path) -> None:
    bare = tmp_path / "out.json"
    bare.write_text(json.dumps(_raw("distributed-cost")["output"]), encoding="utf-8")
    assert bench_tables.main(["distributed-cost", str(bare), "--results", str(tmp_path)]) == 2
    assert not (tmp_path / "bench-distributed-cost.json").exists()
