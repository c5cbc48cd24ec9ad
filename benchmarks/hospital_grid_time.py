"""Wall time of `make -j2 results-hospital` (and of `results-hospital-grid`) here, from the cells that ran.

The hospital-scale sweeps are too long to time end to end here, but their cell kinds ran, three
seeds each, and every sweep table keeps each cell's wall time. This script sets each cell of a
target's sweeps (each recipe line of the Makefile's `<target>-site` and `<target>-distributed`) to
the mean minutes per cell of the same method and ε in the committed wall tables (the newest
measurement first, see WALL_TABLES), a cell kind that never ran to the mean of its method's private
cells that did (marked imputed), and plays the Makefile's schedule: under `-j2` two workers each run
one sub-target's sweeps and then the other's, in opposite orders, one cell at a time, each taking
the next cell in its order that no one has started; a fine-tuned cell whose federated cell has not
finished is passed over (the other worker runs it if it gets there after that cell ends), and the
last recipe runs any cells left, one after another.

Each wall table was measured at some number of passes (rounds × local epochs, or distributed rounds
× Poisson rate); a cell taken from a table at other passes than its config's is rescaled (marked):
its training share, from the per-unit costs of docs/results/bench-hospital-cost.json
(patient-epochs × ms per patient-epoch against the test reports × ms per scored report, non-private
or DP-SGD as the cell), grows with the passes, its scoring stays. A recipe's sampling rate does not
move the patient-gradients of a pass, only the number of steps (and distributed rounds) they come
in: the per-step overhead is not modelled, so a rescaled distributed cell errs short (its 200
rounds' secure sums cost more than twice the model: docs/experiments/hospital-retuned-recipe.md).

The measured cells ran two or three at a time on the 2 cores (their tables' machine lines), as
`-j2` runs them two at a time, so the figure errs long where a table's cells ran three at a time.

    python benchmarks/hospital_grid_time.py                                # results-hospital, JSON
    python benchmarks/hospital_grid_time.py --target results-hospital-grid # the whole grid
    python benchmarks/hospital_grid_time.py --write     # both targets: docs/results/hospital-*time.json
    python benchmarks/hospital_grid_time.py --passes 20 # the cells rescaled to another recipe's passes

tests/test_hospital_grid_time.py checks that the committed tables are what the committed wall tables give.
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
# each target's two sub-targets (the Makefile's `<target>-site` and `<target>-distributed`), by mode;
# each recipe line of a sub-target is one sweep
TARGETS = {
    target: {f"{target}-site": "site mode", f"{target}-distributed": "distributed DP"}
    for target in ("results-hospital", "results-hospital-grid")
}
OUTPUT = {"results-hospital": "hospital-time.json", "results-hospital-grid": "hospital-grid-time.json"}
# per sweep config: (wall table, the passes its cells trained), newest measurement first (a later
# table's cell kind wins only where no newer one has it). The retuned recipe's cells (ten passes)
# ran last: site-mode FedAvg and FedTAR without DP (six at a time), distributed FedAvg with
# survivor-sized shares, and before it FedTAR at its defaults (distributed, three at a time each);
# before them site mode's private central and its noise-free reference, distributed FedAvg and
# FedTAR's earlier release.
# Before them, at five passes: site-mode FedAvg and FedTAR at finite ε on the shipped base, two cells
# at a time and in passes; the other site-mode private cells but central before DP steps ran in
# passes (one pass a step); central's shipped-base cells in passes where the table says so; base,
# central at ∞ and private central at ε = 16, then FedTAR at ∞, two at a time.
WALL_TABLES: dict[str, list[tuple[str, int]]] = {
    "configs/hospital-scale.toml": [
        ("hospital-inf-wall.json", 10),
        ("hospital-retuned-site-wall.json", 10),
        ("hospital-fedtar-inf-wall.json", 5),
        ("hospital-central-e16-wall.json", 5),
        ("hospital-site-shipped-wall.json", 5),
        ("hospital-central-here-wall.json", 5),
        ("hospital-wall.json", 5),
    ],
    "configs/hospital-scale-distributed.toml": [
        ("hospital-fedavg-wall.json", 10),
        ("hospital-fedtar-wall.json", 10),
        ("hospital-retuned-distributed-wall.json", 10),
        ("hospital-distributed-here-wall.json", 5),
        ("hospital-distributed-wall.json", 5),
    ],
}
REFERENCES = ("base", "local")  # run at ε = ∞ only, whatever --epsilons says
NOISE_FREE = "-clip"  # the noise-free reference: at ε = ∞ only
FINE_TUNE = "-ft"  # a fine-tuned cell starts from its federated cell's final model
REPORTS_PER_PATIENT = 3.06  # hospital_cost.py's full-scale grid: 6,120 scored reports of 2,000 test patients


def grid(makefile: Path = ROOT / "Makefile", target: str = "results-hospital") -> list[dict[str, Any]]:
    """Each sweep of a hospital target: its sub-target, config, methods, seeds and ε."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
    text = makefile.read_text(encoding="utf-8")
    sweeps = []
    for sub, mode in TARGETS[target].items():
        # the recipe: every tab-indented line under the target, each a sweep, run one after the other
        m = re.search(rf"^{re.escape(sub)}:.*\n((?:\t.+\n?)+)", text, re.MULTILINE)
        if m is None:
            raise ValueError(f"{makefile}: no `{sub}` target with a sweep line")
        for line in m.group(1).splitlines():
            args = shlex.split(line)
            opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("-")}
            sweeps.append(
                {
                    "target": sub,
                    "mode": mode,
                    "config": opt["--config"],
                    "methods": opt["--methods"].split(","),
                    "seeds": len(opt["--seeds"].split(",")),
                    "epsilons": [None if e == "inf" else float(e) for e in opt["--epsilons"].split(",")],
                }
            )
    return sweeps


