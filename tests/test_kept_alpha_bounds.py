"""Every kept FedTAR cell at today's method ends with its temporal weights inside the deployment
write-up's [0.1, 0.9]; the records that ran before the floor on α (ψ's earlier update, which walked
α onto one visit) are a closed list, so a new record cannot slip in at the earlier method. Reads the
kept records only (docs/results/sweeps/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KEPT = ROOT / "docs" / "results" / "sweeps"
LOW, HIGH = 0.1, 0.9  # the write-up's bounds on each α_t
# Ran before `train.alpha_floor` existed: the investigation that led to the floor (their pages say
# which ψ update each ran). Closed: a record added later must run today's method.
EARLIER_METHOD = frozenset(
    {
        "results-hospital-distributed-fedtar-lr-metalr-grid",
        "results-hospital-distributed-fedtar-lr-metalr",
        "results-hospital-distributed-fedtar-lr",
        "results-hospital-distributed-fedtar-matched",
        "results-hospital-distributed-fedtar-metalr",
        "results-hospital-distributed-fedtar-symmetric",
        "results-hospital-distributed-floor-levers",
        "results-hospital-distributed-floor",
        "results-hospital-distributed",
        "results-hospital-fedtar-inf",
        "results-hospital-retuned-distributed",
        "results-hospital-retuned-fedtar-meta-lr",
        "results-hospital-site-shipped",
        "results-paper-drift-distributed",
        "results-paper-drift",
        "results-paper-drift0-distributed",
        "results-paper-drift0",
    }
)


def _fedtar_records() -> dict[str, dict[str, Any]]:
    records = {}
    for path in sorted(KEPT.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if any(str(run.get("method", "")).startswith("fedtar") for run in record.get("runs", [])):
            records[path.stem] = record
    return records


def _floored(record: dict[str, Any]) -> bool:
    return bool(record["config"].get("train", {}).get("alpha_floor"))


def test_every_kept_fedtar_cell_at_todays_method_ends_within_the_bounds() -> None:
    records = {name: r for name, r in _fedtar_records().items() if _floored(r)}
    assert "results-hospital-fedtar" in records and "results-paper-powered" in records
    cells = [
        (name, run)
        for name, record in records.items()
        for run in record["runs"]
        if str(run["method"]).startswith("fedtar")
    ]
    assert all(run.get("alpha") is not None for _, run in cells), "a kept FedTAR cell without its α"
    outside = [
        (name, run["method"], run["epsilon"], run["seed"], [round(a, 3) for a in run["alpha"]])
        for name, run in cells
        if not all(LOW <= a <= HIGH for a in run["alpha"])
    ]
    assert not outside, f"FedTAR cells at today's method with α outside [{LOW}, {HIGH}]: {outside}"


def test_the_records_from_before_the_floor_are_a_closed_list() -> None:
    earlier = {name for name, record in _fedtar_records().items() if not _floored(record)}
    assert earlier == EARLIER_METHOD, (
        f"new without α's floor: {sorted(earlier - EARLIER_METHOD)}; gone: {sorted(EARLIER_METHOD - earlier)}"
    )
