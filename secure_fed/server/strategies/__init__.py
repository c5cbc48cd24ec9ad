"""One server strategy per file; every strategy updates the global state from sums only. The
baselines live here; an algorithm folder registers its own (`secure_fed.registry`)."""

from secure_fed.registry import strategy_factory, strategy_names
from secure_fed.server.strategies.base import RoundContext, RoundResult, Strategy
from secure_fed.server.strategies.drfa import DRFA
from secure_fed.server.strategies.fedadam import FedAdam
from secure_fed.server.strategies.fedavg import FedAvg
from secure_fed.server.strategies.fedbn import FedBN
from secure_fed.server.strategies.fedprox import FedProx
from secure_fed.server.strategies.fedrep import FedRep
from secure_fed.server.strategies.scaffold import Scaffold

__all__ = [
    "DRFA",
    "FedAdam",
    "FedAvg",
    "FedBN",
    "FedProx",
    "FedRep",
    "RoundContext",
    "RoundResult",
    "Scaffold",
    "Strategy",
    "make_strategy",
]


def make_strategy(method: str, dim: int, t_max: int, cfg: object) -> Strategy:
    """A generic baseline from the table below, or an algorithm folder's strategy (registry)."""
    from secure_fed.config import RunConfig

    assert isinstance(cfg, RunConfig)
    if cfg.dp.enabled and cfg.dp.noise == "distributed" and method == "fedavg":
        # one private step a round, taken by the server (an algorithm's own strategy knows its mode)
        from secure_fed.server.strategies.distributed import DistributedFedAvg

        return DistributedFedAvg(dim, cfg)
    table = {
        "fedavg": FedAvg,
        "fedprox": FedProx,
        "fedadam": FedAdam,
        "scaffold": Scaffold,
        "drfa": DRFA,
        "fedrep": FedRep,
        "fedbn": FedBN,
    }
    if method in table:
        return table[method](dim, cfg)
    factory = strategy_factory(method)
    if factory is None:
        raise ValueError(f"unknown method {method!r}; choose from " + ", ".join([*strategy_names(), *table]))
    strategy = factory(dim, t_max, cfg)
    assert isinstance(strategy, Strategy)
    return strategy
