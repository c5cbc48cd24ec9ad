"""FedRep (Collins et al. 2021): FedAvg's server step over the shared representation
(`strategy.py`); each site keeps its own head and trains it first, then the body (`site.py`)."""

from __future__ import annotations

from secure_fed import registry
from secure_fed.algorithms.fedrep.site import SharedRepresentation
from secure_fed.algorithms.fedrep.strategy import FedRep

registry.register_method(
    registry.Method("fedrep", lambda dim, t_max, cfg: FedRep(dim, cfg), ("imaging",), SharedRepresentation)
)
