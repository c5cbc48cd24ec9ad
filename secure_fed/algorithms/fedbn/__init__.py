"""FedBN (Li et al. 2021): FedAvg's server step (`strategy.py`) over every layer but the
normalisation layers, which each site keeps (`site.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from secure_fed import registry

if TYPE_CHECKING:
    from secure_fed.config import RunConfig

# The registry imports this folder whenever a config names a method, so its heavy halves (torch,
# the model) are imported only when a run builds them.


def _strategy(dim: int, t_max: int, cfg: RunConfig) -> Any:  # noqa: ANN401
    from secure_fed.algorithms.fedbn.strategy import FedBN

    return FedBN(dim, cfg)


def _site() -> registry.SiteHook:
    from secure_fed.algorithms.fedbn.site import LocalNormalisation

    return LocalNormalisation()


registry.register_method(registry.Method("fedbn", _strategy, ("imaging",), _site))
