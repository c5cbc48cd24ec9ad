"""Wall time of `make -j2 results-hospital` on this machine, from the cells that ran.

The hospital-scale grid (issue 30, the Makefile's `results-hospital-site` and
`results-hospital-distributed` sweeps) is too long to time end to end here, but most of its cell
kinds ran, three seeds each, and every sweep table keeps each cell's wall time. This script sets
each cell of the grid to the mean minutes per cell of the same method and ε in the committed wall
tables (the newest measurement first, see WALL_TABLES), a cell kind that never ran to the mean of
its method's private cells that did (marked imputed), and plays the Makefile's schedule: under
`-j2` two workers each run one sweep and then the other, in opposite orders, one cell at a time,
each taking the next cell in its order that no one has started; a fine-tuned cell whose federated
cell has not finished is passed over (the other worker runs it if it gets there after that cell
ends), and the last recipe runs any cells left, one after another.

The measured cells ran two or three at a time on the 2 cores (their tables' machine lines), as
`-j2` runs them two at a time, so the figure errs long where a table's cells ran three at a time.

    python benchmarks/hospital_grid_time.py                 # prints the estimate as JSON
    python benchmarks/hospital_grid_time.py --write          # docs/results/hospital-grid-time.json
    python benchmarks/hospital_grid_time.py --passes 10      # the same grid at another recipe's passes

`--passes P` rescales each cell that trains for the config's passes (rounds × local epochs; every
cell but `base` and the fine-tuned ones) to P passes: its training share, from the per-unit costs of
docs/results/bench-hospital-cost.json (patient-epochs × ms per patient-epoch against the test
reports × ms per scored report, non-private or DP-SGD as the cell), grows by P / passes, its
scoring stays. A recipe's sampling rate does not move the patient-gradients of a pass, only the
number of steps (and of distributed rounds) they come in: the per-step overhead is not modelled.

tests/test_benchmarks.py checks that the committed table is what the committed wall tables give.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shlex
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
TARGETS = {"results-hospital-site": "site mode", "results-hospital-distributed": "distributed DP"}
# per sweep config: wall tables, newest measurement first (a later table's cell kind wins only
# where no newer one has it). Site-mode FedAvg and FedTAR at finite ε ran last on the shipped base,
# two cells at a time and in passes; the other site-mode private cells but central ran before DP
# steps ran in passes (one pass a step); central's shipped-base cells ran in passes where the table
# says so; base, central at ∞ and private central at ε = 16, then FedTAR at ∞, ran last, two at a time.
WALL_TABLES = {
    "configs/hospital-scale.toml": [
        "hospital-fedtar-inf-wall.json",
        "hospital-central-e16-wall.json",
        "hospital-site-shipped-wall.json",
        "hospital-central-here-wall.json",
        "hospital-wall.json",
    ],
    "configs/hospital-scale-distributed.toml": [
        "hospital-distributed-here-wall.json",
        "hospital-distributed-wall.json",
    ],
}
REFERENCES = ("base", "local")  # run at ε = ∞ only, whatever --epsilons says
FINE_TUNE = "-ft"  # a fine-tuned cell starts from its federated cell's final model
PASSES = 5  # configs/hospital-scale*.toml's passes (rounds × local epochs) when the cells were timed
REPORTS_PER_PATIENT = 3.06  # hospital_cost.py's full-scale grid: 6,120 scored reports of 2,000 test patients


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


def training_shares(results: Path = RESULTS) -> dict[str, float]:
    """The share of a full-scale cell's time that is training, non-private and DP-SGD, from the
    per-unit costs in bench-hospital-cost.json and configs/hospital-scale.toml's sizes."""
    table = json.loads((results / "bench-hospital-cost.json").read_text(encoding="utf-8"))
    rows = {row[0]: row for row in table["rows"]}
    per_epoch = next(v for k, v in rows.items() if k.startswith("ms per patient-epoch, after"))
    report_ms = float(next(v for k, v in rows.items() if k.startswith("ms per scored test report"))[1])
    with (ROOT / "configs" / "hospital-scale.toml").open("rb") as f:
        data = tomllib.load(f)["data"]
    sizes = data["synth"]["site_patients"]
    val, test = data["val_fraction"], data["test_fraction"]
    train = sum(n - round(n * val) - round(n * test) for n in sizes)
    reports = sum(round(n * test) for n in sizes) * REPORTS_PER_PATIENT
    scoring = reports * report_ms
    return {
        kind: round(train * PASSES * float(ms) / (train * PASSES * float(ms) + scoring), 4)
        for kind, ms in (("non_private", per_epoch[1]), ("dp", per_epoch[2]))
    }


def rescale(
    minutes: float, method: str, epsilon: float | None, passes: int, shares: dict[str, float]
) -> float:
    """A cell's minutes at `passes` passes instead of the config's (the module docstring)."""
    if method in ("base",) or method.endswith(FINE_TUNE):
        return minutes
    share = shares["non_private" if epsilon is None else "dp"]
    return minutes * (share * passes / PASSES + 1 - share)


