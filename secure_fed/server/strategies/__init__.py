"""One server strategy per file; every strategy updates the global state from sums only."""

from secure_fed.server.strategies.base import RoundContext, RoundResult, Strategy
from secure_fed.server.strategies.drfa import DRFA
from secure_fed.server.strategies.fedadam import FedAdam
from secure_fed.server.strategies.fedavg import FedAvg
from secure_fed.server.strategies.fedbn import FedBN
from secure_fed.server.strategies.fedprox import FedProx
from secure_fed.server.strategies.fedrep import FedRep
from secure_fed.server.strategies.fedtar import FedTAR
from secure_fed.server.strategies.scaffold import Scaffold

__all__ = [
    "DRFA",
    "FedAdam",
    "FedAvg",
    "FedBN",
    "FedProx",
    "FedRep",
    "FedTAR",
    "RoundContext",
    "RoundResult",
    "Scaffold",
    "Strategy",
    "make_strategy",
]


def make_strategy(method: str, dim: int, t_max: int, cfg: object) -> Strategy:
    from secure_fed.config import RunConfig

    assert isinstance(cfg, RunConfig)
    if cfg.dp.enabled and cfg.dp.noise == "distributed":
        # the config admits only fedavg here: one private step a round, taken by the server
        from secure_fed.server.strategies.distributed import DistributedFedAvg

        return DistributedFedAvg(dim, cfg)
    if method.startswith("fedtar"):
        return FedTAR(dim, t_max, cfg, temporal=method != "fedtar-no-temporal", name=method)
    if method == "fm2":  # an algorithm folder registers its strategy here
        from secure_fed.algorithms.fm2.strategy import FM2

        return FM2(dim, cfg)
    table = {
        "fedavg": FedAvg,
        "fedprox": FedProx,
        "fedadam": FedAdam,
        "scaffold": Scaffold,
        "drfa": DRFA,
        "fedrep": FedRep,
        "fedbn": FedBN,
    }
    if method not in table:
        raise ValueError(
            f"unknown method {method!r}; choose from fedtar, fedtar-no-gmm, fedtar-no-temporal, fm2, "
            + ", ".join(table)
        )
    return table[method](dim, cfg)
