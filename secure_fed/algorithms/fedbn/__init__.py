"""FedBN (Li et al. 2021): FedAvg's server step (`strategy.py`) over every layer but the
normalisation layers, which each site keeps (`site.py`)."""

from __future__ import annotations

from secure_fed import registry
from secure_fed.algorithms.fedbn.site import LocalNormalisation
from secure_fed.algorithms.fedbn.strategy import FedBN

registry.register_method(
    registry.Method("fedbn", lambda dim, t_max, cfg: FedBN(dim, cfg), ("imaging",), LocalNormalisation)
)
