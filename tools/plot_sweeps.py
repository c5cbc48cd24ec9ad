"""One privacy–utility plot over several sweeps: each series is one method of one sweep (a sweep
folder, or a kept record in docs/results/sweeps/), drawn as its mean over seeds with the 95 % t
interval against ε, so runs of different modes that no single sweep holds share one figure.

    python tools/plot_sweeps.py -o docs/hospital_distributed_vs_central.png \\
        --points docs/results/hospital-distributed-vs-central-plot.json \\
        "docs/results/sweeps/results-hospital-central.json:central=private central (pooled)" \\
        "docs/results/sweeps/results-hospital-distributed.json:fedavg=FedAvg, distributed DP"

A series is PATH:METHOD=LABEL. ε = ∞ is drawn at the right; `base` of the first sweep that has it
is a horizontal line. --points writes the plotted numbers beside the series specs, so a test can
redraw them from the same records and see that the committed PNG is not stale.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_tables import git_head  # noqa: E402  (a sibling script, not a package)

ROOT = Path(__file__).resolve().parent.parent
METRICS = ("CIDEr", "CE-F1")


class SpecError(ValueError):
    """A series spec or its source that cannot be plotted; the message names it and the fix."""


def parse_spec(spec: str) -> tuple[Path, str, str]:
    source, sep, rest = spec.rpartition(":")
    method, eq, label = rest.partition("=")
    if not sep or not eq or not source or not method or not label:
        raise SpecError(f"series {spec!r}: write it as PATH:METHOD=LABEL")
    return Path(source), method, label


def load_runs(source: Path) -> list[dict[str, Any]]:
    """The cells of a sweep folder or of a kept record (``secure_fed.lab.sweep.kept``)."""
    from secure_fed.lab.records import load_cells

    if source.is_dir():
        runs = load_cells(source)
    elif source.is_file():
        try:
            runs = json.loads(source.read_text())["runs"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise SpecError(
                f"{source}: not a kept sweep record ({e}); name a sweep folder or its kept JSON"
            ) from e
    else:
        raise SpecError(f"{source}: no such sweep folder or kept record")
    if not runs:
        raise SpecError(f"{source}: holds no finished cell")
    return runs


def points(specs: Sequence[str], metrics: Sequence[str] = METRICS) -> dict[str, Any]:
    """Per series, per ε: n, mean and 95 % t interval of each metric; `base` as the reference."""
    from secure_fed.lab.cells import BASE
    from secure_fed.lab.statistics import intervals

    series, base = [], None
    for spec in specs:
        source, method, label = parse_spec(spec)
        rows = intervals(load_runs(source), metrics)
        if base is None:
            base = next((r for r in rows if r["method"] == BASE), None)
        mine = [r for r in rows if r["method"] == method]
        if not mine:
            raise SpecError(f"series {spec!r}: {source} has no {method} cell; name a method it ran")
        series.append({"spec": spec, "label": label, "cells": [_cell(r, metrics) for r in mine]})
    return {
        "series": series,
        "base": None if base is None else _cell(base, metrics),
        "metrics": list(metrics),
    }


def _cell(row: dict[str, Any], metrics: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"epsilon": row["epsilon"], "n": row["n"]}
    for m in metrics:
        mean, ci = row[m]
        out[m] = {"mean": round(mean, 6), "ci": None if ci is None else [round(ci[0], 6), round(ci[1], 6)]}
    return out


def draw(data: dict[str, Any], path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    finite = sorted({c["epsilon"] for s in data["series"] for c in s["cells"] if c["epsilon"] is not None})
    if not finite:
        raise SpecError("no series has a private cell: nothing to draw against ε")
    inf_x = max(finite) * 2.5
    metrics = data["metrics"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4))
    n_series = len(data["series"])
    for ax, metric in zip(axes if len(metrics) > 1 else [axes], metrics, strict=True):
        for i, s in enumerate(data["series"]):
            # a small multiplicative shift per series keeps overlapping intervals readable on log x
            shift = 1.0 + 0.06 * (i - (n_series - 1) / 2)
            cells = sorted(s["cells"], key=lambda c: c["epsilon"] if c["epsilon"] is not None else math.inf)
            xs = [(c["epsilon"] if c["epsilon"] is not None else inf_x) * shift for c in cells]
            ys = [c[metric]["mean"] for c in cells]
            lo = [c[metric]["mean"] - c[metric]["ci"][0] if c[metric]["ci"] else 0.0 for c in cells]
            hi = [c[metric]["ci"][1] - c[metric]["mean"] if c[metric]["ci"] else 0.0 for c in cells]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=s["label"])
        if data["base"] is not None:
            ax.axhline(data["base"][metric]["mean"], linestyle=":", color="grey", label="base")
        ax.set_xscale("log")
        ax.set_xticks([*finite, inf_x], [f"{e:g}" for e in finite] + ["∞"])
        ax.minorticks_off()
        ax.set_xlabel("ε per patient (target; δ fixed)")
        ax.set_ylabel(f"{metric} (mean, 95 % t interval over seeds)")
    (axes[0] if len(metrics) > 1 else axes).legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("series", nargs="+", help="PATH:METHOD=LABEL (PATH: a sweep folder or a kept record)")
    p.add_argument("-o", "--out", type=Path, required=True, help="the PNG to write")
    p.add_argument("--points", type=Path, help="also write the plotted numbers and the specs here (JSON)")
    p.add_argument("--title", default="", help="the figure's title")
    args = p.parse_args(argv)
    try:
        data = points(args.series)
        draw(data, args.out, args.title)
    except SpecError as e:
        print(f"plot_sweeps: {e}", file=sys.stderr)
        return 2
    if args.points:
        # the convention of docs/results/*.json: the source names the command that wrote it
        argv = list(sys.argv[1:] if argv is None else argv)
        source = {
            "command": "python tools/plot_sweeps.py " + shlex.join(argv),
            "commit": git_head(short=True),
            "date": dt.date.today().isoformat(),
        }
        meta = {"title": args.title, "png": str(args.out), "source": source}
        args.points.write_text(json.dumps(data | meta, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}" + (f" and {args.points}" if args.points else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
