"""A sweep's statistics over its cells: per (method, ε) mean ± sample std, means with 95 % t
intervals over seeds, differences paired by seed (against a reference cell, another method, or the
same cells of another sweep), the share of the non-private gain kept, and results.json's content."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from secure_fed.lab.cells import (
    BASE,
    LOCAL,
    _order,
    kept_groups,
    labelled,
    spent_per_site,
    t975,
)
from secure_fed.site.evaluation import METRIC_NAMES

PAIRED_METRICS: tuple[str, ...] = ("CIDEr", "CE-F1", "CE-F1-micro")


def _max_epsilon(privacy: dict[str, Any] | None) -> float | None:
    """The largest per-patient ε any site reports spent."""
    values = spent_per_site(privacy)
    return max(values) if values else None


def _mean_std(values: list[float]) -> tuple[float, float | None]:
    arr = np.array([v for v in values if not math.isnan(v)])
    if not len(arr):
        return (math.nan, None)
    return (float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else None)


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (method, ε): n, mean and sample std (None for n = 1) of every metric, ε spent."""
    groups: dict[tuple[str, float | None], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["method"], run["epsilon"]), []).append(run)
    rows = []
    for (method, epsilon), group in groups.items():
        row: dict[str, Any] = {"method": method, "epsilon": epsilon, "n": len(group)}
        for name in METRIC_NAMES:
            # a cell from before a metric existed has no value for it: NaN, left out of mean and std
            row[name] = _mean_std([float(r["test"].get(name, math.nan)) for r in group])
        spent = [e for e in (_max_epsilon(r.get("privacy")) for r in group) if e is not None]
        row["epsilon_spent"] = max(spent) if spent else None
        walls = [r["wall_s"] for r in group if "wall_s" in r]
        row["wall_s"] = float(np.mean(walls)) if walls else None
        rows.append(row)
    return rows


def paired_differences(
    runs: list[dict[str, Any]], against: str, metrics: Sequence[str] = PAIRED_METRICS
) -> list[dict[str, Any]]:
    """For every other (method, ε) cell group, private ones included: mean per-seed difference
    (method − non-private ``against``) and its 95 % t interval over the seeds both have (None
    where fewer than 2). Seeds pair across ε too: seed s fixes the cohort and split."""
    by = _tests_by_cell(runs)
    reference = by.get((against, None))
    if reference is None:
        return []
    rows = []
    for (method, epsilon), tests in sorted(by.items(), key=lambda item: _order(*item[0])):
        if (method, epsilon) == (against, None):
            continue
        row = {"method": method, "epsilon": epsilon, "label": labelled(method, epsilon), "against": against}
        rows.append(row | _differences(tests, reference, metrics))
    return rows


def paired_between(
    runs: list[dict[str, Any]],
    reference: list[dict[str, Any]],
    names: tuple[str, str],
    metrics: Sequence[str] = PAIRED_METRICS,
    against_method: str | None = None,
) -> list[dict[str, Any]]:
    """Each (method, ε) of ``runs`` minus the same (method, ε) of ``reference``, two sweeps of one
    cohort run two ways (distributed DP against site mode): mean per-seed difference and its 95 %
    t interval over the seeds both have. ``names`` are the two ways, for the table's labels.
    ``against_method``: minus that method of ``reference`` at the same ε instead (every method of a
    distributed-DP sweep against the private pooled `central`, the ceiling at that ε)."""
    theirs = _tests_by_cell(reference)
    rows = []
    for (method, epsilon), tests in sorted(_tests_by_cell(runs).items(), key=lambda item: _order(*item[0])):
        other = theirs.get((against_method or method, epsilon))
        if other is None:
            continue
        if against_method is None:
            label = f"{labelled(method, epsilon)}: {names[0]} − {names[1]}"
            heading = f"{names[0]} − {names[1]}, same method and ε"
        else:
            label = f"{labelled(method, epsilon)} ({names[0]}) − {against_method} ({names[1]})"
            heading = f"{names[0]} − {against_method} ({names[1]}), same ε"
        row = {
            "method": method,
            "epsilon": epsilon,
            "label": label,
            "against": names[1],
            "heading": heading,
        }
        rows.append(row | _differences(tests, other, metrics))
    return rows


# The FedTAR paper's Table 1 columns, in its order
PAPER_METRICS: tuple[str, ...] = ("BLEU-1", "BLEU-4", "ROUGE-L", "CIDEr", "CE-F1")


# FedTAR against FedAvg both ways the baseline can be run (ours with the hyper-LoRA, the paper's
# plain), and the convex reading of FedTAR's step against ours
PAPER_PAIRS: tuple[tuple[str, str], ...] = (
    ("fedtar", "fedavg"),
    ("fedtar", "fedavg-plain"),
    ("fedtar-convex", "fedavg"),
    ("fedtar-convex", "fedavg-plain"),
)


def paper_differences(
    runs: list[dict[str, Any]],
    pairs: Sequence[tuple[str, str]] = PAPER_PAIRS,
    metrics: Sequence[str] = PAPER_METRICS,
) -> list[dict[str, Any]]:
    """``paired_methods`` for each pair the sweep ran (FedTAR − FedAvg, each way), one heading."""
    rows = []
    for method, against in pairs:
        for row in paired_methods(runs, method, against, metrics):
            rows.append(row | {"heading": "method − against, same ε"})
    return rows


