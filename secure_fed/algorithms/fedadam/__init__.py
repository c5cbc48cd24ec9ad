"""FedAdam (Reddi et al. 2021): the sites' plain local step, Adam on the server (`strategy.py`)."""

from __future__ import annotations

from secure_fed import registry

# its strategy and site hook load when a run builds them (registry.deferred), not at each config check
registry.register_method(
    registry.Method("fedadam", registry.deferred_strategy(f"{__name__}.strategy", "FedAdam"), ("reports",))
)
