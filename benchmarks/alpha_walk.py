"""How far FedTAR's meta-learner walks α on noise alone, by the number of α steps and ψ's learning rate.

FedTAR's temporal weights are α = softmax(g(e(t); ψ)), and ψ takes one Adam step a round on the
sites' summed (and, under DP, noised) hypergradient ∂L_val/∂α. Adam moves each parameter by about
the learning rate a step whatever the gradient's size, so on a hypergradient that is mostly noise
ψ random-walks, and over enough steps softmax saturates: α goes one-hot on an index the noise
chose. This script measures that with the real `TemporalMetaLearner` and `MetaUpdater`
(secure_fed.algorithms.fedtar.temporal), no data and no model: each run starts ψ from its seed and
feeds it T-vectors of standard normal noise, alone ("noise only") or plus a steady pull towards
the first visit index ("signal + noise": −s·e₀ added every step, s = 0.5, a signal below the
noise), and reports the largest α at the end and α on the pulled index, over 20 seeds.

The rows are the step counts the repository's configs give ψ at train.meta_lr = 5e-2: the default
benchmark's 10 rounds, site-mode hospital scale's 5, distributed hospital scale's 50 of its first
grid and 200 at the retuned recipe (one α step a round); and 50 and 200 steps at the rate that
keeps lr × steps of the 5-round recipe (5e-3 and 1.25e-3): the same total pull, so a steady signal
moves α as far, while the noise's walk (∝ lr·√steps) shrinks.

The second table (docs/results/fedtar-alpha-walk-floored.json) is the default that replaced it
(issue 63), chosen here on noise before any private run: α = λ/T + (1 − λ)·softmax(u) with
train.alpha_floor 0.1 (every α_t in [0.1, 0.6] at T = 5), ψ's torch init, and plain SGD on the
hypergradient in units of its run's own size at the rate train.meta_travel / rounds. Its rows are
travel budgets by step counts, on the same noise and pull, plus a steady pull with no noise (how far
a full budget carries α). The rule, fixed before the rows were read: the largest travel of
TRAVELS whose median largest α on noise alone stays ≤ NOISE_LIMIT at every step count (uniform is
0.2, the floor's top 0.6).

    python benchmarks/alpha_walk.py            # prints both tables' rows as JSON
    python benchmarks/alpha_walk.py --write    # docs/results/fedtar-alpha-walk{,-floored}.json

tests/test_alpha_walk.py checks that the committed tables are what this script computes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from secure_fed.algorithms.fedtar.temporal import MetaUpdater, TemporalMetaLearner, alpha_bounds

ROOT = Path(__file__).resolve().parent.parent

T = 5  # visit indices of every config here (data.max_visits)
SEEDS = 20
PULL = 0.5  # the steady signal's size, against noise of std 1 per index and step
# (α steps, ψ's learning rate, where the repository runs it)
CASES: tuple[tuple[int, float, str], ...] = (
    (5, 5e-2, "site-mode hospital scale (5 rounds)"),
    (10, 5e-2, "default benchmark (10 rounds)"),
    (50, 5e-2, "distributed hospital scale (50 rounds)"),
    (50, 5e-3, "50 rounds at a tenth of the rate"),
    (200, 5e-2, "distributed hospital scale, retuned recipe (200 rounds)"),
    (200, 1.25e-3, "200 rounds at lr × steps of the 5-round recipe"),
)
OUT = ROOT / "docs" / "results" / "fedtar-alpha-walk.json"
OUT_FLOORED = ROOT / "docs" / "results" / "fedtar-alpha-walk-floored.json"
FLOOR = 0.1  # the write-up's §4.1 lower bound on α_t
TRAVELS = (2.0, 4.0, 8.0)  # ψ's travel budgets tried, in units of the run's hypergradient size
STEP_COUNTS = (5, 10, 20, 50, 200)  # α steps: the configs' rounds (5, 10, 50, 200) and the DP check's 20
NOISE_LIMIT = 0.25  # the rule: median largest α on noise alone at most this, at every step count


def walk(steps: int, lr: float, seed: int, pull: float) -> np.ndarray:
    """α after `steps` Adam steps of ψ on noise (plus −pull on index 0's hypergradient)."""
    torch.manual_seed(seed)
    meta = MetaUpdater(TemporalMetaLearner(T, seed=seed), lr)
    rng = np.random.default_rng(seed)
    alpha = meta.learner.alpha()
    for _ in range(steps):
        grad = rng.normal(0.0, 1.0, T)
        grad[0] -= pull  # descent on α: a negative hypergradient raises α₀
        alpha = meta.step(grad)
    return alpha


def walk_floored(steps: int, travel: float, seed: int, pull: float, noise: float = 1.0) -> np.ndarray:
    """α after `steps` of the default ψ update (floor, torch init, SGD at travel / steps) on noise
    of std `noise` per index (plus −pull on index 0's hypergradient)."""
    torch.manual_seed(seed)
    meta = MetaUpdater(TemporalMetaLearner(T, seed=seed, floor=FLOOR, init="torch"), travel / steps, "sgd")
    rng = np.random.default_rng(seed)
    alpha = meta.learner.alpha()
    for _ in range(steps):
        grad = rng.normal(0.0, noise, T)
        grad[0] -= pull
        alpha = meta.step(grad)
    return alpha


def _median_range(values: list[float]) -> str:
    return f"{np.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def rows(seeds: int = SEEDS) -> list[list[Any]]:
    torch.set_num_threads(1)
    out: list[list[Any]] = []
    for steps, lr, where in CASES:
        noise = [walk(steps, lr, s, 0.0) for s in range(seeds)]
        signal = [walk(steps, lr, s, PULL) for s in range(seeds)]
        out.append(
            [
                where,
                steps,
                f"{lr:g}",
                _median_range([float(a.max()) for a in noise]),
                _median_range([float(a[0]) for a in signal]),
                f"{sum(int(np.argmax(a) != 0) for a in signal)} of {seeds}",
            ]
        )
    return out


def floored_rows(seeds: int = SEEDS, step_counts: tuple[int, ...] = STEP_COUNTS) -> list[list[Any]]:
    torch.set_num_threads(1)
    out: list[list[Any]] = []
    for travel in TRAVELS:
        for steps in step_counts:
            noise = [walk_floored(steps, travel, s, 0.0) for s in range(seeds)]
            signal = [walk_floored(steps, travel, s, PULL) for s in range(seeds)]
            pull_only = [walk_floored(steps, travel, s, PULL, noise=0.0) for s in range(seeds)]
            out.append(
                [
                    f"{travel:g}",
                    steps,
                    f"{travel / steps:g}",
                    _median_range([float(a.max()) for a in noise]),
                    _median_range([float(a.min()) for a in noise]),
                    _median_range([float(a[0]) for a in signal]),
                    f"{sum(int(np.argmax(a) != 0) for a in signal)} of {seeds}",
                    _median_range([float(a[0]) for a in pull_only]),
                ]
            )
    return out


def chosen_travel(made: list[list[Any]]) -> float:
    """The rule of the module docstring on `floored_rows`' rows: the largest travel whose median
    largest α on noise alone is ≤ NOISE_LIMIT at every step count."""
    ok = [
        travel
        for travel in TRAVELS
        if all(float(r[3].split()[0]) <= NOISE_LIMIT for r in made if float(r[0]) == travel)
    ]
    if not ok:
        raise ValueError(f"no travel of {TRAVELS} keeps the noise walk within {NOISE_LIMIT}")
    return max(ok)


def floored_table(made: list[list[Any]], commit: str, date: str) -> dict[str, Any]:
    low, high = alpha_bounds(T, FLOOR)
    return {
        "title": "FedTAR's default ψ update on noise: α with the floor and SGD at travel / steps, by travel "
        f"budget and steps (T = {T}, {SEEDS} seeds, median [min, max])",
        "source": {
            "command": "python benchmarks/alpha_walk.py --write",
            "commit": commit,
            "date": date,
            "machine": "any (seeded, no data; the real meta-learner and its SGD, one torch thread)",
            "wall": None,
        },
        "columns": [
            "travel",
            "α steps",
            "meta lr",
            "largest α, noise only",
            "smallest α, noise only",
            f"α on the pulled index, pull {PULL:g} + noise",
            "seeds whose largest α is on another index, pull + noise",
            f"α on the pulled index, pull {PULL:g} alone",
        ],
        "rows": made,
        "notes": [
            f"α = λ/T + (1 − λ)·softmax(u), λ = min(1, {FLOOR:g}·T): every α_t in [{low:.1f}, {high:.1f}] "
            f"for any u at T = {T}. Uniform α is {1 / T:.3f}.",
            "ψ takes plain SGD steps (torch init) of ĝ_r = g_r / max(‖g_r‖, RMS of ‖g‖ so far) at the "
            "rate travel / steps: the steps' lengths add up to at most the travel.",
            f"Noise: a T-vector of N(0, 1) hypergradients per step; the pull adds −{PULL:g} on the first "
            "index (half the noise's std); 'alone' is the pull without noise.",
            f"The rule, fixed before these rows were read: the largest travel whose median largest α on "
            f"noise alone is ≤ {NOISE_LIMIT:g} at every step count: {chosen_travel(made):g} "
            "(train.meta_travel's default).",
        ],
    }


def table(made: list[list[Any]], commit: str, date: str) -> dict[str, Any]:
    return {
        "title": "FedTAR's meta-learner on noise: α after ψ's Adam steps, by steps and learning rate "
        f"(T = {T}, {SEEDS} seeds, median [min, max])",
        "source": {
            "command": "python benchmarks/alpha_walk.py --write",
            "commit": commit,
            "date": date,
            "machine": "any (seeded, no data; the real meta-learner and its Adam, one torch thread)",
            "wall": None,
        },
        "columns": [
            "where",
            "α steps",
            "meta lr",
            "largest α, noise only",
            f"α on the pulled index, pull {PULL:g} + noise",
            "seeds whose largest α is on another index, pull + noise",
        ],
        "rows": made,
        "notes": [
            f"Each step feeds ψ a T-vector of N(0, 1) hypergradients (noise only), or the same minus "
            f"{PULL:g} on the first index (a steady pull half the noise's std). Uniform α is "
            f"{1 / T:.3f}; one-hot is 1.",
            "Adam (torch defaults, bias-corrected) moves each of ψ's parameters by about the learning "
            "rate a step: on noise its walk grows like lr·√steps, on a steady pull like lr·steps.",
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    parser.add_argument("--quick", action="store_true", help="3 seeds (smoke run)")
    args = parser.parse_args()
    if args.write and args.quick:
        parser.error("--write keeps the full table: drop --quick")
    seeds = 3 if args.quick else SEEDS
    made = rows(seeds)
    floored = floored_rows(seeds)
    if args.write:
        sys.path.insert(0, str(ROOT / "tools"))
        from doc_tables import dump_table, git_head

        commit, date = git_head(short=True), dt.date.today().isoformat()
        OUT.write_text(dump_table(table(made, commit, date)), encoding="utf-8")
        OUT_FLOORED.write_text(dump_table(floored_table(floored, commit, date)), encoding="utf-8")
    print(
        json.dumps(
            {"rows": made, "floored_rows": floored, "travel": chosen_travel(floored)}, ensure_ascii=False
        )
    )


if __name__ == "__main__":
    main()
