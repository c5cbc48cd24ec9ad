"""FedAvg over pooled visits: w ← w + Σ_k n_k Δ_k / Σ_k n_k."""

from __future__ import annotations

import numpy as np

from secure_fed.server.strategies.base import RoundContext, RoundResult, Strategy, weighted_mean


class FedAvg(Strategy):
    name = "fedavg"

    def server_update(self, global_state: np.ndarray, new_state: np.ndarray) -> np.ndarray:
        return new_state

    def run_round(self, ctx: RoundContext, global_state: np.ndarray) -> RoundResult:
        participants, declined, info = self.train_phase(ctx, global_state)
        total, summed = self.sum_uploads(ctx, participants, self.upload_dim())
        new_state = self.server_update(global_state, weighted_mean(total, self.dim, global_state))
        return self.result(new_state, summed, declined, info)
