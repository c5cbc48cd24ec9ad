"""Effective noise of FedTAR's distributed-DP release against FedAvg's, on real site code; prints JSON.

Issue 63: a FedTAR site's T-copy release spreads a patient's gradient over T blocks clipped
together, so it carries less signal per unit of noise than FedAvg's. This measures it. One site of
a config (default: configs/hospital-scale-distributed.toml's smallest site, its ε = 8 plan for 5
sites) computes its clipped sum over ALL its training patients (q = 1 here, so the mean is over the
whole site, not a sample) with the real path a distributed site takes
(`secure_fed.site.distributed.clipped_gradient_sum`, the learner's groups and, for one-vector, the
learner's `OneVectorRelease`), from the round-1 global state, for three releases:

- FedAvg: one pooled adapter, each patient's gradient clipped to C;
- FedTAR, copies (`train.fedtar_release = "copies"`): T per-visit-index copies, a patient's T
  gradients clipped together; the server's model update is the chain Σ_t c_t Δ_t of the copies'
  steps, so its signal is Σ_t c_t (mean clipped block t) and its noise √(Σ_t c_t²)·std per
  coordinate (the copies' noise is independent);
- FedTAR, one-vector: [Σ_t ω_t g_t ; κ·ω_t·P g_t] clipped as one vector; the model update's signal is
  the mean clipped model part and its noise std per coordinate. Beside it, "weights alone": Σ_t ω_t g_t
  without the sketch (α could not learn from it), which separates what the weighting costs from
  what the sketch's share of the clip norm costs, and "one κ": the sketches unweighted
  ([Σ_t ω_t g_t ; κ·P g_t], the first design).

Noise: the std per coordinate of the released sum's noise, the plan's (`plan_for` from the config,
for each release's length: γ·√(sites·share_mu), every site surviving), and as a check measured:
every site encodes a zero vector with `encode_share`, the ring sum is decoded with `decode_sum`, and
the std is taken over the coordinates (its sampling error is about 0.3 % at d = 68,000).

Effective noise = that std (times √Σc_t² for the copies) / ‖the model-update signal‖, with the signal
the mean over patients of their clipped contribution. The expected batch divides both alike, so the
ratio to FedAvg's is the round's. At each α: uniform (ψ's start, every run's round 1) and the floor's
extremes (0.6 on the first, and on the last, visit index; train.alpha_floor 0.1, T = 5).

The rule, fixed before the figures were read: `train.fedtar_release` defaults to "one-vector" for
distributed DP if its effective noise is at most 1.1× FedAvg's at uniform α (the issue's target)
and below the copies' at every α measured, else "copies". --quick: the tests' small config, site0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from secure_fed.algorithms.fedtar.learner import ReportLearner
from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.algorithms.fedtar.release import OneVectorRelease, sketch_scale
from secure_fed.algorithms.fedtar.temporal import alpha_bounds, chain_weights
from secure_fed.config import RunConfig, load_config
from secure_fed.dp.distributed import DistributedPlan, decode_sum, encode_share
from secure_fed.dp.distributed.run import delta, plan_for, round_seed
from secure_fed.dp.keystream import NoiseStream
from secure_fed.model.setup import build_report_model, visit_slots
from secure_fed.site.distributed import ClippedSum, clipped_gradient_sum
from secure_fed.site.site import attach_profiles, load_site, patient_profiles

ROOT = Path(__file__).resolve().parent.parent
HOSPITAL = ROOT / "configs" / "hospital-scale-distributed.toml"


def _config(args: argparse.Namespace, method: str, release: str) -> RunConfig:
    overrides: dict[str, Any] = {
        "fed.method": method,
        "train.fedtar_release": release,
        "dp.target_epsilon": args.epsilon,
        "model.cache_dir": str(args.cache),
    }
    if args.quick:
        overrides |= {
            "data.synth.sites": 3,
            "data.synth.patients": 16,
            "data.synth.visits": 3,
            "data.max_visits": 3,
            "model.pretrain_steps": 0,
            "dp.sample_rate": 0.5,
            "dp.honest_min": 3,
            "fed.rounds": 2,
        }
    return load_config(None if args.quick else args.config, overrides)


def measured_noise_std(plan: DistributedPlan, sites: int, seed: bytes) -> float:
    """Std per coordinate of the decoded ring sum of `sites` encoded zero vectors: the noise every
    surviving site's share (and its rounding) puts into the released sum."""
    total = np.zeros(plan.padded_dim, dtype=np.uint64)
    for _ in range(sites):
        total += encode_share(np.zeros(plan.dim), plan, seed, NoiseStream(os.urandom(32)))
    total &= np.uint64((1 << plan.bits) - 1)
    return float(decode_sum(total, plan, seed).std())


