"""Tune the hospital-scale DP recipe on public patients only, at the noise the target implies; prints
one JSON object.

The question: which Poisson rate q, number of passes, learning rate and iterate averaging train
best at the target's ε, for the pooled training cohort of configs/hospital-scale.toml (N patients:
private `central`, and distributed DP, whose step is one private step over the union of the
sites)? No site's data is read: the training pool and the held-out pool are fresh patients of the
public pretraining domain (seeds neither the base's pretraining cohort, nor benchmarks/dp_recipe.py's
norm patients, nor any site uses), and the only things read of the target are its public sizes.

For every candidate (q, passes) the target runs steps = passes · ⌈1/q⌉ DP-SGD steps, and σ is
calibrated for (ε, δ, q, steps) with the config's accountant (`--accountant`, PRV where the noise is
the sites' Gaussian) and the same share for the GMM histogram as private central's plan. Its noise
on the averaged gradient is σ·C / (q·N) per coordinate. The emulation trains on M < N public
patients and matches that noise exactly, σ_e·C / (q_e·M) = σ·C / (q·N), by one of two rules:

- "rate" (default): q_e = q, σ_e = σ·M/N. Same steps, same rate, an expected batch of q·M instead
  of q·N: the DP noise is the target's, the sampling noise of the smaller batch is larger (the
  emulation errs pessimistic), and a cell costs passes·M patient-gradients.
- "batch": q_e = min(1, q·N/M), σ_e = σ·q_e·M/(q·N) (= σ while q·N ≤ M). The target's batch where
  M allows it; at the cap the whole pool is each step's batch and σ shrinks by the same factor. A
  cell costs steps·q_e·M patient-gradients (up to ⌈1/q⌉ times "rate"'s).

Either way the steps are the target's (passes · ⌈1/q⌉), so the optimiser sees the target's number of
noisy updates of the target's noise. C is benchmarks/dp_recipe.py's rule (the median per-patient
gradient norm of the fresh adapters over the public training pool, to one digit; scaled by
`--clip-factors`). Each run's iterates give every averaging at no extra training: the last iterate
("none") and bias-corrected EMAs with decay 1 − 1/(h·steps) for each horizon h of `--ema-horizons`
(the average spans about a fraction h of the run, whatever its length).

Each (run, averaging) cell is scored by the mean per-report validation loss on the public held-out
pool; the choice is the cell with the lowest, ties to fewer passes. CIDEr on the held-out pool is
reported for the base, the chosen cell and the config's current recipe (decoding is too slow for
every cell here). The noise keys are fixed (public data: nothing to hide), so every cell sees the
same noise stream: differences between cells are the settings', not the draw's.

    python benchmarks/dp_tune.py --epsilon 8 > docs/results/dp-recipe-tuning.json
    python benchmarks/dp_tune.py --quick        # a tiny smoke run (tests/test_benchmarks.py)
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from dp_recipe import (  # noqa: E402  (benchmarks/ is on sys.path when run as a script)
    CONFIG,
    FRESH_PUBLIC_SEED,
    one_digit,
    per_patient_norms,
    public_examples,
    recipe_config,
    train_sizes,
)

from secure_fed.config import RunConfig  # noqa: E402
from secure_fed.data.batching import Examples  # noqa: E402
from secure_fed.data.tokenizer import load_tokenizer  # noqa: E402
from secure_fed.dp.calibration import default_delta, split_budget  # noqa: E402
from secure_fed.dp.keystream import NOISE_KEY_BYTES, NoiseStream  # noqa: E402
from secure_fed.model.report_model import ReportModel  # noqa: E402
from secure_fed.model.setup import build_report_model  # noqa: E402
from secure_fed.model.vectors import flatten, unflatten  # noqa: E402
from secure_fed.server.averaging import IterateAverage  # noqa: E402
from secure_fed.site.evaluation import evaluate_split  # noqa: E402
from secure_fed.site.private import DPGradients, steps_per_epoch  # noqa: E402
from secure_fed.site.training import LocalTrainSettings, State, evaluate_loss, train_copies  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN_SEED = FRESH_PUBLIC_SEED + 1  # the tuning's training pool: not dp_recipe.py's norm patients
HELD_OUT_SEED = FRESH_PUBLIC_SEED + 2  # its held-out pool: disjoint from the training pool
RATES = (0.02, 0.05, 0.1)
PASSES = (5, 10)
LRS = (1e-3, 3e-3, 1e-2)
EMA_HORIZONS = (0.1, 0.25)
RULE = "the lowest validation loss on the public held-out pool; ties to fewer passes"


@dataclass(frozen=True)
class Emulation:
    """The emulation's sampling rate and noise multiplier for one target (q, σ, N) on M patients."""

    sample_rate: float
    noise_multiplier: float
    expected_batch: float

    def noise_std_over_clip(self, patients: int) -> float:
        """Noise std per coordinate of the averaged gradient, in units of C: σ_e / (q_e·M)."""
        return self.noise_multiplier / (self.sample_rate * patients)


