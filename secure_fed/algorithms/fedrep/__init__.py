"""FedRep (Collins et al. 2021): FedAvg's server step over the shared representation
(`strategy.py`); each site keeps its own head and trains it first, then the body (`site.py`)."""

from __future__ import annotations

from secure_fed import registry

# its strategy and site hook load when a run builds them (registry.deferred), not at each config check
registry.register_method(
    registry.Method(
        "fedrep",
        registry.deferred_strategy(f"{__name__}.strategy", "FedRep"),
        ("imaging",),
        registry.deferred(f"{__name__}.site", "SharedRepresentation"),
    )
)
