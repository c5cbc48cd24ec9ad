"""The sweep's summary is what RESULTS.md reports: mean ± sample std per (method, ε)."""

from __future__ import annotations

import math

import pytest

from secure_fed.clients.evaluation import METRIC_NAMES
from secure_fed.sweep import markdown_table, summarise


def _run(method, epsilon, value):
    return {"method": method, "epsilon": epsilon, "seed": 0, "test": dict.fromkeys(METRIC_NAMES, value)}


def test_summary_is_mean_and_sample_std_per_group():
    runs = [
        _run("fedtar", None, 1.0),
        _run("fedtar", None, 2.0),
        _run("fedtar", None, 3.0),
        _run("fedavg", None, 0.5),
        _run("fedtar", 4.0, 0.25),
    ]
    rows = {(r["method"], r["epsilon"]): r for r in summarise(runs)}
    assert rows[("fedtar", None)]["n"] == 3
    assert rows[("fedtar", None)]["CIDEr"] == pytest.approx((2.0, 1.0))
    assert rows[("fedavg", None)]["CIDEr"] == (0.5, 0.0)
    table = markdown_table(list(rows.values()))
    assert "| fedtar | ∞ | 3 | 2.000 ± 1.000" in table and "| fedtar | 4 | 1 |" in table


def test_nan_metrics_are_left_out_not_averaged_in():
    runs = [_run("fedtar", None, 1.0), _run("fedtar", None, math.nan)]
    row = summarise(runs)[0]
    assert row["BLEU-1"] == (1.0, 0.0)
