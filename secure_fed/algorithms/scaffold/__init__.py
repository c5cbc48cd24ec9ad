"""SCAFFOLD (Karimireddy et al. 2020, option II controls): the server keeps the global control
(`strategy.py`); each site corrects its gradients by c − c_k and uploads its control change
(`site.py`)."""

from __future__ import annotations

from secure_fed import registry
from secure_fed.algorithms.scaffold.site import ControlVariates
from secure_fed.algorithms.scaffold.strategy import Scaffold

registry.register_method(
    registry.Method("scaffold", lambda dim, t_max, cfg: Scaffold(dim, cfg), ("reports",), ControlVariates)
)
