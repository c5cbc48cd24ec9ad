"""Noise in the released sum, distributed DP against site mode at the same (ε, δ, q, steps, C); prints JSON.

Both modes are calibrated to the same target: site mode gives every site the Gaussian σ that
Opacus' RDP accountant calibrates (`dp.calibration.calibrate_noise`), and each of the h sites adds
N(0, (σC)²) per coordinate to its sum (drawn as DP-SGD draws it, from a NoiseStream); distributed
mode plans the Skellam shares (`dp.distributed.plan_distributed`, honest_min = h, c colluders) and
each of the h sites encodes its vector with `encode_share`. The released sums are formed (the
float sum, or the ring sum decoded by `decode_sum`) from real random vectors, and the noise std per
coordinate is measured as the std of (released − true sum) over the d coordinates: measured, not
computed from the plan. For each h the JSON gives the ratio distributed/site and whether it is
≤ 1/√h (the issue's goal), with c = 0 and c = 1 (the default threat model: one colluding site,
whose share is not counted on, so each share is mu_total/(h − 1)).

Accounting ("accounting" in the JSON: pure math, seconds): where the gap to 1/√h comes from. For
the benchmark's point and for the hospital-scale recipe (configs/hospital-scale.toml: q = 0.1,
δ = 1e-5, C = 9, 5 sites, run here as 50 distributed rounds, one step each, with its GMM histogram
at dp.gmm_fraction of ε) at ε ∈ {1, 2, 4, 8}, and its 5 passes at q = 0.05, 0.02, 0.01 (5/q
steps) at ε ∈ {1, 2}: site mode's Gaussian σ (Opacus' sampled-Gaussian RDP; for the hospital rows
the one `dp.distributed.run.site_mode_sigma` gives, the figure the run's warning uses) and the
Skellam plan's released std over C from h − c honest shares under each Poisson-subsampling bound
(`dp.amplification`): "symmetric", what plans use, and "general" (Zhu & Wang 2019, Thm. 6), what
runs before the symmetric bound used. The penalty is the symmetric plan over σ (the Skellam
correction, the rounding and integer orders); the released-noise ratio distributed / site for 5
sites at the config defaults (h = 5 − c, c = 1) is `dp.distributed.run.compare_noise`'s
z / (σ·√(h − c)). --quick computes the hospital's ε = 1 only.

Time (d coordinates, medians of interleaved repeats): `encode_share` (rotation + rounding + noise,
with its parts timed alone) against site mode's noise addition (Gaussian draws from a NoiseStream,
scaled and added to the sum). This compares the noise stages only; the whole private step
(per-patient gradients, clipping, the secure sum) is common to both modes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np
from _noise_sums import median_ms, site_vectors  # benchmarks/ is on sys.path as a script

from secure_fed.config import load_config
from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.calibration import calibrate_noise
from secure_fed.dp.distributed import (
    DistributedPlan,
    decode_sum,
    distributed_epsilon,
    encode_share,
    plan_distributed,
    rotate,
)
from secure_fed.dp.distributed.run import compare_noise, delta, histogram_sigma, honest_min, plan_for
from secure_fed.dp.histogram import histogram_event
from secure_fed.dp.keystream import NoiseStream

SEED = bytes(range(32))
HOSPITAL_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "hospital-scale.toml"
HOSPITAL_SITES = 5
HOSPITAL_STEPS = 50  # the recipe's 50 DP steps (5 passes at q = 0.1), one a distributed round
# the recipe these rows measure, set here since benchmarks/dp_tune.py chose the config's own
HOSPITAL_RECIPE: dict[str, Any] = {"dp.sample_rate": 0.1, "dp.max_grad_norm": 9.0, "dp.accountant": "rdp"}
HOSPITAL_EPSILONS = (1.0, 2.0, 4.0, 8.0)
# option (c), smaller q: the recipe's 5 passes over the patients at other Poisson rates (5/q steps),
# at the ε where the recipe's own rate loses
HOSPITAL_OTHER_RATES = ((0.05, 100), (0.02, 250), (0.01, 500))
HOSPITAL_OTHER_EPSILONS = (1.0, 2.0)


def _site_mode_std(vectors: list[np.ndarray], std: float) -> float:
    released = np.zeros_like(vectors[0])
    for v in vectors:
        stream = NoiseStream(os.urandom(32))
        released += v + std * stream.torch_standard_normal(v.size).numpy()
    return float((released - sum(vectors)).std())


def _distributed_std(vectors: list[np.ndarray], plan: DistributedPlan) -> float:
    total = np.zeros(plan.padded_dim, dtype=np.uint64)
    for v in vectors:
        total += encode_share(v, plan, SEED, NoiseStream(os.urandom(32)))
    total &= np.uint64((1 << plan.bits) - 1)
    released = decode_sum(total, plan, SEED)
    return float((released - sum(vectors)).std())


def _plan(
    args: argparse.Namespace,
    *,
    honest_min: int,
    colluders: int,
    max_sites: int,
    amplification: str = "symmetric",
) -> DistributedPlan:
    """The benchmark's plan at its (ε, δ, q, steps, C, d, bits): h, c, the ring's site count and the
    subsampling bound vary."""
    return plan_distributed(
        target_epsilon=args.epsilon,
        delta=args.delta,
        sample_rate=args.sample_rate,
        steps=args.steps,
        clip=args.clip,
        dim=args.dim,
        honest_min=honest_min,
        colluders=colluders,
        bits=args.bits,
        max_sites=max_sites,
        site_bound=args.site_norm,
        amplification=amplification,
    )


def _accounting_row(
    label: str, sigma: float, symmetric: float, general: float, h: int, c: int, **extra: Any
) -> dict[str, Any]:
    honest = math.sqrt(h - c)
    ratio = symmetric / (honest * sigma)
    return {
        "setting": label,
        "site_sigma_exact": sigma,
        "skellam_plan": symmetric,
        "skellam_plan_general": general,
        "penalty": symmetric / sigma,
        "penalty_general": general / sigma,
        "h": h,
        "c": c,
        "ratio": ratio,
        "ratio_general": general / (honest * sigma),
        "goal_ratio": 1 / math.sqrt(h),
        "honest_ratio": 1 / honest,
        "distributed_releases_less": ratio < 1.0,
        **extra,
    }


def accounting(args: argparse.Namespace, sigma: float) -> list[dict[str, Any]]:
    """The second table: site mode's σ, the Skellam plan under each bound, penalty, released ratio."""
    c = 1
    h = HOSPITAL_SITES - c
    plans = {
        bound: _plan(args, honest_min=h, colluders=c, max_sites=HOSPITAL_SITES, amplification=bound)
        for bound in ("symmetric", "general")
    }
    rows = [
        _accounting_row(
            f"benchmark: ε = {args.epsilon:g}, q = {args.sample_rate:g}, {args.steps} steps",
            sigma,
            plans["symmetric"].noise_std / args.clip,
            plans["general"].noise_std / args.clip,
            h,
            c,
            epsilon=args.epsilon,
            sample_rate=args.sample_rate,
            steps=args.steps,
            histogram=False,
            epsilon_accounted=distributed_epsilon(
                plans["symmetric"], args.sample_rate, args.steps, args.delta
            ),
        )
    ]
    cells = [(epsilon, None, HOSPITAL_STEPS) for epsilon in HOSPITAL_EPSILONS]
    cells += [(e, q, n) for q, n in HOSPITAL_OTHER_RATES for e in HOSPITAL_OTHER_EPSILONS]
    if args.quick:  # a smoke run: one hospital plan is enough to exercise the path
        cells = cells[:1]
    for epsilon, rate, steps in cells:
        overrides: dict[str, Any] = {
            **HOSPITAL_RECIPE,
            "dp.enabled": True,
            "dp.noise": "distributed",
            "dp.target_epsilon": epsilon,
            "fed.method": "fedavg",
            "fed.rounds": steps,
        }
        if rate is not None:
            overrides["dp.sample_rate"] = rate
        cfg = load_config(HOSPITAL_CONFIG, overrides)
        run_plan = plan_for(cfg, args.dim, HOSPITAL_SITES)
        general = plan_for(
            load_config(HOSPITAL_CONFIG, {**overrides, "dp.amplification": "general"}),
            args.dim,
            HOSPITAL_SITES,
        )
        found = compare_noise(cfg, run_plan)
        q = cfg.dp.sample_rate
        rows.append(
            _accounting_row(
                f"hospital: ε = {epsilon:g}, q = {q:g}, {cfg.fed.rounds} steps",
                found.site_sigma,
                found.distributed_multiplier,
                general.noise_std / general.clip,
                honest_min(cfg, HOSPITAL_SITES),
                cfg.dp.colluders,
                epsilon=epsilon,
                sample_rate=q,
                steps=cfg.fed.rounds,
                histogram=True,
                gmm_fraction=cfg.dp.gmm_fraction,
                clip=cfg.dp.max_grad_norm,
                amplification=run_plan.amplification,
                # the ledger's ε of the histogram and the rounds together: the target, as planned
                epsilon_accounted=epsilon_rdp(
                    [histogram_event(histogram_sigma(cfg)), run_plan.event(q, cfg.fed.rounds)], delta(cfg)
                ),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--sample-rate", type=float, default=0.02)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--bits", type=int, default=32)
    parser.add_argument("--dim", type=int, default=68_000, help="coordinates (the timing's d)")
    parser.add_argument("--sites", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--site-norm", type=float, default=4.0, help="norm of each site's test vector")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="smoke run: d = 4096, h = 3, 3 repeats")
    args = parser.parse_args()
    if args.quick:
        args.dim, args.sites, args.repeats = 4096, [3], 3
    rng = np.random.default_rng(0)
    sigma = calibrate_noise(args.epsilon, args.delta, args.sample_rate, args.steps, tolerance=1e-4)
    site_std_each = sigma * args.clip
    rows = []
    for h in args.sites:
        vectors = site_vectors(h, args.dim, args.site_norm, rng)
        site = _site_mode_std(vectors, site_std_each)
        row: dict[str, Any] = {
            "h": h,
            "site_mode_std": site,
            "site_mode_std_expected": math.sqrt(h) * site_std_each,
            "goal_ratio": 1 / math.sqrt(h),
        }
        for colluders in (0, 1):
            plan = _plan(args, honest_min=h, colluders=colluders, max_sites=h)
            measured = _distributed_std(vectors, plan)
            row[f"c{colluders}"] = {
                "std": measured,
                "std_expected": plan.gamma * math.sqrt(h * plan.share_mu),
                "honest_floor_std": plan.noise_std,
                "ratio": measured / site,
                "ratio_le_goal": measured / site <= 1 / math.sqrt(h),
                # shares sized for h − c honest sites: the floor even at the exact accounting
                "honest_goal_ratio": 1 / math.sqrt(h - colluders),
                # the plan's own ratio, free of the measurement's sampling error
                "ratio_expected": plan.gamma * math.sqrt(h * plan.share_mu) / (math.sqrt(h) * site_std_each),
                "amplification": plan.amplification,
                "epsilon": distributed_epsilon(plan, args.sample_rate, args.steps, args.delta),
                "skellam_noise_multiplier": math.sqrt(plan.mu_total) / plan.l2_sensitivity,
                "rounding_inflation": plan.inflation,
                "gamma": plan.gamma,
                "wrap_bound_sites": plan.wrap_bound_sites,
            }
        rows.append(row)

    # timing at d coordinates: distributed encoding vs site mode's noise addition
    timing_plan = _plan(args, honest_min=3, colluders=1, max_sites=50)
    vector = site_vectors(1, args.dim, args.site_norm, rng)[0]
    # fixed key: the benchmark times the draws, it releases nothing
    generator = NoiseStream(bytes(32)).cipher_generator()

    def site_noise() -> np.ndarray:
        stream = NoiseStream(os.urandom(32))
        return vector + site_std_each * stream.torch_standard_normal(args.dim).numpy()

    def encode() -> np.ndarray:
        return encode_share(vector, timing_plan, SEED, NoiseStream(bytes(32)))

    def rotation() -> np.ndarray:
        return rotate(vector / timing_plan.gamma, SEED, timing_plan.padded_dim)

    def rounding() -> np.ndarray:
        return np.floor(generator.random(timing_plan.padded_dim) + vector[0])

    def skellam() -> np.ndarray:
        half = timing_plan.share_mu / 2
        return generator.poisson(half, timing_plan.padded_dim) - generator.poisson(
            half, timing_plan.padded_dim
        )

    parts = {"site_noise": site_noise, "encode_share": encode, "rotation": rotation}
    parts |= {"rounding": rounding, "skellam_noise": skellam}
    for fn in parts.values():
        fn()  # warm-up
    timings: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(args.repeats):
        for name, fn in parts.items():  # interleaved: background load hits all alike
            timings[name].append(median_ms(fn, 1))
    ms = {name: statistics.median(values) for name, values in timings.items()}
    print(
        json.dumps(
            {
                "target": {
                    "epsilon": args.epsilon,
                    "delta": args.delta,
                    "sample_rate": args.sample_rate,
                    "steps": args.steps,
                    "clip": args.clip,
                },
                "site_mode_sigma": sigma,
                "bits": args.bits,
                "dim": args.dim,
                "padded_dim": timing_plan.padded_dim,
                "noise": rows,
                "accounting": accounting(args, sigma),
                "accounting_dim": args.dim,
                "timing_ms": ms,
                "timing_dim": args.dim,
                "encode_over_site_noise": ms["encode_share"] / ms["site_noise"],
                "repeats": args.repeats,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
