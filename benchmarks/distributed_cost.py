"""Cost of one private step, distributed DP against site mode, with its share of the SecAgg+ sum; prints JSON.

Issue 31's target: the cost of one private step in distributed mode (the sites' clipped sums,
rotation, rounding, noise share and the secure sum) at most 1.3× one site-mode private step plus
its share of a SecAgg+ sum, at 5 and at 50 sites.

A site's private step, on the tiny preset's pooled report model (FedAvg's one copy, the model
distributed mode trains), on one fixed batch of patients so that both modes do the same work:

- site mode: forward, backward, `PatientDPSGD.privatize` with the calibrated σ (per-patient
  clipping, sum, Gaussian noise from a NoiseStream, divided by q·n), the gradients flattened to the
  float64 update vector;
- distributed: the same forward and backward on the engine of the site's kept work copy
  (`secure_fed.site.distributed.ClippedSum`, as `clipped_gradient_sum` runs it: σ = 0 and
  divisor 1, the clipped sum), flattened, then `encode_layered_share` (projection, scaling,
  rotation, rounding, the Skellam share in a base and its removable layers) with the run's plan
  (`secure_fed.dp.distributed.run.plan_for`: h = K − 1,
  c = 1, a 32-bit ring sized for K sites).

Neither includes an optimiser step (site mode's local AdamW step, distributed mode's server-side
Adam step): the comparison is of what the issue names.

The secure sum: one SecAgg+ round over K sites through the project's protocol code
(`secure_fed.crypto.vectors.sum_vectors` over a `LocalTransport`, every site with its own Ed25519
identity, as benchmarks/secagg.py drives it), with `secure-fed run --secagg`'s settings: site mode
sums K float vectors of the update's length plus its weight (quantised into the ring by each
site); distributed mode sums K `encode_share` outputs as ring integers (`ring_bits` = the plan's
bits, each site's `SiteRules` with the plan's h, as `site/handler.py` sets them). The round's
time over K is a site's share of it. The distributed sum is checked to be the exact residue sum.
Distributed mode's server then takes out the layers every site reveals when all K survive
(`remove_layers`, the seeds of layers h .. K − 1 from each site): `distributed_removal`, charged
like the sum, over K.

Times are medians over interleaved repeats of both wall time and process CPU time (one torch
thread; CPU time is far less disturbed by other jobs on a shared machine); the ratio per K is
(distributed step + sum/K) / (site step + sum/K), on CPU time and on wall time.
A distributed round is one step, so what a site does before it every round counts too:
`round_setup_ms` times `ClippedSum.prepare` (the start state loaded into the kept copy, gradients
cleared, the round's keystream handed to the engine) and `ratio_with_round_setup` charges it to the
distributed step. `build_ms` is the copy and engine `ClippedSum` builds once, in a site's first
round (until they were kept, every round paid it). Site mode rebuilds per round too
(`secure_fed.site.training.train_copies`: a copy of the model, a new engine, an AdamW),
`site_round_setup_ms`, but spreads it over its ⌈1/q⌉ local steps; `ratio_with_both_setups` charges
each mode its own per-step share of its round's setup.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.config import RunConfig, SecAggConfig, build_config
from secure_fed.crypto.secagg_identity import SecAggIdentity
from secure_fed.crypto.secagg_protocol import SecAggSettings, round_params
from secure_fed.crypto.transport import LocalTransport
from secure_fed.crypto.vectors import SiteRules, client_step, sum_vectors
from secure_fed.dp.calibration import calibrate_noise
from secure_fed.dp.distributed import DistributedPlan, encode_layered_share, layers_for, remove_layers
from secure_fed.dp.distributed.run import delta, plan_for, round_seed
from secure_fed.dp.dpsgd import PatientDPSGD
from secure_fed.dp.keystream import NoiseStream
from secure_fed.model.setup import build_report_model, visit_slots
from secure_fed.site.distributed import ClippedSum
from secure_fed.site.private import steps_per_epoch
from secure_fed.site.site import attach_profiles, load_site, patient_profiles

TARGET_RATIO = 1.3


def make_config(args: argparse.Namespace, sites: int, noise: str, honest_min: int | None = None) -> RunConfig:
    """The run's config. Site mode: one site (dp_overhead.py's cohort, shared in a cache); distributed
    mode at K sites, for its plan only (no data of it is loaded)."""
    distributed = (
        {"noise": "distributed", "colluders": 1, "honest_min": honest_min} if noise == "distributed" else {}
    )
    return build_config(
        {
            "seed": 0,
            "out": str(args.cache / "unused-run"),
            "data": {
                "synth": {"sites": sites, "patients": args.patients, "visits": args.visits},
                "max_visits": args.visits,
            },
            "model": {"preset": "tiny", "cache_dir": str(args.cache), "pretrain_steps": args.pretrain_steps},
            "fed": {"rounds": args.rounds, "method": "fedavg"},
            "train": {"local_epochs": 1},
            "secagg": {"enabled": True},
            # dp.honest_min None: h = K − 1, every site but the one colluder
            "dp": {
                "enabled": True,
                "target_epsilon": args.epsilon,
                "delta": args.delta,
                "sample_rate": args.sample_rate,
                "max_grad_norm": 1.0,
                **distributed,
            },
        }
    )


class PrivateSteps:
    """One site's pooled model and fixed batch, with a site-mode and a distributed-mode step."""

    def __init__(self, cfg: RunConfig, batch_patients: int) -> None:
        data = load_site(cfg, "site0")
        gmm, _ = fit_gmm(
            patient_profiles(data.train), cfg.model.gmm_components, cfg.model.gmm_reg_covar, 0, None
        )
        attach_profiles(data, gmm, visit_slots(cfg))
        self.cfg = cfg
        self.model = build_report_model(cfg)
        self.examples = data.train
        self.n_patients = 1 + int(data.train.patient_slot.max())
        member = torch.zeros(self.n_patients, dtype=torch.bool)
        member[: min(batch_patients, self.n_patients)] = True
        self.rows = torch.nonzero(member[data.train.patient_slot]).flatten()
        self.batch_patients = int(member.sum())
        self.dim = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.clip = cfg.dp.max_grad_norm
        q = cfg.dp.sample_rate
        # site mode's σ for the DP-SGD share of ε over the rounds (its value does not change the
        # cost: one Gaussian draw per coordinate either way)
        assert cfg.dp.target_epsilon is not None
        train_epsilon = (1.0 - cfg.dp.gmm_fraction) * cfg.dp.target_epsilon
        self.sigma = calibrate_noise(train_epsilon, delta(cfg), q, cfg.fed.rounds, tolerance=1e-4)
        # fixed keys: the benchmark times the draws, it releases nothing
        self.site_engine = self._engine(self.sigma, q * self.n_patients, NoiseStream(bytes(32)))
        # the distributed site's kept copy, as the learner holds it across rounds
        self.sum_work = ClippedSum(self.model, self.clip)
        self.start = self.model.trainable_state()
        # site mode's local steps per round (train.local_epochs = 1), over which it spreads its setup
        self.site_steps_per_round = steps_per_epoch(q)

    def _engine(self, sigma: float, divisor: float, noise: NoiseStream) -> PatientDPSGD:
        work = copy.deepcopy(self.model)
        work.train()
        return PatientDPSGD([work], self.clip, sigma, divisor, noise)

    def _gradient(self, engine: PatientDPSGD) -> np.ndarray:
        x = self.examples
        assert x.profiles is not None
        rows = self.rows
        loss = engine.forward_modules[0](x.images[rows], x.input_ids[rows], x.profiles[rows])
        loss.sum().backward()
        engine.privatize([x.patient_slot[rows]], self.n_patients)
        flat = torch.cat([p.grad.detach().reshape(-1).double() for p in engine.trainable_parameters[0]])  # type: ignore[union-attr]
        engine.zero_grad()
        return flat.numpy()

    def round_setup(self, stream: NoiseStream) -> PatientDPSGD:
        """What `clipped_gradient_sum` does before its step every round: the kept copy and engine
        made ready for the round's start and stream."""
        return self.sum_work.prepare(self.start, stream)

    def build(self, stream: NoiseStream) -> PatientDPSGD:
        """What a site's first round adds: the copy of the model and the engine, built once."""
        return ClippedSum(self.model, self.clip).prepare(self.start, stream)

    def site_round_setup(self) -> torch.optim.Optimizer:
        """What site mode's `train_copies` does before its local steps every round (FedAvg: one
        copy): a copy of the model at the start, a new engine around it, an AdamW over it."""
        work = copy.deepcopy(self.model)
        work.load_trainable_state(self.start)
        work.train()
        divisor = self.cfg.dp.sample_rate * self.n_patients
        engine = PatientDPSGD([work], self.clip, self.sigma, divisor, NoiseStream(bytes(32)))
        return torch.optim.AdamW(engine.trainable_parameters[0], lr=self.cfg.train.lr)

    def site_step(self) -> np.ndarray:
        return self._gradient(self.site_engine)

    def distributed_step(
        self, engine: PatientDPSGD, plan: DistributedPlan, seed: bytes
    ) -> tuple[np.ndarray, list[bytes]]:
        return encode_layered_share(self._gradient(engine), plan, seed, NoiseStream(bytes(32)))


