"""FedAvg (McMahan et al. 2017): the sites' plain local step (the default `SiteHook`) and the core's
weighted mean on the server; under `dp.noise = "distributed"` the server takes one private step a
round on the decoded sum of the sites' noise shares. It runs on both kinds of data."""

from __future__ import annotations

from typing import TYPE_CHECKING

from secure_fed import registry

if TYPE_CHECKING:
    from secure_fed.config import RunConfig
    from secure_fed.server.strategies import Strategy

# The registry imports this folder whenever a config names a method, so its heavy halves (torch,
# the model) are imported only when a run builds them.


def _strategy(dim: int, t_max: int, cfg: RunConfig) -> Strategy:
    if cfg.dp.enabled and cfg.dp.noise == "distributed":
        from secure_fed.server.strategies.distributed import DistributedFedAvg

        return DistributedFedAvg(dim, cfg)
    from secure_fed.server.strategies import FedAvg

    return FedAvg(dim, cfg)


registry.register_method(registry.Method("fedavg", _strategy, ("reports", "imaging"), distributed=True))
