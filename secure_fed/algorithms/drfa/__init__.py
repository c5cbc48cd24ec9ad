"""DRFA (Deng et al. 2020): the sites' plain local step under the server's factors; the server
ascends its site weights on the sites' losses (`strategy.py`)."""

from __future__ import annotations

from secure_fed import registry

# its strategy and site hook load when a run builds them (registry.deferred), not at each config check
registry.register_method(
    registry.Method("drfa", registry.deferred_strategy(f"{__name__}.strategy", "DRFA"), ("reports",))
)
