"""Privacy–utility sweeps: methods × seeds × ε on the same data, summarised as mean ± std."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from secure_fed.clients.evaluation import METRIC_NAMES
from secure_fed.config import RunConfig
from secure_fed.runner import run_inprocess

BASE = "base"  # the pretrained base with untrained adapters: the "no federated training" reference


def run_label(method: str, epsilon: float | None) -> str:
    return method if epsilon is None else f"{method} ε={epsilon:g}"


def sweep(
    base: RunConfig,
    methods: Sequence[str],
    seeds: Sequence[int],
    epsilons: Sequence[float | None],
    out: Path,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every (method, ε, seed) run in its own folder; results.json holds each run's test metrics."""
    if base.train.threads is not None:
        import torch

        torch.set_num_threads(base.train.threads)
    results: dict[str, Any] = {"runs": []}
    out.mkdir(parents=True, exist_ok=True)
    for epsilon in epsilons:
        for method in methods:
            for seed in seeds:
                update: dict[str, Any] = {"seed": seed}
                cfg = base.model_copy(deep=True, update=update)
                if method != BASE:
                    cfg.fed.method = method  # type: ignore[assignment]
                cfg.data.synth.seed = seed
                if epsilon is not None:
                    cfg.dp.target_epsilon = epsilon  # before enabling: the validator needs it
                    cfg.dp.enabled = True
                folder = out / f"{method}-eps{epsilon if epsilon is not None else 'inf'}-seed{seed}"
                log(f"{run_label(method, epsilon)} seed {seed} → {folder}")
                if method == BASE:
                    results["runs"].extend(evaluate_base(base, [seed], out))
                    continue
                metrics = run_inprocess(cfg, folder).metrics
                results["runs"].append(
                    {
                        "method": method,
                        "epsilon": epsilon,
                        "seed": seed,
                        "test": metrics["test"],
                        "alpha": metrics.get("alpha"),
                        "privacy": metrics.get("privacy"),
                    }
                )
                (out / "results.json").write_text(json.dumps(results, indent=1))
    results["summary"] = summarise(results["runs"])
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(markdown_table(results["summary"]))
    return results


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, float | None], list[dict[str, float]]] = {}
    for run in runs:
        groups.setdefault((run["method"], run["epsilon"]), []).append(run["test"])
    rows = []
    for (method, epsilon), tests in groups.items():
        row: dict[str, Any] = {"method": method, "epsilon": epsilon, "n": len(tests)}
        for name in METRIC_NAMES:
            values = np.array([t[name] for t in tests if not math.isnan(t[name])])
            row[name] = (
                (float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0)
                if len(values)
                else (math.nan, math.nan)
            )
        rows.append(row)
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = "| method | ε | n | " + " | ".join(METRIC_NAMES) + " |\n"
    head += "|" + " --- |" * (3 + len(METRIC_NAMES)) + "\n"
    lines = []
    for row in rows:
        eps = "∞" if row["epsilon"] is None else f"{row['epsilon']:g}"
        cells = [f"{m:.3f} ± {s:.3f}" for m, s in (row[name] for name in METRIC_NAMES)]
        lines.append(f"| {row['method']} | {eps} | {row['n']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


def evaluate_base(base: RunConfig, seeds: Sequence[int], out: Path) -> list[dict[str, Any]]:
    """The pretrained base with untrained adapters, scored exactly as a run's final evaluation
    (each site's test split, weighted as in a run): the "no federated training" reference."""
    from secure_fed.clients.handler import handle
    from secure_fed.clients.runtime import SiteRuntime
    from secure_fed.clients.site import site_names
    from secure_fed.runner import initial_adapter_state
    from secure_fed.server.orchestrator import pool_scores

    runs = []
    for seed in seeds:
        cfg = base.model_copy(deep=True, update={"seed": seed, "out": out / f"base-seed{seed}"})
        cfg.data.synth.seed = seed
        cfg.audit.enabled = False
        state = initial_adapter_state(cfg)
        request = {"global": state, "stopped_early": "base reference: no federated training"}
        replies = [
            handle(SiteRuntime.create(cfg, site), "evaluate", request, {})[0] for site in site_names(cfg)
        ]
        test = pool_scores(replies)
        runs.append({"method": BASE, "epsilon": None, "seed": seed, "test": test})
    return runs
