"""The hospital-scale DP recipe, chosen without private data; prints one JSON object.

Reads only public things: the public pretraining domain (fresh patients of it, drawn with a seed
neither the base's pretraining cohort nor any site uses, so the gradients are not those of data the
base memorised) and the sizes in configs/hospital-scale.toml (a site's size is not its patients'
data).

- C (``dp.max_grad_norm``): the median per-patient gradient norm of the adapters at their start
  (the pretrained base, fresh adapters) over the public patients, rounded to one significant digit:
  half the patients are clipped, the rest keep their gradient (Ponomareva et al. 2023, section 5.4:
  C near the median norm, tuned on public data at no privacy cost);
- the Poisson rate (``dp.sample_rate``): the smallest of a few candidates whose expected batch is at
  least ``--min-batch`` patients at the smallest site (large batches, few steps: De et al. 2022);
- for the chosen rate, rounds and local epochs: σ calibrated at every ε of the grid by the same
  split the sites use, and the noise each step adds to the averaged gradient, σ·C / (q·n), at the
  smallest and the largest site.

The rate rule above, rounds and local epochs are the recipe before tuning. benchmarks/dp_tune.py
chooses the rate, passes, learning rate and iterate averaging by training on public patients at
the noise the target implies (and C by the median rule above, on its own public pool); the config
carries its choice.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from secure_fed.config import RunConfig, load_config
from secure_fed.data.batching import Examples, make_examples
from secure_fed.data.cohort import load_cohort
from secure_fed.data.synthetic import synthesize
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.dp.calibration import default_delta, split_budget
from secure_fed.model.setup import PUBLIC_SEED, build_report_model, visit_slots
from secure_fed.site.private import steps_per_epoch
from secure_fed.site.site import with_visit

CONFIG = Path(__file__).parents[1] / "configs" / "hospital-scale.toml"
RATES = (0.25, 0.2, 0.1, 0.05, 0.02)
EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0)
FRESH_PUBLIC_SEED = PUBLIC_SEED + 17  # unseen public patients: not the base's pretraining cohort


def per_patient_norms(model: Any, examples: Any) -> list[float]:
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    norms = []
    for slot in sorted({int(s) for s in examples.patient_slot}):
        rows = torch.nonzero(examples.patient_slot == slot).flatten()
        loss = model(examples.images[rows], examples.input_ids[rows], examples.profiles[rows]).sum()
        grads = torch.autograd.grad(loss, params)
        norms.append(float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads))))
    return norms


def recipe_config(out: Path, cache: Path | None, pretrain_steps: int | None) -> RunConfig:
    """configs/hospital-scale.toml with the run folder, model cache and base length overridden."""
    overrides: dict[str, Any] = {"out": str(out)}
    if cache is not None:
        overrides["model.cache_dir"] = str(cache)
    if pretrain_steps is not None:
        overrides["model.pretrain_steps"] = pretrain_steps
    return load_config(CONFIG, overrides)


def public_examples(cfg: RunConfig, patients: int, seed: int, folder: Path) -> Examples:
    """Fresh patients of the public pretraining domain (no site's data), as training examples.

    Every patient gets the uniform GMM profile: no site's GMM is fitted to public patients, and the
    uniform one favours no component."""
    manifest = synthesize(
        folder,
        sites=1,
        patients=patients,
        visits=cfg.data.max_visits,
        seed=seed,
        image_size=cfg.data.synth.image_size,
        domain="public",
    )
    tokenizer = load_tokenizer(cfg.model.tokenizer_path, cfg.data.tokenizer)
    cohort = load_cohort(manifest, cfg.data.synth.image_size)
    key = hashlib.sha256(b"public-cohort").digest()
    examples = make_examples(cohort.visits, tokenizer, key, cfg.data.max_report_tokens, cfg.data.max_visits)
    uniform = torch.full((len(examples), cfg.model.gmm_components), 1.0 / cfg.model.gmm_components)
    examples.profiles = with_visit(uniform, examples.visit_index, visit_slots(cfg))
    return examples


def _site_sizes(cfg: RunConfig) -> list[int]:
    return cfg.data.synth.site_patients or [cfg.data.synth.patients] * cfg.data.synth.sites


def train_sizes(cfg: RunConfig) -> list[int]:
    """Each site's training patients, from the public site sizes and split fractions."""
    d = cfg.data
    return [n - round(n * d.val_fraction) - round(n * d.test_fraction) for n in _site_sizes(cfg)]


def val_sizes(cfg: RunConfig) -> list[int]:
    """Each site's validation patients, from the public site sizes and split fractions."""
    return [round(n * cfg.data.val_fraction) for n in _site_sizes(cfg)]


def one_digit(x: float) -> float:
    return float(f"{x:.1g}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--patients", type=int, default=120, help="fresh public patients for the norms")
    parser.add_argument("--min-batch", type=float, default=20.0, help="expected batch at the smallest site")
    parser.add_argument("--cache", type=Path, default=None, help="model cache (default: the config's)")
    parser.add_argument("--pretrain-steps", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="few patients, short base (smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.quick:
        args.patients = 8
        args.pretrain_steps = args.pretrain_steps if args.pretrain_steps is not None else 20
    with tempfile.TemporaryDirectory() as tmp:
        cfg = recipe_config(Path(tmp) / "run", args.cache, args.pretrain_steps)
        model = build_report_model(cfg)
        examples = public_examples(cfg, args.patients, FRESH_PUBLIC_SEED, Path(tmp) / "public")
        norms = per_patient_norms(model, examples)
    clip = one_digit(statistics.median(norms))
    train = train_sizes(cfg)
    # the most steps a pass (the smallest rate) whose expected batch at the smallest site is large
    # enough: large batches, but enough steps in the few passes the time budget allows
    rate = next((q for q in sorted(RATES) if q * min(train) >= args.min_batch), max(RATES))
    epochs = cfg.fed.rounds * cfg.train.local_epochs
    steps = epochs * steps_per_epoch(rate)
    delta = cfg.dp.delta if cfg.dp.delta is not None else default_delta(min(train))
    noise: dict[str, Any] = {}
    for eps in EPSILONS:
        split = split_budget(
            eps,
            delta,
            sampling_rate=rate,
            rounds=cfg.fed.rounds,
            steps_per_round=cfg.train.local_epochs * steps_per_epoch(rate),
            gmm_fraction=cfg.dp.gmm_fraction,
        )
        sigma = split.dpsgd_noise_multiplier
        noise[f"{eps:g}"] = {
            "sigma": round(sigma, 4),
            "noise_per_coordinate_over_C": {
                "smallest_site": round(sigma / (rate * min(train)), 5),
                "largest_site": round(sigma / (rate * max(train)), 5),
            },
        }
    quantiles = statistics.quantiles(norms, n=10) if len(norms) > 1 else norms * 9
    print(
        json.dumps(
            {
                "config": str(CONFIG.relative_to(CONFIG.parents[1])),
                "public_patients": len(norms),
                "per_patient_grad_norm": {
                    "median": round(statistics.median(norms), 4),
                    "p10": round(quantiles[0], 4),
                    "p90": round(quantiles[-1], 4),
                },
                "choice": {
                    "max_grad_norm": clip,
                    "sample_rate": rate,
                    "expected_batch": {"smallest_site": rate * min(train), "largest_site": rate * max(train)},
                    "epochs": epochs,
                    "steps": steps,
                    "rounds": cfg.fed.rounds,
                    "local_epochs": cfg.train.local_epochs,
                    "delta": delta,
                    "lr": cfg.train.lr,
                },
                "sigma_by_epsilon": noise,
                "threads": torch.get_num_threads(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
