"""One pydantic tree for every setting of a run, loadable from TOML.

Unknown keys are rejected (``extra="forbid"``) so that a typo in a hospital's policy file is an
error, not a silently ignored privacy setting.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)


class _Strict(BaseModel):
    # allow_inf_nan=False: `target_epsilon = inf` or `budget_epsilon = inf` in a policy file would switch
    # calibration or the budget guard off while the run still reads as private
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def cache_base() -> Path:
    """One absolute place for the model cache: $SECURE_FED_CACHE, else ~/.cache/secure_fed.

    Read when a config is built, so every process of a run (Ray workers, SuperNodes started
    elsewhere) gets the same absolute path from the saved config, whatever its working directory.
    """
    import os

    env = os.environ.get("SECURE_FED_CACHE")
    return Path(env).expanduser().absolute() if env else Path.home() / ".cache" / "secure_fed"


class SynthConfig(_Strict):
    sites: int = Field(3, ge=1, le=64)
    patients: int = Field(60, ge=2, description="patients per site")
    site_patients: list[int] | None = Field(
        None,
        description="patients of each site, site0 first (one number per site): unequal sites, as a "
        "network of one academic and several community hospitals; None = `patients` at every site",
    )
    visits: int = Field(5, ge=1, le=16, description="maximum visits per patient (T)")
    image_size: int = Field(32, ge=16, le=256)
    seed: int = 0
    temporal_drift: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="chance a visit from the third on follows the follow-up protocol (0 = off)",
    )
    demographic_effect: float = Field(
        1.0, ge=0.0, le=1.0, description="chance of each age/sex-dependent report sentence (0 = off)"
    )
    site_wording: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="chance a report uses its site's own synonyms, else the standard terms "
        "(0 = one shared vocabulary)",
    )
    scanner_shift: float = Field(
        1.0, ge=0.0, le=1.0, description="how far each site's scanner look is from site 0's (0 = all alike)"
    )
    age_mix_shift: float = Field(
        1.0, ge=0.0, le=1.0, description="how far each site's mean age is from 58 (0 = all alike)"
    )
    institution_drift: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="pace of each site's year-by-year report drift: in exam year y a report convention's "
        "chance moves towards the site's own target by this x the site's pace (0.5-1) x (y - 2018) / 6, "
        "each site in its own direction (0 = off, today's generator)",
    )
    institution_clusters: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="chance a report keeps each of its site's house conventions (sentence order, "
        "pertinent negatives), so that sites' reports form separate clusters (0 = off, today's generator)",
    )

    @model_validator(mode="after")
    def _one_size_per_site(self) -> SynthConfig:
        sizes = self.site_patients
        if sizes is not None:
            if len(sizes) != self.sites:
                raise ValueError(
                    f"site_patients has {len(sizes)} size(s) for {self.sites} site(s); give one per site"
                )
            if min(sizes) < 2:
                raise ValueError("site_patients: every site needs at least 2 patients")
        return self

    def patients_at(self, site: int) -> int:
        """Patients of site ``site`` (its entry in ``site_patients``, else ``patients``)."""
        return self.patients if self.site_patients is None else self.site_patients[site]


class ImagingConfig(_Strict):
    """The multi-modality imaging benchmark FM2 and its baselines run on (data.kind = "imaging")."""

    path: Path | None = Field(
        None, description="a multi-modality manifest.jsonl with a site per record; None = synthetic"
    )
    sites: int = Field(4, ge=1, le=64, description="synthetic: sites the images are dealt to")
    per_class: int = Field(40, ge=4, description="synthetic: images per (modality, class)")
    image_size: int = Field(32, ge=16, le=128)
    split: Literal["overlapped", "disjoint"] = Field(
        "overlapped",
        description="synthetic: every site every modality with Dirichlet(phi) label skew, or each "
        "site its own modalities",
    )
    phi: float = Field(0.3, gt=0, description="Dirichlet concentration of the overlapped split")
    test_fraction: float = Field(0.25, gt=0.0, lt=0.5, description="each site's held-out images")


class DataConfig(_Strict):
    kind: Literal["reports", "imaging"] = Field(
        "reports",
        description="longitudinal reports (FedTAR and its baselines) or multi-modality images (FM2)",
    )
    imaging: ImagingConfig = ImagingConfig()
    source: Literal["synthetic", "manifest", "annotation"] = "synthetic"
    path: Path | None = Field(None, description="manifest.jsonl or annotation.json when not synthetic")
    synth: SynthConfig = SynthConfig()
    val_fraction: float = Field(0.2, gt=0.0, lt=0.5, description="patients held out for α")
    test_fraction: float = Field(0.2, gt=0.0, lt=0.5)
    max_visits: int = Field(5, ge=1, le=16, description="T: visit indices beyond this are dropped")
    max_report_tokens: int = Field(56, ge=8, le=512)  # the knobs add up to 2 sentences: 48 words max
    views: Literal[1, 2] = Field(
        1,
        description="images per study the model reads: 2 = a study's first two images (IU-Xray: "
        "frontal and lateral) through the same encoder, a one-image study repeating its image",
    )
    deal_sites: int | None = Field(
        None,
        ge=1,
        le=64,
        description="deal a single-source data set's patients (IU-Xray) at random to this many sites "
        "site0..; None = each record's own site",
    )
    split_seed: int | None = Field(
        None,
        ge=0,
        description="seed of each site's train/validation/test split (and of deal_sites); None: the "
        "run's seed. Set, a sweep holds the data (this split, data.synth.seed's cohort) fixed, and "
        "its seeds vary only the training (adapter init, batch order): the training noise alone",
    )
    tokenizer: Literal["public", "words+chars", "bytes"] = Field(
        "public",
        description="built-in tokenizer when model.tokenizer_path is unset: the generator's words, "
        "a public word list with a character fallback (real reports), or UTF-8 bytes",
    )

    @model_validator(mode="after")
    def _needs_path(self) -> DataConfig:
        if self.source != "synthetic" and self.path is None:
            raise ValueError(f"data.path is required when data.source = {self.source!r}")
        return self


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


Method = Literal[
    "fedtar",
    "fedtar-no-gmm",
    "fedtar-no-temporal",
    "fedavg",
    "fedprox",
    "fedadam",
    "scaffold",
    "drfa",
    "fm2",
    "fedrep",
    "fedbn",
]
_METHODS: tuple[str, ...] = get_args(Method)
# the methods each kind of data runs: a report model's and an image classifier's
METHODS_FOR: dict[str, tuple[str, ...]] = {
    "reports": _METHODS[:8],  # FedTAR, its ablations and the pooled baselines
    "imaging": ("fm2", "fedavg", "fedprox", "fedrep", "fedbn"),
}
# dp.noise = "distributed": one private step a round, which the server takes on the decoded sum
DISTRIBUTED_METHODS: tuple[str, ...] = ("fedavg", "fedtar", "fedtar-no-gmm", "fedtar-no-temporal")


class FedConfig(_Strict):
    method: Method = "fedtar"
    rounds: int = Field(10, ge=1, description="10 × 2 local epochs: central gains most by 20 epochs")
    min_sites: int = Field(2, ge=1, description="a round needs at least this many sites")
    dropouts: int | None = Field(
        None,
        ge=0,
        description="sites the run must survive losing; refused at start when the site count, the "
        "3-survivor rule and the SecAgg+ threshold allow fewer (None = no demand)",
    )
    fedprox_mu: float = Field(0.01, ge=0)
    fedadam_lr: float = Field(1e-2, gt=0)
    drfa_lr: float = Field(0.1, gt=0, description="DRFA's step on the site-weight simplex")
    participation: float = Field(
        1.0, gt=0, le=1, description="share of the sites the server samples per round (seeded, logged)"
    )
    factor_floor: float = Field(
        0.5,
        gt=0,
        le=1,
        description="site policy: the smallest server-chosen factor (DRFA's n·λ) a site accepts on "
        "any site's secure-sum contribution; factors average 1",
    )
    accepted_methods: list[Method] = Field(
        default_factory=lambda: list(_METHODS),
        description="site policy: the methods this site trains for; a request for another is refused",
    )
    time_embedding_dim: int = Field(32, ge=1)
    dp_weights: Literal["equal", "public_size"] = Field(
        "equal",
        description="site-mode DP: the weight of each site's private update in the server's mean. "
        "equal: every site counts once; public_size: the patient count its operator declares public "
        "in fed.public_patients (a constant of its policy, never read from its data), so a site "
        "declared at 2,800 counts 13⅓ times one declared at 210. Either is post-processing of the "
        "sites' private updates (no ε); the weight travels as count / secagg.count_scale, which must "
        "stay within secagg.clip (a site refuses to plan otherwise). Non-private runs weigh by rows "
        "whatever this says",
    )
    public_patients: dict[str, PositiveInt] = Field(
        default_factory=dict,
        description="site policy: each site's training-patient count as its operator declares it "
        "public, by site name (a round figure the operator chooses; the site never derives it from "
        "its data, so it does not move when one patient joins). It is the site's weight under "
        "fed.dp_weights = 'public_size' (needed there for every site) and its term in distributed "
        "DP's divisor q × Σ counts (a site without an entry counts 1 there: Adam's step hardly "
        "depends on the divisor's scale)",
    )
    engine: Literal["simulation", "inprocess"] = "simulation"
    simulation_heartbeat_s: float = Field(
        600.0,
        gt=0,
        description="how long a simulation's own SuperLink waits for the simulation process's "
        "heartbeat before it fails the run (taking the task, then between beats). Flower's 30 s "
        "(60 s once running) was missed on a loaded 2-core machine and lost whole runs; the runner "
        "watches that process itself, so a long wait hides no dead one",
    )

    @model_validator(mode="after")
    def _declared_sizes(self) -> FedConfig:
        if self.dp_weights == "public_size" and not self.public_patients:
            raise ValueError(
                "fed.dp_weights = 'public_size' needs fed.public_patients: declare each site's public "
                'patient count, e.g. public_patients = { site0 = 2000, site1 = 1000 }, or use "equal"'
            )
        return self


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
    alpha_clip: float = Field(1.0, gt=0, description="C_α for the hypergradient scalars")
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


class SecAggConfig(_Strict):
    enabled: bool | None = Field(None, description="None = on exactly when DP is on")
    neighbours: int | None = Field(None, ge=2, description="k of the k-regular graph; None = log-scale")
    threshold: float = Field(0.6, gt=0.5, le=1.0, description="fraction of neighbours to unmask")
    clip: float = Field(1.0, gt=0, description="values are clipped to [-clip, clip] before encoding")
    bits: int | None = Field(
        None,
        ge=8,
        le=40,
        description="2^bits quantisation steps per clip (step = clip / 2^bits); None = the most, up "
        "to 30, that keep the ring in 32-bit words for the round's site count (29 bits for 3 sites, "
        "27 for 10)",
    )
    count_scale: float = Field(
        1024.0,
        gt=0,
        description="uploads carry n / count_scale (public), keeping weighted updates within clip",
    )


class FM2Config(_Strict):
    """FM2 (seed 001): Observer V, class-wise MoE M_c (local), domain-wise MoE M_d (aggregated)."""

    dim: int = Field(64, ge=8, le=1024, description="the Observer's feature size")
    hidden: int = Field(64, ge=8, le=1024, description="hidden units of each expert")
    class_experts: int = Field(4, ge=1, le=32, description="N_c, the local class-wise experts")
    gamma_d: float = Field(0.5, ge=0, description="weight of M_d in y = γ_d M_d + γ_c M_c")
    gamma_c: float = Field(0.5, ge=0, description="weight of M_c")
    hma_lambda: float = Field(0.01, ge=0, description="λ of the HMA pull towards the global M_d")
    top_k: int | None = Field(
        None, ge=1, description="Observer Top-K sampling: images per class for stage 2; None = all"
    )
    cel_weight: float = Field(0.0, ge=0, description="weight of Caption-Enhanced Learning in stage 1")
    lr: float = Field(0.01, gt=0, description="Adam step size of FM2's stages and the imaging baselines")


class HEConfig(_Strict):
    enabled: bool = False
    keys_dir: Path | None = None
    poly_modulus_degree: int = 8192
    coeff_mod_bit_sizes: list[int] = [60, 40, 40, 60]
    scale_bits: int = Field(40, ge=20, le=60)


class AuditConfig(_Strict):
    enabled: bool = True
    keys_dir: Path | None = Field(None, description="Ed25519 keys; None = ephemeral keys in out/")


class DeployConfig(_Strict):
    approved_fabs: Path | None = Field(
        None,
        description="a deployed site's list of approved FAB SHA-256s (`secure-fed code approve` writes it); "
        "its node runs only runs of these FABs, with the site's own installed code",
    )


class RunConfig(_Strict):
    seed: int = 0
    out: Path = Path("runs/default")
    data: DataConfig = DataConfig()
    model: ModelConfig = Field(default_factory=ModelConfig)  # its cache_dir is read per config
    train: TrainConfig = TrainConfig()
    fed: FedConfig = FedConfig()
    dp: DPConfig = DPConfig()
    fm2: FM2Config = FM2Config()
    secagg: SecAggConfig = SecAggConfig()
    he: HEConfig = HEConfig()
    audit: AuditConfig = AuditConfig()
    deploy: DeployConfig = DeployConfig()

    @model_validator(mode="after")
    def _he_keys(self) -> RunConfig:
        # checked when the config loads, before Flower or Ray start: CKKS without keys cannot run
        if self.he.enabled and self.he.keys_dir is None:
            raise ValueError(
                "he.enabled needs he.keys_dir: make keys with `secure-fed keys init --out KEYS`, then "
                "pass --keys KEYS (or set [he] keys_dir)"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _kind_from_method(cls, data: Any) -> Any:
        # `--method fm2` alone means the imaging data FM2 runs on; an explicit data.kind wins
        if isinstance(data, dict):
            method = (data.get("fed") or {}).get("method") if isinstance(data.get("fed"), dict) else None
            section = data.get("data")
            if method in ("fm2", "fedrep", "fedbn") and not (isinstance(section, dict) and "kind" in section):
                data = {**data, "data": {**(section if isinstance(section, dict) else {}), "kind": "imaging"}}
        return data

    @model_validator(mode="after")
    def _distributed_noise(self) -> RunConfig:
        if self.dp.noise != "distributed":
            return self
        if not self.dp.enabled:
            raise ValueError(
                "dp.noise = 'distributed' needs dp.enabled = true (it is a way of adding DP noise)"
            )
        if not self.secagg_on:
            raise ValueError(
                "dp.noise = 'distributed' needs SecAgg+ (secagg.enabled unset or true): each site's "
                "share carries only part of the noise, so its update must never be seen alone"
            )
        if self.train.local_epochs > 1:
            raise ValueError(
                f"train.local_epochs = {self.train.local_epochs} with dp.noise = 'distributed': set it to "
                "1. A distributed round is one DP step; local multi-step training on partially noised "
                "gradients is not DP"
            )
        if self.dp.accountant == "prv":
            raise ValueError(
                "dp.accountant = 'prv' with dp.noise = 'distributed': the Skellam sum has no PRV "
                "accountant (RDP only); set dp.accountant = 'rdp', or dp.noise = 'site' for PRV"
            )
        if self.dp.target_epsilon is None:
            raise ValueError(
                "dp.noise = 'distributed' needs dp.target_epsilon: the noise shares are calibrated to "
                "it (dp.noise_multiplier is site mode's σ)"
            )
        if self.fed.participation < 1:
            raise ValueError(
                f"fed.participation = {self.fed.participation:g} with dp.noise = 'distributed' is not yet "
                "supported: a round is one step over every site's patients, at least h sites; set it to 1"
            )
        if self.fed.method not in DISTRIBUTED_METHODS:
            raise ValueError(
                f"fed.method = {self.fed.method!r} with dp.noise = 'distributed' is not yet supported; "
                f"use fed.method = one of {', '.join(DISTRIBUTED_METHODS)} or dp.noise = 'site'"
            )
        sites = self.expected_sites
        h, c = self.dp.honest_min, self.dp.colluders
        if h is not None and h <= c:
            raise ValueError(
                f"dp.honest_min = {h} must exceed dp.colluders = {c}: the noise comes from the honest "
                "survivors, h − c of them"
            )
        if h is not None and sites is not None and h > sites:
            raise ValueError(f"dp.honest_min = {h} exceeds the {sites} sites of this run; lower it")
        if h is None and sites is not None and sites - c < 1:
            raise ValueError(f"dp.colluders = {c} leaves no honest site among {sites}; lower it or add sites")
        return self

    @property
    def expected_sites(self) -> int | None:
        """The run's site count where the config fixes it (synthetic or dealt data); None otherwise."""
        if self.data.deal_sites is not None:
            return self.data.deal_sites
        if self.data.kind == "reports" and self.data.source == "synthetic":
            return self.data.synth.sites
        return None

    @model_validator(mode="after")
    def _method_fits_data(self) -> RunConfig:
        kind, method = self.data.kind, self.fed.method
        if method not in METHODS_FOR[kind]:
            raise ValueError(
                f"fed.method = {method!r} does not run on data.kind = {kind!r}; choose from "
                + ", ".join(METHODS_FOR[kind])
            )
        if self.model.visit_input and not self.hyper_lora_on:
            # the visit index enters through the patient hyper-LoRA; without it nothing reads it
            raise ValueError(
                "model.visit_input needs the patient hyper-LoRA: set model.hyper_lora = true and a "
                f"method other than fedtar-no-gmm (fed.method = {method!r}), or unset model.visit_input"
            )
        if kind == "imaging" and self.dp.enabled and method == "fm2":
            # both make one image's gradient depend on other images: per-image clipping then no
            # longer bounds an image's influence, and Top-K voids the Poisson sampling accounted for
            if self.fm2.top_k is not None:
                raise ValueError(
                    "fm2.top_k must be unset with dp.enabled: a score-ranked selection "
                    "is not the Poisson sampling DP-SGD is accounted with"
                )
            if self.fm2.cel_weight > 0:
                raise ValueError(
                    "fm2.cel_weight must be 0 with dp.enabled: the contrastive loss "
                    "mixes images of a batch, so per-image clipping would not hold"
                )
        return self

    @property
    def hyper_lora_on(self) -> bool:
        """The `fedtar-no-gmm` ablation drops the patient hyper-LoRA (and so the GMM's role)."""
        return self.model.hyper_lora and self.fed.method != "fedtar-no-gmm"

    @property
    def visit_input_on(self) -> bool:
        """Whether the hyper-LoRA reads the visit index: `model.visit_input`, or by default FedTAR's."""
        if self.model.visit_input is not None:
            return self.model.visit_input and self.hyper_lora_on
        return self.hyper_lora_on and self.fed.method.startswith("fedtar")

    @property
    def secagg_on(self) -> bool:
        return self.dp.enabled if self.secagg.enabled is None else self.secagg.enabled


