"""The share of a method's non-private gain over ``base`` that it keeps at each ε, with a 95 %
interval, overall and per site (issue 30's privacy–utility table); and the share of the pooled
non-private ``central``'s gain over ``base`` that a cell reaches (one reference point for every
method: what pooling all patients without privacy learns).

The share is a ratio of paired mean gains, R = mean(g) / mean(G) with g_s = m_ε,s − base_s and
G_s = m_∞,s − base_s over the seeds all three cells have: the point estimate the sweep's own
privacy–utility table prints. Its interval is the delta method's for a ratio of paired means: the
per-seed residuals z_s = g_s − R·G_s have mean zero, and R's standard error is
sd(z) / (√n · mean(G)), taken with Student's t at n − 1 degrees of freedom. With three seeds it is
wide, which is what three seeds can say. The share of central's gain is the same ratio with
G_s = central_∞,s − base_s, over the seeds base, central at ε = ∞ and the cell all have."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from secure_fed.lab.cells import (
    BASE,
    CENTRAL,
    FEDERATED,
    FINE_TUNED,
    NOISE_FREE_METHODS,
    _order,
    kept_groups,
    labelled,
    spent_per_site,
    t975,
)

Key = tuple[str, float | None]


def ratio_ci(gains: Sequence[float], full: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """mean(gains) / mean(full) and its 95 % delta-method t interval (None for fewer than two
    pairs); NaN where the non-private gain is not positive (no gain to keep a share of)."""
    g = np.asarray(gains, dtype=np.float64)
    big = np.asarray(full, dtype=np.float64)
    keep = ~(np.isnan(g) | np.isnan(big))
    g, big = g[keep], big[keep]
    if len(g) == 0 or big.mean() <= 0:
        return (math.nan, None)
    ratio = float(g.mean() / big.mean())
    if len(g) < 2:
        return (ratio, None)
    residual = g - ratio * big
    half = t975(len(g) - 1) * float(residual.std(ddof=1)) / (math.sqrt(len(g)) * float(big.mean()))
    return (ratio, (ratio - half, ratio + half))


def _scores(run: dict[str, Any], metric: str, site: str | None) -> float:
    if site is None:
        return float(run["test"].get(metric, math.nan))
    return float((run.get("per_site") or {}).get(site, {}).get(metric, math.nan))


def shares_kept(
    runs: list[dict[str, Any]], metrics: Sequence[str] = ("CIDEr", "CE-F1"), site: str | None = None
) -> list[dict[str, Any]]:
    """Per private (method, ε) cell group with a non-private cell of its method and ``base`` cells:
    n (the seeds all three have), the ε spent per site (lowest and highest over sites and seeds;
    one pooled value for ``central``) and per metric the share kept with its interval, on the
    whole test set or on one ``site``'s patients."""
    by: dict[Key, dict[int, dict[str, Any]]] = {}
    for run in runs:
        by.setdefault((run["method"], run["epsilon"]), {})[run["seed"]] = run
    rows = []
    for method, epsilon, seeds in kept_groups(runs):
        if epsilon is None:
            continue
        rows.append(_share_row(method, epsilon, seeds, by, by[(method, None)], metrics, site))
    return rows


def shares_of_central(
    runs: list[dict[str, Any]], metrics: Sequence[str] = ("CIDEr", "CE-F1"), site: str | None = None
) -> list[dict[str, Any]]:
    """Per (method, ε) cell group of a federated, fine-tuned or noise-free method (any ε) and of
    private ``central``: the share of non-private ``central``'s gain over ``base`` it reaches, with
    its interval, over the seeds it, ``base`` and ``central`` at ε = ∞ all have (n); the ε spent as
    in ``shares_kept``. Groups without such a seed are left out."""
    by: dict[Key, dict[int, dict[str, Any]]] = {}
    for run in runs:
        by.setdefault((run["method"], run["epsilon"]), {})[run["seed"]] = run
    base, ceiling = by.get((BASE, None), {}), by.get((CENTRAL, None), {})
    methods = (*FEDERATED, *FINE_TUNED, *NOISE_FREE_METHODS, CENTRAL)
    rows = []
    for method, epsilon in sorted(by, key=lambda key: _order(*key)):
        if method not in methods or (method, epsilon) == (CENTRAL, None):
            continue
        cells = by[(method, epsilon)]
        seeds = sorted(set(cells) & set(base) & set(ceiling))
        if not seeds:
            continue
        rows.append(_share_row(method, epsilon, seeds, by, ceiling, metrics, site))
    return rows