def _identities(nodes: list[int]) -> dict[int, SecAggIdentity]:
    keys = {node: Ed25519PrivateKey.generate() for node in nodes}
    public = {f"site-{node}": key.public_key() for node, key in keys.items()}
    return {node: SecAggIdentity(f"site-{node}", "bench", key, public) for node, key in keys.items()}


def secure_sum(
    inputs: dict[int, np.ndarray], settings: SecAggSettings, rules: SiteRules, round_id: int
) -> tuple[float, float, np.ndarray]:
    """(wall s, CPU s, total) of one SecAgg+ round over the sites' vectors, from fresh client state
    (a site refuses to mask the same update twice)."""
    identities = _identities(list(inputs))

    def step(phase: str, request: Any, state: Any, secret: tuple[np.ndarray, SecAggIdentity]) -> Any:
        vector, identity = secret
        return client_step(phase, request, state, vector, identity=identity, rules=rules)

    transport = LocalTransport({n: (x, identities[n]) for n, x in inputs.items()}, step)
    dim = len(next(iter(inputs.values())))
    wall, cpu = time.perf_counter(), time.process_time()
    result = sum_vectors(transport, list(inputs), dim, settings, round_id)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if transport.errors or len(result.survivors) != len(inputs):
        raise RuntimeError(f"the secure sum lost sites: {transport.errors}")
    return wall, cpu, result.total


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def variants(sites: int, dim: int) -> list[tuple[str, int | None, int | None]]:
    """(name, dp.honest_min, secagg.neighbours) to measure at K sites. A site unmasks only with h
    sites in its signed view, which SecAgg+ limits to its neighbourhood (degree k + itself), so
    h = K − 1 needs the complete graph once k + 1 < K − 1 (from 10 sites on); the sparse graph
    then runs with h = k + 1, whose shares are each larger (mu_total / (h − c))."""
    degree = round_params(sites, dim, SecAggSettings.from_config(SecAggConfig())).degree
    if degree + 1 >= sites - 1:
        return [("default", None, None)]
    return [("complete_graph", None, sites - 1), ("secagg_plus_graph", degree + 1, None)]


