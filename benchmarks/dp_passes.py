"""Memory and time of a private step of the pooled hospital-scale cohort, in one forward/backward
pass and in passes of at most k patients (`dp.max_patients_per_pass`); prints JSON.

The step is private `central`'s (configs/hospital-scale.toml at Poisson rate 0.1 over the 7,000
pooled train patients, about 700 patients and 5,600 report rows a step), the real loop
(`train_copies` with `DPGradients`, one adapter copy, the tiny preset on one torch thread). Each
variant runs in a process of its own, since a process's peak resident memory is its whole life's:
the cohort is loaded and the model built (``rss_before_steps_gb``), then ``--steps`` steps run
(``peak_rss_gb``: the process's peak, steps included). Every variant draws the same patients and
the same noise (one fixed key), so the adapters after the steps must agree: ``max_abs_diff`` is
their largest difference from the one-pass variant's (float rounding only; the clipping and noise
are per patient over the whole step, whatever the passes).

``--quick``: a slice of the cohort (``--scale``) and small passes, for the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

CONFIG = Path(__file__).parents[1] / "configs" / "hospital-scale.toml"


def _status_gb(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024**2  # kB -> GiB
    raise RuntimeError(f"/proc/self/status has no {field}")


def child(
    per_pass: int | None, scale: float, steps: int, cache: Path | None, state_file: Path
) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from secure_fed.config import load_config
    from secure_fed.dp.keystream import NoiseStream
    from secure_fed.lab.centralised import pooled_splits
    from secure_fed.model.setup import build_report_model
    from secure_fed.site.private import DPGradients
    from secure_fed.site.training import LocalTrainSettings, train_copies

    # the step this benchmark measures (700 patients at q = 0.1), not the smaller one of the
    # configs' tuned recipe: the memory question is the largest pooled step
    overrides: dict[str, Any] = {"dp.sample_rate": 0.1}
    cfg = load_config(CONFIG)
    if scale != 1.0:
        assert cfg.data.synth.site_patients is not None
        overrides["data.synth.site_patients"] = [
            max(20, round(n * scale)) for n in cfg.data.synth.site_patients
        ]
    if cache is not None:
        overrides["model.cache_dir"] = str(cache)
    cfg = load_config(CONFIG, overrides)
    pooled, _, _ = pooled_splits(cfg)
    model = build_report_model(cfg)
    n = int(pooled.patient_slot.max()) + 1
    times: list[tuple[float, float]] = []

    class Timed(DPGradients):
        """The loop's DPGradients, `steps` steps in all, timing each (sample to released gradient)."""

        def steps_per_epoch(self, n_patients: int) -> int:
            return steps

        def sample(self, n_patients: int) -> torch.Tensor:
            self._t = (time.perf_counter(), time.process_time())
            return super().sample(n_patients)

        def backward(self, copies, losses, patient_index, last_pass=True) -> None:  # type: ignore[no-untyped-def]
            super().backward(copies, losses, patient_index, last_pass)
            if last_pass:
                times.append((time.perf_counter() - self._t[0], time.process_time() - self._t[1]))

    rss_before = _status_gb("VmHWM")
    grads = Timed(
        cfg.dp.sample_rate, cfg.dp.max_grad_norm, 1.0, n, steps, NoiseStream(b"\x2a" * 32), per_pass
    )
    result = train_copies(
        model, model.trainable_state(), [pooled], LocalTrainSettings(lr=cfg.train.lr), seed=0, gradients=grads
    )
    torch.save(result.states[0], state_file)
    later = times[1:] or times  # the first step also pays for allocations the later ones reuse
    return {
        "max_patients_per_pass": per_pass,
        "pooled_train_patients": n,
        "steps": steps,
        "rows_per_step": len(pooled) * cfg.dp.sample_rate,
        "rss_before_steps_gb": round(rss_before, 3),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 3),
        "step_wall_s": [round(w, 3) for w, _ in times],
        "step_cpu_s": [round(c, 3) for _, c in times],
        "median_wall_s_after_first": round(statistics.median(w for w, _ in later), 3),
        "median_cpu_s_after_first": round(statistics.median(c for _, c in later), 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-pass", default="none,256,128,64", help="variants: 'none' (one pass) or patients")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0, help="each site's size times this (1 = full)")
    p.add_argument("--cache", type=Path, default=None, help="model cache (default: the config's)")
    p.add_argument("--quick", action="store_true", help="a slice of the cohort and small passes")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--state", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.scale, args.steps, args.per_pass = 0.02, 2, "none,8"
    variants = [None if v.strip() == "none" else int(v) for v in args.per_pass.split(",")]
    if args.child:
        assert args.state is not None
        print(json.dumps(child(variants[0], args.scale, args.steps, args.cache, args.state)))
        return 0
    if variants[0] is not None:
        print("--per-pass must start with 'none' (the one-pass reference)", file=sys.stderr)
        return 2
    import torch

    results = []
    first: dict[str, torch.Tensor] | None = None  # the one-pass variant's adapters
    with tempfile.TemporaryDirectory() as tmp:
        for k, per_pass in enumerate(variants):
            state = Path(tmp) / f"state-{k}.pt"
            cmd = [
                sys.executable,
                __file__,
                "--child",
                "--per-pass",
                "none" if per_pass is None else str(per_pass),
            ]
            cmd += ["--steps", str(args.steps), "--scale", str(args.scale), "--state", str(state)]
            if args.cache is not None:
                cmd += ["--cache", str(args.cache)]
            print(f"variant {per_pass or 'one pass'} ...", file=sys.stderr, flush=True)
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stderr[-4000:], file=sys.stderr)
                return 1
            row = json.loads(done.stdout.strip().splitlines()[-1])
            mine = torch.load(state, weights_only=True)
            first = mine if first is None else first
            row["max_abs_diff_vs_one_pass"] = max(float((first[n] - mine[n]).abs().max()) for n in first)
            results.append(row)
            print(
                f"  peak {row['peak_rss_gb']} GiB, step {row['median_wall_s_after_first']} s", file=sys.stderr
            )
    one = results[0]
    for row in results:
        row["peak_over_one_pass"] = round(row["peak_rss_gb"] / one["peak_rss_gb"], 3)
        row["steps_memory_gb"] = round(row["peak_rss_gb"] - row["rss_before_steps_gb"], 3)
        row["wall_over_one_pass"] = round(
            row["median_wall_s_after_first"] / one["median_wall_s_after_first"], 3
        )
    print(json.dumps({"config": str(CONFIG.name), "scale": args.scale, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
