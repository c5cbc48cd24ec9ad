"""Cost of patient-level DP-SGD per training step, against the non-private step; prints JSON.

One step = what `secure_fed.site.training.train_copies` does per step: forward of each of the
T per-visit-index adapter copies on the chosen patients' rows of its visit index, the backward,
and one AdamW step per copy. The variants share the model, the copies' starting point and the
batch (a fixed set of patients; by default q·n, the expected Poisson batch of the default site):

- non-private: `MinibatchGradients.backward` (mean loss per copy, plain autograd);
- DP: `DPGradients` (the system's wrapper around `secure_fed.dp.dpsgd.PatientDPSGD`): summed row
  losses, Opacus per-row gradients, per-patient sums across copies, clipping, Gaussian noise;
  once per Opacus mode: ExpandedWeights ("ew", the system's default: torch computes each row's
  gradient inside the ops' own backward, no module hooks), hand-written per-layer samplers behind
  module hooks ("hooks") and torch.func for every layer behind the same hooks ("functorch").

Time: warmup, then N steps per variant, interleaved so that background load on a shared machine
hits all alike; reported as medians, minima and the median of paired ratios (each DP step over the
non-private step timed just before it). Memory: the resident-set high-water mark (VmHWM, the
counter behind getrusage's ru_maxrss) is reset before each variant's steps, so its peak above the
RSS at the start belongs to the steps; plus the peak of Python-level allocations (tracemalloc;
tensor storage is not among them).
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import gc
import json
import resource
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.config import RunConfig, build_config
from secure_fed.data.batching import Examples
from secure_fed.dp.dpsgd import PatientDPSGD
from secure_fed.dp.keystream import NoiseStream
from secure_fed.model.setup import build_report_model, visit_slots
from secure_fed.site.private import DPGradients
from secure_fed.site.site import attach_profiles, load_site, patient_profiles
from secure_fed.site.training import MinibatchGradients, _trainable


def make_config(preset: str, cache: Path, visits: int, patients: int, pretrain_steps: int) -> RunConfig:
    return build_config(
        {
            "seed": 0,
            "out": str(cache / "unused-run"),
            "data": {"synth": {"sites": 1, "patients": patients, "visits": visits}, "max_visits": visits},
            "model": {"preset": preset, "cache_dir": str(cache), "pretrain_steps": pretrain_steps},
            # a fixed σ needs a budget to hold the run to; this times the mechanism, it claims no ε
            "dp": {
                "enabled": True,
                "noise_multiplier": 1.0,
                "max_grad_norm": 1.0,
                "sample_rate": 0.25,
                "budget_epsilon": 1000.0,
            },
        }
    )


def count_parameters(model: torch.nn.Module) -> dict[str, int]:
    params = list(model.parameters())
    return {
        "total": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in params if p.requires_grad),
    }


class Setup:
    """Model, per-visit-index groups and one fixed batch of patients, as a site trains them."""

    def __init__(self, cfg: RunConfig, batch_patients: int) -> None:
        data = load_site(cfg, "site0")
        gmm, _ = fit_gmm(
            patient_profiles(data.train), cfg.model.gmm_components, cfg.model.gmm_reg_covar, 0, None
        )
        attach_profiles(data, gmm, visit_slots(cfg))
        self.model = build_report_model(cfg)
        self.start = self.model.trainable_state()
        self.groups: list[Examples] = [data.train.at_visit(t) for t in range(1, cfg.data.max_visits + 1)]
        self.n_patients = 1 + max(int(g.patient_slot.max()) for g in self.groups if len(g))
        chosen = torch.arange(min(batch_patients, self.n_patients))
        member = torch.zeros(self.n_patients, dtype=torch.bool)
        member[chosen] = True
        self.rows = [torch.nonzero(member[g.patient_slot]).flatten() for g in self.groups]
        self.batch_patients = len(chosen)

    def copies(self) -> list[torch.nn.Module]:
        out = []
        for _ in self.groups:
            c = copy.deepcopy(self.model)
            c.load_trainable_state(self.start)
            c.train()
            out.append(c)
        return out


Step = Callable[[], None]


def make_step(setup: Setup, private: bool, grad_sample_mode: str = "ew") -> tuple[Step, Any]:
    """A closure running one training step (as train_copies' loop body) on the fixed batch."""
    copies = setup.copies()
    generator = torch.Generator().manual_seed(0)
    grads: DPGradients | MinibatchGradients
    if private:
        noise = NoiseStream(bytes(32))  # a fixed key: the benchmark times the draws, it releases nothing
        grads = DPGradients(0.25, 1.0, 1.0, setup.n_patients, 1, noise)
        grads.engine = PatientDPSGD(
            copies, 1.0, 1.0, 0.25 * setup.n_patients, noise, grad_sample_mode=grad_sample_mode
        )
    else:
        grads = MinibatchGradients(setup.batch_patients, generator)
    optims = [torch.optim.AdamW([p for _, p in _trainable(c)], lr=1e-4) for c in copies]
    if private:
        copies = grads.engine.forward_modules  # "ew" records per-row gradients only through its wrappers

    def step() -> None:
        losses, index = [], []
        for c, g, rows in zip(copies, setup.groups, setup.rows, strict=True):
            if rows.numel() == 0:
                losses.append(torch.zeros(0))
                index.append(torch.zeros(0, dtype=torch.long))
                continue
            losses.append(c(g.images[rows], g.input_ids[rows], g.profiles[rows]))
            index.append(g.patient_slot[rows])
        for opt in optims:
            opt.zero_grad(set_to_none=True)
        grads.backward(copies, losses, index)
        for opt in optims:
            opt.step()

    return step, grads


def _timed(step: Step) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one step."""
    wall, cpu = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - wall, time.process_time() - cpu


def time_variants(steps: dict[str, Step], warmup: int, repeats: int) -> dict[str, list[tuple[float, float]]]:
    for step in steps.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in steps}
    for _ in range(repeats):  # interleaved, so background load hits every variant alike
        for name, step in steps.items():
            times[name].append(_timed(step))
    return times


def summarise(times: dict[str, list[float]]) -> dict[str, Any]:
    """Per-variant median and min step time (ms), and DP / non-private ratios of medians, of minima,
    and the median of paired ratios (each DP step over the non-private step timed just before it)."""
    median = {n: statistics.median(t) for n, t in times.items()}
    best = {n: min(t) for n, t in times.items()}
    base = "non_private"
    dp = [n for n in times if n != base]
    return {
        "step_ms_median": {n: 1e3 * v for n, v in median.items()},
        "step_ms_min": {n: 1e3 * v for n, v in best.items()},
        "ratio_of_medians": {n: median[n] / median[base] for n in dp},
        "ratio_of_minima": {n: best[n] / best[base] for n in dp},
        "ratio_paired_median": {
            n: statistics.median(d / b for d, b in zip(times[n], times[base], strict=True)) for n in dp
        },
    }


def _proc_status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise KeyError(key)


def _reset_peak_rss() -> bool:
    """Reset the kernel's resident-set high-water mark (VmHWM, what getrusage's ru_maxrss reports)
    to the current RSS, so a peak measured afterwards belongs to the steps, not to the setup."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap back, so current RSS is live data
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_memory(step: Step, repeats: int) -> dict[str, Any]:
    """Peak extra resident memory while running `step`, above the RSS just before; and the peak of
    Python-level allocations (tracemalloc: tensors' storage is not among them)."""
    gc.collect()
    reset = _reset_peak_rss()
    before = _proc_status_mib("VmRSS")
    tracemalloc.start()
    for _ in range(repeats):
        step()
    _, python_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak = _proc_status_mib("VmHWM")
    return {
        "rss_before_mib": before,
        "rss_peak_mib": peak,
        "rss_peak_above_before_mib": peak - before if reset else None,
        "python_alloc_peak_mib": python_peak / 2**20,
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def phase_split(setup: Setup, repeats: int, mode: str) -> dict[str, Any]:
    """Median wall ms per DP step and the part of it spent in PatientDPSGD.privatize (per-patient
    sums, norms, clipping, noise); the rest of the DP premium is computing per-row gradients."""
    step, grads = make_step(setup, private=True, grad_sample_mode=mode)
    engine = grads.engine
    spent: list[float] = []
    privatize = engine.privatize

    def timed(*a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        try:
            return privatize(*a, **k)
        finally:
            spent.append(time.perf_counter() - start)

    engine.privatize = timed  # type: ignore[method-assign]
    step()
    spent.clear()
    totals = [_timed(step)[0] for _ in range(repeats)]
    return {
        "mode": mode,
        "step_ms": 1e3 * statistics.median(totals),
        "privatize_ms": 1e3 * statistics.median(spent),
    }


def _op_times(step: Step, repeats: int) -> dict[str, tuple[float, int]]:
    """Self CPU ms per step and calls per step of every operator a step runs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            step()
    return {e.key: (e.self_cpu_time_total / 1e3 / repeats, e.count // repeats) for e in prof.key_averages()}


def top_ops(ops: dict[str, tuple[float, int]]) -> list[dict[str, Any]]:
    """Where a DP step's time goes: the top operators by self CPU time."""
    top = sorted(ops, key=lambda k: ops[k][0], reverse=True)[:12]
    return [{"op": k, "self_ms_per_step": ops[k][0], "calls": ops[k][1]} for k in top]


def premium_ops(before: dict[str, tuple[float, int]], after: dict[str, tuple[float, int]]) -> dict[str, Any]:
    """Where the DP premium goes: per operator, self CPU ms per step of the DP step minus the
    non-private one (profiled back to back), the largest first; the profiler's own cost is in both."""
    premium = {
        k: after.get(k, (0.0, 0))[0] - before.get(k, (0.0, 0))[0] for k in before.keys() | after.keys()
    }
    top = sorted(premium, key=premium.__getitem__, reverse=True)[:12]
    return {
        "profiled_ms_per_step": {
            "non_private": sum(t for t, _ in before.values()),
            "dp": sum(t for t, _ in after.values()),
        },
        "top_ops": [
            {
                "op": k,
                "premium_ms_per_step": premium[k],
                "calls": [before.get(k, (0.0, 0))[1], after.get(k, (0.0, 0))[1]],
            }
            for k in top
        ],
    }


def bench_preset(preset: str, cache: Path, args: argparse.Namespace, modes: list[str]) -> dict[str, Any]:
    cfg = make_config(preset, cache, args.visits, args.patients, args.pretrain_steps)
    setup = Setup(cfg, args.batch_patients)
    counts = count_parameters(setup.model)
    steps: dict[str, Step] = {"non_private": make_step(setup, private=False)[0]}
    for mode in modes:
        steps[f"dp_{mode}"] = make_step(setup, private=True, grad_sample_mode=mode)[0]
    # the larger preset's steps take seconds: fewer of them keep the run within a few minutes
    repeats = args.repeats if preset == "tiny" else args.repeats_large
    times = time_variants(steps, 1 if preset != "tiny" else args.warmup, repeats)
    wall = summarise({n: [w for w, _ in t] for n, t in times.items()})
    cpu = summarise({n: [c for _, c in t] for n, t in times.items()})
    fastest_dp = min(cpu["ratio_of_medians"], key=cpu["ratio_of_medians"].__getitem__)
    memory = {name: peak_memory(step, 2) for name, step in steps.items()} if args.memory else {}
    out: dict[str, Any] = {
        "preset": preset,
        "parameters": {**counts, "copies": len(setup.groups)},
        "batch": {
            "patients": setup.batch_patients,
            "rows_per_copy": [int(r.numel()) for r in setup.rows],
            "population": setup.n_patients,
        },
        "wall": wall,
        # process CPU time: far less disturbed than wall time by other jobs on a shared machine
        "cpu": cpu,
        "repeats": repeats,
        "fastest_dp_mode": fastest_dp.removeprefix("dp_"),
        "memory": memory,
    }
    out["dp_split"] = phase_split(setup, max(3, repeats // 3), fastest_dp.removeprefix("dp_"))
    if args.profile:
        # one profile of each step serves both fields
        private = _op_times(steps[fastest_dp], args.profile_steps)
        out["dp_profile_top_ops"] = top_ops(private)
        out["dp_premium"] = premium_ops(_op_times(steps["non_private"], args.profile_steps), private)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument(
        "--modes", nargs="+", default=["ew", "hooks", "functorch"], help="Opacus grad-sample modes"
    )
    parser.add_argument("--visits", type=int, default=5, help="T: per-visit-index copies")
    parser.add_argument("--patients", type=int, default=60, help="patients at the site (before splits)")
    parser.add_argument(
        "--batch-patients", type=int, default=9, help="patients in the batch (0.25 × 36 train)"
    )
    parser.add_argument("--pretrain-steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15, help="timed steps per variant, tiny preset")
    parser.add_argument("--repeats-large", type=int, default=5, help="timed steps per variant, other presets")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: on a shared machine, multi-threaded steps spin and stall on "
        "each other's time slices, and both wall and CPU time stop measuring the step's work)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="add the DP step's top operators and where its premium goes"
    )
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "secure_fed_bench_cache")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the memory runs")
    args = parser.parse_args()
    # a profiled step costs ~6x an unprofiled one: 10 of each kind were a third of a --quick run
    args.profile_steps = 3 if args.quick else 10
    if args.quick:
        args.warmup, args.repeats, args.repeats_large = 1, 5, 3
    torch.set_num_threads(args.threads)
    args.cache.mkdir(parents=True, exist_ok=True)
    results = [bench_preset(p, args.cache, args, args.modes) for p in args.presets]
    print(
        json.dumps(
            {
                "torch_threads": torch.get_num_threads(),
                "T": args.visits,
                "target_ratio": 1.2,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