def matched_noise(rate: float, sigma: float, target: int, patients: int, rule: str) -> Emulation:
    """q_e and σ_e on `patients` public patients with σ_e/(q_e·M) = σ/(q·N) (the module docstring)."""
    if rule == "rate":
        q_e = rate
    elif rule == "batch":
        q_e = min(1.0, rate * target / patients)
    else:
        raise ValueError(f"unknown matching rule {rule!r}; expected 'rate' or 'batch'")
    return Emulation(q_e, sigma * q_e * patients / (rate * target), q_e * patients)


def target_sigma(
    epsilon: float, delta: float, rate: float, steps: int, accountant: str, gmm_fraction: float | None
) -> float:
    """σ of private central's plan at the target: `steps` Poisson-sampled steps at `rate`, with the
    GMM histogram's share where the hyper-LoRA releases one."""
    return split_budget(
        epsilon,
        delta,
        sampling_rate=rate,
        rounds=1,
        steps_per_round=steps,
        gmm_fraction=gmm_fraction,
        accountant=accountant,  # type: ignore[arg-type]
    ).dpsgd_noise_multiplier


class TargetSteps(DPGradients):
    """DP-SGD at the emulation's rate taking the target's steps per pass (⌈1/q⌉, not ⌈1/q_e⌉)."""

    def __init__(self, *args: Any, per_pass: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.per_pass = per_pass

    def steps_per_epoch(self, n_patients: int) -> int:
        return self.per_pass


def _noise(purpose: str) -> NoiseStream:
    # public patients only: a fixed key and no fresh entropy, so every cell draws the same stream
    key = hashlib.sha256(b"dp-tune/" + purpose.encode()).digest()[:NOISE_KEY_BYTES]
    return NoiseStream.for_release(key, purpose, 1, entropy=lambda n: bytes(n))


def val_loss(model: ReportModel, state: State, held_out: Examples) -> float:
    model.load_trainable_state(state)
    loss = evaluate_loss(model, held_out)
    return loss if math.isfinite(loss) else math.inf


def train_run(
    model: ReportModel,
    start: State,
    train: Examples,
    held_out: Examples,
    *,
    emulation: Emulation,
    clip: float,
    lr: float,
    passes: int,
    per_pass: int,
    patients: int,
    horizons: tuple[float, ...],
    batch_patients: int,
    max_patients_per_pass: int | None,
) -> tuple[dict[str, dict[str, Any]], dict[str, State], float, float]:
    """One DP-SGD run; the validation loss of its last iterate and of each EMA, the states, the train
    wall time and the mean clipped fraction."""
    steps = passes * per_pass
    gradients = TargetSteps(
        emulation.sample_rate,
        clip,
        emulation.noise_multiplier,
        patients,
        steps,
        _noise("dpsgd"),
        max_patients_per_pass,
        per_pass=per_pass,
    )
    averages = {
        f"ema{h:g}": IterateAverage("ema", steps, decay=1.0 - 1.0 / max(h * steps, 1.0 + 1e-9))
        for h in horizons
    }

    def after_step(step: int, states: list[State]) -> None:
        vector = flatten(states[0]).numpy()
        for average in averages.values():
            average.update(vector, step)

    settings = LocalTrainSettings(lr=lr, epochs=passes, batch_patients=batch_patients)
    began = time.perf_counter()
    result = train_copies(model, start, [train], settings, seed=0, gradients=gradients, after_step=after_step)
    wall = time.perf_counter() - began
    last = result.states[0]
    states: dict[str, State] = {"none": last}
    scores: dict[str, dict[str, Any]] = {"none": {"average": "none", "ema_decay": None}}
    for name, average in averages.items():
        states[name] = unflatten(torch.from_numpy(average.released(flatten(last).numpy())).float(), last)
        scores[name] = {"average": "ema", "ema_decay": round(average.decay, 6)}
    for name, state in states.items():
        scores[name]["val_loss"] = round(val_loss(model, state, held_out), 5)
    model.load_trainable_state(start)
    clipped = statistics.fmean(gradients.clipped) if gradients.clipped else math.nan
    return scores, states, wall, clipped


def cider(cfg: RunConfig, model: ReportModel, state: State, held_out: Examples) -> float:
    model.load_trainable_state(state)
    tokenizer = load_tokenizer(cfg.model.tokenizer_path, cfg.data.tokenizer)
    metrics = evaluate_split(model, held_out, tokenizer.decode, cfg.data.max_report_tokens + 1)
    return round(float(metrics["CIDEr"]), 4)


def choose(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell RULE picks."""
    return min(cells, key=lambda c: (c["val_loss"], c["passes"]))


def config_settings(cell: dict[str, Any], accountant: str) -> dict[str, Any]:
    """The config keys that carry a cell's recipe (one local epoch a round in site mode)."""
    return {
        "dp.sample_rate": cell["sample_rate"],
        "dp.max_grad_norm": cell["max_grad_norm"],
        "dp.accountant": accountant,
        "train.lr": cell["lr"],
        "train.average": cell["average"],
        "train.ema_decay": cell["ema_decay"],
        "passes (fed.rounds × train.local_epochs)": cell["passes"],
        "private central's steps": cell["steps"],
    }


def _git_commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def _log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--target-patients", type=int, default=None,
                        help="N (default: the config's pooled training patients)")  # fmt: skip
    parser.add_argument("--train-patients", type=int, default=240, help="M: the public training pool")
    parser.add_argument("--held-out-patients", type=int, default=80, help="the public held-out pool")
    parser.add_argument("--rule", choices=("rate", "batch"), default="rate", help="noise matching")
    parser.add_argument("--accountant", choices=("rdp", "prv"), default=None, help="default: the config's")
    parser.add_argument("--rates", type=float, nargs="+", default=list(RATES))
    parser.add_argument("--passes", type=int, nargs="+", default=list(PASSES))
    parser.add_argument("--lrs", type=float, nargs="+", default=list(LRS))
    parser.add_argument("--ema-horizons", type=float, nargs="+", default=list(EMA_HORIZONS))
    parser.add_argument("--clip-factors", type=float, nargs="+", default=[1.0], help="C = factor × rule's")
    parser.add_argument("--no-cider", action="store_true", help="skip CIDEr of the base/choice/current")
    parser.add_argument("--cache", type=Path, default=None, help="model cache (default: the config's)")
    parser.add_argument("--pretrain-steps", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="tiny pools, grid and base (smoke run)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.quick:
        args.train_patients, args.held_out_patients = 12, 6
        args.rates, args.passes, args.lrs, args.ema_horizons = [0.25, 0.5], [1], [1e-3, 1e-2], [0.5]
        args.pretrain_steps = args.pretrain_steps if args.pretrain_steps is not None else 20
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = recipe_config(Path(tmp) / "run", args.cache, args.pretrain_steps)
        accountant = args.accountant or cfg.dp.accountant
        target = args.target_patients or sum(train_sizes(cfg))
        delta = cfg.dp.delta if cfg.dp.delta is not None else default_delta(target)
        gmm_fraction = cfg.dp.gmm_fraction if cfg.hyper_lora_on else None
        _log("building the base")
        model = build_report_model(cfg)
        start = model.trainable_state()
        train = public_examples(cfg, args.train_patients, TRAIN_SEED, Path(tmp) / "train")
        held_out = public_examples(cfg, args.held_out_patients, HELD_OUT_SEED, Path(tmp) / "held-out")
        patients = int(train.patient_slot.max()) + 1
        norms = per_patient_norms(model, train)
        model.load_trainable_state(start)
        rule_clip = one_digit(statistics.median(norms))
        base_loss = round(val_loss(model, start, held_out), 5)
        _log(f"C by the median rule {rule_clip}; base validation loss {base_loss}")
        runs = list(itertools.product(args.rates, args.passes, args.lrs, args.clip_factors))
        cells: list[dict[str, Any]] = []
        sigmas: dict[tuple[float, int], float] = {}
        kept: dict[tuple[int, str], State] = {}
        for index, (rate, passes, lr, factor) in enumerate(runs):
            per_pass = steps_per_epoch(rate)
            steps = passes * per_pass
            if (rate, passes) not in sigmas:
                sigmas[rate, passes] = target_sigma(
                    args.epsilon, delta, rate, steps, accountant, gmm_fraction
                )
            sigma = sigmas[rate, passes]
            emulation = matched_noise(rate, sigma, target, patients, args.rule)
            clip = one_digit(rule_clip * factor)
            scores, states, wall, clipped = train_run(
                model, start, train, held_out,
                emulation=emulation, clip=clip, lr=lr, passes=passes, per_pass=per_pass,
                patients=patients, horizons=tuple(args.ema_horizons),
                batch_patients=cfg.train.batch_size, max_patients_per_pass=cfg.dp.max_patients_per_pass,
            )  # fmt: skip
            for name, score in scores.items():
                kept[index, name] = states[name]
                cells.append(
                    {
                        "run": index,
                        "variant": name,
                        "sample_rate": rate,
                        "passes": passes,
                        "steps": steps,
                        "lr": lr,
                        "max_grad_norm": clip,
                        "sigma": round(sigma, 4),
                        "target_noise_std_over_C": sigma / (rate * target),
                        "emulation": {
                            **asdict(emulation),
                            "noise_std_over_C": emulation.noise_std_over_clip(patients),
                        },
                        **score,
                        "train_wall_s": round(wall, 1),
                        "clipped_fraction": round(clipped, 3),
                    }
                )
            best = min(s["val_loss"] for s in scores.values())
            _log(
                f"run {index + 1}/{len(runs)}: q={rate} passes={passes} lr={lr:g} C={clip} σ={sigma:.3f} "
                f"σ_e={emulation.noise_multiplier:.4g} best val loss {best} ({wall:.0f} s)"
            )
        chosen = choose(cells)
        # the config's q, passes, lr and averaging at the rule's C: the config's C is the same rule's
        # on another public pool, so a digit apart would leave no cell to compare against
        current = next(
            (c for c in cells if c["sample_rate"] == cfg.dp.sample_rate and c["lr"] == cfg.train.lr
             and c["passes"] == cfg.fed.rounds * cfg.train.local_epochs
             and c["average"] == cfg.train.average and c["max_grad_norm"] == rule_clip
             and (c["average"] != "ema" or c["ema_decay"] == round(cfg.train.ema_decay, 6))),
            None,
        )  # fmt: skip
        cider_scores: dict[str, float] | None = None
        if not args.no_cider:
            _log("CIDEr of the base, the choice and the current recipe")

            def state_of(cell: dict[str, Any]) -> State:
                return kept[cell["run"], cell["variant"]]

            cider_scores = {
                "base": cider(cfg, model, start, held_out),
                "choice": cider(cfg, model, state_of(chosen), held_out),
            }
            if current is not None:
                cider_scores["current_recipe"] = cider(cfg, model, state_of(current), held_out)
    out = {
        "question": "the DP-SGD recipe (q, passes, lr, C, averaging) with the lowest public validation loss "
        "at the target's per-step noise",
        "config": str(CONFIG.relative_to(ROOT)),
        "target": {
            "patients": target,
            "epsilon": args.epsilon,
            "delta": delta,
            "accountant": accountant,
            "gmm_fraction": gmm_fraction,
        },
        "emulation": {
            "rule": args.rule,
            "matching": "σ_e·C/(q_e·M) = σ·C/(q·N); steps = passes·⌈1/q⌉ (the target's)",
            "public_train_patients": patients,
            "public_held_out_patients": int(held_out.patient_slot.max()) + 1,
            "held_out_reports": len(held_out),
            "seeds": {"train": TRAIN_SEED, "held_out": HELD_OUT_SEED},
        },
        "clip": {
            "rule": "median per-patient gradient norm of the fresh adapters over the public training pool, "
            "to one digit",
            "median_norm": round(statistics.median(norms), 4),
            "rule_value": rule_clip,
            "factors": args.clip_factors,
        },
        "grid": {
            "rates": args.rates,
            "passes": args.passes,
            "lrs": args.lrs,
            "ema_horizons": args.ema_horizons,
            "ema_decay": "1 − 1/(h·steps)",
        },
        "base_val_loss": base_loss,
        "cells": cells,
        "rule": RULE,
        "choice": {**chosen, "config": config_settings(chosen, accountant)},
        "current_recipe": current,
        "cider_held_out": cider_scores,
        "wall_s": round(time.perf_counter() - began, 1),
        "threads": torch.get_num_threads(),
        "source": {
            "command": " ".join(
                ["python", "benchmarks/dp_tune.py", *(sys.argv[1:] if argv is None else argv)]
            ),
            "commit": _git_commit(),
            "date": dt.date.today().isoformat(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"1-min load {os.getloadavg()[0]:.1f} at the end",
        },
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
