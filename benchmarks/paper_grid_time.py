"""Wall time of `make -j2 results-paper` on this machine, estimated before it runs, from the
small benchmark's recorded cell times.

The small benchmark (configs/results.toml, which configs/paper-drift*.toml mirror at the same scale)
records its sweeps' total cell time, not a time per method: the default benchmark's non-private
cells and its site-mode private cells. Each recipe cell is set to its kind's mean minutes per cell:

- without DP: the default benchmark's cell time over its cells (base and the fine-tuned reference
  included, which run faster than a federated cell; FedTAR's cells run slower);
- distributed DP at ε = 8: the small benchmark's site-mode private cell, times the ratio of a
  distributed to a site-mode cell at ε = 8 with the same number of private steps at hospital scale
  (FedAvg's for the pooled methods, FedTAR's for FedTAR and its ablations). No distributed cell
  has run at the small scale.

`make -j2 results-paper` runs the two drifts side by side, each its non-private sweep and then its
distributed one, so its wall time is the longer drift's cell time.

    python benchmarks/paper_grid_time.py            # prints the estimate as JSON
    python benchmarks/paper_grid_time.py --write    # docs/results/paper-grid-time.json
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
TARGETS = ("results-paper-drift0", "results-paper-drift")
NON_PRIVATE = "default-benchmark.json"  # its source: the cell time of every cell it names
SITE_PRIVATE = "privacy-utility.json"  # its source: the cell time of its DP cells
HOSPITAL_SITE, HOSPITAL_DISTRIBUTED = "hospital-wall.json", "hospital-distributed-wall.json"
REFERENCES = ("base", "local")  # no private cell


def _sweep_args(command: str) -> dict[str, str]:
    args = shlex.split(command.split("&&")[0])
    return {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("-")}


def _minutes(wall: str) -> float:
    m = re.search(r"([\d.]+) min", wall)
    if m is None:
        raise ValueError(f"no minutes in the wall line {wall!r}")
    return float(m.group(1))


def _cells(opt: dict[str, str], private_only: bool) -> int:
    methods = opt["--methods"].split(",")
    if private_only:
        methods = [m for m in methods if m not in REFERENCES]
    return len(methods) * len(opt["--seeds"].split(",")) * len(opt["--epsilons"].split(","))


def _row_minutes(table: dict[str, Any], label: str) -> float:
    for row in table["rows"]:
        if row[0] == label:
            return float(str(row[2]).split()[0])
    raise ValueError(f"no row {label!r} in {table['title']!r}")


def rates(results: Path = RESULTS) -> dict[str, Any]:
    """Minutes per cell of each kind, and where each figure comes from."""
    plain = json.loads((results / NON_PRIVATE).read_text(encoding="utf-8"))["source"]
    private = json.loads((results / SITE_PRIVATE).read_text(encoding="utf-8"))["source"]
    plain_min = _minutes(plain["wall"]) / _cells(_sweep_args(plain["command"]), False)
    site_min = _minutes(private["wall"]) / _cells(_sweep_args(private["command"]), True)
    site = json.loads((results / HOSPITAL_SITE).read_text(encoding="utf-8"))
    dist = json.loads((results / HOSPITAL_DISTRIBUTED).read_text(encoding="utf-8"))
    ratio = {m: _row_minutes(dist, f"{m} ε=8") / _row_minutes(site, f"{m} ε=8") for m in ("fedavg", "fedtar")}
    return {"non_private": plain_min, "site_private": site_min, "distributed_ratio": ratio}


def recipe(makefile: Path = ROOT / "Makefile") -> dict[str, list[dict[str, Any]]]:
    """Each drift target's sweeps: config, methods, seeds, ε."""
    text = makefile.read_text(encoding="utf-8")
    variables = dict(re.findall(r"^(PAPER_\w+) := (.+)$", text, re.MULTILINE))
    out: dict[str, list[dict[str, Any]]] = {}
    for target in TARGETS:
        m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.+\n)+)", text, re.MULTILINE)
        if m is None:
            raise ValueError(f"{makefile}: no `{target}` target")
        sweeps = []
        for line in m.group(1).splitlines():
            opt = _sweep_args(line.strip().removeprefix("$(SWEEP) "))
            methods = opt["--methods"]
            methods = variables.get(methods.strip("$()"), methods) if methods.startswith("$(") else methods
            sweeps.append(
                {
                    "config": opt["--config"],
                    "methods": methods.split(","),
                    "seeds": len(opt["--seeds"].split(",")),
                    "epsilons": [None if e == "inf" else float(e) for e in opt["--epsilons"].split(",")],
                }
            )
        out[target] = sweeps
    return out


