"""The accounting table of benchmarks/distributed_noise.py (docs/BENCHMARKS.md, "Distributed DP"): the
committed table is the committed raw output shaped, its columns follow from the raw fields, and the
two multipliers it sets side by side are each the smallest that meets ε (rechecked here with the
project's accountants). Files and two RDP curves, no benchmark run: well under a second."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.distributed import ORDERS, _subsampled_curve, rdp_to_epsilon
from secure_fed.dp.events import PoissonSampledGaussian

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
_spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "tools" / "bench_tables.py")
assert _spec is not None and _spec.loader is not None
bench_tables = importlib.util.module_from_spec(_spec)
sys.modules["bench_tables"] = bench_tables
_spec.loader.exec_module(bench_tables)
NAME = "distributed-noise-accounting"


def _raw() -> dict[str, Any]:
    return json.loads((RESULTS / "distributed-noise.json").read_text(encoding="utf-8"))


def test_committed_table_is_the_raw_output_shaped(tmp_path: Path) -> None:
    raw = RESULTS / "distributed-noise.json"
    assert bench_tables.main([NAME, str(raw), "--results", str(tmp_path)]) == 0
    fresh = json.loads((tmp_path / f"bench-{NAME}.json").read_text(encoding="utf-8"))
    committed = json.loads((RESULTS / f"bench-{NAME}.json").read_text(encoding="utf-8"))
    assert fresh == committed
    for key in ("command", "commit", "date", "machine"):
        assert committed["source"][key] == _raw()["source"][key]


def test_columns_follow_from_the_raw_fields() -> None:
    rows = _raw()["output"]["accounting"]
    table = bench_tables.shape(NAME, _raw(), "cmd", "machine", None, "0" * 40)
    assert [r[0] for r in table["rows"]] == [r["setting"] for r in rows]
    for row, shaped in zip(rows, table["rows"], strict=True):
        assert row["penalty"] == row["gaussian_zhu_wang"] / row["site_sigma_exact"]
        honest = math.sqrt(row["h"] - row["c"])
        assert math.isclose(row["ratio"], row["skellam_plan"] / (honest * row["site_sigma_exact"]))
        assert shaped[5] == f"{row['ratio']:.3f}"
        assert shaped[7] == ("more noise" if row["ratio"] >= 1 else "less noise")
    verdict = {r[0]: r[7] for r in table["rows"]}
    # the recipe's own rate: distributed mode loses at ε = 1 and 2 and wins at 4 and 8
    assert [verdict[f"hospital: ε = {e}, q = 0.1, 50 steps"] for e in (1, 2, 4, 8)] == [
        "more noise",
        "more noise",
        "less noise",
        "less noise",
    ]


def test_the_benchmark_rows_multipliers_are_each_the_smallest_meeting_epsilon() -> None:
    row = _raw()["output"]["accounting"][0]
    assert not row["histogram"]
    eps, q, steps, delta = (
        row["epsilon"],
        row["sample_rate"],
        row["steps"],
        _raw()["output"]["target"]["delta"],
    )
    orders = np.asarray(ORDERS, dtype=np.float64)

    def zhu_wang(z: float) -> float:
        return rdp_to_epsilon(orders, _subsampled_curve(q, orders / (2 * z * z)) * steps, delta)

    def exact(sigma: float) -> float:
        return epsilon_rdp([PoissonSampledGaussian(q, sigma, steps)], delta)

    for epsilon_of, z in ((zhu_wang, row["gaussian_zhu_wang"]), (exact, row["site_sigma_exact"])):
        assert epsilon_of(z) <= eps < epsilon_of(0.999 * z)
