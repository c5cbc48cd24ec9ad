"""FedBN (Li et al. 2021): FedAvg's server step (`strategy.py`) over every layer but the
normalisation layers, which each site keeps (`site.py`)."""

from __future__ import annotations

from secure_fed import registry

# its strategy and site hook load when a run builds them (registry.deferred), not at each config check
registry.register_method(
    registry.Method(
        "fedbn",
        registry.deferred_strategy(f"{__name__}.strategy", "FedBN"),
        ("imaging",),
        registry.deferred(f"{__name__}.site", "LocalNormalisation"),
    )
)
