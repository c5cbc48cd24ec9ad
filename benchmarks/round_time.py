"""In-process FedTAR round time vs number of sites and T (tiny preset); prints JSON.

Each (sites, T) cell is `--repeats` `secure_fed.launch.runner.run_inprocess` runs of `--rounds` rounds
(default one) on a small synthetic cohort. The time reported is the orchestrator's own per-round
"seconds" in metrics.json (the strategy's round: every site's local training of its T copies, the
secure sum, the α hypergradient phase and the temporal aggregation), so setup — cohort synthesis,
base-model pretraining (cached), GMM fitting — and the final test evaluation are left out. All
sites run one after another in this process: a round's time is the sum of the sites' work, not a
deployment's wall clock, where sites train in parallel.

`--secagg` adds the same round with SecAgg+ and no DP (the secure sum's cost inside a real round),
`--private` DP-SGD with SecAgg+, `--he` SecAgg+ with the α scalars under CKKS (masked, signed
keys from one `keys init` folder per site count), `--hardened` all three (DP-SGD, SecAgg+, CKKS);
all need at least 3 sites. A cell's modes run interleaved, run by run.
Every mode does the same training work, so a ratio between two modes is the mechanisms' cost: the
DP round samples patients Poisson at rate q (`--sample-rate`), ceil(1/q) steps an epoch of q·n
patients in expectation (n: a site's training patients), and the non-private rounds take shuffled
batches of exactly q·n patients, n / (q·n) = ceil(1/q) steps an epoch: the same optimizer steps on
the same rows, batch by batch the DP round's expected batch. The benchmark refuses a --patients and
--sample-rate whose q·n is not a whole batch that divides n into ceil(1/q) steps (the default 16
patients, 8 of them training, at q = 0.25: 4 steps of 2 patients an epoch in every mode).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from secure_fed.config import RunConfig, build_config
from secure_fed.crypto.keys import init_keys
from secure_fed.data.cohort import _split_sizes
from secure_fed.launch.runner import run_inprocess

VAL_FRACTION = TEST_FRACTION = 0.25


def training_schedule(patients: int, sample_rate: float) -> dict[str, Any]:
    """The training work every mode does: a DP epoch is ceil(1/q) Poisson steps of q·n patients in
    expectation; a non-private epoch is n / batch shuffled steps of `batch` = q·n patients."""
    n_val, n_test = _split_sizes(patients, VAL_FRACTION, TEST_FRACTION)
    n_train = patients - n_val - n_test
    steps = math.ceil(1.0 / sample_rate)
    batch = sample_rate * n_train
    if abs(batch - round(batch)) > 1e-9 or round(batch) < 1 or n_train != steps * round(batch):
        raise SystemExit(
            f"--patients {patients} (n = {n_train} training patients a site) at --sample-rate "
            f"{sample_rate}: the DP round's expected batch q·n = {batch:g} must be a whole number of "
            f"patients that splits n into ceil(1/q) = {steps} batches, so the plain round can take the "
            "same steps on the same rows (e.g. 16 patients at 0.25)"
        )
    return {
        "train_patients_per_site": n_train,
        "sample_rate": sample_rate,
        "batch_patients": round(batch),
        "steps_per_epoch": steps,
    }


def make_config(sites: int, t: int, args: argparse.Namespace, mode: str, out: Path) -> RunConfig:
    schedule = training_schedule(args.patients, args.sample_rate)
    data: dict[str, Any] = {
        "seed": 0,
        "out": str(out),
        "data": {
            "synth": {"sites": sites, "patients": args.patients, "visits": t},
            "max_visits": t,
            "val_fraction": VAL_FRACTION,
            "test_fraction": TEST_FRACTION,
        },
        "model": {"preset": "tiny", "cache_dir": str(args.cache), "pretrain_steps": args.pretrain_steps},
        # the non-private rounds' batch is the DP round's expected batch: the same steps, the same rows
        "train": {"batch_size": schedule["batch_patients"]},
        "fed": {"method": "fedtar", "rounds": args.rounds, "engine": "inprocess", "min_sites": 2},
        # the audit trail signs and writes every event; it is part of a real round, so it stays on
        "audit": {"enabled": True},
    }
    if mode in ("dp", "dp_he"):
        data["dp"] = {"enabled": True, "target_epsilon": 8.0, "sample_rate": args.sample_rate}
    data["secagg"] = {"enabled": mode in ("dp", "dp_he", "secagg", "secagg_he")}
    if mode in ("secagg_he", "dp_he"):  # the sites' signing keys sign their α mask keys: one kit for all
        keys = Path(args.cache) / f"keys-{sites}"
        if not (keys / "fingerprints.json").exists():
            init_keys(keys, ["server", *[f"site{i}" for i in range(sites)]])
        data["he"] = {"enabled": True, "keys_dir": str(keys)}
        data["audit"]["keys_dir"] = str(keys)
    return build_config(data)


def run_once(
    sites: int, t: int, args: argparse.Namespace, mode: str, out: Path
) -> tuple[list[float], float, str]:
    """One run: its rounds' seconds, its whole wall time and its aggregation's name."""
    cfg = make_config(sites, t, args, mode, out)
    start = time.perf_counter()
    outcome = run_inprocess(cfg, out)
    total = time.perf_counter() - start
    metrics = json.loads((out / "metrics.json").read_text())
    if metrics["he"] != cfg.he.enabled:
        raise RuntimeError(f"{mode}: the run's CKKS setting did not take")
    if len(metrics["per_round"]) != args.rounds or outcome.stopped_early:
        raise RuntimeError(f"run stopped early: {outcome.stopped_early}")
    return [float(row["seconds"]) for row in metrics["per_round"]], total, metrics["secure_aggregation"]


def cell_rows(
    sites: int, t: int, args: argparse.Namespace, modes: list[str], root: Path, repeats: int
) -> list[dict[str, Any]]:
    """Every mode's runs of one (sites, T) cell, interleaved run by run (plain, then each hardened
    mode, then plain again...), so that a machine's load drifts over all modes alike."""
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    totals: dict[str, list[float]] = {m: [] for m in modes}
    aggregation: dict[str, str] = {}
    for rep in range(repeats):
        for mode in modes:
            rounds, total, aggregation[mode] = run_once(
                sites, t, args, mode, root / f"{mode}-s{sites}-t{t}-{rep}"
            )
            seconds[mode] += rounds
            totals[mode].append(total)
    return [
        {
            "sites": sites,
            "T": t,
            "private": mode in ("dp", "dp_he"),
            "mode": mode,
            "aggregation": aggregation[mode],
            "round_s": seconds[mode],
            "round_s_median": statistics.median(seconds[mode]),
            "round_s_per_site": statistics.median(seconds[mode]) / sites,
            "run_s_including_setup_and_evaluation_median": statistics.median(totals[mode]),
        }
        for mode in modes
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sites", type=int, nargs="+", default=[2, 3, 5])
    parser.add_argument("--T", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--patients", type=int, default=16, help="patients per site")
    parser.add_argument("--rounds", type=int, default=1, help="fed.rounds of each run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (median reported)")
    parser.add_argument(
        "--sample-rate",
        type=float,
        default=0.25,
        help="q: the DP round's Poisson rate; every mode trains ceil(1/q) steps of q·n patients an epoch",
    )
    parser.add_argument("--pretrain-steps", type=int, default=50)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)"
    )
    parser.add_argument("--private", action="store_true", help="also run DP-SGD + SecAgg+ (sites >= 3)")
    parser.add_argument("--secagg", action="store_true", help="also run SecAgg+ without DP (sites >= 3)")
    parser.add_argument("--he", action="store_true", help="also run SecAgg+ + CKKS α, no DP (sites >= 3)")
    parser.add_argument(
        "--hardened",
        action="store_true",
        help="also run DP-SGD + SecAgg+ + CKKS α, every mechanism (sites >= 3)",
    )
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "secure_fed_bench_cache")
    parser.add_argument("--quick", action="store_true", help="sites 2 and 3, T = 3 only")
    args = parser.parse_args()
    if args.quick:
        args.sites, args.T, args.repeats = [2, 3], [3], 1
    schedule = training_schedule(args.patients, args.sample_rate)
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # a first run pays one-off costs (lazy imports, first-call dispatch, cohort synthesis and
        # base pretraining into the cache): run the smallest cell once and discard it
        run_once(min(args.sites), min(args.T), args, "plain", Path(tmp) / "warmup")
        modes = (
            ["plain"]
            + ["secagg"] * args.secagg
            + ["secagg_he"] * args.he
            + ["dp"] * args.private
            + ["dp_he"] * args.hardened
        )
        for t in args.T:
            for sites in args.sites:
                cell_modes = [m for m in modes if m == "plain" or sites >= 3]
                rows += cell_rows(sites, t, args, cell_modes, Path(tmp), args.repeats)
    print(
        json.dumps(
            {
                "preset": "tiny",
                "patients_per_site": args.patients,
                "rounds": args.rounds,
                "repeats": args.repeats,
                "torch_threads": args.threads,
                "training": schedule,
                "results": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
