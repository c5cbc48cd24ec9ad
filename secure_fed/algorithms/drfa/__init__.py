"""DRFA (Deng et al. 2020): the sites' plain local step under the server's factors; the server
ascends its site weights on the sites' losses (`strategy.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from secure_fed import registry

if TYPE_CHECKING:
    from secure_fed.config import RunConfig

# The registry imports this folder whenever a config names a method, so its heavy halves (torch,
# the model) are imported only when a run builds them.


def _strategy(dim: int, t_max: int, cfg: RunConfig) -> Any:  # noqa: ANN401
    from secure_fed.algorithms.drfa.strategy import DRFA

    return DRFA(dim, cfg)


registry.register_method(registry.Method("drfa", _strategy, ("reports",)))
