"""The model a site trains and how it trains it: the base, the adapters, the optimiser."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from secure_fed.config.base import _Strict, cache_base

# what a CheXbert checkpoint folder holds: the checkpoint, BERT's configuration and vocabulary
CHEXBERT_FILES: tuple[str, ...] = ("chexbert.pth", "config.json", "vocab.txt")


class ModelConfig(_Strict):
    preset: Literal["tiny", "small", "paper"] = "tiny"
    encoder: str | None = Field(None, description="timm model name or local path; None = preset")
    decoder_path: Path | None = Field(None, description="local GPT-2-family checkpoint")
    tokenizer_path: Path | None = None
    chexbert_path: Path | None = Field(
        None,
        description="local CheXbert folder (chexbert.pth, config.json, vocab.txt): CE-F1 on free-text "
        "reports read with it instead of the rule labeler",
    )
    lora_rank: int = Field(4, ge=1, le=64)
    lora_alpha: float = Field(128.0, gt=0)
    hyper_lora: bool = True
    hyper_rank: int = Field(2, ge=1, le=16)
    profile_dim: int = Field(8, ge=1, le=128, description="dimension of φ_p")
    gmm_components: int = Field(16, ge=1, le=64)
    visit_input: bool | None = Field(
        None,
        description="the report's visit index (one-hot over data.max_visits) joins q_p at the patient "
        "hyper-LoRA's input, so one adapter is visit-aware (public: the report's own position); "
        "None = on for the FedTAR methods that have the hyper-LoRA (FedTAR's visit-aware reading, "
        "issue 63, chosen before any run that measures it), off for every other method",
    )
    gmm_reg_covar: float = Field(1e-6, ge=1e-6)
    cache_dir: Path = Field(
        default_factory=lambda: cache_base(),
        description="cohorts and pretrained bases; a relative path is taken under the cache base",
    )
    pretrain_steps: int = Field(2000, ge=0, description="tiny preset: base pretraining steps (public data)")

    @field_validator("chexbert_path")
    @classmethod
    def _chexbert_files(cls, value: Path | None) -> Path | None:
        # checked when the config loads: a run must not train for an hour and then fail to score
        if value is not None:
            missing = [n for n in CHEXBERT_FILES if not (value / n).is_file()]
            if missing:
                raise ValueError(f"{value} lacks {', '.join(missing)} (a CheXbert checkpoint folder)")
        return value

    @field_validator("cache_dir")
    @classmethod
    def _absolute_cache(cls, value: Path) -> Path:
        # Relative to the cwd, each process (and each folder an operator starts from) had its own.
        value = Path(value).expanduser()
        return value if value.is_absolute() else cache_base() / value


class TrainConfig(_Strict):
    lr: float = Field(1e-3, gt=0, description="adapters (paper: 1e-5 with a full-size backbone)")
    meta_lr: float | None = Field(
        None,
        gt=0,
        description="ψ's learning rate (the temporal meta-learner; paper: 1e-4 over many more rounds); "
        "None = train.meta_travel / fed.rounds. Runs before issue 63 used Adam at 5e-2",
    )
    meta_travel: float = Field(
        2.0,
        gt=0,
        description="ψ's travel budget over the run: with meta_optimizer 'sgd' each round's step is at "
        "most meta_lr long (in units of the run's hypergradient size), so the run's steps add up to at "
        "most this; chosen on noise alone (benchmarks/alpha_walk.py, "
        "docs/results/fedtar-alpha-walk-floored.json)",
    )
    meta_optimizer: Literal["sgd", "adam"] = Field(
        "sgd",
        description="ψ's update: 'sgd' (plain SGD on the hypergradient in units of its run's size: a "
        "step shrinks with the hypergradient and zero-mean noise averages out; torch's init for ψ) or "
        "'adam' (the original: Adam, ψ's small init; about meta_lr on every parameter a step)",
    )
    alpha_floor: float = Field(
        0.1,
        ge=0,
        le=1,
        description="α = λ/T + (1 − λ)·softmax(u), λ = min(1, alpha_floor·T): every α_t ≥ alpha_floor and, "
        "for T ≥ 2, ≤ 1 − (T − 1)·alpha_floor, on the simplex (the write-up's §4.1 α_t ∈ [0.1, 0.9]); "
        "0 = the paper's plain softmax",
    )
    fedtar_step: Literal["chained", "matched"] = Field(
        "chained",
        description="FedTAR's server step per visit index with distributed DP: 'chained' (each at "
        "train.lr; the residual chain passes on √Σc_t² of it) or 'matched' (each scaled by "
        "1/√Σc_t² from the round's α, so a round moves the model as far as FedAvg's); site mode "
        "and non-private runs always chain",
    )
    fedtar_chain: Literal["residual", "convex"] = Field(
        "residual",
        description="FedTAR's temporal step, read either way its Theorem 1 allows: 'residual' "
        "(w^(t) = w^(t-1) + α_t (w̄^(t) - w^(t-1)) from the round's start, which keeps "
        "Π(1 - α_t) of the start: 0.33 at uniform α, T = 5) or 'convex' (w = Σ_t α_t w̄^(t))",
    )
    fedtar_release: Literal["copies", "one-vector"] = Field(
        "one-vector",
        description="what a FedTAR site releases a round with distributed DP: 'copies' (one adapter "
        "gradient per visit index, a patient's T clipped together: the release's signal-to-noise is at "
        "most ‖s‖₂ ≈ 0.47 of FedAvg's) or 'one-vector' (Σ_t c_t g_t from the round's public α, plus a "
        "small public sketch of each g_t for α's hypergradient, clipped as one vector: close to "
        "FedAvg's signal-to-noise; chosen by benchmarks/fedtar_release_noise.py, "
        "docs/results/fedtar-release-noise.json). Site mode and non-private runs always train the copies",
    )
    fedtar_sketch_dim: int = Field(
        64,
        ge=1,
        le=1024,
        description="'one-vector': k, the rows of the public Gaussian sketch of each visit index's "
        "gradient (α's hypergradient is a JL estimate whose relative error is about √(2/k)); it adds "
        "T·k coordinates to the release",
    )
    fedtar_sketch_share: float = Field(
        0.3,
        gt=0,
        lt=1,
        description="'one-vector': ρ, the sketch's share of a patient's released norm when its visits' "
        "gradients are orthogonal, whatever α (visit t's sketch is scaled by κ·ω_t, κ = ρ/√(1 − ρ²)); "
        "a clipped patient's model part keeps √(1 − ρ²) of the clip norm",
    )
    local_epochs: int = Field(2, ge=1)
    average: Literal["none", "ema", "tail"] = Field(
        "none",
        description="iterate averaging: the model evaluated and released at the end is an average of "
        "the training iterates (the server's model after each round of a federated run, private or "
        "not, distributed DP included; each optimiser step of `central`), while training goes on from "
        "the raw iterate. ema: weights ∝ train.ema_decay^age, bias-corrected; tail: the mean of the "
        "last train.tail_fraction of the iterates. Post-processing of iterates already released: it "
        "costs no ε and nothing is charged for it. Checkpoints keep the average. `local` and the "
        "`-ft` references are not averaged; none = the last iterate",
    )
    ema_decay: float = Field(
        0.9, gt=0, lt=1, description="train.average = 'ema': the weight kept by the average per iterate"
    )
    tail_fraction: float = Field(
        0.5, gt=0, le=1, description="train.average = 'tail': the share of the last iterates averaged"
    )
    fine_tune_epochs: int | None = Field(
        None,
        ge=1,
        description="a sweep's `<method>-ft` reference: epochs each site fine-tunes the federated "
        "model for; None = one round's local epochs (local trains rounds × local_epochs)",
    )
    batch_size: int = Field(16, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: int | None = Field(
        None,
        ge=1,
        description="torch threads of every process that trains (the run's, each site's); None = "
        "torch's default (every core). On a shared machine, the cores left free",
    )
