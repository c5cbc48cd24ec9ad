"""Cost of the hospital-scale benchmark (configs/hospital-scale.toml) on this machine; prints JSON.

Measured on a slice of the hospital cohort (every site's size times ``--scale``), with the tiny
preset on one torch thread, as a sweep runs it:

- ``train``: ms per patient-epoch of `train_copies` over site0's train patients, one adapter copy
  (the pooled methods), non-private (`MinibatchGradients`, the config's batch) and DP-SGD
  (`DPGradients` at the config's Poisson rate; the cost does not depend on σ), over the patients
  an epoch trained (DP: the patients Poisson sampling drew); each with the loss's padding trim
  (``after``) and without it (``before``), interleaved epoch by epoch;
- ``eval_ms_per_report``: greedy decoding and scoring of site0's test reports (a run scores every
  test visit once, at its end);
- ``decode``: greedy decoding alone of one batch of those reports (up to 64, the evaluation's
  batch), ms per report with the key/value cache `ReportModel.generate` uses and with the whole
  prefix recomputed each step, interleaved, median of ``--repeats``; and whether their ids agree;
- ``step_split_ms``: where a step of 32 rows goes (the encoder's frozen prefix — patch embedding and
  position embedding, the only part of the encoder without LoRA —, the whole encoder, the forward,
  forward + backward);
- ``encoder_trainable``: the encoder's trainable parameters (LoRA on every attention block: its
  visual tokens change with training, so they cannot be cached; only the frozen prefix could be);
- ``grid_estimate``: the wall time of issue 30's grid at full scale from these per-unit costs;
- with ``--cells``, one real sweep cell each of ``central`` at ε = ∞ and at ``--epsilon`` on the
  slice, its wall time over its patient-epochs (evaluation and setup included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.config import RunConfig, load_config
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.dp.keystream import NOISE_KEY_BYTES, NoiseStream
from secure_fed.model import report_model
from secure_fed.model.setup import build_report_model, visit_slots
from secure_fed.site.evaluation import generate_reports
from secure_fed.site.private import DPGradients, steps_per_epoch
from secure_fed.site.site import attach_profiles, load_site, patient_profiles
from secure_fed.site.training import LocalTrainSettings, MinibatchGradients, train_copies

CONFIG = Path(__file__).parents[1] / "configs" / "hospital-scale.toml"
EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0)
SEEDS = 3


def slice_config(scale: float, cache: Path, out: Path, pretrain_steps: int | None) -> RunConfig:
    full = load_config(CONFIG)
    assert full.data.synth.site_patients is not None
    sizes = [max(20, round(n * scale)) for n in full.data.synth.site_patients]
    overrides: dict[str, Any] = {
        "data.synth.site_patients": sizes,
        "model.cache_dir": str(cache),
        "out": str(out),
    }
    if pretrain_steps is not None:
        overrides["model.pretrain_steps"] = pretrain_steps
    return load_config(CONFIG, overrides)


def _ms(seconds: float, units: float) -> float:
    return round(1000.0 * seconds / max(units, 1e-9), 3)


def _epoch(cfg: RunConfig, model: Any, train: Any, private: bool) -> tuple[float, int, int]:
    """One epoch of `train_copies`: (seconds, patients trained, steps)."""
    n = int(train.patient_slot.max()) + 1
    settings = LocalTrainSettings(lr=cfg.train.lr, epochs=1, batch_patients=cfg.train.batch_size)
    drawn: list[int] = []
    if private:
        q = cfg.dp.sample_rate
        noise = NoiseStream.for_release(os.urandom(NOISE_KEY_BYTES), "bench", 0)

        class Counting(DPGradients):
            def sample(self, n_patients: int) -> torch.Tensor:
                chosen = super().sample(n_patients)
                drawn.append(int(chosen.numel()))
                return chosen

        grads: Any = Counting(q, cfg.dp.max_grad_norm, 1.0, n, steps_per_epoch(q), noise)
    else:
        grads = MinibatchGradients(cfg.train.batch_size, torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    result = train_copies(model, model.trainable_state(), [train], settings, seed=0, gradients=grads)
    return time.perf_counter() - t0, sum(drawn) if private else n, result.steps


def train_costs(cfg: RunConfig, model: Any, train: Any, repeats: int) -> dict[str, Any]:
    """Per patient-epoch, non-private and DP, with the loss's padding trim (today) and without it
    (before: every batch padded to the longest report allowed), the four interleaved epoch by
    epoch so that background load hits them alike; medians over ``repeats`` epochs each."""
    n = int(train.patient_slot.max()) + 1
    runs: dict[str, list[tuple[float, int, int]]] = {}
    untrimmed = report_model.trim_padding
    for _ in range(repeats):
        for private in (False, True):
            for trim in (False, True):
                report_model.trim_padding = untrimmed if trim else (lambda ids, pad: ids)  # type: ignore[assignment]
                try:
                    runs.setdefault(
                        f"{'dp' if private else 'non_private'}_{'after' if trim else 'before'}", []
                    ).append(_epoch(cfg, model, train, private))
                finally:
                    report_model.trim_padding = untrimmed
    out: dict[str, Any] = {
        "patients": n,
        "rows_per_patient": round(len(train) / n, 3),
        "epochs_each": repeats,
    }
    for name, rs in runs.items():
        per = [_ms(s, k) for s, k, _ in rs]
        out[name] = {
            "steps_per_epoch": rs[0][2],
            "patients_per_epoch": round(statistics.mean(k for _, k, _ in rs), 1),
            "ms_per_patient_epoch": round(statistics.median(per), 2),
            "min_ms_per_patient_epoch": round(min(per), 2),
        }
    for kind in ("non_private", "dp"):
        out[f"{kind}_after_over_before"] = round(
            out[f"{kind}_after"]["ms_per_patient_epoch"] / out[f"{kind}_before"]["ms_per_patient_epoch"], 3
        )
    return out


def step_split(model: Any, train: Any, repeats: int) -> dict[str, float]:
    rows = torch.arange(min(32, len(train)))
    images, ids, profiles = train.images[rows], train.input_ids[rows], train.profiles[rows]
    backbone = model.encoder.backbone

    def prefix() -> None:
        with torch.no_grad():
            for view in images.split(2, dim=1):
                backbone._pos_embed(backbone.patch_embed(view))

    def encoder() -> None:
        with torch.no_grad():
            model.visual_tokens(images)

    def forward() -> None:
        with torch.no_grad():
            model(images, ids, profiles)

    def both() -> None:
        model.zero_grad(set_to_none=True)
        model(images, ids, profiles).mean().backward()

    out = {}
    model.train()
    for name, fn in (
        ("frozen_prefix", prefix),
        ("encoder", encoder),
        ("forward", forward),
        ("forward_backward", both),
    ):
        fn()
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        out[name + "_ms"] = round(1000 * (time.perf_counter() - t0) / repeats, 2)
    out["rows"] = len(rows)
    return out


def eval_cost(cfg: RunConfig, model: Any, test: Any, rows: int) -> dict[str, Any]:
    tokenizer = load_tokenizer(cfg.model.tokenizer_path, cfg.data.tokenizer)
    part = test.subset(list(range(min(rows, len(test)))))
    t0 = time.perf_counter()
    generate_reports(model, part, tokenizer.decode, cfg.data.max_report_tokens + 1)
    wall = time.perf_counter() - t0
    return {"reports": len(part), "wall_s": round(wall, 2), "ms_per_report": _ms(wall, len(part))}


def prefix_generate(
    model: Any, images: torch.Tensor, profiles: torch.Tensor, max_len: int
) -> list[list[int]]:
    """Greedy decoding without a cache (the whole prefix through the decoder each step): what
    `ReportModel.generate` did before it kept keys/values, timed here against it."""
    model.eval()
    with torch.no_grad():
        ids = torch.full((images.shape[0], 1), model.bos_id, dtype=torch.long)
        done = torch.zeros(images.shape[0], dtype=torch.bool)
        visual = model.visual_tokens(images)
        model.ctx.phi = model.proj(profiles) if model.proj is not None else None
        try:
            for _ in range(max_len):
                nxt = model.decoder(input_ids=ids, encoder_hidden_states=visual).logits[:, -1].argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
                ids = torch.cat([ids, nxt[:, None]], dim=1)
                done |= nxt == model.eos_id
                if bool(done.all()):
                    break
        finally:
            model.ctx.phi = None
    return [row[1:].tolist() for row in ids]


def decode_cost(cfg: RunConfig, model: Any, test: Any, rows: int, repeats: int) -> dict[str, Any]:
    part = test.subset(list(range(min(rows, len(test), 64))))
    images, profiles = part.images, part.profiles
    max_len = cfg.data.max_report_tokens + 1
    runs: dict[str, tuple[Any, list[float]]] = {
        "prefix": (lambda: prefix_generate(model, images, profiles, max_len), []),
        "kv_cache": (lambda: model.generate(images, profiles, max_len), []),
    }
    ids = {name: fn() for name, (fn, _) in runs.items()}  # warm-up, and the ids compared
    for _ in range(repeats):
        for fn, times in runs.values():
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    ms = {name: _ms(statistics.median(times), len(part)) for name, (_, times) in runs.items()}
    eos = model.eos_id
    lengths = [row.index(eos) + 1 if eos in row else len(row) for row in ids["kv_cache"]]
    return {
        "reports": len(part),
        "mean_tokens": round(statistics.mean(lengths), 1),
        "same_ids": ids["prefix"] == ids["kv_cache"],
        "ms_per_report": ms,
        "kv_cache_over_prefix": round(ms["kv_cache"] / ms["prefix"], 3),
    }


def grid_estimate(train_ms: dict[str, float], eval_ms: float, rows_per_patient: float) -> dict[str, Any]:
    """Issue 30's grid at full scale from per-unit costs: training patient-epochs × cost plus every
    cell's scoring of the test reports. FedTAR's extra work (T copies, α hypergradients) and the
    run's fixed costs are not in it: a lower bound for those cells."""
    full = load_config(CONFIG)
    d, sizes = full.data, full.data.synth.site_patients
    assert sizes is not None
    train_n = [n - round(n * d.val_fraction) - round(n * d.test_fraction) for n in sizes]
    test_reports = sum(round(n * d.test_fraction) for n in sizes) * rows_per_patient
    epochs = full.fed.rounds * full.train.local_epochs
    pe = sum(train_n) * epochs  # patient-epochs of one trained cell (local: the sites' sum, the same)
    eval_s = test_reports * eval_ms / 1000
    plain_s = pe * train_ms["non_private"] / 1000 + eval_s
    dp_s = pe * train_ms["dp"] / 1000 + eval_s
    cells = {
        "base": (SEEDS, eval_s),
        "local, central, fedavg, fedtar at ε = ∞": (4 * SEEDS, plain_s),
        "central, fedavg, fedtar at 5 finite ε": (3 * len(EPSILONS) * SEEDS, dp_s),
    }
    total = sum(k * s for k, s in cells.values())
    return {
        "train_patients": sum(train_n),
        "epochs": epochs,
        "patient_epochs_per_cell": pe,
        "test_reports_per_cell": round(test_reports),
        "cell_s": {"eval_only": round(eval_s), "non_private": round(plain_s), "dp": round(dp_s)},
        "cells": {k: v[0] for k, v in cells.items()},
        "total_h": round(total / 3600, 2),
    }


