"""FedRep (Collins et al. 2021): FedAvg's server step over the shared representation
(`strategy.py`); each site keeps its own head and trains it first, then the body (`site.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from secure_fed import registry

if TYPE_CHECKING:
    from secure_fed.config import RunConfig

# The registry imports this folder whenever a config names a method, so its heavy halves (torch,
# the model) are imported only when a run builds them.


def _strategy(dim: int, t_max: int, cfg: RunConfig) -> Any:  # noqa: ANN401
    from secure_fed.algorithms.fedrep.strategy import FedRep

    return FedRep(dim, cfg)


def _site() -> registry.SiteHook:
    from secure_fed.algorithms.fedrep.site import SharedRepresentation

    return SharedRepresentation()


registry.register_method(registry.Method("fedrep", _strategy, ("imaging",), _site))