class ConfigError(ValueError):
    """A configuration problem, with every offending key named."""


def _sections(model: type[BaseModel] = RunConfig, prefix: str = "") -> dict[str, type[BaseModel]]:
    """Every section of the tree by its dotted name ("" for the top), nested ones included."""
    found = {prefix: model}
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            found |= _sections(sub, f"{prefix}.{name}" if prefix else name)
    return found


def _did_you_mean(loc: tuple[int | str, ...]) -> str:
    """The nearest known key to an unknown one: a close spelling in the same section, else the same
    name in another section (a key put under the wrong header); "" when nothing is near."""
    import difflib

    *parents, leaf = (str(p) for p in loc)
    sections = _sections()
    here = sections.get(".".join(parents))
    if here is not None:
        close = difflib.get_close_matches(leaf, list(here.model_fields), n=1, cutoff=0.75)
        if close:
            return f" (did you mean {'.'.join([*parents, close[0]])}?)"
    elsewhere = [name for name, model in sections.items() if leaf in model.model_fields]
    if len(elsewhere) == 1:
        return f" (did you mean {elsewhere[0] + '.' if elsewhere[0] else ''}{leaf}?)"
    return ""


# pydantic's bounds, in the words of the fix: (what is wrong, how to set it, ctx key)
_BOUNDS = {
    "greater_than": ("too small", "above", "gt"),
    "greater_than_equal": ("too small", "to at least", "ge"),
    "less_than": ("too large", "below", "lt"),
    "less_than_equal": ("too large", "to at most", "le"),
}
# pydantic's type errors: what the value is not, and what to set
_KINDS = {
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "path_type": "a path",
}