def cell_costs(cfg: RunConfig, epsilon: float, folder: Path) -> dict[str, Any]:
    from secure_fed.lab.sweep import run_cell

    out = {}
    epochs = cfg.fed.rounds * cfg.train.local_epochs
    for eps in (None, epsilon):
        t0 = time.perf_counter()
        cell = run_cell(cfg, "central", eps, 0, folder / f"central-{eps}")
        wall = time.perf_counter() - t0
        n = cell["privacy"]["patients"] if cell["privacy"] else None
        if n is None:
            from secure_fed.lab.centralised import pooled_splits

            n = int(pooled_splits(cfg)[0].patient_slot.max()) + 1
        out["inf" if eps is None else f"{eps:g}"] = {
            "wall_s": round(wall, 1),
            "patient_epochs": n * epochs,
            "ms_per_patient_epoch": _ms(wall, n * epochs),
            "epsilon_spent": (cell["privacy"] or {}).get("epsilon"),
            "CIDEr": cell["test"].get("CIDEr"),
            "CE-F1": cell["test"].get("CE-F1"),
        }
    return out


def doc_table(result: dict[str, Any], command: str) -> dict[str, Any]:
    """The docs table (tools/doc_tables.py's format) of a full run."""
    import datetime as dt
    import subprocess

    t, dec = result["train"], result["decode"]
    rows: list[list[Any]] = [
        [
            "ms per patient-epoch, before (batches padded to 57 tokens)",
            t["non_private_before"]["ms_per_patient_epoch"],
            t["dp_before"]["ms_per_patient_epoch"],
        ],
        [
            "ms per patient-epoch, after (all-padding columns trimmed)",
            t["non_private_after"]["ms_per_patient_epoch"],
            t["dp_after"]["ms_per_patient_epoch"],
        ],
        ["after / before", t["non_private_after_over_before"], t["dp_after_over_before"]],
        [
            "ms per scored test report (greedy decoding)",
            result["eval"]["ms_per_report"],
            result["eval"]["ms_per_report"],
        ],
        [
            f"ms per decoded report, whole prefix recomputed each step ({dec['reports']} reports)",
            dec["ms_per_report"]["prefix"],
            dec["ms_per_report"]["prefix"],
        ],
        [
            "ms per decoded report, key/value cache (what scoring runs; same ids: "
            f"{'yes' if dec['same_ids'] else 'NO'})",
            dec["ms_per_report"]["kv_cache"],
            dec["ms_per_report"]["kv_cache"],
        ],
    ]
    cells = result.get("cells")
    if cells:
        eps = next(k for k in cells if k != "inf")
        rows.append(
            [
                f"one central cell on the slice, ms per patient-epoch (all included; ε = {eps} private)",
                cells["inf"]["ms_per_patient_epoch"],
                cells[eps]["ms_per_patient_epoch"],
            ]
        )
    g, split = result["grid_estimate"], result["step_split_ms"]
    rows.append(
        ["full-scale cell estimate, s (train + scoring)", g["cell_s"]["non_private"], g["cell_s"]["dp"]]
    )
    rows.append(["issue 30's grid at full scale, h (60 cells of both kinds)", g["total_h"], "(in the total)"])
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "title": "Hospital-scale cost per patient-epoch on this machine (tiny preset, 1 thread)",
        "source": {
            "command": command,
            "commit": commit,
            "date": dt.date.today().isoformat(),
            "machine": f"2-core machine shared with other jobs (1-min load {result['load_1min']})",
            "wall": None,
        },
        "columns": ["quantity", "non-private", "DP-SGD"],
        "rows": rows,
        "notes": [
            f"Slice of configs/hospital-scale.toml: sites of {result['slice_site_patients']} patients; "
            "site0's "
            f"{t['patients']} train patients, {t['epochs_each']} interleaved epochs per variant (median).",
            f"Grid of issue 30 at full scale (7,000 train patients, 5 epochs, {g['test_reports_per_cell']} "
            f"test reports a cell, 60 cells): estimated {g['total_h']} h from the per-unit costs above; "
            "FedTAR's extra work is not in it (a lower bound for its cells).",
            "The encoder has LoRA in every block: its visual tokens change with training and are not "
            f"cached; its frozen prefix (patch and position embedding) is {split['frozen_prefix_ms']} ms "
            f"of a {split['forward_backward_ms']} ms step of 32 rows.",
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=0.03, help="slice: each site's size times this")
    parser.add_argument("--cache", type=Path, default=None, help="model cache (default: the config's)")
    parser.add_argument("--pretrain-steps", type=int, default=None, help="base pretraining (default: config)")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per step-split entry")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per training variant")
    parser.add_argument("--eval-rows", type=int, default=96)
    parser.add_argument("--cells", action="store_true", help="also time one real central cell at ∞ and ε")
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--json-out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--doc-json", type=Path, default=None, help="write the docs table JSON here")
    parser.add_argument("--quick", action="store_true", help="a tiny slice and base (smoke run)")
    args = parser.parse_args()
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    torch.set_num_threads(1)
    if args.quick:
        args.scale, args.repeats, args.eval_rows, args.epochs = 0.005, 2, 8, 1
        args.pretrain_steps = args.pretrain_steps if args.pretrain_steps is not None else 20
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache or Path(tmp) / "cache"
        cfg = slice_config(args.scale, cache, Path(tmp) / "run", args.pretrain_steps)
        model = build_report_model(cfg)
        data = load_site(cfg, "site0")
        gmm, _ = fit_gmm(
            patient_profiles(data.train), cfg.model.gmm_components, cfg.model.gmm_reg_covar, 0, None
        )
        attach_profiles(data, gmm, visit_slots(cfg))
        enc = [n for n, p in model.named_parameters() if p.requires_grad and n.startswith("encoder.")]
        train = train_costs(cfg, model, data.train, args.epochs)
        result: dict[str, Any] = {
            "config": str(CONFIG.relative_to(CONFIG.parents[1])),
            "slice_site_patients": cfg.data.synth.site_patients,
            "threads": torch.get_num_threads(),
            "encoder_trainable": {"tensors": len(enc), "lora_in_every_block": bool(enc)},
            "train": train,
            "step_split_ms": step_split(model, data.train, args.repeats),
            "eval": eval_cost(cfg, model, data.test, args.eval_rows),
            "decode": decode_cost(cfg, model, data.test, args.eval_rows, args.repeats),
            "load_1min": round(os.getloadavg()[0], 2),
        }
        ms = {k: train[f"{k}_after"]["ms_per_patient_epoch"] for k in ("non_private", "dp")}
        result["grid_estimate"] = grid_estimate(
            ms, result["eval"]["ms_per_report"], train["rows_per_patient"]
        )
        if args.cells:
            result["cells"] = cell_costs(cfg, args.epsilon, Path(tmp) / "cells")
    if args.doc_json is not None:
        import sys

        command = ".venv/bin/python benchmarks/hospital_cost.py " + " ".join(sys.argv[1:])
        args.doc_json.write_text(json.dumps(doc_table(result, command), indent=1) + "\n")
    text = json.dumps(result, indent=1)
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
