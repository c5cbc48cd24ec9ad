"""Differential privacy: site-mode DP-SGD, distributed noise inside SecAgg+, the noise-free reference."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from secure_fed.config.base import _Strict


class DPConfig(_Strict):
    enabled: bool = False
    target_epsilon: float | None = Field(None, gt=0)
    delta: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="None = min(1e-5, 1/(10 B)), B = the site's patient count rounded up to a power of "
        "ten (δ is released: it names n's decade, never n itself)",
    )
    max_grad_norm: float = Field(1.0, gt=0, description="C: per-patient clipping bound")
    sample_rate: float = Field(0.25, gt=0, le=1, description="Poisson rate over patients")
    noise_multiplier: float | None = Field(None, ge=0, description="σ; None = calibrate")
    budget_epsilon: float | None = Field(None, gt=0, description="site policy; None = target")
    gmm_fraction: float = Field(0.1, gt=0, lt=0.5, description="share of the train ε for the GMM histogram")
    alpha_clip: float = Field(
        1.0,
        gt=0,
        description="C_α for the hypergradient scalars; the private FedTAR presets carry their own, sized "
        "on public data (benchmarks/alpha_clip.py)",
    )
    alpha_noise_multiplier: float | None = Field(None, gt=0, description="σ_α; None = calibrate")
    alpha_direction_norm: float = Field(
        100.0, gt=0, description="largest L2 norm of one α direction the site accepts from the server"
    )
    accountant: Literal["rdp", "prv"] = Field(
        "rdp",
        description="the accountant σ is calibrated with and the budget guard enforces: rdp (Rényi DP, "
        "a looser upper bound) or prv (the tight privacy-random-variable value, falling back to RDP "
        "where it cannot be computed), so prv gives less noise for the same (ε, δ): σ 0.809 instead of "
        "0.863 at ε = 8, δ = 1e-5, q = 0.1, 50 steps with the GMM histogram's share. It applies to "
        "the Gaussian mechanisms of site mode and of the pooled `central` (DP-SGD, GMM histogram, α "
        "scalars); refused with dp.noise = 'distributed', whose Skellam sum has RDP accounting only. "
        "Every privacy record logs both values and `secure-fed audit verify` re-derives both",
    )
    ledger_dir: Path | None = Field(
        None,
        description="site policy: folder of the site's persistent privacy ledgers (one per data set, "
        "kept across runs; a deployed site's default is <out>/ledgers)",
    )
    noise: Literal["site", "distributed"] = Field(
        "site",
        description="site: every site adds the full DP-SGD noise to its update; distributed: a round "
        "is one DP step over all sites' patients, each site adding an integer share of the noise "
        "inside SecAgg+ (needs secagg and one local step)",
    )
    honest_min: int | None = Field(
        None,
        ge=2,
        description="distributed: h, the fewest surviving sites a site unmasks a sum with; the noise "
        "shares are sized so h − colluders sites' shares carry the whole noise (None = all sites "
        "minus the colluders)",
    )
    colluders: int = Field(
        1, ge=0, description="distributed: c, sites that may collude with the server and remove their shares"
    )
    ring_bits: int | None = Field(
        None, ge=16, le=62, description="distributed: bits of the SecAgg+ ring the shares live in; None = 32"
    )
    amplification: Literal["symmetric", "general"] = Field(
        "symmetric",
        description="distributed: the Poisson-subsampling bound the Skellam sum is accounted with; "
        "symmetric: the exact expansion, proved for the Skellam sum (docs/THREAT_MODEL.md); general: "
        "Zhu & Wang's bound for any mechanism, looser (more noise at the same ε), what runs before "
        "the symmetric bound used",
    )
    max_patients_per_pass: int | None = Field(
        128,
        ge=1,
        description="most patients in one forward/backward pass of a DP step: a larger Poisson sample "
        "runs in passes whose per-patient gradients are summed before clipping (memory only: the "
        "released gradient is the same); None = one pass",
    )

    noise_free_reference: bool = Field(
        False,
        description="NOT PRIVATE, a reference only: train with the private recipe's Poisson sampling "
        "(dp.sample_rate), steps and per-patient clipping (dp.max_grad_norm) but add no noise, so "
        "every update, histogram and α scalar leaves un-noised (ε = ∞). It separates what clipping "
        "and sampling cost from what the noise costs. Needs dp.enabled and no target_epsilon, "
        "noise_multiplier or budget_epsilon (a number there would read as a guarantee); site mode "
        "and the pooled central only. Nothing is charged or logged as a privacy release, so the "
        "run's metrics name no ε and its audit report reads ε = ∞",
    )

    @model_validator(mode="after")
    def _target(self) -> DPConfig:
        if self.noise_free_reference:
            if not self.enabled:
                raise ValueError(
                    "dp.noise_free_reference needs dp.enabled = true: it runs DP-SGD's sampling and "
                    "clipping, without the noise"
                )
            keys = ("target_epsilon", "noise_multiplier", "budget_epsilon")
            given = [f"dp.{k}" for k in keys if getattr(self, k) is not None]
            if given:
                raise ValueError(
                    f"dp.noise_free_reference adds no noise (ε = ∞): unset {', '.join(given)}, which would "
                    "read as a privacy guarantee"
                )
            if self.noise == "distributed":
                raise ValueError(
                    "dp.noise_free_reference runs in site mode only: set dp.noise = 'site' (distributed "
                    "mode's plan is calibrated to a target ε)"
                )
            if self.ledger_dir is not None:
                raise ValueError(
                    "dp.noise_free_reference charges no ledger: unset dp.ledger_dir (a lifetime ledger "
                    "is for the patients' private runs)"
                )
            return self
        if self.enabled and self.target_epsilon is None and self.noise_multiplier is None:
            raise ValueError("dp.target_epsilon (or dp.noise_multiplier) is required when dp.enabled")
        if not self.enabled:
            return self
        target, budget = self.target_epsilon, self.budget_epsilon
        if self.noise_multiplier is not None and target is None and budget is None:
            # the site's budget would be unbounded, which its guard refuses at the first round
            raise ValueError(
                f"dp.noise_multiplier = {self.noise_multiplier:g} with neither dp.budget_epsilon nor "
                "dp.target_epsilon: a site would have no ε budget to hold the run to; set "
                "dp.budget_epsilon (the most ε the patients may spend) or dp.target_epsilon"
            )
        if self.noise_multiplier is None and target is not None and budget is not None and budget < target:
            # σ is calibrated to spend the whole target, so the guard would decline a round partway
            raise ValueError(
                f"dp.budget_epsilon = {budget:g} is below dp.target_epsilon = {target:g}, which the run is "
                f"calibrated to spend: raise dp.budget_epsilon to {target:g} or more, or lower "
                f"dp.target_epsilon to {budget:g} or less"
            )
        return self
