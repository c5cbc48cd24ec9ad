"""FedTAR: per-visit-index updates, temporal residual aggregation, meta-learned α.

Round phases: (a) sites train one adapter copy per visit index; (b) the uploads are summed
(`secure_sum`); (c) the server forms the snapshots and the residual chain; (d) sites compute their
validation hypergradient scalars along ∂w^(T)/∂α_t; (e) the scalars are summed (`scalar_sum`);
(f) ψ takes a step and w^(T) becomes the global state.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from secure_fed.algorithms.fedtar.temporal import (
    MetaUpdater,
    TemporalMetaLearner,
    temporal_step,
    weighted_snapshots,
)
from secure_fed.config import RunConfig
from secure_fed.crypto.scalars import ScalarAggregationError
from secure_fed.protocol.failures import signed_reason
from secure_fed.server.aggregation import scalar_sum
from secure_fed.server.strategies.base import RoundContext, RoundResult, Strategy


class FedTAR(Strategy):
    pooled = False

    def __init__(
        self, dim: int, t_max: int, cfg: RunConfig, temporal: bool = True, name: str = "fedtar"
    ) -> None:
        super().__init__(dim, cfg)
        self.name = name
        self.t_max = t_max
        self.temporal = temporal
        train = cfg.train
        self.learner = TemporalMetaLearner(
            t_max,
            cfg.fed.time_embedding_dim,
            seed=cfg.seed,
            floor=train.alpha_floor,
            init="torch" if train.meta_optimizer == "sgd" else "small",
        )
        self.meta = MetaUpdater(self.learner, meta_rate(cfg), train.meta_optimizer)

    def upload_dim(self) -> int:
        return self.t_max * (self.dim + 1)

    def alpha(self) -> np.ndarray:
        return self.learner.alpha() if self.temporal else np.full(self.t_max, 1.0 / self.t_max)

    def run_round(self, ctx: RoundContext, global_state: np.ndarray) -> RoundResult:
        participants, declined, info = self.train_phase(ctx, global_state)
        total, summed = self.sum_uploads(ctx, participants, self.upload_dim())
        per_t = total.reshape(self.t_max, self.dim + 1)
        counts = per_t[:, self.dim]
        snapshots = weighted_snapshots(global_state, per_t[:, : self.dim], counts)
        return self.combine(ctx, global_state, snapshots, counts > 0, summed, declined, info)

    def combine(
        self,
        ctx: RoundContext,
        global_state: np.ndarray,
        snapshots: np.ndarray,
        present: np.ndarray,
        summed: Any,
        declined: dict[str, str],
        info: dict[str, Any],
        final: np.ndarray | None = None,
    ) -> RoundResult:
        """Phases (c)–(f) from the round's snapshots w̄^(1..T): the temporal step (the residual
        chain, or the convex combination: `train.fedtar_chain`), the survivors' α hypergradient sum
        and ψ's step. `final`: the round's model where it is not the chain's own end (the one-vector
        release's step; the snapshots are then its surrogates, which give only α's directions)."""
        alpha = self.alpha()
        chain = temporal_step(self.cfg.train.fedtar_chain, global_state, snapshots, alpha, present=present)
        final = chain.final if final is None else final
        val_loss = None
        delivered: list[int] | None = None
        kept = False
        if self.temporal:
            request = {"round": ctx.round, "final": final, "directions": chain.directions}
            replies = ctx.transport.exchange("hypergrad", {n: dict(request) for n in summed.survivors})
            answered = [n for n in summed.survivors if replies.get(n, {}).get("status") == "ok"]
            delivered, kept = [], True
            if len(answered) >= ctx.cfg.fed.min_sites:
                try:
                    grad = scalar_sum(ctx.transport, answered, ctx.aggregation, ctx.round)
                except ScalarAggregationError as err:  # α keeps its value; never retried over a subset
                    ctx.log_event("alpha_skipped", {"reason": signed_reason(err)[1]})
                else:
                    alpha = self.meta.step(np.asarray(grad, dtype=np.float64))
                    delivered, kept = answered, False
                n_val = sum(int(replies[n].get("val_patients", 0)) for n in answered)
                if n_val:
                    val_loss = sum(float(replies[n]["val_loss_sum"]) for n in answered) / n_val
        return self.result(
            final,
            summed,
            declined,
            info,
            alpha=[float(a) for a in alpha],
            val_loss=val_loss,
            delivered=delivered,
            alpha_kept=kept,
        )

    def state_dict(self) -> dict[str, Any]:
        params = {f"psi.{k}": v.detach().numpy() for k, v in self.learner.state_dict().items()}
        # the SGD update's running hypergradient size: a resumed run keeps its units
        params.update(
            {f"meta.{k}": np.asarray(v, dtype=np.float64) for k, v in self.meta.state_dict().items()}
        )
        return params

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(
            {k[4:]: torch.as_tensor(v) for k, v in state.items() if k.startswith("psi.")}
        )
        # a checkpoint stores each number as a one-element array (numpy 2 refuses float() of one)
        self.meta.load_state_dict(
            {k[5:]: float(np.asarray(v).reshape(-1)[0]) for k, v in state.items() if k.startswith("meta.")}
        )


def meta_rate(cfg: RunConfig) -> float:
    """ψ's rate: train.meta_lr where given, else the travel budget spread over the run's rounds."""
    train = cfg.train
    return train.meta_lr if train.meta_lr is not None else train.meta_travel / cfg.fed.rounds
