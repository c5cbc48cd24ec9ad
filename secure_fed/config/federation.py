"""The federation: which method runs, the server's rounds and each site's policy on them, and FM2."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, PositiveInt, model_validator

from secure_fed.config.base import _Strict

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
