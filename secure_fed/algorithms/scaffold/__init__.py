"""SCAFFOLD (Karimireddy et al. 2020, option II controls): the server keeps the global control
(`strategy.py`); each site corrects its gradients by c − c_k and uploads its control change
(`site.py`)."""

from __future__ import annotations

from secure_fed import registry

# its strategy and site hook load when a run builds them (registry.deferred), not at each config check
registry.register_method(
    registry.Method(
        "scaffold",
        registry.deferred_strategy(f"{__name__}.strategy", "Scaffold"),
        ("reports",),
        registry.deferred(f"{__name__}.site", "ControlVariates"),
    )
)