def _share_row(
    method: str,
    epsilon: float | None,
    seeds: list[int],
    by: dict[Key, dict[int, dict[str, Any]]],
    reference: dict[int, dict[str, Any]],
    metrics: Sequence[str],
    site: str | None,
) -> dict[str, Any]:
    """One cell group's row: n, the ε spent per site, and per metric its gain over ``base`` as a
    share of `reference`'s (by seed), with the interval."""
    cells, base = by[(method, epsilon)], by.get((BASE, None), {})
    spent = [e for s in seeds for e in spent_per_site(cells[s].get("privacy"))]
    row: dict[str, Any] = {
        "method": method,
        "epsilon": epsilon,
        "n": len(seeds),
        "spent": (min(spent), max(spent)) if spent else None,
    }
    for metric in metrics:
        b = [_scores(base[s], metric, site) for s in seeds]
        gains = [_scores(cells[s], metric, site) - bs for s, bs in zip(seeds, b, strict=True)]
        full = [_scores(reference[s], metric, site) - bs for s, bs in zip(seeds, b, strict=True)]
        row[metric] = ratio_ci(gains, full)
    return row


def _share_cell(share: float, ci: tuple[float, float] | None) -> str:
    if math.isnan(share):
        return "—"
    return f"{100 * share:.0f} %" + ("" if ci is None else f" [{100 * ci[0]:.0f}, {100 * ci[1]:.0f}]")


def _spent_cell(spent: tuple[float, float] | None) -> str:
    if spent is None:
        return "—"
    low, high = spent
    return f"{high:.3f}" if high - low < 5e-4 else f"{low:.3f}–{high:.3f}"


Shares = Callable[..., list[dict[str, Any]]]  # shares_kept or shares_of_central: (runs, metrics, site)
_KEPT, _OF_CENTRAL = "share kept", "share of central's gain"


def _overall_table(rows: list[dict[str, Any]], metrics: Sequence[str], column: str) -> str:
    if not rows:
        return ""
    head = (
        "| method | ε spent per site | n | " + " | ".join(f"{m} {column} [95 % CI]" for m in metrics) + " |\n"
    )
    head += "|" + " --- |" * (3 + len(metrics)) + "\n"
    lines = [
        f"| {labelled(r['method'], r['epsilon'])} | {_spent_cell(r['spent'])} | {r['n']} | "
        + " | ".join(_share_cell(*r[m]) for m in metrics)
        + " |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def _per_site_table(shares: Shares, runs: list[dict[str, Any]], metric: str, column: str) -> str:
    sites = sorted({site for r in runs for site in (r.get("per_site") or {})})
    per_site = {
        site: {(r["method"], r["epsilon"]): r for r in shares(runs, (metric,), site)} for site in sites
    }
    overall = shares(runs, (metric,))
    if not overall or not sites:
        return ""
    head = f"| method ({metric} {column} [95 % CI]) | n | " + " | ".join(sites) + " |\n"
    head += "|" + " --- |" * (2 + len(sites)) + "\n"
    lines = []
    for r in overall:
        key = (r["method"], r["epsilon"])
        cells = [
            _share_cell(*per_site[site][key][metric]) if key in per_site[site] else "—" for site in sites
        ]
        lines.append(f"| {labelled(*key)} | {r['n']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def share_table(runs: list[dict[str, Any]], metrics: Sequence[str] = ("CIDEr", "CE-F1")) -> str:
    """Markdown: per private cell group, ε spent per site and the share kept on each metric."""
    return _overall_table(shares_kept(runs, metrics), metrics, _KEPT)


def share_per_site_table(runs: list[dict[str, Any]], metric: str = "CIDEr") -> str:
    """Markdown: per private cell group, the share of the non-private gain kept at each site."""
    return _per_site_table(shares_kept, runs, metric, _KEPT)


def share_of_central_table(runs: list[dict[str, Any]], metrics: Sequence[str] = ("CIDEr", "CE-F1")) -> str:
    """Markdown: per cell group, ε spent per site and the share of non-private central's gain over
    base it reaches on each metric (the second reference point beside ``share_table``'s)."""
    return _overall_table(shares_of_central(runs, metrics), metrics, _OF_CENTRAL)


def share_of_central_per_site_table(runs: list[dict[str, Any]], metric: str = "CIDEr") -> str:
    """Markdown: per cell group, the share of non-private central's gain it reaches at each site."""
    return _per_site_table(shares_of_central, runs, metric, _OF_CENTRAL)
