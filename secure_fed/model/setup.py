"""Build the run's report model: public tokenizer, base pretrained on a public synthetic cohort."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from secure_fed.config import RunConfig
from secure_fed.data.batching import make_examples
from secure_fed.data.cohort import load_cohort
from secure_fed.data.synthetic import synthesize
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.model.build import build_model
from secure_fed.model.device import resolve_device
from secure_fed.model.report_model import ReportModel

log = logging.getLogger(__name__)

# The public cohort shares no seed with any private cohort a run generates (those use small seeds).
PUBLIC_SEED = 1_000_003
PUBLIC_PATIENTS = 240


def _public_examples(cfg: RunConfig, tokenizer: object) -> object:
    # Its own domain (wording, look, age mix unlike every site): see synthetic.py's docstring.
    folder = Path(cfg.model.cache_dir) / f"public-domain2-i{cfg.data.synth.image_size}-v{cfg.data.max_visits}"
    manifest = folder / "manifest.jsonl"
    if not manifest.exists():
        synthesize(
            folder,
            sites=1,
            patients=PUBLIC_PATIENTS,
            visits=cfg.data.max_visits,
            seed=PUBLIC_SEED,
            image_size=cfg.data.synth.image_size,
            domain="public",
        )
    cohort = load_cohort(manifest, cfg.data.synth.image_size)
    key = hashlib.sha256(b"public-cohort").digest()
    return make_examples(cohort.visits, tokenizer, key, cfg.data.max_report_tokens, cfg.data.max_visits)


def pretraining_recipe(cfg: RunConfig) -> str:
    """What the cached base was pretrained on: the public cohort's version and how its reports are
    encoded (the cache key includes it, so a changed recipe pretrains anew)."""
    d = cfg.data
    return (
        f"public-domain2|patients{PUBLIC_PATIENTS}|seed{PUBLIC_SEED}|visits{d.max_visits}"
        f"|tokens{d.max_report_tokens}|tokenizer:{d.tokenizer}:{cfg.model.tokenizer_path or ''}"
    )


def pretrain_base(
    model: ReportModel, examples: object, steps: int, lr: float = 3e-3, batch: int = 32
) -> None:
    """Plain supervised training of every base weight on public data (before adapters exist).

    On one torch thread, whatever the run's: intra-op threads split float reductions differently,
    and 2000 steps amplify that. The default demo's base pretrained on 2 threads scored CE-F1 0.0
    and CIDEr 1.94 where the 1-thread base of the sweeps scored 0.32 and 3.52 (same machine, same
    seed). The tiny preset's matrices gain nothing from more threads; a larger preset pretrained on
    a CPU pays for the same base everywhere in time."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _pretrain(model, examples, steps, lr, batch)
    finally:
        torch.set_num_threads(threads)


def _pretrain(model: ReportModel, examples: object, steps: int, lr: float, batch: int) -> None:
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    n = len(examples)  # type: ignore[arg-type]
    zeros = torch.zeros(1, 1)
    model.train()
    for step in range(steps):
        rows = torch.randint(0, n, (min(batch, n),), generator=gen)
        loss = model(examples.images[rows], examples.input_ids[rows], zeros.expand(len(rows), 1)).mean()  # type: ignore[attr-defined]
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            log.info("base pretraining step %d/%d loss %.3f", step, steps, float(loss.detach()))


def visit_slots(cfg: RunConfig) -> int:
    """How many visit-index inputs the patient hyper-LoRA takes after q_p (`RunConfig.visit_input_on`)."""
    return cfg.data.max_visits if cfg.visit_input_on else 0


def build_report_model(cfg: RunConfig) -> ReportModel:
    tokenizer = load_tokenizer(cfg.model.tokenizer_path, cfg.data.tokenizer)

    def pretrain(model: ReportModel) -> None:
        pretrain_base(model, _public_examples(cfg, tokenizer), cfg.model.pretrain_steps)

    model_cfg = cfg.model if cfg.hyper_lora_on else cfg.model.model_copy(update={"hyper_lora": False})
    model = build_model(
        model_cfg,
        tokenizer.vocab_size,
        tokenizer.pad_id,
        tokenizer.bos_id,
        tokenizer.eos_id,
        cfg.data.synth.image_size,
        pretrain=pretrain,
        adapter_seed=cfg.seed,
        min_positions=cfg.data.max_report_tokens + 2,
        recipe=pretraining_recipe(cfg),
        visit_slots=visit_slots(cfg),
    )
    return model.to(resolve_device(cfg.train.device))