def config_passes(config: str, root: Path = ROOT) -> float:
    """The passes over each site's patients a config trains: rounds × local epochs in site mode,
    rounds × the Poisson rate with distributed DP (one private step a round)."""
    with (root / config).open("rb") as f:
        data = tomllib.load(f)
    rounds = data.get("fed", {}).get("rounds", 1)
    if data.get("dp", {}).get("noise") == "distributed":
        return round(rounds * data["dp"]["sample_rate"], 6)
    return float(rounds * data.get("train", {}).get("local_epochs", 1))


def _label(method: str, epsilon: float | None) -> str:
    return f"{method} ε={'∞' if epsilon is None else f'{epsilon:g}'}"


def measured(config: str, results: Path = RESULTS) -> dict[str, tuple[float, str, int]]:
    """Cell kind ("fedavg ε=8") → (mean minutes per cell, the table it comes from, its passes),
    newest first."""
    out: dict[str, tuple[float, str, int]] = {}
    for name, passes in WALL_TABLES[config]:
        path = results / name
        if not path.is_file():
            continue
        table = json.loads(path.read_text(encoding="utf-8"))
        col = table["columns"].index("min per cell")
        for row in table["rows"]:
            out.setdefault(row[0], (float(str(row[col]).split(" ")[0]), name, passes))
    return out


