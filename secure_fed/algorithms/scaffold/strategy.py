"""SCAFFOLD (Karimireddy et al. 2020, option II controls): sites correct their gradients by c − c_k
and upload their control change with the model update; the server only needs both sums."""

from __future__ import annotations

from typing import Any

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.server.strategies.base import RoundContext, RoundResult, Strategy, weighted_mean


class Scaffold(Strategy):
    name = "scaffold"

    def __init__(self, dim: int, cfg: RunConfig) -> None:
        super().__init__(dim, cfg)
        self.control = np.zeros(dim)
        self.n_sites = 0

    def upload_dim(self) -> int:
        return self.dim + 1 + self.dim  # weighted Δ, n, weighted Δc

    def train_options(self, round_id: int) -> dict[str, Any]:
        return {"control": self.control.copy()}

    def run_round(self, ctx: RoundContext, global_state: np.ndarray) -> RoundResult:
        participants, declined, info = self.train_phase(ctx, global_state)
        total, summed = self.sum_uploads(ctx, participants, self.upload_dim())
        new_state = weighted_mean(total, self.dim, global_state)
        count = total[self.dim]
        if count > 0:
            # c ← c + (|S|/N) · mean Δc_k, with the sites' weights standing in for |S|/N.
            self.control = self.control + total[self.dim + 1 :] / count * len(summed.survivors) / len(
                ctx.nodes
            )
        return self.result(new_state, summed, declined, info)

    def state_dict(self) -> dict[str, Any]:
        return {"control": self.control}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.control = np.asarray(state["control"])
