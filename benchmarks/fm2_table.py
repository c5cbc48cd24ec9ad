"""FM2 vs FedAvg, FedProx, FedRep and FedBN on the synthetic multi-modality benchmark, in the shape
of the FM2 seed's Table 1: label skew φ × participation, paired seeds (every method sees the same
images, split and test shares per seed), mean ± std of the sites' pooled test accuracy.

Each cell is an ordinary `run_inprocess` of the federation (audit logs on; SecAgg+ and DP as the
config says: off by default, `--epsilon E` for the DP-SGD variant). Finished cells are skipped, so
an interrupted table resumes. Prints one JSON object per run, then the table as JSON and markdown.

    .venv/bin/python benchmarks/fm2_table.py --out runs/fm2-table
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


def cell_config(args: argparse.Namespace, method: str, split: str, phi: float, part: float, seed: int) -> Any:
    from secure_fed.config import load_config

    overrides: dict[str, Any] = {
        "data.kind": "imaging",
        "fed.method": method,
        "fed.rounds": args.rounds,
        "fed.engine": "inprocess",
        "fed.participation": part,
        "seed": seed,
        "data.imaging.split": split,
        "data.imaging.phi": phi,
        "data.imaging.sites": args.sites if split == "overlapped" else args.disjoint_sites,
        "data.imaging.per_class": args.per_class,
        "train.threads": 1,
    }
    if args.epsilon is not None:
        overrides.update({"dp.enabled": True, "dp.target_epsilon": args.epsilon})
    return load_config(None, overrides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/fm2-table"))
    parser.add_argument("--methods", default="fm2,fedavg,fedprox,fedrep,fedbn")
    parser.add_argument("--phis", default="0.1,0.3,100")
    parser.add_argument("--participation", default="0.5,1.0")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--sites", type=int, default=10, help="overlapped split (the seed's 10 clients)")
    parser.add_argument("--disjoint-sites", type=int, default=5, help="non-overlapped: one modality each")
    parser.add_argument("--no-disjoint", action="store_true", help="skip the non-overlapped column")
    parser.add_argument("--per-class", type=int, default=40)
    parser.add_argument("--epsilon", type=float, default=None, help="DP-SGD at this ε per image")
    args = parser.parse_args()

    from secure_fed.launch.runner import run_inprocess

    methods = args.methods.split(",")
    columns = [("overlapped", float(p)) for p in args.phis.split(",")]
    if not args.no_disjoint:
        columns.append(("disjoint", 0.0))
    parts = [float(p) for p in args.participation.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[str, list[float]] = {}
    started = time.perf_counter()
    total, done = len(methods) * len(columns) * len(parts) * len(seeds), 0
    for seed in seeds:
        for split, phi in columns:
            for part in parts:
                for method in methods:
                    name = f"{method}-{split}-phi{phi:g}-p{part:g}-s{seed}"
                    out = args.out / name
                    metrics_path = out / "metrics.json"
                    if not metrics_path.exists():
                        cfg = cell_config(
                            args, method, split, phi if split == "overlapped" else 0.3, part, seed
                        )
                        run_inprocess(cfg, out)
                    metrics = json.loads(metrics_path.read_text())
                    acc = float(metrics["test"]["accuracy"])
                    key = f"{method}|{split}|{phi:g}|{part:g}"
                    results.setdefault(key, []).append(acc)
                    done += 1
                    row = {"cell": name, "accuracy": acc, "macro_f1": metrics["test"]["macro-F1"]}
                    print(json.dumps(row), flush=True)
                    print(
                        f"[{done}/{total}] {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True
                    )
    summary = {
        k: {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0, "n": len(v)}
        for k, v in results.items()
    }
    print(json.dumps({"summary": summary, "seconds": round(time.perf_counter() - started, 1)}))
    header = ["method"] + [
        f"{'φ=' + format(phi, 'g') if split == 'overlapped' else 'disjoint'}, r={part:g}"
        for split, phi in columns
        for part in parts
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for method in methods:
        cells = []
        for split, phi in columns:
            for part in parts:
                s = summary[f"{method}|{split}|{phi:g}|{part:g}"]
                cells.append(f"{100 * s['mean']:.1f} ± {100 * s['std']:.1f}")
        print(f"| {method} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
