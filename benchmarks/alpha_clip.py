"""C_α (`dp.alpha_clip`) sized on public patients in an emulated private FedTAR run; prints one JSON
object.

C_α clips each validation patient's T-vector of α hypergradient scalars before a site's Gaussian α
release. The scalars are ⟨∇L_p(w), d_t⟩ along the round's directions d_t, and under distributed DP
those directions come from the round's noisy release (FedTAR's one-vector release: the surrogate
snapshots from the noisy sketches, `secure_fed.algorithms.fedtar.release`), so a noise-free public
round would not give their size. This emulates the private run instead, on public patients only:
fresh patients of the public pretraining domain (benchmarks/dp_tune.py's training and held-out
pools; no site's data), of which only the preset's public sizes are read.

Each emulated round is the one-vector round as the sites and the server run it, with the real code:
every site's path (`clipped_gradient_sum` over the T visit-index copies, Poisson-sampled at the
preset's q, the learner's `OneVectorRelease` from the round's α, clipped to C as one vector), plus
Gaussian noise of the target's size, then the server's path (the sum over the expected batch,
`split_release`, the distributed Adam step, the surrogate snapshots and `temporal_step`'s
directions), the held-out patients' scalars at the round's model (`per_patient_hypergradients`, as
a site takes them), their α release and ψ's step (the strategy's own learner and update). The noise
is matched as dp_tune's "rate" rule does: the preset's released sum over all N training patients
has std s per coordinate (its distributed plan with every site surviving, γ·√(K·share_μ)); on M
public patients at the same q the emulation adds s·M/N, so the noise on the averaged step,
s/(q·N), is the target's (Gaussian in place of the Skellam sum of the same std). The α release is
matched alike: the sites' summed noise √(Σ_k σ_α,k²)·C_α over N_val validation patients becomes
that times M_val/N_val on the M_val held-out patients, at the config's current C_α, so ψ walks as
it would (its update is in units of its own run's size, so only the signal-to-noise matters).

The rule, fixed before any measurement: C_α = the median, over the held-out patients and the
measured rounds pooled (round 1, the middle round ⌈R/2⌉ and the last round R), of the L2 norm of
each patient's T-vector of scalars, rounded to one significant digit (benchmarks/dp_recipe.py's
rule for C).

    python benchmarks/alpha_clip.py > docs/results/alpha-clip-paper-drift.json
    python benchmarks/alpha_clip.py --config configs/hospital-scale-distributed.toml
    python benchmarks/alpha_clip.py --quick        # a tiny smoke run (tests/test_benchmarks.py)
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from dp_recipe import one_digit, public_examples, train_sizes, val_sizes  # noqa: E402
from dp_tune import HELD_OUT_SEED, TRAIN_SEED, _git_commit, _log  # noqa: E402

from secure_fed.algorithms.fedtar.distributed import DistributedFedTAR  # noqa: E402
from secure_fed.algorithms.fedtar.hypergrad import per_patient_hypergradients  # noqa: E402
from secure_fed.algorithms.fedtar.release import (  # noqa: E402
    OneVectorRelease,
    direction_step_norm,
    release_dim,
    sketch_matrix,
    sketch_rows,
    sketch_scales,
    sketch_seed,
    split_release,
    surrogate_snapshots,
    surrogate_steps,
)
from secure_fed.algorithms.fedtar.temporal import temporal_step  # noqa: E402
from secure_fed.config import RunConfig, load_config  # noqa: E402
from secure_fed.dp.calibration import calibrate_gaussian_for, default_delta  # noqa: E402
from secure_fed.dp.clipped_sum import clip_and_noise_sum  # noqa: E402
from secure_fed.dp.distributed.run import delta as union_delta  # noqa: E402
from secure_fed.dp.distributed.run import plan_for  # noqa: E402
from secure_fed.dp.keystream import NOISE_KEY_BYTES, NoiseStream  # noqa: E402
from secure_fed.model.setup import build_report_model  # noqa: E402
from secure_fed.model.vectors import flatten, unflatten  # noqa: E402
from secure_fed.site.distributed import ClippedSum, clipped_gradient_sum  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "configs" / "paper-drift-distributed.toml"
METHOD = "fedtar"
QUANTILES = (10, 25, 50, 75, 90)
RULE = (
    "the median, over the public held-out patients and the measured rounds pooled (by default 1, "
    "⌈R/2⌉ and R), of the L2 norm of each patient's T-vector of α hypergradient scalars in the "
    "emulated private run, to one significant digit"
)


def _stream(purpose: str, round_id: int) -> NoiseStream:
    # public patients only: a fixed key and no fresh entropy, so the run is reproducible
    key = hashlib.sha256(b"alpha-clip/" + purpose.encode()).digest()[:NOISE_KEY_BYTES]
    return NoiseStream.for_release(key, purpose, round_id, entropy=lambda n: bytes(n))


def preset_config(path: Path | None, out: Path, args: argparse.Namespace) -> RunConfig:
    """The preset with FedTAR as its method and the run folder, model cache and base length set;
    --quick: the tests' small shape (3 sites of 16 patients, T = 3, 2 rounds)."""
    overrides: dict[str, Any] = {"out": str(out), "fed.method": METHOD}
    if args.epsilon is not None:
        overrides["dp.target_epsilon"] = args.epsilon
    if args.cache is not None:
        overrides["model.cache_dir"] = str(args.cache)
    if args.pretrain_steps is not None:
        overrides["model.pretrain_steps"] = args.pretrain_steps
    if args.quick:
        overrides |= {
            "data.synth.sites": 3,
            "data.synth.patients": 16,
            "data.synth.visits": 3,
            "data.max_visits": 3,
            "dp.sample_rate": 0.5,
            "dp.honest_min": 3,
            "dp.target_epsilon": args.epsilon or 8.0,
            "fed.rounds": 2,
            "train.fedtar_sketch_dim": 8,
            "model.pretrain_steps": args.pretrain_steps if args.pretrain_steps is not None else 0,
        }
    return load_config(path, overrides)