def _shown(value: Any) -> str:
    """A value as the operator wrote it in TOML, cut short where it is long."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:g}"
    else:
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _problem(e: Any) -> str:
    """One pydantic error in our words: the value given, what is wrong with it, what to set instead
    (never the library's "Input should be …", which names neither the value nor the fix)."""
    kind, ctx, given = e["type"], e.get("ctx") or {}, _shown(e.get("input"))
    if kind == "extra_forbidden":
        return "unknown key" + _did_you_mean(e["loc"])
    if kind in _BOUNDS:
        wrong, how, bound = _BOUNDS[kind]
        return f"{given} is {wrong}; set it {how} {_shown(ctx[bound])}"
    if kind == "finite_number":
        return f"{given} is not a finite number; set a number (inf and nan would switch its check off)"
    if kind == "literal_error":
        return f"{given} is not allowed; set one of {str(ctx['expected']).replace(' or ', ', ')}"
    if kind in _KINDS:
        return f"{given} is not {_KINDS[kind]}; set {_KINDS[kind]}"
    if kind in ("model_type", "dict_type"):
        section = ".".join(str(p) for p in e["loc"])
        return f"{given} is not a table; write it as a [{section}] table"
    if kind == "missing":
        return "is required; set it"
    msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return msg.replace("Input should be", f"{given} must be", 1)


def _describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = _problem(e)
        # a check across keys names its keys itself ("dp.budget_epsilon = 4 is below …")
        named = msg.startswith(f"{key}.") or msg.startswith(f"{key} ")
        lines.append(msg if key == "<root>" or named else f"{key}: {msg}")
    return "\n".join(lines)


def build_config(data: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read TOML (if given), apply dotted-key overrides, validate the whole tree once."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            # utf-8-sig: Windows editors start a UTF-8 file with a byte-order mark, which TOML rejects
            data = tomllib.loads(Path(path).read_text(encoding="utf-8-sig"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such config file") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: {err}") from None
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return build_config(data)
