"""Private `central` trained with the noise distributed FedAvg's sums carried: issue 31's isolation run.

At hospital scale distributed FedAvg trails the pooled private `central` at the same ε, and the
gap grows as ε falls. Both take 50 Adam steps at Poisson rate 0.1 over the same 7,000 patients
with C = 9; what differs is the noise in each released step. `central` adds Gaussian noise of
σ·C, σ from Opacus' exact analysis. A distributed round releases the ring sum of every surviving
site's Skellam share, each sized so that h − c honest shares alone carry the plan's z·C (z from
the looser Zhu–Wang subsampling bound), so all m survivors together carry z·C·√(m / (h − c)).

This script trains `central` at that released noise: for each ε it plans the distributed run as
the distributed sweep's cells did (`dp.distributed.run.plan_for` on configs/hospital-scale-
distributed.toml, the FedAvg step's length, 5 sites, every site surviving every round, as the
runs' logs show), sets `dp.noise_multiplier` to z·√(5 / (h − c)) and runs the sweep's `central`
cells on configs/hospital-scale.toml. If these cells land where distributed FedAvg did, the gap
to `central` is the noise, i.e. the accounting bound and the c = 1 design, and nothing else in the
federated path. Each cell's ledger accounts the Gaussian that ran (Opacus' RDP), so its spent ε
is far below the label ε of the distributed run it imitates: the cells say so in their privacy
record, and the JSON below lists it.

    .venv/bin/python benchmarks/central_at_distributed_noise.py --plan-only      # σ per ε, seconds
    .venv/bin/python benchmarks/central_at_distributed_noise.py --epsilons 1,8 \\
        -o runs/central-at-distributed-noise                       # ~12 min a cell, resumable
    .venv/bin/python benchmarks/central_at_distributed_noise.py --keep --write   # the docs' JSON

Option (c) of docs/experiments/bench-distributed-dp.md at hospital scale is the same comparison
at a smaller Poisson rate over the same five passes, run with the CLI (`secure-fed-lab sweep ... --set
dp.sample_rate=0.02`, the commands in docs/experiments/hospital-sampling-rate.md): --keep-rates
commits its two sweep folders, --write-rates renders docs/results/hospital-sampling-rate.json from
them and the recipe's kept sweeps, with the noise each mode released at each rate.

Cells go to OUT/eps{ε}, one sweep folder per σ (a folder holds one config). --keep commits each
folder's cells as docs/results/sweeps/central-at-distributed-noise-eps{ε}.json; --write renders
docs/results/hospital-central-at-distributed-noise.json from the kept records (these cells', the
distributed sweep's and private `central`'s), which tests/test_central_at_distributed_noise.py
recomputes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTED_CONFIG = ROOT / "configs" / "hospital-scale-distributed.toml"
CENTRAL_CONFIG = ROOT / "configs" / "hospital-scale.toml"
# the recipe the kept cells ran, set here since benchmarks/dp_tune.py chose the configs' own
RECIPE: dict[str, Any] = {
    "dp.sample_rate": 0.1,
    "dp.max_grad_norm": 9.0,
    "train.lr": 1e-3,
    "train.average": "none",
}
DISTRIBUTED_RECIPE: dict[str, Any] = {**RECIPE, "fed.rounds": 50}
CENTRAL_RECIPE: dict[str, Any] = {**RECIPE, "fed.rounds": 5, "dp.accountant": "rdp"}
KEPT = ROOT / "docs" / "results" / "sweeps"
TABLE = ROOT / "docs" / "results" / "hospital-central-at-distributed-noise.json"
NAME = "central-at-distributed-noise"
SITES = 5  # every round of the distributed cells had all five (their reports' secagg_rounds)
# FedAvg's private step at hospital scale: the tiny base's trainable adapters (the distributed
# cells' logged plans say dim 67976); `released_noise` checks the model it builds against it
DIM = 67976
# the kept records the table sets these cells against
DISTRIBUTED_RECORD = "results-hospital-distributed"
CENTRAL_RECORD = "results-hospital-central"
METRICS = ("CIDEr", "CE-F1")
# option (c) (docs/experiments/bench-distributed-dp.md): the same five passes at a smaller
# Poisson rate (250 one-step rounds, 250 pooled steps), each mode's kept sweep per rate; the
# recipe's rate first
RATES_TABLE = ROOT / "docs" / "results" / "hospital-sampling-rate.json"
RATE_RECORDS = {
    0.1: (DISTRIBUTED_RECORD, CENTRAL_RECORD),
    0.02: ("results-hospital-distributed-q002", "results-hospital-central-q002"),
}


# The kept distributed sweeps were planned before the symmetric bound (dp/distributed/), with Zhu &
# Wang's general one: the noise their sums carried is what that plan gives.
KEPT_AMPLIFICATION = "general"


def plan_noise(epsilon: float, dim: int = DIM, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The distributed FedAvg run's plan at `epsilon` (as its cells planned it, with `overrides`
    over the config, e.g. another Poisson rate) and the noise its 5-site sum carried, over C, beside
    the σ a pooled curator's Gaussian needs at that ε."""
    from secure_fed.config import load_config
    from secure_fed.dp.distributed.run import plan_for, site_mode_sigma

    cfg = load_config(
        DISTRIBUTED_CONFIG,
        {
            **DISTRIBUTED_RECIPE,
            "dp.enabled": True,
            "dp.target_epsilon": epsilon,
            "dp.amplification": KEPT_AMPLIFICATION,
            "fed.method": "fedavg",
            **(overrides or {}),
        },
    )
    plan = plan_for(cfg, dim, SITES)
    shares = plan.honest_min - plan.colluders
    z = plan.noise_std / plan.clip
    return {
        "epsilon": epsilon,
        "dim": dim,
        "honest_min": plan.honest_min,
        "colluders": plan.colluders,
        "plan_multiplier": z,
        "released_multiplier": z * math.sqrt(SITES / shares),
        "central_sigma": site_mode_sigma(cfg),
    }