def quantiles(values: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else values * 99
    return {f"p{q}": round(cuts[q - 1], 6) for q in QUANTILES}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=PRESET)
    parser.add_argument("--epsilon", type=float, default=None, help="default: the config's target")
    parser.add_argument("--train-patients", type=int, default=None,
                        help="M: the public training pool (default: N, at most 240)")  # fmt: skip
    parser.add_argument("--held-out-patients", type=int, default=None,
                        help="the public held-out pool (default: N_val, at most 80)")  # fmt: skip
    parser.add_argument("--measure", type=int, nargs="+", default=None,
                        help="rounds measured (default: 1, ⌈R/2⌉, R); the run stops at the last")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=None, help="model cache (default: the config's)")
    parser.add_argument("--pretrain-steps", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="the tests' small shape, 2 rounds (smoke run)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = preset_config(None if args.quick else args.config, Path(tmp) / "run", args)
        if args.quick:
            args.train_patients, args.held_out_patients = 12, 6
        dp, t_max, rounds = cfg.dp, cfg.data.max_visits, cfg.fed.rounds
        sites = cfg.data.synth.sites
        target = sum(train_sizes(cfg))
        target_val = sum(val_sizes(cfg))
        m_train = args.train_patients or min(target, 240)
        m_val = args.held_out_patients or min(target_val, 80)
        measured = sorted(set(args.measure or (1, math.ceil(rounds / 2), rounds)))
        if measured[0] < 1 or measured[-1] > rounds:
            parser.error(f"--measure: rounds must lie in 1..{rounds} (fed.rounds of {args.config})")
        _log(f"building the base; N = {target}, N_val = {target_val}, M = {m_train}, M_val = {m_val}")
        model = build_report_model(cfg)
        dim = sum(p.numel() for p in model.parameters() if p.requires_grad)
        template = model.trainable_state()
        train = public_examples(cfg, m_train, TRAIN_SEED, Path(tmp) / "train")
        held_out = public_examples(cfg, m_val, HELD_OUT_SEED, Path(tmp) / "held-out")
        patients = int(train.patient_slot.max()) + 1
        held = int(held_out.patient_slot.max()) + 1
        groups = [train.at_visit(t) for t in range(1, t_max + 1)]

        # the target's noise: the released sum's std with every site surviving (the plan's), over
        # the expected batch q·N; the emulation's sum gets s·M/N, the same std over q·M
        plan = plan_for(cfg, release_dim(cfg, METHOD, dim), sites)
        sum_std = plan.gamma * math.sqrt(sites * plan.share_mu)
        emulated_std = sum_std * patients / target
        # the α release: each site's Gaussian σ_α (its own δ for its validation patients), summed
        alpha_sigmas = [
            dp.alpha_noise_multiplier
            or calibrate_gaussian_for(
                dp.target_epsilon or 1.0,
                dp.delta if dp.delta is not None else default_delta(max(n, 1)),
                rounds,
                dp.accountant,
            )
            for n in val_sizes(cfg)
        ]
        alpha_sum_sigma = math.sqrt(sum(s * s for s in alpha_sigmas))
        alpha_emulated_sigma = alpha_sum_sigma * held / target_val

        strategy = DistributedFedTAR(dim, t_max, cfg, name=METHOD)
        assert strategy.one_vector, "the presets' FedTAR cells take the one-vector release"
        k = sketch_rows(cfg, METHOD)
        step_norm = direction_step_norm(cfg, dim)
        work = ClippedSum(model, dp.max_grad_norm, copies=t_max)
        state = flatten(template).numpy().astype(np.float64)
        records: list[dict[str, Any]] = []
        pooled: list[float] = []
        for r in range(1, measured[-1] + 1):
            alpha = strategy.alpha()
            release = OneVectorRelease.for_round(cfg, METHOD, r, alpha, dim)
            start = unflatten(torch.tensor(state), template)
            sample = _stream("sample", r)
            clipped, sampled = clipped_gradient_sum(
                model, start, groups, dp.max_grad_norm, dp.sample_rate, patients, sample, work=work,
                max_patients_per_pass=dp.max_patients_per_pass, release=release,
            )  # fmt: skip
            noisy = clipped + _stream("dpsgd", r).normal(0.0, emulated_std, size=clipped.shape)
            released = noisy / max(dp.sample_rate * patients, 1.0)
            model_part, sketches = split_release(released, dim, t_max, k, sketch_scales(cfg, alpha))
            final = strategy.adam.step(state, model_part)
            sketch = sketch_matrix(sketch_seed(cfg, r), k, dim)
            snapshots = surrogate_snapshots(state, surrogate_steps(sketch, sketches), step_norm)
            chain = temporal_step(cfg.train.fedtar_chain, state, snapshots, alpha)
            scalars, losses = per_patient_hypergradients(
                model, torch.tensor(final), torch.tensor(chain.directions), held_out
            )
            norms = [float(x) for x in torch.linalg.vector_norm(scalars, dim=1)]
            if r in measured:
                pooled += norms
                records.append(
                    {
                        "round": r,
                        "alpha": [round(float(a), 4) for a in alpha],
                        "sampled_patients": sampled,
                        "direction_norms": [
                            round(float(x), 4) for x in np.linalg.norm(chain.directions, axis=1)
                        ],
                        "median": round(statistics.median(norms), 6),
                        "quantiles": quantiles(norms),
                        "clipped_at_current_C_alpha": round(
                            sum(x > dp.alpha_clip for x in norms) / len(norms), 3
                        ),
                        "val_loss": round(float(losses.mean()), 5),
                    }
                )
                _log(f"round {r}: {json.dumps(records[-1], ensure_ascii=False)}")
            # the α release at the config's current C_α, summed over the sites, and ψ's step
            alpha_sum = clip_and_noise_sum(
                scalars.numpy(), dp.alpha_clip, alpha_emulated_sigma, _stream("alpha", r)
            )
            strategy.meta.step(alpha_sum)
            if r % 10 == 0:
                _log(f"round {r} of {measured[-1]}")
            state = final
    median = statistics.median(pooled)
    out = {
        "question": "C_α (dp.alpha_clip) by the median rule, in an emulated private FedTAR run on public "
        "patients",
        "config": "tests' small shape" if args.quick else str(args.config.resolve().relative_to(ROOT)),
        "method": METHOD,
        "release": cfg.train.fedtar_release,
        "target": {
            "epsilon": dp.target_epsilon,
            "delta": union_delta(cfg),
            "sites": sites,
            "train_patients": target,
            "val_patients": target_val,
            "rounds": rounds,
            "sample_rate": dp.sample_rate,
            "max_grad_norm": dp.max_grad_norm,
            "lr": cfg.train.lr,
            "alpha_clip_now": dp.alpha_clip,
        },
        "noise": {
            "matching": "rate: q_e = q; the sum's std s·M/N, so the averaged step's std s/(q·N) is the "
            "target's",
            "target_sum_std": sum_std,
            "target_step_std": sum_std / (dp.sample_rate * target),
            "emulated_sum_std": emulated_std,
            "emulated_step_std": emulated_std / (dp.sample_rate * patients),
            "alpha_sigma_per_site": [round(s, 4) for s in alpha_sigmas],
            "alpha_sum_sigma": round(alpha_sum_sigma, 4),
            "alpha_emulated_sigma": alpha_emulated_sigma,
        },
        "public": {
            "train_patients": patients,
            "held_out_patients": held,
            "held_out_reports": len(held_out),
            "seeds": {"train": TRAIN_SEED, "held_out": HELD_OUT_SEED},
        },
        "trainable": dim,
        "rounds": records,
        "pooled": {"norms": len(pooled), "median": round(median, 6), "quantiles": quantiles(pooled)},
        "measured_rounds": measured,
        "rule": RULE,
        "alpha_clip": one_digit(median),
        "wall_s": round(time.perf_counter() - began, 1),
        "threads": torch.get_num_threads(),
        "source": {
            "command": " ".join(
                ["python", "benchmarks/alpha_clip.py", *(sys.argv[1:] if argv is None else argv)]
            ),
            "commit": _git_commit(),
            "date": dt.date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other work, "
            f"1-min load {os.getloadavg()[0]:.1f} at the end",
        },
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
