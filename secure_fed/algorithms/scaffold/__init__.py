"""SCAFFOLD (Karimireddy et al. 2020, option II controls): the server keeps the global control
(`strategy.py`); each site corrects its gradients by c − c_k and uploads its control change
(`site.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from secure_fed import registry

if TYPE_CHECKING:
    from secure_fed.config import RunConfig

# The registry imports this folder whenever a config names a method, so its heavy halves (torch,
# the model) are imported only when a run builds them.


def _strategy(dim: int, t_max: int, cfg: RunConfig) -> Any:  # noqa: ANN401
    from secure_fed.algorithms.scaffold.strategy import Scaffold

    return Scaffold(dim, cfg)


def _site() -> registry.SiteHook:
    from secure_fed.algorithms.scaffold.site import ControlVariates

    return ControlVariates()


registry.register_method(registry.Method("scaffold", _strategy, ("reports",), _site))