def _model_dim() -> int:
    from secure_fed.config import load_config
    from secure_fed.model.setup import build_report_model

    model = build_report_model(load_config(DISTRIBUTED_CONFIG, DISTRIBUTED_RECIPE))
    return int(sum(t.numel() for t in model.trainable_state().values()))


def run(epsilons: list[float], seeds: list[int], out: Path) -> None:
    from secure_fed.config import load_config
    from secure_fed.lab.sweep import sweep
    from secure_fed.launch.console import quiet_frameworks

    quiet_frameworks()  # the sweep's console, as `secure-fed-lab sweep` shows it
    if (dim := _model_dim()) != DIM:
        raise SystemExit(f"the model's FedAvg step has {dim} coordinates, not {DIM}: update DIM")
    for epsilon in epsilons:
        sigma = plan_noise(epsilon)["released_multiplier"]
        base = load_config(
            CENTRAL_CONFIG, {**CENTRAL_RECIPE, "dp.noise_multiplier": sigma, "fed.engine": "inprocess"}
        )
        sweep(base, ["central"], seeds, [epsilon], out / f"eps{epsilon:g}")


def _keep(folder: Path, name: str) -> Path:
    """A sweep folder's cells as the kept record docs/results/sweeps/NAME.json."""
    from secure_fed.lab.records import kept

    path = KEPT / f"{name}.json"
    path.write_text(json.dumps(kept(folder), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def keep(out: Path) -> list[Path]:
    """Each OUT/eps* folder's cells as docs/results/sweeps/central-at-distributed-noise-eps*.json."""
    return [_keep(folder, f"{NAME}-{folder.name}") for folder in sorted(out.glob("eps*"))]


def _record(name: str) -> dict[str, Any]:
    return dict(json.loads((KEPT / f"{name}.json").read_text(encoding="utf-8")))


def _runs(name: str) -> list[dict[str, Any]]:
    return list(_record(name)["runs"])


def _shown(mean: float, ci: tuple[float, float] | None, signed: bool = False) -> str:
    form = "{:+.3f}" if signed else "{:.3f}"
    interval = "" if ci is None else f" [{form.format(ci[0])}, {form.format(ci[1])}]"
    return form.format(mean) + interval


def table(plans: dict[float, dict[str, Any]], commit: str, date: str) -> dict[str, Any]:
    """The docs table from the kept records: per ε, the noise each way and what it trained."""
    from secure_fed.lab import statistics as lab_stats

    mine = [r for path in sorted(KEPT.glob(f"{NAME}-eps*.json")) for r in _runs(path.stem)]
    central = [r for r in _runs(CENTRAL_RECORD) if r["method"] == "central"]
    distributed = [r for r in _runs(DISTRIBUTED_RECORD) if r["method"] == "fedavg"]
    at_noise = {row["epsilon"]: row for row in lab_stats.intervals(mine, METRICS)}
    vs_distributed = {
        row["epsilon"]: row
        for row in lab_stats.paired_between(distributed, mine, ("d", "c"), METRICS, "central")
    }
    vs_central = {row["epsilon"]: row for row in lab_stats.paired_between(mine, central, ("c", "p"), METRICS)}
    rows = []
    for epsilon in sorted(at_noise, reverse=True):
        cells = [r for r in mine if r["epsilon"] == epsilon]
        ran_sigma = {round(r["privacy"]["noise_multiplier"], 6) for r in cells}
        curator = {round(r["privacy"]["noise_multiplier"], 6) for r in central if r["epsilon"] == epsilon}
        spent = max(lab_stats._max_epsilon(r["privacy"]) or math.nan for r in cells)
        plan = plans[epsilon]
        (sigma,) = ran_sigma
        (curator_sigma,) = curator
        rows.append(
            [
                f"{epsilon:g}",
                f"{curator_sigma:.4f}",
                f"{plan['plan_multiplier']:.4f}",
                f"{sigma:.4f}",
                f"{sigma / curator_sigma:.2f}",
                f"{spent:.3f}",
                str(at_noise[epsilon]["n"]),
                *(_shown(*at_noise[epsilon][m]) for m in METRICS),
                *(_shown(*vs_distributed[epsilon][m], signed=True) for m in METRICS),
                *(_shown(*vs_central[epsilon][m], signed=True) for m in METRICS),
            ]
        )
    return {
        "title": "Hospital scale on the shipped base: private central trained with the noise distributed "
        "FedAvg's sums carried, against distributed FedAvg and against private central at the same ε "
        "(paired by seed, 95 % t intervals)",
        "source": {
            "command": "python benchmarks/central_at_distributed_noise.py --epsilons 1,8 -o "
            "runs/central-at-distributed-noise && python benchmarks/central_at_distributed_noise.py "
            "--epsilons 2,4 -o runs/central-at-distributed-noise && python "
            "benchmarks/central_at_distributed_noise.py --keep --write",
            "commit": commit,
            "date": date,
            "machine": "2-core machine (24 GiB), 1 torch thread per cell, two cells at a time (the two "
            "commands above side by side); base model f2154a8f26190d7a (the shipped tiny base)",
            "wall": None,
        },
        "columns": [
            "ε (distributed run)",
            "central σ (Opacus, at ε)",
            "distributed plan z (h − c shares)",
            "released σ (z·√(5/3)), trained here",
            "released / central",
            "ε spent here (RDP)",
            "n",
            *(f"{m} here [95 % CI]" for m in METRICS),
            *(f"Δ {m}: distributed − here" for m in METRICS),
            *(f"Δ {m}: here − central" for m in METRICS),
        ],
        "rows": rows,
        "notes": [
            "here: private central (DP-SGD on the 7,000 pooled patients, configs/hospital-scale.toml, "
            "50 steps at q = 0.1, C = 9) with dp.noise_multiplier set to the noise std over C that "
            "distributed FedAvg's released sum carried at that ε: its plan's z (the Skellam shares "
            "sized so that h − c = 3 honest sites carry it, accounted with Zhu & Wang's subsampling "
            "bound) times √(5/3), since all five sites added their share every round.",
            "ε spent here: the cells' own ledger (Opacus RDP of the Gaussian that ran, with the GMM "
            "histogram), far below the ε of the distributed run whose noise they carry: these cells "
            "are a control, not a private central at that ε.",
            "distributed: the kept FedAvg cells of results-hospital-distributed; central: the kept "
            "private central cells of results-hospital-central; every pair on the same seed (cohort, "
            "split and training seed).",
        ],
    }


def rates_table(commit: str, date: str) -> dict[str, Any]:
    """Option (c) from the kept sweeps: per rate and ε, the noise each mode released (over C, and
    over the expected batch it is averaged into) and what each trained, paired by seed against
    private central at that rate and at the recipe's."""
    from secure_fed.lab import statistics as lab_stats

    records = {name: _record(name) for pair in RATE_RECORDS.values() for name in pair}
    recipe_central = [r for r in records[CENTRAL_RECORD]["runs"] if r["method"] == "central"]
    small = records[RATE_RECORDS[0.02][0]]["runs"]
    wall = sum(r["wall_s"] for name in RATE_RECORDS[0.02] for r in records[name]["runs"])
    epsilons = sorted({r["epsilon"] for r in small}, reverse=True)
    rows = []
    for rate, (distributed_name, central_name) in RATE_RECORDS.items():
        record = records[distributed_name]
        steps, ran_rate = record["config"]["fed"]["rounds"], record["config"]["dp"]["sample_rate"]
        if ran_rate != rate:
            raise ValueError(f"{distributed_name}: ran at q = {ran_rate}, not {rate}")
        distributed = [r for r in record["runs"] if r["method"] == "fedavg"]
        central = [r for r in records[central_name]["runs"] if r["method"] == "central"]
        shown = {
            "distributed": {row["epsilon"]: row for row in lab_stats.intervals(distributed, METRICS)},
            "central": {row["epsilon"]: row for row in lab_stats.intervals(central, METRICS)},
            "vs own": {
                row["epsilon"]: row
                for row in lab_stats.paired_between(distributed, central, ("d", "c"), METRICS, "central")
            },
            "vs recipe": {
                row["epsilon"]: row
                for row in lab_stats.paired_between(
                    distributed, recipe_central, ("d", "c"), METRICS, "central"
                )
            },
        }
        for epsilon in epsilons:
            cells = [r["privacy"] for r in central if r["epsilon"] == epsilon]
            ((sigma, batch, pooled_steps),) = {
                (round(c["noise_multiplier"], 6), c["expected_batch"], c["steps"]) for c in cells
            }
            if pooled_steps != steps:
                raise ValueError(f"{central_name}: {pooled_steps} pooled steps, distributed ran {steps}")
            released = plan_noise(epsilon, overrides={"dp.sample_rate": rate, "fed.rounds": steps})
            z = released["released_multiplier"]
            rows.append(
                [
                    f"q = {rate:g}, ε = {epsilon:g}",
                    str(steps),
                    f"{sigma:.4f}",
                    f"{z:.4f}",
                    f"{z / sigma:.2f}",
                    f"{sigma / batch:.4f}",
                    f"{z / batch:.4f}",
                    str(shown["distributed"][epsilon]["n"]),
                    *(
                        _shown(*shown[kind][epsilon][m], signed=kind.startswith("vs"))
                        for m in METRICS
                        for kind in ("distributed", "central", "vs own", "vs recipe")
                    ),
                ]
            )
    return {
        "title": "Hospital scale on the shipped base: distributed FedAvg and private central at the recipe's "
        "Poisson rate and at a smaller one over the same five passes (BENCHMARKS option (c)); mean "
        "and 95 % t interval over seeds, differences paired by seed",
        "source": {
            "command": "secure-fed-lab sweep --config configs/hospital-scale-distributed.toml --set "
            "dp.sample_rate=0.02 --rounds 250 --methods fedavg --seeds 0,1,2 --epsilons 1 -o "
            "runs/results-hospital-distributed-q002 && secure-fed-lab sweep --config "
            "configs/hospital-scale-distributed.toml --set dp.sample_rate=0.02 --rounds 250 --methods "
            "fedavg --seeds 0,1,2 --epsilons 2 -o runs/results-hospital-distributed-q002 && secure-fed-lab "
            "sweep --config configs/hospital-scale.toml --set dp.sample_rate=0.02 --methods central "
            "--seeds 0,1,2 --epsilons 1 -o runs/results-hospital-central-q002 && secure-fed-lab sweep "
            "--config configs/hospital-scale.toml --set dp.sample_rate=0.02 --methods central --seeds "
            "0,1,2 --epsilons 2 -o runs/results-hospital-central-q002 && python "
            "benchmarks/central_at_distributed_noise.py --keep-rates --write-rates",
            "commit": commit,
            "date": date,
            "machine": "2-core machine (24 GiB), 1 torch thread per cell, the two sweeps of each ε side by "
            "side; base model f2154a8f26190d7a (the shipped tiny base)",
            "wall": f"{wall / 60:.1f} min (the q = 0.02 cells, each its own time, two at a time)",
        },
        "columns": [
            "setting",
            "private steps",
            "central σ",
            "distributed released σ",
            "released / central",
            "central σ / expected batch",
            "distributed σ / expected batch",
            "n",
            *(
                f"{m}: {kind}"
                for m in METRICS
                for kind in (
                    "distributed FedAvg [95 % CI]",
                    "private central [95 % CI]",
                    "Δ distributed − central, same q",
                    "Δ distributed − central at q = 0.1",
                )
            ),
        ],
        "rows": rows,
        "notes": [
            "Both rates make the same five passes over the 7,000 training patients: 50 steps at q = 0.1 "
            "(the recipe, configs/hospital-scale*.toml), 250 at q = 0.02 (--set dp.sample_rate=0.02; "
            "the distributed sweep --rounds 250, one private step a round). C = 9, δ = 1e-5, Adam at the "
            "same learning rate; nothing else changed.",
            "central σ: the pooled cells' noise multiplier (Opacus, exact sampled-Gaussian analysis). "
            "distributed released σ: the distributed plan's z (Zhu & Wang's subsampling bound, shares "
            "sized for h − c = 3 honest sites) times √(5/3), five sites adding a share every round. "
            "σ / expected batch: the noise std, over C, per coordinate of the averaged step (expected "
            "batch q × 7,000 patients).",
            "Δ … same q: paired by seed against private central run at that rate; at q = 0.1: against "
            "private central at the recipe's rate (the kept results-hospital-central), the comparison "
            "issue 31's goal names.",
            "The q = 0.02 cells ran on 2026-12-04, two sweeps side by side: distributed ε = 1 from 15:33 "
            "UTC and ε = 2 from 16:10, central ε = 1 from 15:47 and ε = 2 from 16:20, each sweep "
            "importing a commit from 104ce8c to 63fa4af (between them only tools, tests and the "
            "sweep's console line changed). The q = 0.1 rows are the recipe's kept sweeps.",
        ],
    }


def keep_rates() -> list[Path]:
    """The smaller rate's sweep folders as kept records (docs/results/sweeps/NAME.json)."""
    return [_keep(ROOT / "runs" / name, name) for name in RATE_RECORDS[0.02]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epsilons", default="8,4,2,1")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("-o", "--out", type=Path, default=Path("runs") / NAME)
    parser.add_argument("--plan-only", action="store_true", help="print the σ per ε and run nothing")
    parser.add_argument("--keep", action="store_true", help="commit OUT/eps*'s cells (docs/results/sweeps/)")
    parser.add_argument("--write", action="store_true", help="render the docs table from the kept records")
    parser.add_argument(
        "--keep-rates", action="store_true", help="commit runs/" + ",".join(RATE_RECORDS[0.02]) + "'s cells"
    )
    parser.add_argument(
        "--write-rates", action="store_true", help="render the sampling-rate table from the kept records"
    )
    args = parser.parse_args(argv)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    plans = {e: plan_noise(e) for e in epsilons}
    print(json.dumps({"plans": list(plans.values())}, indent=1))
    if args.plan_only:
        return 0
    if not (args.keep or args.write or args.keep_rates or args.write_rates):
        run(epsilons, [int(s) for s in args.seeds.split(",")], args.out)
    kept = (keep(args.out) if args.keep else []) + (keep_rates() if args.keep_rates else [])
    for path in kept:
        print(f"kept {path.relative_to(ROOT)}", file=sys.stderr)
    if not (args.write or args.write_rates):
        return 0
    sys.path.insert(0, str(ROOT / "tools"))
    from doc_tables import dump_table, git_head

    today = dt.date.today().isoformat()
    for wanted, path, render in (
        (args.write, TABLE, lambda: table(plans, git_head(short=True), today)),
        (args.write_rates, RATES_TABLE, lambda: rates_table(git_head(short=True), today)),
    ):
        if wanted:
            path.write_text(dump_table(render()), encoding="utf-8")
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