def estimate(
    results: Path = RESULTS, makefile: Path = ROOT / "Makefile", passes: int | None = None
) -> dict[str, Any]:
    shares = training_shares(results) if passes is not None else {}
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
                if passes is not None:
                    minutes = rescale(minutes, method, e, passes, shares)
                rows.append(
                    {"cell": label, "seeds": sw["seeds"], "min_per_cell": round(minutes, 3), "source": source}
                )
        hours = sum(r["min_per_cell"] * r["seeds"] for r in rows) / 60
        sweeps.append(sw | {"rows": rows, "cells": sum(r["seeds"] for r in rows), "hours": round(hours, 2)})
    workers, left = two_workers(sweeps)
    return {
        **(
            {"passes": passes, "config_passes": PASSES, "training_shares": shares}
            if passes is not None
            else {}
        ),
        "sweeps": sweeps,
        "workers_hours": [round(w / 60, 2) for w in workers],
        "left_for_the_last_recipe_hours": round(left / 60, 2),
        "j2_hours": round((max(workers) + left) / 60, 2),
        "one_after_the_other_hours": round(sum(s["hours"] for s in sweeps), 2),
        "wall_tables": {c: names for c, names in WALL_TABLES.items()},
    }


def sweep_order(sw: dict[str, Any]) -> list[tuple[str, float | None, int]]:
    """A sweep's cells in the order `secure-fed sweep` runs them: each ε, each method (a fine-tuned
    method's federated one before it), each seed; base and local at ε = ∞ only."""
    methods = list(dict.fromkeys(m2 for m in sw["methods"] for m2 in (m.removesuffix(FINE_TUNE), m)))
    return [
        (method, e, seed)
        for e in sw["epsilons"]
        for method in methods
        if not (method in REFERENCES and e is not None)
        for seed in range(sw["seeds"])
    ]


def two_workers(sweeps: list[dict[str, Any]]) -> tuple[list[float], float]:
    """`make -j2 results-hospital` played out in minutes: each worker's end, and the minutes of the
    cells left for the last recipe (fine-tuned cells whose federated cell was still running)."""
    minutes = {}
    cells = []
    for k, sw in enumerate(sweeps):
        per_kind = {r["cell"]: r["min_per_cell"] for r in sw["rows"]}
        cells.append([(k, method, e, seed) for method, e, seed in sweep_order(sw)])
        minutes.update({cell: per_kind[_label(cell[1], cell[2])] for cell in cells[-1]})
    orders = [[c for sweep in cells for c in sweep], [c for sweep in reversed(cells) for c in sweep]]
    finish: dict[tuple, float] = {}
    clock = [0.0 for _ in orders]
    position = [0 for _ in orders]
    while True:
        free = [w for w in range(len(orders)) if position[w] < len(orders[w])]
        if not free:
            break
        w = min(free, key=lambda i: clock[i])
        cell = orders[w][position[w]]
        position[w] += 1
        if cell in finish:
            continue  # done or running: the other worker's
        k, method, e, seed = cell
        if method.endswith(FINE_TUNE):
            federated = finish.get((k, method.removesuffix(FINE_TUNE), e, seed))
            if federated is None or federated > clock[w]:
                continue  # left waiting: the last recipe runs it
        finish[cell] = clock[w] = clock[w] + minutes[cell]
    left = sum(m for c, m in minutes.items() if c not in finish)
    return clock, left


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
    for n, hours in enumerate(est["workers_hours"], 1):
        rows.append(["both", f"make -j2 results-hospital: worker {n}", "", "", f"{hours:.2f}", ""])
    rows.append(
        [
            "both",
            "make -j2 results-hospital: cells left for its last recipe",
            "",
            "",
            f"{est['left_for_the_last_recipe_hours']:.2f}",
            "",
        ]
    )
    rows.append(["both", "make -j2 results-hospital", "", "", f"{est['j2_hours']:.2f}", ""])
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
            "make -j2 results-hospital runs two workers, each one sweep and then the other in opposite "
            "orders, one cell at a time, each taking the next cell no one has started (a lock beside each "
            "cell folder); a fine-tuned cell whose federated cell is still running is passed over, run by "
            "the other worker if it reaches it after that cell ends, else by the last recipe, which runs "
            "the cells left one after another. Its time is the later worker's end plus those cells. "
            "The cells were measured two or three at a time; -j2 runs two at a time, "
            "so the figure errs long where a table's cells ran three at a time.",
            "Site-mode FedAvg and FedTAR at finite ε come from their shipped-base sweep (two cells at a "
            "time, DP steps in passes of at most 128 patients); private central at ε = 8 and 4 and the "
            "distributed FedAvg ε = 4 cells ran with each DP step in one pass, which steps in passes "
            "would speed (a pooled private step at 0.38x the wall, BENCHMARKS 'DP step memory in "
            "passes'); this estimate does not credit it.",
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="write docs/results/hospital-grid-time.json")
    p.add_argument("--passes", type=int, default=None, help="rescale the training cells to this many passes")
    args = p.parse_args(argv)
    if args.write and args.passes is not None:
        p.error("--write records the measured grid; --passes is an estimate beside it")
    try:
        est = estimate(passes=args.passes)
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