class Pooled:
    """FedAvg's one copy as a release (the patient's gradient itself), its norms kept: which
    patients the clip binds. FedAvg's signal is taken on the clipped sum's own path."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.norms: list[np.ndarray] = []

    def __call__(self, per_copy: Any) -> torch.Tensor:
        (rows,) = per_copy
        self.norms.append(torch.linalg.vector_norm(rows.double(), dim=1).cpu().numpy())
        return rows.double()


class Recorded:
    """The learner's release, with each patient's norms kept: model part, sketch part, whole."""

    def __init__(self, release: OneVectorRelease) -> None:
        self.release = release
        self.norms: list[np.ndarray] = []

    @property
    def dim(self) -> int:
        return self.release.dim

    def __call__(self, per_copy: Any) -> torch.Tensor:
        rows = self.release(per_copy)
        d = self.release.grad_dim
        self.norms.append(
            torch.stack(
                [torch.linalg.vector_norm(rows[:, :d], dim=1), torch.linalg.vector_norm(rows[:, d:], dim=1)],
                1,
            )
            .cpu()
            .numpy()
        )
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=HOSPITAL)
    parser.add_argument(
        "--site", default=None, help="the site whose patients are measured (default: the last)"
    )
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/fedtar-release-noise-cache"))
    parser.add_argument("--quick", action="store_true", help="smoke run: the tests' small config, site0")
    args = parser.parse_args()
    started = time.perf_counter()
    torch.manual_seed(0)
    cfg = _config(args, "fedtar", "one-vector")
    sites = cfg.data.synth.sites
    site = args.site or ("site0" if args.quick else f"site{sites - 1}")
    t_max = cfg.data.max_visits
    data = load_site(cfg, site)
    gmm, _ = fit_gmm(patient_profiles(data.train), cfg.model.gmm_components, cfg.model.gmm_reg_covar, 0, None)
    attach_profiles(data, gmm, visit_slots(cfg))
    model = build_report_model(cfg)
    dim = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # round 1's global state, which every party builds from the run's seed
    start = OrderedDict((k, v.detach().clone()) for k, v in model.trainable_state().items())
    n = 1 + int(data.train.patient_slot.max())
    clip = cfg.dp.max_grad_norm
    low, high = alpha_bounds(t_max, cfg.train.alpha_floor)
    kappa = sketch_scale(cfg.train.fedtar_sketch_share)
    alphas = {"uniform": np.full(t_max, 1.0 / t_max)}
    for name, index in (("peaked on visit 1", 0), (f"peaked on visit {t_max}", t_max - 1)):
        peaked = np.full(t_max, low)
        peaked[index] = high
        alphas[name] = peaked

    # the noise of each release's plan, measured on its decoded ring sum (all sites survive)
    seed = round_seed(cfg, 1)
    lengths = {
        "fedavg": ReportLearner(_config(args, "fedavg", "copies"), data, model=model).distributed_dim(
            "fedavg"
        ),
        "copies": ReportLearner(_config(args, "fedtar", "copies"), data, model=model).distributed_dim(
            "fedtar"
        ),
        "one-vector": ReportLearner(cfg, data, model=model).distributed_dim("fedtar"),
    }
    plans = {name: plan_for(cfg, length, sites) for name, length in lengths.items()}
    noise = {
        name: {
            "dim": lengths[name],
            "padded_dim": plan.padded_dim,
            "std_measured": measured_noise_std(plan, sites, seed),
            "std_plan_all_survive": plan.gamma * math.sqrt(sites * plan.share_mu),
            "noise_multiplier": plan.noise_std / plan.clip,
        }
        for name, plan in plans.items()
    }

    learner = ReportLearner(cfg, data, model=model)
    pooled = [data.train]
    copies = learner._groups("fedtar")

    def clipped(groups: list[Any], release: Any = None) -> np.ndarray:
        work = ClippedSum(model, clip, copies=len(groups))
        total, sampled = clipped_gradient_sum(
            model, start, groups, clip, 1.0, n, NoiseStream(bytes(32)), work=work,
            max_patients_per_pass=cfg.dp.max_patients_per_pass, release=release,
        )  # fmt: skip
        assert sampled == n
        return total / n

    fedavg_signal = float(np.linalg.norm(clipped(pooled)))
    pooled_norms = Pooled(dim)
    clipped(pooled, pooled_norms)
    fedavg_clipped = float((np.concatenate(pooled_norms.norms) > clip).mean())
    copies_mean = clipped(copies).reshape(t_max, dim)
    # the plans' own std (γ·√(sites·share_mu)): the mechanism's; the measured one is its check
    std = {name: found["std_plan_all_survive"] for name, found in noise.items()}
    fedavg_effective = std["fedavg"] / fedavg_signal
    rows = []
    for name, alpha in alphas.items():
        c = chain_weights(alpha, kind=cfg.train.fedtar_chain)
        copies_signal = float(np.linalg.norm(c @ copies_mean))
        copies_noise = math.sqrt(float(c @ c)) * std["copies"]
        recorded = Recorded(OneVectorRelease.for_round(cfg, "fedtar", 1, alpha, dim))
        one = clipped(copies, recorded)
        one_signal = float(np.linalg.norm(one[:dim]))
        norms = np.concatenate(recorded.norms)
        whole = np.linalg.norm(norms, axis=1)
        live = whole > 0
        share = norms[live, 1] / whole[live]
        copies_effective = copies_noise / copies_signal
        one_effective = std["one-vector"] / one_signal
        # the same weights without the sketch (α could then not learn): what the weighting alone
        # costs against FedAvg, apart from the sketch's share of the clip norm
        bare = dataclasses.replace(recorded.release, sketch=None)
        bare_signal = float(np.linalg.norm(clipped(copies, bare)))
        bare_effective = std["one-vector"] / bare_signal
        # the first design: one κ for every visit index's sketch
        flat = Recorded(dataclasses.replace(recorded.release, scales=np.full(t_max, kappa)))
        flat_signal = float(np.linalg.norm(clipped(copies, flat)[:dim]))
        flat_norms = np.concatenate(flat.norms)
        flat_whole = np.linalg.norm(flat_norms, axis=1)
        flat_live = flat_whole > 0
        flat_effective = std["one-vector"] / flat_signal
        rows.append(
            {
                "alpha": name,
                "alpha_values": [float(a) for a in alpha],
                "chain_weights": [float(x) for x in c],
                "fedavg": {
                    "signal": fedavg_signal,
                    "effective_noise": fedavg_effective,
                    "clipped_fraction": fedavg_clipped,
                },
                "copies": {
                    "signal": copies_signal,
                    "noise": copies_noise,
                    "effective_noise": copies_effective,
                    "over_fedavg": copies_effective / fedavg_effective,
                },
                "one_vector": {
                    "signal": one_signal,
                    "effective_noise": one_effective,
                    "over_fedavg": one_effective / fedavg_effective,
                    "sketch_share_median": float(np.median(share)),
                    "sketch_share_max": float(share.max()),
                    "clipped_fraction": float((whole[live] > clip).mean()),
                },
                "one_kappa": {
                    "signal": flat_signal,
                    "effective_noise": flat_effective,
                    "over_fedavg": flat_effective / fedavg_effective,
                    "sketch_share_median": float(np.median(flat_norms[flat_live, 1] / flat_whole[flat_live])),
                },
                "weights_alone": {
                    "signal": bare_signal,
                    "effective_noise": bare_effective,
                    "over_fedavg": bare_effective / fedavg_effective,
                },
            }
        )
    uniform = rows[0]
    one_vector_default = uniform["one_vector"]["over_fedavg"] <= 1.1 and all(
        r["one_vector"]["effective_noise"] < r["copies"]["effective_noise"] for r in rows
    )
    print(
        json.dumps(
            {
                "config": "tests' small config" if args.quick else str(args.config.relative_to(ROOT)),
                "site": site,
                "patients": n,
                "visits": t_max,
                "trainable": dim,
                "sites": sites,
                "epsilon": args.epsilon,
                "delta": delta(cfg),
                "sample_rate": cfg.dp.sample_rate,
                "rounds": cfg.fed.rounds,
                "clip": clip,
                "chain": cfg.train.fedtar_chain,
                "sketch_dim": cfg.train.fedtar_sketch_dim,
                "sketch_share": cfg.train.fedtar_sketch_share,
                "noise": noise,
                "rows": rows,
                "target_over_fedavg": 1.1,
                "one_vector_default": one_vector_default,
                "wall_s": time.perf_counter() - started,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
