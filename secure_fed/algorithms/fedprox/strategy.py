"""FedProx: FedAvg's server step; the sites add μ/2‖w − w_global‖² to their local loss."""

from __future__ import annotations

from secure_fed.server.strategies.fedavg import FedAvg


class FedProx(FedAvg):
    name = "fedprox"