def training_rates(results: Path = RESULTS) -> dict[str, float]:
    """A full-scale cell's training time per pass over its scoring time, non-private and DP-SGD,
    from the per-unit costs in bench-hospital-cost.json and configs/hospital-scale.toml's sizes."""
    table = json.loads((results / "bench-hospital-cost.json").read_text(encoding="utf-8"))
    rows = {row[0]: row for row in table["rows"]}
    per_epoch = next(v for k, v in rows.items() if k.startswith("ms per patient-epoch, after"))
    report_ms = float(next(v for k, v in rows.items() if k.startswith("ms per scored test report"))[1])
    with (ROOT / "configs" / "hospital-scale.toml").open("rb") as f:
        data = tomllib.load(f)["data"]
    sizes = data["synth"]["site_patients"]
    val, test = data["val_fraction"], data["test_fraction"]
    train = sum(n - round(n * val) - round(n * test) for n in sizes)
    scoring = sum(round(n * test) for n in sizes) * REPORTS_PER_PATIENT * report_ms
    return {
        kind: round(train * float(ms) / scoring, 4)
        for kind, ms in (("non_private", per_epoch[1]), ("dp", per_epoch[2]))
    }


def _at_inf_only(method: str) -> bool:
    """base, local and the noise-free references run at ε = ∞ only, whatever --epsilons says."""
    return method in REFERENCES or method.endswith(NOISE_FREE)


def rescale(
    minutes: float, method: str, epsilon: float | None, passes: float, to: float, rates: dict[str, float]
) -> float:
    """A cell's minutes measured at `passes` passes, at `to` passes (the module docstring)."""
    if method == "base" or method.endswith(FINE_TUNE) or passes == to:
        return minutes
    private = epsilon is not None or method.endswith(NOISE_FREE)  # DP-SGD's steps, no noise
    rate = rates["dp" if private else "non_private"]
    return minutes * (rate * to + 1) / (rate * passes + 1)


def estimate(
    results: Path = RESULTS,
    makefile: Path = ROOT / "Makefile",
    passes: float | None = None,
    target: str = "results-hospital",
) -> dict[str, Any]:
    """`passes`: every training cell at that many passes instead of its config's."""
    rates = training_rates()  # the committed per-unit costs, whichever wall tables are read
    sweeps = []
    for sw in grid(makefile, target):
        times = measured(sw["config"], results)
        to = passes if passes is not None else config_passes(sw["config"])
        # each kind that ran, at the config's passes: (minutes, source)
        scaled: dict[str, tuple[float, str]] = {}
        for method in sw["methods"]:
            for e in [None, *sw["epsilons"]]:
                if (label := _label(method, e)) in times:
                    minutes, source, measured_at = times[label]
                    at_to = rescale(minutes, method, e, measured_at, to, rates)
                    note = f", rescaled from {measured_at:g} passes" if at_to != minutes else ""
                    scaled[label] = (at_to, source + note)
        rows = []
        for method in sw["methods"]:
            ran = [
                scaled[_label(method, e)][0]
                for e in sw["epsilons"]
                if e is not None and _label(method, e) in scaled
            ]
            for e in [None] if _at_inf_only(method) else sw["epsilons"]:
                label = _label(method, e)
                if label in scaled:
                    minutes, source = scaled[label]
                elif e is not None and ran:
                    minutes, source = sum(ran) / len(ran), "imputed: mean of its private cells that ran"
                else:
                    tables = ", ".join(name for name, _ in WALL_TABLES[sw["config"]])
                    raise ValueError(f"{label}: no wall time in {tables}")
                rows.append(
                    {"cell": label, "seeds": sw["seeds"], "min_per_cell": round(minutes, 3), "source": source}
                )
        hours = sum(r["min_per_cell"] * r["seeds"] for r in rows) / 60
        sweeps.append(
            sw
            | {"passes": to, "rows": rows, "cells": sum(r["seeds"] for r in rows), "hours": round(hours, 2)}
        )
    workers, left = two_workers(sweeps)
    return {
        "target": target,
        "training_rates": rates,
        "sweeps": sweeps,
        "workers_hours": [round(w / 60, 2) for w in workers],
        "left_for_the_last_recipe_hours": round(left / 60, 2),
        "j2_hours": round((max(workers) + left) / 60, 2),
        "one_after_the_other_hours": round(sum(s["hours"] for s in sweeps), 2),
        "wall_tables": {c: [name for name, _ in names] for c, names in WALL_TABLES.items()},
    }


