"""One server strategy per file; every strategy updates the global state from sums only. The core
keeps the base class and FedAvg's weighted mean (every baseline's server step builds on it); each
method's own strategy lives in its algorithm folder and is found through `secure_fed.registry`."""

from secure_fed import registry
from secure_fed.server.strategies.base import RoundContext, RoundResult, Strategy
from secure_fed.server.strategies.fedavg import FedAvg

__all__ = [
    "FedAvg",
    "RoundContext",
    "RoundResult",
    "Strategy",
    "make_strategy",
]


def make_strategy(method: str, dim: int, t_max: int, cfg: object) -> Strategy:
    """The server half of the registered method `method` (ValueError naming the registered ones)."""
    strategy = registry.method(method).strategy(dim, t_max, cfg)
    assert isinstance(strategy, Strategy)
    return strategy