def bench_sites(
    steps: PrivateSteps,
    args: argparse.Namespace,
    sites: int,
    variant: tuple[str, int | None, int | None],
) -> dict[str, Any]:
    name, h, neighbours = variant
    cfg = make_config(args, sites, "distributed", h)
    plan = plan_for(cfg, steps.dim, sites)
    base = SecAggSettings.from_config(SecAggConfig())  # what `secure-fed run --secagg` uses
    # as server/aggregation.py sets it in distributed mode (and the graph the variant needs)
    ring = replace(base, ring_bits=plan.bits, neighbours=neighbours or base.neighbours)
    ring_rules = SiteRules(ring_bits=plan.bits, honest_min=plan.honest_min)
    float_rules = SiteRules()
    rng = np.random.default_rng(sites)
    # the other sites' inputs: site mode's float updates (within the quantiser's clip, as count_scale
    # keeps them) and distributed shares of clipped sums encoded with the same plan
    site_inputs = {n: rng.normal(0.0, base.clip / 10, steps.dim + 1) for n in range(1, sites + 1)}
    parts = (
        "site_step",
        "distributed_step",
        "site_sum",
        "distributed_sum",
        "distributed_removal",
        "round_setup",
        "build",
        "site_round_setup",
    )
    times: dict[str, list[float]] = {k: [] for k in parts}
    cpu: dict[str, list[float]] = {k: [] for k in times}
    for repeat in range(args.warmup + args.repeats):
        seed = round_seed(cfg, repeat + 1)
        # fixed keys: the benchmark times the draws, it releases nothing
        stream = NoiseStream(bytes([repeat % 256]) * 32)
        w_setup, c_setup, engine = _timed(lambda st=stream: steps.round_setup(st))
        w_site, c_site, _ = _timed(steps.site_step)
        w_dist, c_dist, (share, seeds) = _timed(lambda s=seed, e=engine: steps.distributed_step(e, plan, s))
        # after the steps: the model copies these two make and drop would otherwise sit between a
        # round's setup and its step, where no real round has them
        w_build, c_build, _ = _timed(lambda: steps.build(NoiseStream(bytes(32))))
        w_ssetup, c_ssetup, _ = _timed(steps.site_round_setup)
        layered = {1: (share, seeds)} | {
            n: encode_layered_share(rng.normal(0.0, 1.0, steps.dim), plan, seed, NoiseStream(bytes([n]) * 32))
            for n in range(2, sites + 1)
        }
        shares = {n: pair[0] for n, pair in layered.items()}
        # every site survives and reveals the layers a count of K frees
        freed = [(i, pair[1][i]) for pair in layered.values() for i in layers_for(plan, sites)]
        w_ssum, c_ssum, _ = secure_sum(site_inputs, base, float_rules, repeat)
        w_dsum, c_dsum, total = secure_sum(shares, ring, ring_rules, repeat)
        expected = np.sum([s.astype(np.uint64) for s in shares.values()], axis=0) & np.uint64(
            (1 << plan.bits) - 1
        )
        if not np.array_equal(np.asarray(total, dtype=np.uint64), expected):
            raise RuntimeError("the SecAgg+ ring sum is not the residue sum of the shares")
        w_rem, c_rem, _ = _timed(lambda t=total, f=freed: remove_layers(t, plan, f))
        if repeat < args.warmup:
            continue
        for key, w, c in (
            ("site_step", w_site, c_site),
            ("distributed_step", w_dist, c_dist),
            ("site_sum", w_ssum, c_ssum),
            ("distributed_sum", w_dsum, c_dsum),
            ("distributed_removal", w_rem, c_rem),
            ("round_setup", w_setup, c_setup),
            ("build", w_build, c_build),
            ("site_round_setup", w_ssetup, c_ssetup),
        ):
            times[key].append(w)
            cpu[key].append(c)

    def summary(series: dict[str, list[float]]) -> dict[str, float]:
        med = {k: _median(v) for k, v in series.items()}
        site = med["site_step"] + med["site_sum"] / sites
        dist = med["distributed_step"] + (med["distributed_sum"] + med["distributed_removal"]) / sites
        return {
            **{f"{k}_ms": 1e3 * v for k, v in med.items()},
            "site_sum_share_ms": 1e3 * med["site_sum"] / sites,
            "distributed_sum_share_ms": 1e3 * med["distributed_sum"] / sites,
            "site_total_ms": 1e3 * site,
            "distributed_total_ms": 1e3 * dist,
            "ratio": dist / site,
            # a distributed round is one step, so it pays the round's setup every step; site mode
            # spreads its own over its local steps (not charged to it here)
            "ratio_with_round_setup": (dist + med["round_setup"]) / site,
            "site_round_setup_per_step_ms": 1e3 * med["site_round_setup"] / steps.site_steps_per_round,
            "ratio_with_both_setups": (dist + med["round_setup"])
            / (site + med["site_round_setup"] / steps.site_steps_per_round),
        }

    cpu_summary, wall_summary = summary(cpu), summary(times)
    return {
        "sites": sites,
        "variant": name,
        "secagg_degree": {
            "site_mode": round_params(sites, steps.dim + 1, base).degree,
            "distributed": round_params(sites, plan.padded_dim, ring).degree,
        },
        "honest_min": plan.honest_min,
        "colluders": plan.colluders,
        "plan": {
            "bits": plan.bits,
            "dim": plan.dim,
            "padded_dim": plan.padded_dim,
            "gamma": plan.gamma,
            "share_mu": plan.share_mu,
            "rounding_inflation": plan.inflation,
            "digest": hashlib.sha256(json.dumps(plan.to_json(), sort_keys=True).encode()).hexdigest(),
        },
        "cpu": cpu_summary,
        "wall": wall_summary,
        "ratio_cpu": cpu_summary["ratio"],
        "ratio_wall": wall_summary["ratio"],
        "ratio_cpu_le_target": cpu_summary["ratio"] <= TARGET_RATIO,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[5, 50])
    parser.add_argument("--epsilon", type=float, default=2.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--sample-rate", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=30, help="private rounds the plan is calibrated for")
    parser.add_argument("--visits", type=int, default=5)
    parser.add_argument("--patients", type=int, default=60, help="patients at the site (before splits)")
    parser.add_argument("--batch-patients", type=int, default=9, help="patients in the fixed batch")
    parser.add_argument("--pretrain-steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "secure_fed_bench_cache")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 sites, 2 repeats, no warm-up")
    args = parser.parse_args()
    if args.quick:
        args.sites, args.repeats, args.warmup = [5], 2, 0
    if min(args.sites) < 3:
        raise SystemExit("--sites: SecAgg+ needs at least 3 sites")
    torch.set_num_threads(args.threads)
    args.cache.mkdir(parents=True, exist_ok=True)
    steps = PrivateSteps(make_config(args, 1, "site"), args.batch_patients)
    results = [bench_sites(steps, args, k, v) for k in args.sites for v in variants(k, steps.dim)]
    print(
        json.dumps(
            {
                "target_ratio": TARGET_RATIO,
                "torch_threads": torch.get_num_threads(),
                "model": {"preset": "tiny", "method": "fedavg", "trainable": steps.dim},
                "batch": {"patients": steps.batch_patients, "rows": int(steps.rows.numel())},
                "privacy": {
                    "epsilon": args.epsilon,
                    "delta": args.delta,
                    "sample_rate": args.sample_rate,
                    "rounds": args.rounds,
                    "site_mode_sigma": steps.sigma,
                    "site_mode_steps_per_round": steps.site_steps_per_round,
                },
                "repeats": args.repeats,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