def estimate(results: Path = RESULTS, makefile: Path = ROOT / "Makefile") -> dict[str, Any]:
    r = rates(results)
    targets = []
    for target, sweeps in recipe(makefile).items():
        rows = []
        for sw in sweeps:
            for eps in sw["epsilons"]:
                for method in sw["methods"]:
                    if eps is None:
                        per = r["non_private"]
                    else:
                        family = "fedtar" if method.startswith("fedtar") else "fedavg"
                        per = r["site_private"] * r["distributed_ratio"][family]
                    rows.append({"config": sw["config"], "method": method, "epsilon": eps,
                                 "seeds": sw["seeds"], "min_per_cell": per})  # fmt: skip
        hours = sum(x["seeds"] * x["min_per_cell"] for x in rows) / 60
        targets.append(
            {"target": target, "cells": sum(x["seeds"] for x in rows), "hours": hours, "rows": rows}
        )
    return {
        "rates": r,
        "targets": targets,
        "j2_hours": max(t["hours"] for t in targets),
        "one_after_the_other_hours": sum(t["hours"] for t in targets),
    }


def table(est: dict[str, Any], commit: str, date: str) -> dict[str, Any]:
    """The doc table (tools/doc_tables.py's format): per target, cells of a kind and their hours."""
    rows = []
    for t in est["targets"]:
        kinds: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for x in t["rows"]:
            eps = "∞" if x["epsilon"] is None else f"{x['epsilon']:g}"
            family = "FedTAR and ablations" if x["method"].startswith("fedtar") else "pooled baselines"
            kinds.setdefault((f"{family}, ε={eps}", x["config"]), []).append((x["seeds"], x["min_per_cell"]))
        for (kind, config), cells in kinds.items():
            n = sum(seeds for seeds, _ in cells)
            minutes = sum(seeds * per for seeds, per in cells)
            rows.append([t["target"], kind, config, str(n), f"{minutes / n:.2f}", f"{minutes / 60:.2f}"])
        rows.append([t["target"], f"all ({t['cells']} cells)", "", "", "", f"{t['hours']:.2f}"])
    rows.append(["make -j2 results-paper", "the longer drift", "", "", "", f"{est['j2_hours']:.2f}"])
    rows.append(
        [
            "make results-paper",
            "one drift after the other",
            "",
            "",
            "",
            f"{est['one_after_the_other_hours']:.2f}",
        ]
    )
    r = est["rates"]
    return {
        "title": "make results-paper: estimated wall time on this machine, from the recorded cell times",
        "source": {
            "command": "python benchmarks/paper_grid_time.py --write",
            "commit": commit,
            "date": date,
            "machine": "the recorded cells' (2-core CPU machine, one torch thread a cell, two or three "
            "cells at a time)",
            "wall": None,
        },
        "columns": ["target", "cell kind", "config", "cells", "min per cell", "hours"],
        "rows": rows,
        "notes": [
            f"Without DP: {r['non_private']:.2f} min a cell, the default benchmark's cell time over its "
            f"cells ({NON_PRIVATE}); its base and fine-tuned cells are faster than a federated cell and "
            "FedTAR's are slower, so FedTAR-heavy sweeps err short.",
            f"Distributed DP at ε = 8: the small benchmark's site-mode private cell ({r['site_private']:.2f} "
            f"min, {SITE_PRIVATE}) times the hospital-scale ratio of a distributed to a site-mode cell at "
            f"ε = 8 with the same private steps (FedAvg {r['distributed_ratio']['fedavg']:.2f}, FedTAR "
            f"{r['distributed_ratio']['fedtar']:.2f}: {HOSPITAL_DISTRIBUTED}, {HOSPITAL_SITE}). No "
            "distributed cell has run at this scale, where a round's fixed costs (SecAgg+, the α "
            "exchange) weigh more than at hospital scale; this figure is the least certain.",
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="write docs/results/paper-grid-time.json")
    args = p.parse_args(argv)
    try:
        est = estimate()
    except (ValueError, KeyError) as e:
        print(f"paper_grid_time: {e}", file=sys.stderr)
        return 2
    if args.write:
        sys.path.insert(0, str(ROOT / "tools"))
        from doc_tables import dump_table, git_head

        out = RESULTS / "paper-grid-time.json"
        out.write_text(
            dump_table(table(est, git_head(short=True), dt.date.today().isoformat())), encoding="utf-8"
        )
        print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)
    targets = [{k: v for k, v in t.items() if k != "rows"} for t in est["targets"]]
    print(json.dumps({k: v for k, v in est.items() if k != "targets"} | {"targets": targets}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
