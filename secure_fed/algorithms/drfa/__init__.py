"""DRFA (Deng et al. 2020): the sites' plain local step under the server's factors; the server
ascends its site weights on the sites' losses (`strategy.py`)."""

from __future__ import annotations

from secure_fed import registry
from secure_fed.algorithms.drfa.strategy import DRFA

registry.register_method(registry.Method("drfa", lambda dim, t_max, cfg: DRFA(dim, cfg), ("reports",)))
