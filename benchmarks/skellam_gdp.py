"""The Skellam sum's accountant at the hospital settings: RDP (what plans are calibrated with and the
ledger charges) against the Gaussian-dominated PLD route (secure_fed/dp/skellam_gdp.py: conditional
on the centre-step lemma, so a measured gap, not an accountant); prints JSON.

The plan is benchmarks/distributed_survivors.py's (configs/hospital-scale-distributed.toml, d
coordinates, 5 sites, c = 1 so h = 4): for each accountant, the noise multiplier z = √mu / Δ₂ that
meets ε = 8 together with the GMM histogram, the ε the running plan (RDP-calibrated) and its
histogram would be priced at, and the released std with all five surviving over the curator's σ (PRV):
√(5 / (h − c))·z·(1 + inflation) / σ, the same expression the survivors benchmark's "expected"
column uses (layered shares, every site revealing its layer for m = 5).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from secure_fed.config import load_config
from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.distributed import kept_variance
from secure_fed.dp.distributed.run import _site_sigma, delta, histogram_sigma, plan_for
from secure_fed.dp.histogram import histogram_event
from secure_fed.dp.skellam_gdp import centre_step, gdp_calibrated_multiplier, gdp_epsilon

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "hospital-scale-distributed.toml"
SITES = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=68_000, help="coordinates (the model update's d)")
    args = parser.parse_args()
    start = time.perf_counter()
    cfg = load_config(CONFIG, {})
    assert cfg.dp.target_epsilon is not None
    plan = plan_for(cfg, args.dim, SITES)
    steps, q, d = cfg.fed.rounds, cfg.dp.sample_rate, delta(cfg)
    fixed = (histogram_event(histogram_sigma(cfg)),)
    sigma = _site_sigma(cfg.dp.target_epsilon, d, q, steps, cfg.dp.gmm_fraction, "prv")
    # what the five revealing shares keep, over what h − c honest shares carry: 5/4 at c = 1
    kept_over_mu = SITES * kept_variance(plan, SITES) / plan.mu_total
    z_rdp = math.sqrt(plan.mu_total) / plan.l2_sensitivity
    z_gdp = gdp_calibrated_multiplier(cfg.dp.target_epsilon, plan.l2_sensitivity, q, steps, d, fixed)

    def ratio(z: float) -> float:
        return math.sqrt(kept_over_mu) * z * (1 + plan.inflation) / sigma

    rows = [
        {
            "accountant": "RDP (the ledger's)",
            "sound": "yes",
            "z": z_rdp,
            "epsilon_of_running_plan": epsilon_rdp([*fixed, plan.event(q, steps)], d),
            "ratio_all_five": ratio(z_rdp),
        },
        {
            "accountant": "PLD on the centre-step Gaussian pair",
            "sound": "if the centre step is the largest (checked to mu = 1e6, not proved)",
            "z": z_gdp,
            "epsilon_of_running_plan": gdp_epsilon(plan.mu_total, plan.l2_sensitivity, q, steps, d, fixed),
            "ratio_all_five": ratio(z_gdp),
        },
    ]
    out = {
        "config": str(CONFIG.relative_to(CONFIG.parent.parent)),
        "epsilon": cfg.dp.target_epsilon,
        "delta": d,
        "sample_rate": q,
        "steps": steps,
        "dim": args.dim,
        "sites": SITES,
        "honest_min": plan.honest_min,
        "colluders": plan.colluders,
        "mu_total": plan.mu_total,
        "l2_sensitivity": plan.l2_sensitivity,
        "inflation": plan.inflation,
        "curator_sigma_prv": sigma,
        "centre_step_excess": centre_step(plan.mu_total) * math.sqrt(plan.mu_total) - 1,
        "rows": rows,
        "wall_s": time.perf_counter() - start,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
