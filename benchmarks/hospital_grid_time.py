"""Wall time of `make -j2 results-hospital` on this machine, from the cells that ran.

The hospital-scale grid (issue 30, the Makefile's `results-hospital-site` and
`results-hospital-distributed` sweeps) is too long to time end to end here, but most of its cell
kinds ran, three seeds each, and every sweep table keeps each cell's wall time. This script sets
each cell of the grid to the mean minutes per cell of the same method and ε in the committed wall
tables (the newest measurement first, see WALL_TABLES), a cell kind that never ran to the mean of
its method's private cells that did (marked imputed), and sums: each sweep runs its cells one at
a time, and `-j2` runs the two sweeps at once, so its wall time is the longer sweep's.

The measured cells ran two or three at a time on the 2 cores (their tables' machine lines), as
`-j2` runs them; the longer sweep's cells after the shorter one ends run alone and faster, so the
`-j2` figure errs long.

    python benchmarks/hospital_grid_time.py                 # prints the estimate as JSON
    python benchmarks/hospital_grid_time.py --write          # docs/results/hospital-grid-time.json

tests/test_benchmarks.py checks that the committed table is what the committed wall tables give.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
TARGETS = {"results-hospital-site": "site mode", "results-hospital-distributed": "distributed DP"}
# per sweep config: wall tables, newest measurement first (a later table's cell kind wins only
# where no newer one has it). Site-mode private cells other than central ran before DP steps ran
# in passes (one pass a step); central's shipped-base cells ran in passes where the table says so.
WALL_TABLES = {
    "configs/hospital-scale.toml": ["hospital-central-here-wall.json", "hospital-wall.json"],
    "configs/hospital-scale-distributed.toml": [
        "hospital-distributed-here-wall.json",
        "hospital-distributed-wall.json",
    ],
}
REFERENCES = ("base", "local")  # run at ε = ∞ only, whatever --epsilons says


def grid(makefile: Path = ROOT / "Makefile") -> list[dict[str, Any]]:
    """Each hospital sweep of the Makefile: its target, config, methods, seeds and ε."""
    text = makefile.read_text(encoding="utf-8")
    sweeps = []
    for target, mode in TARGETS.items():
        m = re.search(rf"^{re.escape(target)}:.*\n\t(.+)$", text, re.MULTILINE)
        if m is None:
            raise ValueError(f"{makefile}: no `{target}` target with a sweep line")
        args = shlex.split(m.group(1))
        opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("-")}
        sweeps.append(
            {
                "target": target,
                "mode": mode,
                "config": opt["--config"],
                "methods": opt["--methods"].split(","),
                "seeds": len(opt["--seeds"].split(",")),
                "epsilons": [None if e == "inf" else float(e) for e in opt["--epsilons"].split(",")],
            }
        )
    return sweeps


def _label(method: str, epsilon: float | None) -> str:
    return f"{method} ε={'∞' if epsilon is None else f'{epsilon:g}'}"


def measured(config: str, results: Path = RESULTS) -> dict[str, tuple[float, str]]:
    """Cell kind ("fedavg ε=8") → (mean minutes per cell, the table it comes from), newest first."""
    out: dict[str, tuple[float, str]] = {}
    for name in WALL_TABLES[config]:
        path = results / name
        if not path.is_file():
            continue
        table = json.loads(path.read_text(encoding="utf-8"))
        col = table["columns"].index("min per cell")
        for row in table["rows"]:
            out.setdefault(row[0], (float(str(row[col]).split(" ")[0]), name))
    return out


def estimate(results: Path = RESULTS, makefile: Path = ROOT / "Makefile") -> dict[str, Any]:
    sweeps = []
    for sw in grid(makefile):
        times = measured(sw["config"], results)
        rows = []
        for method in sw["methods"]:
            epsilons = [None] if method in REFERENCES else sw["epsilons"]
            ran = [
                times[_label(method, e)][0]
                for e in sw["epsilons"]
                if e is not None and _label(method, e) in times
            ]
            for e in epsilons:
                label = _label(method, e)
                if label in times:
                    minutes, source = times[label]
                elif e is not None and ran:
                    minutes, source = sum(ran) / len(ran), "imputed: mean of its private cells that ran"
                else:
                    raise ValueError(f"{label}: no wall time in {', '.join(WALL_TABLES[sw['config']])}")
                rows.append(
                    {"cell": label, "seeds": sw["seeds"], "min_per_cell": round(minutes, 3), "source": source}
                )
        hours = sum(r["min_per_cell"] * r["seeds"] for r in rows) / 60
        sweeps.append(sw | {"rows": rows, "cells": sum(r["seeds"] for r in rows), "hours": round(hours, 2)})
    return {
        "sweeps": sweeps,
        "j2_hours": max(s["hours"] for s in sweeps),
        "one_after_the_other_hours": round(sum(s["hours"] for s in sweeps), 2),
        "wall_tables": {c: names for c, names in WALL_TABLES.items()},
    }


def table(est: dict[str, Any], commit: str, date: str) -> dict[str, Any]:
    """The doc table (tools/doc_tables.py's format)."""
    rows = []
    for sw in est["sweeps"]:
        for r in sw["rows"]:
            source = r["source"].removesuffix(".json")
            hours = r["seeds"] * r["min_per_cell"] / 60
            rows.append(
                [sw["mode"], r["cell"], str(r["seeds"]), f"{r['min_per_cell']:.1f}", f"{hours:.2f}", source]
            )
        rows.append([sw["mode"], f"whole sweep ({sw['cells']} cells)", "", "", f"{sw['hours']:.2f}", ""])
    rows.append(
        ["both", "make -j2 results-hospital (the longer sweep)", "", "", f"{est['j2_hours']:.2f}", ""]
    )
    rows.append(["both", "one sweep after the other", "", "", f"{est['one_after_the_other_hours']:.2f}", ""])
    return {
        "title": "Hospital scale: the grid's wall time on this machine, from the cells that ran",
        "source": {
            "command": "python benchmarks/hospital_grid_time.py --write",
            "commit": commit,
            "date": date,
            "machine": "the measured cells' (their wall tables': 2-core machine, 24 GiB, one torch thread a "
            "cell, two or three cells at a time)",
            "wall": None,
        },
        "columns": [
            "sweep",
            "cell (method ε)",
            "seeds",
            "min per cell",
            "hours",
            "measured in (docs/results/…)",
        ],
        "rows": rows,
        "notes": [
            "Each cell kind's minutes are the mean over its seeds in the newest wall table that has it; "
            "a kind that never ran is the mean of its method's private cells that did (imputed).",
            "A sweep runs its cells one at a time; make -j2 runs the two sweeps at once, so its time is "
            "the longer sweep's. The cells were measured two or three at a time, as -j2 runs them; "
            "after the shorter sweep ends the longer one's cells run alone and faster, so the -j2 "
            "figure errs long.",
            "Site mode's private cells other than central ran with each DP step in one pass; steps now "
            "run in passes of at most 128 patients (a pooled private step at 0.38x the wall, "
            "BENCHMARKS 'DP step memory in passes'), which this estimate does not credit.",
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="write docs/results/hospital-grid-time.json")
    args = p.parse_args(argv)
    try:
        est = estimate()
    except (ValueError, KeyError) as e:
        print(f"hospital_grid_time: {e}", file=sys.stderr)
        return 2
    if args.write:
        out = RESULTS / "hospital-grid-time.json"
        sys.path.insert(0, str(ROOT / "tools"))
        from doc_tables import dump_table, git_head

        made = table(est, git_head(short=True), dt.date.today().isoformat())
        out.write_text(dump_table(made), encoding="utf-8")
        print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)
    print(json.dumps(est, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
