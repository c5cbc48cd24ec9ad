"""A sweep's outputs from its cells: the markdown tables (results.md), the same as HTML
(results.html), the privacy–utility plot (privacy_utility.png) and results.json, each written whole."""

from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from secure_fed.lab.cells import (
    BASE,
    CENTRAL,
    FEDERATED,
    LOCAL,
    VARIANTS,
    _order,
    labelled,
)
from secure_fed.lab.records import _write_whole, load_cells
from secure_fed.lab.share_kept import (
    share_of_central_per_site_table,
    share_of_central_table,
    share_per_site_table,
    share_table,
)
from secure_fed.lab.statistics import (
    PAIRED_METRICS,
    PAPER_METRICS,
    _mean_ci,
    _mean_std,
    _paired_reference,
    _tests_by_cell,
    intervals,
    privacy_utility,
    results_of,
)
from secure_fed.site.evaluation import METRIC_NAMES

# The columns tables show by default (every metric stays in results.json).
TABLE_METRICS: tuple[str, ...] = (
    "CIDEr",
    "CE-F1",
    "CE-F1-micro",
    "temporal_consistency",
    "BLEU-4",
    "ROUGE-L",
)


def _cell(mean: float, std: float | None) -> str:
    if math.isnan(mean):
        return "—"
    return f"{mean:.3f}" if std is None else f"{mean:.3f} ± {std:.3f}"


def _difference_cell(mean: float, ci: tuple[float, float] | None) -> str:
    if math.isnan(mean):
        return "—"
    return f"{mean:+.3f}" + ("" if ci is None else f" [{ci[0]:+.3f}, {ci[1]:+.3f}]")


