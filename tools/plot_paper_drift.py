"""FedTAR − FedAvg against the strength of the paper's drift, without DP and with it: each point is
the mean per-seed difference of one drift's sweeps, with its 95 % t interval (paired seeds).

A sweep (a folder, or a kept record in docs/results/sweeps/) is placed by its config's
`data.synth.institution_drift`; sweeps of one strength are joined (the distributed-DP sweep beside
the non-private one of the same cohort: their (method, ε, seed) cells do not overlap).

    python tools/plot_paper_drift.py -o docs/paper_drift.png --points docs/results/paper-drift-plot.json \\
        docs/results/sweeps/results-paper-drift0.json \\
        docs/results/sweeps/results-paper-drift0-distributed.json \\
        docs/results/sweeps/results-paper-drift.json \\
        docs/results/sweeps/results-paper-drift-distributed.json

--method and --against choose the pair (default fedtar − fedavg; fedavg-plain is the paper's
baseline). --points writes the plotted numbers, so a test can see the PNG is the records'.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class DriftPlotError(ValueError):
    """A sweep that cannot be placed or joined; the message names it and the fix."""


def load_sweep(path: Path) -> tuple[float, list[dict[str, Any]]]:
    """(institution_drift, cells) of a sweep folder or a kept record."""
    from secure_fed.lab import records as lab_records

    if path.is_file():
        record = json.loads(path.read_text(encoding="utf-8"))
        config, runs = record.get("config"), record.get("runs")
    elif (path / "sweep-config.json").is_file():
        config, runs = json.loads((path / "sweep-config.json").read_text()), lab_records.load_cells(path)
    else:
        raise DriftPlotError(f"{path}: neither a kept sweep record nor a sweep folder (no sweep-config.json)")
    try:
        drift = float(config["data"]["synth"]["institution_drift"])
    except (TypeError, KeyError) as err:
        raise DriftPlotError(f"{path}: its config names no data.synth.institution_drift ({err})") from err
    return drift, list(runs or [])


def drift_points(
    paths: Sequence[Path], method: str = "fedtar", against: str = "fedavg", metric: str = "CIDEr"
) -> list[dict[str, Any]]:
    """One point per (drift, ε) both methods ran: the mean per-seed difference and its interval."""
    from secure_fed.lab import statistics as lab_stats

    by_drift: dict[float, list[dict[str, Any]]] = {}
    for path in paths:
        drift, runs = load_sweep(path)
        joined = by_drift.setdefault(drift, [])
        have = {(r["method"], r["epsilon"], r["seed"]) for r in joined}
        clash = [k for k in ((r["method"], r["epsilon"], r["seed"]) for r in runs) if k in have]
        if clash:
            raise DriftPlotError(f"{path}: cell {clash[0]} is also in another sweep of drift {drift:g}")
        joined.extend(runs)
    points = []
    for drift in sorted(by_drift):
        for row in lab_stats.paired_methods(by_drift[drift], method, against, (metric,)):
            mean, ci = row[metric]
            if math.isnan(mean):
                continue
            points.append(
                {
                    "drift": drift,
                    "epsilon": row["epsilon"],
                    "n": row["n"],
                    "mean": mean,
                    "ci": list(ci) if ci else None,
                }
            )
    return points


def plot(points: list[dict[str, Any]], out: Path, method: str, against: str, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for epsilon in sorted({p["epsilon"] for p in points}, key=lambda e: -(e if e is not None else math.inf)):
        pts = [p for p in points if p["epsilon"] == epsilon]
        xs = [p["drift"] for p in pts]
        ys = [p["mean"] for p in pts]
        lo = [p["mean"] - p["ci"][0] if p["ci"] else 0.0 for p in pts]
        hi = [p["ci"][1] - p["mean"] if p["ci"] else 0.0 for p in pts]
        label = "no DP" if epsilon is None else f"ε = {epsilon:g}"
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.axhline(0.0, color="grey", linestyle=":")
    ax.set_xlabel("institution_drift (the generator's year-by-year drift; 0 = off)")
    ax.set_ylabel(f"{method} − {against}, {metric} (95 % CI, paired seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweeps", nargs="+", type=Path, help="sweep folders or kept records")
    p.add_argument("-o", "--out", type=Path, required=True, help="the PNG")
    p.add_argument("--points", type=Path, help="also write the plotted numbers as JSON")
    p.add_argument("--method", default="fedtar")
    p.add_argument("--against", default="fedavg")
    p.add_argument("--metric", default="CIDEr")
    args = p.parse_args(argv)
    try:
        points = drift_points(args.sweeps, args.method, args.against, args.metric)
    except DriftPlotError as err:
        print(err, file=sys.stderr)
        return 1
    if not points:
        print(f"no drift has both {args.method} and {args.against} cells", file=sys.stderr)
        return 1
    plot(points, args.out, args.method, args.against, args.metric)
    if args.points is not None:
        spec = {"method": args.method, "against": args.against, "metric": args.metric}
        sources = [str(s) for s in args.sweeps]
        args.points.write_text(json.dumps(spec | {"sweeps": sources, "points": points}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
