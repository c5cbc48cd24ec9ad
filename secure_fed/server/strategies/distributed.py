"""FedAvg under distributed DP (`dp.noise = "distributed"`): a round is one DP step over the union
of the sites' patients, and the server takes it.

Each site uploads, through SecAgg+ in the sites' own ring, its clipped gradient sum encoded with its
noise share (secure_fed.site.distributed). The server unmasks only the survivors' sum, which is
the released noisy sum of clipped gradients; it decodes it with the plan it derives itself from the
config (the same function the sites use), divides by the expected batch q × Σ_k floor_k, where
floor_k is site k's patient count as its operator declares it public (`fed.public_patients`, 1 where
undeclared: a constant of its policy, not derived from its data, so it tells nothing of n), and
takes an Adam step at `train.lr`. Everything after the
unmasked sum is post-processing. `noisy_gradient` and `Adam` are the parts an algorithm's own
distributed strategy reuses.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from secure_fed.config import RunConfig
from secure_fed.dp.distributed import DistributedSum, padded_size
from secure_fed.server.strategies.base import RoundContext, RoundResult, Strategy


class Adam:
    """The server's optimiser over the decoded gradients (any shape), its moments kept across rounds."""

    def __init__(self, shape: tuple[int, ...], lr: float, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8) -> None:  # fmt: skip
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = np.zeros(shape)
        self.v = np.zeros(shape)
        self.steps = 0

    def step(self, state: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        self.steps += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * gradient
        self.v = self.beta2 * self.v + (1 - self.beta2) * gradient**2
        m_hat = self.m / (1 - self.beta1**self.steps)
        v_hat = self.v / (1 - self.beta2**self.steps)
        return state - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m, "v": self.v, "steps": np.asarray(self.steps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.m, self.v = np.asarray(state["m"]), np.asarray(state["v"])
        # a checkpoint stores the count as a one-element array (numpy 2 refuses int() of one)
        self.steps = int(np.asarray(state["steps"]).reshape(-1)[0])


def noisy_gradient(
    strategy: Strategy, ctx: RoundContext, participants: list[int], info: dict[str, Any], step_dim: int
) -> tuple[np.ndarray, Any]:
    """The round's released step: the survivors' decoded noisy sum of clipped gradients over the
    expected batch (length `step_dim`), and the secure sum's outcome. Refuses, before any sum, a
    round in which a site encoded with another plan than the server derives."""
    dsum = DistributedSum.for_round(strategy.cfg, step_dim, len(ctx.sites), ctx.round)
    other = sorted(ctx.sites[n] for n in participants if info["distributed_plans"].get(n) != dsum.digest)
    if other:
        # their shares are on another ring, granularity or noise: the sum would decode to noise
        raise ValueError(
            f"round {ctx.round}: {', '.join(other)} encoded with another distributed-DP plan than the "
            f"server's ({len(ctx.sites)} sites, this config): every site and the server need the same "
            "[dp] settings and the same provisioned sites"
        )
    total, summed = strategy.sum_uploads(ctx, participants, dsum.length)
    # the noise layers survivors revealed ("add-then-remove"), those the decode may take out
    accepted = dsum.accepted_reveals(getattr(summed, "noise_layers", None) or {}, set(summed.survivors))
    if any(layers for _, layers in accepted.values()):
        removed = {ctx.sites[node]: count for node, (count, _) in accepted.items()}
        ctx.log_event("noise_layers_removed", {"round": ctx.round, "removed": removed})
    noisy_sum = dsum.decode(total, accepted)
    floors = info.get("population_floors", {})
    patients = sum(floors.get(n, 0) for n in summed.survivors)
    expected_batch = max(strategy.cfg.dp.sample_rate * patients, 1.0)
    return noisy_sum / expected_batch, summed


class DistributedFedAvg(Strategy):
    name = "fedavg"

    def __init__(self, dim: int, cfg: RunConfig) -> None:
        super().__init__(dim, cfg)
        self.adam = Adam((dim,), cfg.train.lr)

    def upload_dim(self) -> int:
        """The shares' length: the update padded for the mechanism's blockwise Hadamard rotation."""
        return padded_size(self.dim)

    def run_round(self, ctx: RoundContext, global_state: np.ndarray) -> RoundResult:
        participants, declined, info = self.train_phase(ctx, global_state)
        gradient, summed = noisy_gradient(self, ctx, participants, info, self.dim)
        return self.result(self.adam.step(global_state, gradient), summed, declined, info)

    def state_dict(self) -> dict[str, Any]:
        return self.adam.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.adam.load_state_dict(state)