def markdown_table(rows: list[dict[str, Any]], metrics: Sequence[str] = METRIC_NAMES) -> str:
    """Mean ± sample std; n = 1 shows the value alone (a std of one run does not exist)."""
    head = "| method | ε | ε spent | n | " + " | ".join(metrics) + " |\n"
    head += "|" + " --- |" * (4 + len(metrics)) + "\n"
    lines = []
    for row in rows:
        eps = "∞" if row["epsilon"] is None else f"{row['epsilon']:g}"
        spent = row.get("epsilon_spent")
        spent_s = "—" if spent is None else f"{spent:.3f}"
        cells = [_cell(*row[name]) for name in metrics]
        lines.append(f"| {row['method']} | {eps} | {spent_s} | {row['n']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def interval_table(runs: list[dict[str, Any]], metrics: Sequence[str] = PAIRED_METRICS) -> str:
    """Mean and its 95 % t interval over the seeds per (method, ε): for setting a mean against a
    cell group it cannot be paired with (another sweep whose cells are not at hand)."""

    def shown(mean: float, ci: tuple[float, float] | None) -> str:
        if math.isnan(mean):
            return "—"
        return f"{mean:.3f}" + ("" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]")

    head = "| method | ε | n | " + " | ".join(f"{m} [95 % CI]" for m in metrics) + " |\n"
    head += "|" + " --- |" * (3 + len(metrics)) + "\n"
    lines = []
    for row in intervals(runs, metrics):
        eps = "∞" if row["epsilon"] is None else f"{row['epsilon']:g}"
        cells = [shown(*row[m]) for m in metrics]
        lines.append(f"| {row['method']} | {eps} | {row['n']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def paired_table(rows: list[dict[str, Any]], metrics: Sequence[str] = PAIRED_METRICS) -> str:
    if not rows:
        return ""
    heading = rows[0].get("heading", f"method (ε) − {rows[0]['against']} ε=∞")
    head = f"| {heading} | n | " + " | ".join(f"Δ {m} [95 % CI]" for m in metrics) + " |\n"
    head += "|" + " --- |" * (2 + len(metrics)) + "\n"
    lines = []
    for row in rows:
        cells = [_difference_cell(*row[m]) for m in metrics]
        label = row.get("label", row["method"])
        lines.append(f"| {label} | {row['n']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def per_site_table(runs: list[dict[str, Any]], metric: str = "CIDEr") -> str:
    """Mean (± std) of ``metric`` per site, for every (method, ε) whose cells report sites, each
    row labelled with its ε (∞: non-private)."""
    per: dict[str, dict[str, list[float]]] = {}
    for run in sorted(runs, key=lambda r: _order(r["method"], r["epsilon"])):
        if run.get("per_site"):
            label = labelled(run["method"], run["epsilon"])
            for site, scores in run["per_site"].items():
                if metric in scores:
                    per.setdefault(label, {}).setdefault(site, []).append(float(scores[metric]))
    if not per:
        return ""
    sites = sorted({s for m in per.values() for s in m})
    head = f"| method ({metric}) | " + " | ".join(sites) + " |\n" + "|" + " --- |" * (1 + len(sites)) + "\n"
    lines = [
        f"| {method} | " + " | ".join(_cell(*_mean_std(by.get(s, []))) for s in sites) + " |"
        for method, by in per.items()
    ]
    return head + "\n".join(lines) + "\n"


def per_site_vs(runs: list[dict[str, Any]], against: str, metric: str = "CIDEr") -> str:
    """Per site, each (method, ε) minus the non-private ``against`` cell (``local``: the site
    training alone), paired by seed: the mean difference and its 95 % t interval over the seeds
    both have. The question a site asks before it joins: does federating beat what it has alone."""
    per: dict[tuple[str, float | None], dict[int, dict[str, float]]] = {}
    for run in runs:
        if run.get("per_site"):
            scores = {site: float(v[metric]) for site, v in run["per_site"].items() if metric in v}
            per.setdefault((run["method"], run["epsilon"]), {})[run["seed"]] = scores
    reference = per.get((against, None))
    if not reference:
        return ""
    sites = sorted({site for by_seed in per.values() for scores in by_seed.values() for site in scores})
    head = f"| method (Δ {metric} vs {against}) | n | " + " | ".join(sites) + " |\n"
    head += "|" + " --- |" * (2 + len(sites)) + "\n"
    lines = []
    for (method, epsilon), by_seed in sorted(per.items(), key=lambda item: _order(*item[0])):
        if (method, epsilon) == (against, None):
            continue
        seeds = sorted(set(by_seed) & set(reference))
        cells = [
            _difference_cell(
                *_mean_ci([by_seed[s].get(site, math.nan) - reference[s].get(site, math.nan) for s in seeds])
            )
            for site in sites
        ]
        lines.append(f"| {labelled(method, epsilon)} | {len(seeds)} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def wall_table(runs: list[dict[str, Any]]) -> str:
    """Wall time of a cell, in minutes, per (method, ε): what the grid costs on the machine that
    ran it (a cell's own time; cells that ran side by side shared the machine)."""
    per: dict[str, list[float]] = {}
    for run in sorted(runs, key=lambda r: _order(r["method"], r["epsilon"])):
        if run.get("wall_s"):
            per.setdefault(labelled(run["method"], run["epsilon"]), []).append(run["wall_s"] / 60)
    if not per:
        return ""
    head = "| method | cells | min per cell | longest |\n| --- | --- | --- | --- |\n"
    lines = [
        f"| {label} | {len(walls)} | {_cell(*_mean_std(walls))} | {max(walls):.1f} |"
        for label, walls in per.items()
    ]
    return head + "\n".join(lines) + "\n"


def paper_table(
    runs: list[dict[str, Any]], private: float = 8.0, metrics: Sequence[str] = PAPER_METRICS
) -> str:
    """The FedTAR paper's Table 1 as this sweep gives it: one row per method, each metric's mean
    with its 95 % t interval over the seeds without DP and at ε = ``private``; "—" where a method
    has no cell at that ε (a method without a DP variant)."""
    by = _tests_by_cell(runs)
    methods = sorted({m for m, _ in by}, key=lambda m: _order(m, None))
    if not methods:
        return ""

    def shown(tests: dict[int, dict[str, float]] | None, metric: str) -> str:
        if not tests:
            return "—"
        mean, ci = _mean_ci([t.get(metric, math.nan) for t in tests.values()])
        if math.isnan(mean):
            return "—"
        return f"{mean:.3f}" + ("" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]")

    eps = f"{private:g}"
    cols = [f"{m} ε=∞" for m in metrics] + [f"{m} ε={eps}" for m in metrics]
    head = f"| method | seeds (ε=∞ / ε={eps}) | " + " | ".join(cols) + " |\n"
    head += "|" + " --- |" * (2 + len(cols)) + "\n"
    lines = []
    for method in methods:
        plain, dp = by.get((method, None)), by.get((method, private))
        seeds = f"{len(plain) if plain else '—'} / {len(dp) if dp else '—'}"
        cells = [shown(plain, m) for m in metrics] + [shown(dp, m) for m in metrics]
        lines.append(f"| {method} | {seeds} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def privacy_table(pu: list[dict[str, Any]], metric: str = "CIDEr") -> str:
    if not pu:
        return ""
    head = f"| method | ε target | ε spent | seeds | {metric} | share of gain kept |\n" + "| --- " * 6 + "|\n"
    lines = []
    for r in pu:
        eps = "∞" if r["epsilon"] is None else f"{r['epsilon']:g}"
        spent = "—" if r["epsilon_spent"] is None else f"{r['epsilon_spent']:.3f}"
        kept = "—" if math.isnan(r["kept"]) else f"{100 * r['kept']:.0f} %"
        seeds = r.get("n", "—")
        lines.append(f"| {r['method']} | {eps} | {spent} | {seeds} | {_cell(*r[metric])} | {kept} |")
    return head + "\n".join(lines) + "\n"


def plot_privacy_utility(rows: list[dict[str, Any]], path: Path, metric: str = "CIDEr") -> bool:
    """PNG of the metric against ε (∞ drawn at the right, base as a line); a sweep without private
    cells gets the metric per method at ε = ∞ instead. False only when no cell has the metric."""
    private = [r for r in rows if r["method"] in (*FEDERATED, *VARIANTS) and r["epsilon"] is not None]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not private:
        plain = [r for r in rows if r["epsilon"] is None and not math.isnan(r[metric][0])]
        if not plain:
            return False
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = list(range(len(plain)))
        ax.errorbar(
            xs, [r[metric][0] for r in plain], yerr=[r[metric][1] or 0.0 for r in plain], fmt="o", capsize=3
        )
        ax.set_xticks(xs, [r["method"] for r in plain], rotation=30, ha="right")
        ax.set_title("no private cells in this sweep: every method at ε = ∞", fontsize=9)
        ax.set_ylabel(f"{metric} (mean ± std over seeds)")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return True

    finite = sorted({r["epsilon"] for r in private})
    inf_x = max(finite) * 2.5
    fig, ax = plt.subplots(figsize=(6, 4))
    for method in sorted({r["method"] for r in private}):
        pts = sorted(
            ((r["epsilon"] if r["epsilon"] is not None else inf_x), r[metric])
            for r in rows
            if r["method"] == method
        )
        xs = [p[0] for p in pts]
        ys = [p[1][0] for p in pts]
        es = [p[1][1] or 0.0 for p in pts]
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=method)
    for ref, style in ((BASE, ":"), (CENTRAL, "--")):
        row = next((r for r in rows if r["method"] == ref), None)
        if row is not None:
            ax.axhline(row[metric][0], linestyle=style, color="grey", label=ref)
    ax.set_xscale("log")
    ax.set_xticks([*finite, inf_x], [f"{e:g}" for e in finite] + ["∞"])
    ax.set_xlabel("ε per patient (target; δ fixed)")
    ax.set_ylabel(f"{metric} (mean ± std over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _md_to_html(table: str) -> str:
    rows = [ln.strip("|").split(" | ") for ln in table.strip().splitlines() if ln and "---" not in ln]
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(c.strip())}</th>" for c in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c.strip())}</td>" for c in r) + "</tr>" for r in rows[1:]
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_outputs(out: Path, wall_s: float = 0.0) -> dict[str, Any]:
    """results.json, results.md, privacy_utility.png and results.html from every cell in ``out``."""
    runs = load_cells(out)
    results = results_of(runs, wall_s)
    rows = results["summary"]
    pu, pu_ce = results["privacy_utility"], privacy_utility(runs, "CE-F1")
    png = out / "privacy_utility.png"
    drawn = out / f".privacy_utility.{os.getpid()}.png"
    has_plot = plot_privacy_utility(rows, drawn)
    if has_plot:
        drawn.replace(png)
    total_wall = results["wall_s_all_cells"]
    _write_whole(out / "results.json", json.dumps(results, indent=1))
    sections = [
        ("Mean ± sample std over paired seeds", markdown_table(rows, TABLE_METRICS)),
        ("Mean and 95 % t interval over seeds", interval_table(runs)),
        (f"Paired differences to {_paired_reference(runs)}", paired_table(results["paired"])),
        ("Paired differences to base", paired_table(results["paired_vs_base"])),
        ("Paired differences to local", paired_table(results["paired_vs_local"])),
        ("CIDEr per site", per_site_table(runs)),
        ("CE-F1 per site", per_site_table(runs, "CE-F1")),
        ("CE-F1-micro per site", per_site_table(runs, "CE-F1-micro")),
        ("CIDEr per site minus local, paired by seed", per_site_vs(runs, LOCAL)),
        ("CE-F1 per site minus local, paired by seed", per_site_vs(runs, LOCAL, "CE-F1")),
        ("Privacy–utility: share of the non-private CIDEr gain over base kept", privacy_table(pu)),
        ("Privacy–utility: share of the non-private CE-F1 gain", privacy_table(pu_ce, "CE-F1")),
        ("Share of the non-private gain kept, 95 % intervals, ε spent per site", share_table(runs)),
        ("CIDEr share kept per site", share_per_site_table(runs)),
        ("CE-F1 share kept per site", share_per_site_table(runs, "CE-F1")),
        ("Share of non-private central's gain over base, 95 % intervals", share_of_central_table(runs)),
        ("CIDEr share of central's gain per site", share_of_central_per_site_table(runs)),
        ("Wall time per cell", wall_table(runs)),
    ]
    md = "".join(f"### {title}\n\n{table}\n" for title, table in sections if table)
    md += (
        f"All {len(METRIC_NAMES)} metrics: results.json. Wall time of all cells: {total_wall / 60:.1f} min.\n"
    )
    _write_whole(out / "results.md", md)
    img = ""
    if has_plot:
        img = (
            '<img alt="privacy-utility" src="data:image/png;base64,'
            + base64.b64encode(png.read_bytes()).decode()
            + '">'
        )
    body = "".join(f"<h2>{html.escape(t)}</h2>{_md_to_html(tab)}" for t, tab in sections if tab)
    _write_whole(
        out / "results.html",
        "<!doctype html><meta charset='utf-8'><title>secure-fed sweep</title>"
        "<style>body{font-family:sans-serif}td,th{border:1px solid #ccc;padding:2px 6px}"
        "table{border-collapse:collapse}</style>"
        f"<h1>secure-fed sweep: {html.escape(str(out))}</h1>{img}{body}"
        f"<p>Wall time of all cells: {total_wall / 60:.1f} min.</p>",
    )
    return results
