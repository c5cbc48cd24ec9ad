"""FM2's server step: the Observer moves by the weighted mean change of the sites that trained, each
domain expert by the weighted mean change of the sites holding its modality (HMA's aggregation), all
read from one secure sum. The class-wise experts never reach the server."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from secure_fed.algorithms.fm2.learner import build_imaging_model
from secure_fed.algorithms.fm2.model import FM2Model, dmoe_from_sum
from secure_fed.config import RunConfig
from secure_fed.server.strategies.base import RoundContext, RoundResult, Strategy, weighted_mean


class FM2(Strategy):
    name = "fm2"

    def __init__(self, dim: int, cfg: RunConfig) -> None:
        super().__init__(dim, cfg)
        model = build_imaging_model(cfg)
        assert isinstance(model, FM2Model)
        self.dmoe = model.dmoe  # a template: the server loads each round's global M_d into it
        self.observer_dim = sum(p.numel() for p in model.observer.parameters())
        self.dmoe_dim = sum(p.numel() for p in self.dmoe.parameters())
        if self.observer_dim + self.dmoe_dim != dim:
            raise ValueError(f"FM2's shared state has {self.observer_dim + self.dmoe_dim} values, not {dim}")

    def upload_dim(self) -> int:
        """Observer change and weight, then each expert's weighted change and the expert weights."""
        return self.observer_dim + 1 + self.dmoe_dim + len(self.dmoe.experts)

    def run_round(self, ctx: RoundContext, global_state: np.ndarray) -> RoundResult:
        participants, declined, info = self.train_phase(ctx, global_state)
        total, summed = self.sum_uploads(ctx, participants, self.upload_dim())
        d = self.observer_dim
        observer = weighted_mean(total[: d + 1], d, global_state[:d])
        params = list(self.dmoe.parameters())
        with torch.no_grad():
            vector_to_parameters(torch.as_tensor(global_state[d:]).to(params[0].dtype), params)
        merged = dmoe_from_sum(torch.as_tensor(total[d + 1 :]), self.dmoe)
        dmoe = parameters_to_vector([merged[n] for n, _ in self.dmoe.named_parameters()]).double().numpy()
        return self.result(np.concatenate([observer, dmoe]), summed, declined, info)
