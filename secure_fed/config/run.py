"""The root of the tree, `RunConfig`: every section, and the checks that span sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from secure_fed.config.base import _Strict
from secure_fed.config.data import DataConfig
from secure_fed.config.dp import DPConfig
from secure_fed.config.federation import FedConfig, FM2Config
from secure_fed.config.model import ModelConfig, TrainConfig
from secure_fed.config.protection import AuditConfig, DeployConfig, HEConfig, SecAggConfig


def _implied_kind(method: object) -> str | None:
    """The data kind a registered method's name implies where it differs from the default kind."""
    if not isinstance(method, str):
        return None
    from secure_fed import registry  # lazily: the registry imports the algorithms, which import this

    if method not in registry.method_names():
        return None  # the field's own check names the registered methods
    kind = registry.method(method).kinds[0]
    return None if kind == DataConfig.model_fields["kind"].default else kind


class RunConfig(_Strict):
    seed: int = 0
    out: Path = Path("runs/default")
    data: DataConfig = DataConfig()
    model: ModelConfig = Field(default_factory=ModelConfig)  # its cache_dir is read per config
    train: TrainConfig = TrainConfig()
    # made per config: its default site policy lists the registered methods, which the registry
    # can only give once this package has loaded (the algorithm folders import it)
    fed: FedConfig = Field(default_factory=FedConfig)
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
        # `--method fm2` alone means the imaging data FM2 runs on (a method's first kind); an
        # explicit data.kind wins
        if isinstance(data, dict):
            method = (data.get("fed") or {}).get("method") if isinstance(data.get("fed"), dict) else None
            section = data.get("data")
            implied = _implied_kind(method)
            if implied is not None and not (isinstance(section, dict) and "kind" in section):
                data = {**data, "data": {**(section if isinstance(section, dict) else {}), "kind": implied}}
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
        # imported here: the accountants pull in scipy, which a config without distributed noise never needs
        from secure_fed.dp.accountants import ACCOUNTANTS, accountant_named

        accountant = accountant_named(self.dp.accountant)
        if not accountant.prices_skellam:
            pricing = [name for name, other in ACCOUNTANTS.items() if other.prices_skellam]
            raise ValueError(
                f"dp.accountant = {accountant.name!r} with dp.noise = 'distributed': the Skellam sum has no "
                f"{accountant.label} accountant ({', '.join(n.upper() for n in pricing)} only); set "
                f"dp.accountant = {pricing[0]!r}, or dp.noise = 'site' for {accountant.label}"
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
        from secure_fed import registry  # lazily: the registry imports the algorithms, which import this

        if not registry.method(self.fed.method).distributed:
            raise ValueError(
                f"fed.method = {self.fed.method!r} with dp.noise = 'distributed' is not yet supported; "
                f"use fed.method = one of {', '.join(registry.distributed_methods())} or dp.noise = 'site'"
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
        from secure_fed import registry  # lazily: the registry imports the algorithms, which import this

        kind, method = self.data.kind, self.fed.method
        if kind not in registry.method(method).kinds:
            raise ValueError(
                f"fed.method = {method!r} does not run on data.kind = {kind!r}; choose from "
                + ", ".join(registry.methods_for(kind))
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
