"""Released noise of distributed DP with shares sized for the confirmed survivors, over the curator's σ,
at the hospital settings; prints JSON.

The plan is the hospital-scale distributed run's own (configs/hospital-scale-distributed.toml: ε = 8,
δ = 1e-5, q = 0.05, 200 rounds of one step, C = 8, the symmetric RDP bound, 5 sites, c = 1 so
h = 4), at d coordinates. The curator's σ is the pooled DP-SGD σ at the same (ε, δ, q, steps), with
the same GMM-histogram share of ε, calibrated with the PRV accountant (the hospital recipe's: issue
64's reference) and with RDP (the accountant the Skellam plan has), both by
`dp.distributed.run`'s own calibration (`_site_sigma`, tolerance 1e-4).

Each case encodes real random vectors at the sites with `encode_share` (shares sized for h − c
honest sites, as before) or `encode_layered_share` (the same share in layers), sums them in the
ring, takes out the layers the survivors reveal (`remove_layers`, each site's for the survivor count
it confirmed: `layers_for`), decodes with `decode_sum`, and measures the std per coordinate of
(released − true sum) over the d coordinates, divided by the curator's σ·C:

- unlayered: the old shares, all five surviving (m = 5, 5·mu/3);
- all five: layered, each of the five reveals its layer for m = 5 (5·mu/4);
- one dropout before masking: four in the sum, each confirms m = 4, nothing is freed (4·mu/3);
- one dropout after confirming: five in the sum, m = 5, four reveal (4·mu/4 + mu/3 = 4·mu/3).

Each row also gives the ratio the plan predicts (from the kept variances), free of sampling error.
Time (medians of interleaved repeats, d coordinates): `encode_layered_share` against `encode_share`,
and the server's removal of one site's revealed layers (`remove_layers`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _noise_sums import median_ms, site_vectors  # benchmarks/ is on sys.path as a script

from secure_fed.config import load_config
from secure_fed.dp.distributed import (
    DistributedPlan,
    decode_sum,
    encode_layered_share,
    encode_share,
    kept_variance,
    layers_for,
    remove_layers,
)
from secure_fed.dp.distributed.run import _site_sigma, delta, plan_for
from secure_fed.dp.keystream import NoiseStream

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "hospital-scale-distributed.toml"
SITES = 5
SEED = bytes(range(32))


def _released_std(
    vectors: list[np.ndarray], plan: DistributedPlan, *, layered: bool, revealing: int, survivors: int
) -> float:
    """Std per coordinate of the released sum's noise: `vectors` are the sums in the ring, the first
    `revealing` of them reveal their layers for `survivors` confirmed survivors."""
    total = np.zeros(plan.padded_dim, dtype=np.uint64)
    freed: list[tuple[int, bytes]] = []
    for k, v in enumerate(vectors):
        stream = NoiseStream(os.urandom(32))
        if layered:
            share, seeds = encode_layered_share(v, plan, SEED, stream)
            if k < revealing:
                freed += [(i, seeds[i]) for i in layers_for(plan, survivors)]
        else:
            share = encode_share(v, plan, SEED, stream)
        total += share
    total = remove_layers(total, plan, freed)
    released = decode_sum(total, plan, SEED)
    return float((released - sum(vectors)).std())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=68_000, help="coordinates (the model update's d)")
    parser.add_argument("--site-norm", type=float, default=32.0, help="norm of each site's test vector")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="smoke run: d = 4096, 3 repeats")
    args = parser.parse_args()
    if args.quick:
        args.dim, args.repeats = 4096, 3
    cfg = load_config(CONFIG, {})
    assert cfg.dp.target_epsilon is not None
    plan = plan_for(cfg, args.dim, SITES)
    steps, q = cfg.fed.rounds, cfg.dp.sample_rate
    curator = {
        accountant: _site_sigma(cfg.dp.target_epsilon, delta(cfg), q, steps, cfg.dp.gmm_fraction, accountant)
        for accountant in ("prv", "rdp")
    }
    z = math.sqrt(plan.mu_total) * plan.gamma / plan.clip  # the plan's noise multiplier
    h, c = plan.honest_min, plan.colluders
    # each case: label, layered, sites in the sum, how many of them reveal, the confirmed count
    cases = [
        ("unlayered, all five", False, SITES, 0, SITES),
        ("all five survive", True, SITES, SITES, SITES),
        ("one dropout before masking", True, SITES - 1, SITES - 1, SITES - 1),
        ("one dropout after confirming", True, SITES, SITES - 1, SITES),
    ]
    rng = np.random.default_rng(0)
    rows = []
    for label, layered, in_sum, revealing, survivors in cases:
        # each share's variance once the revealed layers are out
        kept = [
            kept_variance(plan, survivors) if layered and k < revealing else plan.share_mu
            for k in range(in_sum)
        ]
        vectors = site_vectors(in_sum, args.dim, args.site_norm, rng)
        std = _released_std(vectors, plan, layered=layered, revealing=revealing, survivors=survivors)
        expected = plan.gamma * math.sqrt(sum(kept))
        rows.append(
            {
                "case": label,
                "layered": layered,
                "sites_in_sum": in_sum,
                "revealing": revealing,
                "confirmed_survivors": survivors,
                "std": std,
                "std_expected": expected,
                "ratio_prv": std / (curator["prv"] * plan.clip),
                "ratio_rdp": std / (curator["rdp"] * plan.clip),
                "ratio_prv_expected": expected / (curator["prv"] * plan.clip),
                "ratio_rdp_expected": expected / (curator["rdp"] * plan.clip),
                # what the honest shares keep when the c colluders are those that keep the most,
                # over the mu_total the ledger charged (the guarantee: ≥ 1)
                "honest_floor_over_mu": sum(sorted(kept)[: in_sum - c]) / plan.mu_total,
            }
        )

    vector = site_vectors(1, args.dim, args.site_norm, rng)[0]
    _, seeds = encode_layered_share(vector, plan, SEED, NoiseStream(bytes(32)))
    freed = [(i, seeds[i]) for i in layers_for(plan, SITES)]
    total = np.zeros(plan.padded_dim, dtype=np.uint64)
    parts: dict[str, Callable[[], Any]] = {
        "encode_share": lambda: encode_share(vector, plan, SEED, NoiseStream(bytes(32))),
        "encode_layered_share": lambda: encode_layered_share(vector, plan, SEED, NoiseStream(bytes(32))),
        "remove_one_sites_layers": lambda: remove_layers(total, plan, freed),
    }
    for fn in parts.values():
        fn()
    timings: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(args.repeats):
        for name, fn in parts.items():  # interleaved: background load hits all alike
            timings[name].append(median_ms(fn, 1))
    ms = {name: statistics.median(values) for name, values in timings.items()}
    print(
        json.dumps(
            {
                "config": str(CONFIG.relative_to(CONFIG.parent.parent)),
                "epsilon": cfg.dp.target_epsilon,
                "delta": delta(cfg),
                "sample_rate": q,
                "steps": steps,
                "clip": plan.clip,
                "sites": SITES,
                "honest_min": h,
                "colluders": c,
                "amplification": plan.amplification,
                "dim": args.dim,
                "padded_dim": plan.padded_dim,
                "skellam_noise_multiplier": z,
                "curator_sigma": curator,
                "removable_layers": SITES - h,
                "rows": rows,
                "timing_ms": ms,
                "repeats": args.repeats,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