def sweep_order(sw: dict[str, Any]) -> list[tuple[str, float | None, int]]:
    """A sweep's cells in the order `secure-fed-lab sweep` runs them: each ε, each method (a fine-tuned
    method's federated one before it), each seed; base, local and the noise-free references at
    ε = ∞ only."""
    methods = list(dict.fromkeys(m2 for m in sw["methods"] for m2 in (m.removesuffix(FINE_TUNE), m)))
    return [
        (method, e, seed)
        for e in sw["epsilons"]
        for method in methods
        if not (_at_inf_only(method) and e is not None)
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
    # worker 2 runs the sub-targets in the other order, each sub-target's sweep lines in their own
    groups: dict[Any, list[int]] = {}
    for k, sw in enumerate(sweeps):
        groups.setdefault(sw.get("target", k), []).append(k)
    second = [k for group in reversed(list(groups.values())) for k in group]
    orders = [[c for sweep in cells for c in sweep], [c for k in second for c in cells[k]]]
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
            source = r["source"].replace(".json", "")
            hours = r["seeds"] * r["min_per_cell"] / 60
            rows.append(
                [sw["mode"], r["cell"], str(r["seeds"]), f"{r['min_per_cell']:.1f}", f"{hours:.2f}", source]
            )
        rows.append([sw["mode"], f"whole sweep ({sw['cells']} cells)", "", "", f"{sw['hours']:.2f}", ""])
    for n, hours in enumerate(est["workers_hours"], 1):
        rows.append(["both", f"make -j2 {est['target']}: worker {n}", "", "", f"{hours:.2f}", ""])
    rows.append(
        [
            "both",
            f"make -j2 {est['target']}: cells left for its last recipe",
            "",
            "",
            f"{est['left_for_the_last_recipe_hours']:.2f}",
            "",
        ]
    )
    rows.append(["both", f"make -j2 {est['target']}", "", "", f"{est['j2_hours']:.2f}", ""])
    rows.append(["both", "one sweep after the other", "", "", f"{est['one_after_the_other_hours']:.2f}", ""])
    passes = " and ".join(dict.fromkeys(format(s["passes"], "g") for s in est["sweeps"]))
    return {
        "title": f"Hospital scale: `make -j2 {est['target']}`'s wall time on this machine, from the cells "
        f"that ran (the configs' recipe: {passes} passes)",
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
            f"make -j2 {est['target']} runs two workers, each one sweep and then the other in opposite "
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
            "A cell measured at other passes than its config's is rescaled (its source says from how many): "
            "its training share grows with the passes, its scoring stays; the per-step and per-round "
            "overhead is not modelled, so a rescaled distributed cell errs short.",
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--write",
        action="store_true",
        help="write docs/results/hospital-time.json and hospital-grid-time.json (both targets)",
    )
    p.add_argument("--target", choices=sorted(TARGETS), default="results-hospital", help="the make target")
    p.add_argument(
        "--passes", type=float, default=None, help="rescale the training cells to this many passes"
    )
    args = p.parse_args(argv)
    if args.write and args.passes is not None:
        p.error("--write records the configs' recipe; --passes is an estimate beside it")
    try:
        estimates = {
            t: estimate(passes=args.passes, target=t) for t in (TARGETS if args.write else [args.target])
        }
    except (ValueError, KeyError, OSError) as e:
        print(f"hospital_grid_time: {e}", file=sys.stderr)
        return 2
    if args.write:
        sys.path.insert(0, str(ROOT / "tools"))
        from doc_tables import dump_table, git_head

        commit, date = git_head(short=True), dt.date.today().isoformat()
        for target, est in estimates.items():
            out = RESULTS / OUTPUT[target]
            out.write_text(dump_table(table(est, commit, date)), encoding="utf-8")
            print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)
    print(json.dumps(estimates[args.target], indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