def privacy_costs(runs: list[dict[str, Any]], metrics: Sequence[str] = PAPER_METRICS) -> list[dict[str, Any]]:
    """Each method's own privacy cost: its cells at a finite ε minus its own non-private cells,
    paired by seed (seed s fixes the cohort and split at every ε). The row the FedTAR paper's table
    lacks: what DP takes from a method, as against what it takes from the baseline."""
    by = _tests_by_cell(runs)
    rows = []
    for (method, epsilon), tests in sorted(by.items(), key=lambda item: _order(*item[0])):
        plain = by.get((method, None))
        if epsilon is None or plain is None:
            continue
        row = {
            "method": method,
            "epsilon": epsilon,
            "label": f"{method}: ε={epsilon:g} − ε=∞",
            "against": f"{method} ε=∞",
            "heading": "method at ε − the same method without DP",
        }
        rows.append(row | _differences(tests, plain, metrics))
    return rows


def paired_methods(
    runs: list[dict[str, Any]], method: str, against: str, metrics: Sequence[str] = PAIRED_METRICS
) -> list[dict[str, Any]]:
    """``method`` minus ``against`` at the same ε, for every ε both ran (FedTAR against FedAvg,
    private and not): mean per-seed difference and its 95 % t interval over the seeds both have."""
    by = _tests_by_cell(runs)
    rows = []
    for (name, epsilon), tests in sorted(by.items(), key=lambda item: _order(*item[0])):
        other = by.get((against, epsilon))
        if name != method or other is None:
            continue
        row = {
            "method": method,
            "epsilon": epsilon,
            "label": f"{method} − {against}, ε={'∞' if epsilon is None else f'{epsilon:g}'}",
            "against": against,
            "heading": f"{method} − {against}, same ε",
        }
        rows.append(row | _differences(tests, other, metrics))
    return rows


def _tests_by_cell(runs: list[dict[str, Any]]) -> dict[tuple[str, float | None], dict[int, dict[str, float]]]:
    """(method, ε) → seed → that cell's test scores."""
    by: dict[tuple[str, float | None], dict[int, dict[str, float]]] = {}
    for run in runs:
        by.setdefault((run["method"], run["epsilon"]), {})[run["seed"]] = run["test"]
    return by


def _differences(
    tests: dict[int, dict[str, float]], reference: dict[int, dict[str, float]], metrics: Sequence[str]
) -> dict[str, Any]:
    """n, and per metric the mean per-seed difference with its 95 % t interval, over shared seeds."""
    seeds = sorted(set(tests) & set(reference))
    out: dict[str, Any] = {"n": len(seeds)}
    for name in metrics:
        out[name] = _mean_ci([tests[s].get(name, math.nan) - reference[s].get(name, math.nan) for s in seeds])
    return out


def _mean_ci(values: list[float]) -> tuple[float, tuple[float, float] | None]:
    """Mean and its 95 % t interval (None for one value), NaN left out."""
    d = np.array(values, dtype=np.float64)
    d = d[~np.isnan(d)]
    if len(d) == 0:
        return (math.nan, None)
    if len(d) == 1:
        return (float(d[0]), None)
    half = t975(len(d) - 1) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return (float(d.mean()), (float(d.mean()) - half, float(d.mean()) + half))


def intervals(runs: list[dict[str, Any]], metrics: Sequence[str] = PAIRED_METRICS) -> list[dict[str, Any]]:
    """Per (method, ε) in table order: n and, per metric, the mean over seeds with its 95 % t
    interval (None for one seed)."""
    rows = []
    for (method, epsilon), tests in sorted(_tests_by_cell(runs).items(), key=lambda item: _order(*item[0])):
        row: dict[str, Any] = {"method": method, "epsilon": epsilon, "n": len(tests)}
        for m in metrics:
            row[m] = _mean_ci([t.get(m, math.nan) for t in tests.values()])
        rows.append(row)
    return rows


def privacy_utility(runs: list[dict[str, Any]], metric: str = "CIDEr") -> list[dict[str, Any]]:
    """Share of the non-private gain over ``base`` kept at each ε, per federated method, its
    site-fine-tuned variant (``fedavg-ft``: the private federated model, then each site's own
    epochs on its own patients, a model that never leaves the site) and ``central`` (at a finite ε
    the pooled private ceiling: what any private method could keep).

    Paired: each share is taken over the seeds that base, the method without DP and the method at
    that ε all have (a partial grid's means over different seeds would compare different cohorts);
    ``n`` says how many."""
    out = []
    for method, epsilon, common in kept_groups(runs):
        keys = {(BASE, None), (method, None), (method, epsilon)}
        paired = [r for r in runs if r["seed"] in common and (r["method"], r["epsilon"]) in keys]
        rows = {(r["method"], r["epsilon"]): r for r in summarise(paired)}
        base, plain, row = rows[(BASE, None)], rows[(method, None)], rows[(method, epsilon)]
        gain = plain[metric][0] - base[metric][0]
        out.append(
            {
                "method": method,
                "epsilon": epsilon,
                "epsilon_spent": row["epsilon_spent"],
                "n": len(common),
                metric: row[metric],
                "kept": (row[metric][0] - base[metric][0]) / gain if gain > 0 else math.nan,
            }
        )
    return out


def _paired_reference(runs: list[dict[str, Any]]) -> str:
    return "fedtar" if any(r["method"] == "fedtar" for r in runs) else BASE


def results_of(runs: list[dict[str, Any]], wall_s: float = 0.0) -> dict[str, Any]:
    """results.json's content from the cells alone: everything else in it is derived from them."""
    against = _paired_reference(runs)
    return {
        "runs": runs,
        "summary": summarise(runs),
        "paired": paired_differences(runs, against),
        "paired_vs_base": paired_differences(runs, BASE) if against != BASE else [],
        # "does federating beat training alone": the question a site asks before it joins
        "paired_vs_local": paired_differences(runs, LOCAL),
        "privacy_utility": privacy_utility(runs),
        "wall_s_this_call": round(wall_s, 1),
        "wall_s_all_cells": round(sum(r.get("wall_s", 0.0) for r in runs), 1),
    }
