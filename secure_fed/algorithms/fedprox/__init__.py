"""FedProx (Li et al. 2020): FedAvg's server step (`strategy.py`); each site pulls its local
training towards the round's global state (`SiteHook.prox_mu`, μ = `fed.fedprox_mu`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from secure_fed import registry

if TYPE_CHECKING:
    from secure_fed.config import RunConfig

# The registry imports this folder whenever a config names a method, so its heavy halves (torch,
# the model) are imported only when a run builds them.


class ProximalSite(registry.SiteHook):
    def prox_mu(self, cfg: RunConfig) -> float:
        return cfg.fed.fedprox_mu


registry.register_method(
    registry.Method(
        "fedprox",
        registry.deferred_strategy(f"{__name__}.strategy", "FedProx"),
        ("reports", "imaging"),
        ProximalSite,
    )
)
