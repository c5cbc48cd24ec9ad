"""FedProx (Li et al. 2020): FedAvg's server step (`strategy.py`); each site pulls its local
training towards the round's global state (`SiteHook.prox_mu`, μ = `fed.fedprox_mu`)."""

from __future__ import annotations

from secure_fed import registry
from secure_fed.algorithms.fedprox.strategy import FedProx
from secure_fed.config import RunConfig


class ProximalSite(registry.SiteHook):
    def prox_mu(self, cfg: RunConfig) -> float:
        return cfg.fed.fedprox_mu


registry.register_method(
    registry.Method(
        "fedprox", lambda dim, t_max, cfg: FedProx(dim, cfg), ("reports", "imaging"), ProximalSite
    )
)
