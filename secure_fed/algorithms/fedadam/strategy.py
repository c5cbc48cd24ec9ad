"""FedAdam (Reddi et al. 2021): Adam on the server with the averaged update as pseudo-gradient."""

from __future__ import annotations

from typing import Any

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.server.strategies.fedavg import FedAvg


class FedAdam(FedAvg):
    name = "fedadam"

    def __init__(
        self, dim: int, cfg: RunConfig, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3
    ) -> None:
        super().__init__(dim, cfg)
        self.lr, self.beta1, self.beta2, self.tau = cfg.fed.fedadam_lr, beta1, beta2, tau
        self.m = np.zeros(dim)
        self.v = np.zeros(dim)

    def server_update(self, global_state: np.ndarray, new_state: np.ndarray) -> np.ndarray:
        delta = new_state - global_state
        self.m = self.beta1 * self.m + (1 - self.beta1) * delta
        self.v = self.beta2 * self.v + (1 - self.beta2) * delta**2
        return global_state + self.lr * self.m / (np.sqrt(self.v) + self.tau)

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m, "v": self.v}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.m, self.v = np.asarray(state["m"]), np.asarray(state["v"])
