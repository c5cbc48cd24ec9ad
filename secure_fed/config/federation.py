"""The federation: which method runs, the server's rounds and each site's policy on them, and FM2."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from secure_fed.config.base import _Strict


def registered_methods() -> list[str]:
    """The method names the algorithm folders register (`secure_fed.registry`), sorted. Imported
    when called: the registry imports the algorithm folders, which import this package."""
    from secure_fed import registry

    return registry.method_names()


def check_method(name: str, key: str = "fed.method") -> str:
    names = registered_methods()
    if name not in names:
        raise ValueError(f"{key} = {name!r} is no registered method; choose one of {', '.join(names)}")
    return name


def _method_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = registered_methods()


def _methods_enum(schema: dict[str, Any]) -> None:
    schema.setdefault("items", {})["enum"] = registered_methods()


class FedConfig(_Strict):
    method: str = Field(
        "fedtar",
        description="the federated method: a name a folder under secure_fed/algorithms registers",
        json_schema_extra=_method_enum,
    )
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
    accepted_methods: list[str] = Field(
        default_factory=registered_methods,
        description="site policy: the methods this site trains for; a request for another is refused "
        "(default: every registered method; kept sorted, as a set)",
        json_schema_extra=_methods_enum,
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

    @field_validator("method")
    @classmethod
    def _registered(cls, name: str) -> str:
        return check_method(name)

    @field_validator("accepted_methods")
    @classmethod
    def _all_registered(cls, names: list[str]) -> list[str]:
        for name in names:
            check_method(name, "fed.accepted_methods")
        return sorted(names)

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
