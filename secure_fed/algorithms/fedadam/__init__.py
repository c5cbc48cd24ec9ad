"""FedAdam (Reddi et al. 2021): the sites' plain local step, Adam on the server (`strategy.py`)."""

from __future__ import annotations

from secure_fed import registry
from secure_fed.algorithms.fedadam.strategy import FedAdam

registry.register_method(registry.Method("fedadam", lambda dim, t_max, cfg: FedAdam(dim, cfg), ("reports",)))
