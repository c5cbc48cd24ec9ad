"""DP-SGD vs non-private training step on a GPU (or any train.device), small and paper-size presets;
prints JSON.

One step is `benchmarks/dp_overhead.py`'s step (train_copies' loop body: T adapter copies, forward
on a fixed batch of patients, backward, AdamW), with the model placed by `train.device` through
`secure_fed.model.device.resolve_device`. The `paper` preset is built offline: a random-weight
CvT-13-shaped CvT and a DistilGPT2-shaped GPT-2 (6 layers, 768 wide) saved into a temporary folder
(`--quick`: toy widths, for a smoke run on CPU). Times are medians over interleaved steps, with
`torch.cuda.synchronize()` around each on CUDA; samples/s counts report rows per step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dp_overhead import Setup, make_step  # noqa: E402

from secure_fed.config import RunConfig, build_config  # noqa: E402
from secure_fed.model.device import DeviceUnavailable, resolve_device  # noqa: E402


def paper_checkpoints(folder: Path, quick: bool) -> tuple[Path, Path]:
    from transformers import CvtConfig, CvtModel, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    if quick:
        cvt = CvtConfig(embed_dim=[16, 32, 48], num_heads=[1, 2, 3], depth=[1, 2, 3])
        gpt = GPT2Config(n_embd=64, n_layer=6, n_head=4, n_positions=128)
    else:  # CvT-13 and DistilGPT2 shapes
        cvt = CvtConfig(embed_dim=[64, 192, 384], num_heads=[1, 3, 6], depth=[1, 2, 10])
        gpt = GPT2Config(n_embd=768, n_layer=6, n_head=12, n_positions=1024)
    CvtModel(cvt).save_pretrained(folder / "cvt")
    GPT2LMHeadModel(gpt).save_pretrained(folder / "distilgpt2")
    return folder / "cvt", folder / "distilgpt2"


def make_config(preset: str, device: str, cache: Path, args: argparse.Namespace) -> RunConfig:
    model: dict[str, Any] = {"preset": preset, "cache_dir": str(cache), "pretrain_steps": 0}
    image_size = 32
    if preset == "paper":
        cvt, gpt = paper_checkpoints(cache / "paper", args.quick)
        model |= {"encoder": str(cvt), "decoder_path": str(gpt)}
        image_size = 32 if args.quick else 224
    return build_config(
        {
            "seed": 0,
            "out": str(cache / "unused-run"),
            "data": {
                "synth": {
                    "sites": 1,
                    "patients": args.patients,
                    "visits": args.visits,
                    "image_size": image_size,
                },
                "max_visits": args.visits,
            },
            "model": model,
            "train": {"device": device},
            "dp": {
                "enabled": True,
                "noise_multiplier": 1.0,
                "budget_epsilon": 1e6,  # a timing run: the config asks for a budget, never reached here
                "max_grad_norm": 1.0,
                "sample_rate": 0.25,
            },
        }
    )


def time_steps(setup: Setup, steps: int, warmup: int, cuda: bool) -> dict[str, Any]:
    variants = {"non_private": make_step(setup, private=False)[0], "dp": make_step(setup, private=True)[0]}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(warmup + steps):
        for name, step in variants.items():
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize()
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
    rows = sum(int(r.numel()) for r in setup.rows)
    out: dict[str, Any] = {"rows_per_step": rows, "batch_patients": setup.batch_patients}
    for name, ts in times.items():
        median = statistics.median(ts)
        out[name] = {"median_s": median, "min_s": min(ts), "samples_per_s": rows / median}
    out["dp_over_non_private"] = out["dp"]["median_s"] / out["non_private"]["median_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="train.device: auto, cpu or cuda")
    parser.add_argument("--presets", default="small,paper")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--patients", type=int, default=64, help="synthetic patients of the site")
    parser.add_argument("--visits", type=int, default=3, help="T: adapter copies")
    parser.add_argument("--batch", type=int, default=16, help="patients per step")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 step, toy paper widths")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.patients, args.visits, args.batch = 1, 0, 8, 2, 4
    try:
        device = resolve_device(args.device)
    except DeviceUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    cuda = device.type == "cuda"
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "torch": torch.__version__,
        "quick": args.quick,
        "presets": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            cfg = make_config(preset, args.device, Path(tmp) / preset, args)
            setup = Setup(cfg, args.batch)
            result["presets"][preset] = {
                "trainable_parameters": sum(p.numel() for p in setup.model.parameters() if p.requires_grad),
                "parameters": sum(p.numel() for p in setup.model.parameters()),
                "image_size": cfg.data.synth.image_size,
                **time_steps(setup, args.steps, args.warmup, cuda),
            }
            if cuda:
                result["presets"][preset]["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
                torch.cuda.reset_peak_memory_stats()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
