"""Temporal residual aggregation and the meta-learned coefficients α (FedTAR, server side).

w^(t) = w^(t−1) + α_t (w̄^(t) − w^(t−1)), w^(0) = w_g. Each w^(t) is a convex combination of
w^(0) and the snapshots w̄^(1..t) (paper Thm. 1) and each step moves by α_t‖w̄^(t) − w^(t−1)‖
(Thm. 2). Because w^(T) is linear in the snapshots, ∂w^(T)/∂α_t = Π_{s>t}(1 − α_s)(w̄^(t) − w^(t−1)),
so a site's validation hypergradient is a directional derivative along these T directions.

Theorem 1 allows a second reading of the step, `train.fedtar_chain = "convex"`: the round's model is
the full convex combination w = Σ_t α_t w̄^(t) (α on the simplex), which keeps none of the round's
start where every visit index is present; the chain keeps Π_t(1 − α_t) of it (0.33 at uniform α,
T = 5). `temporal_step` applies the configured one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn

ChainKind = Literal["residual", "convex"]


@dataclass(frozen=True)
class ResidualChain:
    states: np.ndarray  # (T + 1, D): w^(0) … w^(T); the convex reading: (2, D), w^(0) and w
    directions: np.ndarray  # (T, D): the directions a site's α hypergradient scalars are taken along

    @property
    def final(self) -> np.ndarray:
        return self.states[-1]


def weighted_snapshots(start: np.ndarray, weighted_delta_sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """w̄^(t) = w_g + Σ_k n_{k,t} Δ_{k,t} / Σ_k n_{k,t}; a visit index nobody trained on keeps w_g."""
    snaps = np.repeat(start[None, :], len(counts), axis=0).astype(np.float64)
    for t, n in enumerate(counts):
        if n > 0:
            snaps[t] += weighted_delta_sums[t] / n
    return snaps


def residual_chain(
    start: np.ndarray, snapshots: np.ndarray, alpha: np.ndarray, present: np.ndarray | None = None
) -> ResidualChain:
    """Apply the chain; a visit index absent this round (`present[t]` False) is skipped (Δ_t = 0)."""
    t_max = len(snapshots)
    present = np.ones(t_max, dtype=bool) if present is None else present
    states = np.empty((t_max + 1, start.size), dtype=np.float64)
    states[0] = start
    steps = np.zeros((t_max, start.size), dtype=np.float64)
    for t in range(t_max):
        if present[t]:
            steps[t] = snapshots[t] - states[t]
        states[t + 1] = states[t] + alpha[t] * steps[t]
    directions = np.empty_like(steps)
    carry = 1.0
    for t in range(t_max - 1, -1, -1):
        directions[t] = carry * steps[t]
        if present[t]:
            carry *= 1.0 - alpha[t]
    return ResidualChain(states=states, directions=directions)


def convex_combination(
    start: np.ndarray, snapshots: np.ndarray, alpha: np.ndarray, present: np.ndarray | None = None
) -> ResidualChain:
    """w = Σ_t α_t w̄^(t), written w^(0) + Σ_t α_t (w̄^(t) − w^(0)) so that an absent visit index
    (its snapshot is w^(0) in a round, `weighted_snapshots`) leaves its weight with the start.

    ∂w/∂α_t = w̄^(t). The directions sent are w̄^(t) − w^(0) instead: α = softmax(u) and the
    softmax Jacobian diag(α) − αα^T maps a shift common to every t to 0, so ψ takes the same step,
    while each direction is one round's update in size rather than the whole adapter's (a site
    refuses a direction longer than dp.alpha_direction_norm, and C_α clips the T scalars together)."""
    present = np.ones(len(snapshots), dtype=bool) if present is None else present
    directions = np.where(present[:, None], snapshots - start[None, :], 0.0).astype(np.float64)
    final = start.astype(np.float64) + alpha @ directions
    return ResidualChain(states=np.stack([start.astype(np.float64), final]), directions=directions)


def temporal_step(
    kind: ChainKind,
    start: np.ndarray,
    snapshots: np.ndarray,
    alpha: np.ndarray,
    present: np.ndarray | None = None,
) -> ResidualChain:
    """The round's model from its snapshots, read as `train.fedtar_chain` says."""
    if kind == "convex":
        return convex_combination(start, snapshots, alpha, present)
    return residual_chain(start, snapshots, alpha, present)


def chain_weights(
    alpha: np.ndarray, present: np.ndarray | None = None, kind: ChainKind = "residual"
) -> np.ndarray:
    """c_t of Thm. 1: w^(T) − w^(0) = Σ_t c_t (w̄^(t) − w^(0)), c_t = α_t Π_{s>t, present}(1 − α_s)
    for the chain (α_t for the convex reading); an absent visit index gets 0 and, in the chain,
    passes everything on. w^(0)'s own weight is 1 − Σ_t c_t."""
    present = np.ones(len(alpha), dtype=bool) if present is None else present
    if kind == "convex":
        return np.where(present, alpha, 0.0)
    c = np.zeros(len(alpha))
    carry = 1.0
    for t in range(len(alpha) - 1, -1, -1):
        if present[t]:
            c[t] = alpha[t] * carry
            carry *= 1.0 - alpha[t]
    return c


def matched_step_scale(alpha: np.ndarray, kind: ChainKind = "residual") -> float:
    """The factor on every visit index's server step that lets a FedTAR round move the model as far
    as one step at train.lr (FedAvg's round) when the steps are independent noise of one size, as
    a private step's mostly are: the chain passes on Σ_t c_t Δ_t, of size √(Σ_t c_t²)·|Δ|.
    Uniform α at T = 5: 3.18 (convex: √5 = 2.24); one-hot α: 1 (the model is then one copy's step)."""
    return float(1.0 / np.sqrt(np.sum(chain_weights(alpha, kind=kind) ** 2)))


MetaInit = Literal["small", "torch"]
MetaOptimizer = Literal["sgd", "adam"]


def floor_mix(t_max: int, floor: float) -> float:
    """λ of α = λ/T + (1 − λ)·softmax(u): λ = min(1, floor·T) gives α_t ≥ floor for every u and,
    for T ≥ 2, α_t ≤ 1 − (T − 1)·floor (0.9 at T = 2, 0.6 at T = 5 with floor 0.1); α stays on the
    simplex. The write-up's §4.1 "keep α_t within [0.1, 0.9]" made consistent with a sum of 1."""
    return min(1.0, floor * t_max)


def alpha_bounds(t_max: int, floor: float) -> tuple[float, float]:
    """The [min, max] every α_t of the floored softmax stays within, for any scores u."""
    lam = floor_mix(t_max, floor)
    return lam / t_max, lam / t_max + (1.0 - lam)


class TemporalMetaLearner(nn.Module):
    """u_t = g(e(t); ψ), α = λ/T + (1 − λ)·softmax(u): a learned time embedding, a small MLP and the
    floor of `floor_mix` (floor 0: the paper's plain softmax).

    init "small" is the original one (every weight N(0, 0.02²)): the hidden state is then nearly the
    shared bias for every t, so ∂u/∂ψ barely differs between visit indices and plain SGD on ψ sits on
    a flat start for hundreds of steps, then jumps (benchmarks/alpha_walk.py). Only Adam's
    per-parameter scaling moved it. init "torch" is torch's own (embedding N(0, 1), Linear
    U(±1/√fan_in)) with the same zeroed last layer: the visit indices' hidden states differ from the
    first step, so a step on ψ is close to a step on u. Both start at uniform α."""

    def __init__(
        self,
        t_max: int,
        embed_dim: int = 32,
        hidden: int = 32,
        seed: int = 0,
        floor: float = 0.0,
        init: MetaInit = "small",
    ) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.t_max = t_max
        self.mix = floor_mix(t_max, floor)
        self.embedding = nn.Embedding(t_max, embed_dim)
        self.mlp = nn.Sequential(nn.Linear(embed_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        with torch.no_grad():
            if init == "small":
                for p in self.parameters():
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            else:
                self.embedding.weight.copy_(torch.randn(self.embedding.weight.shape, generator=gen))
                first = self.mlp[0]
                bound = 1.0 / float(np.sqrt(embed_dim))
                for p in (first.weight, first.bias):
                    p.copy_((torch.rand(p.shape, generator=gen) * 2.0 - 1.0) * bound)
            # Start from uniform α: equal scores for every visit index.
            self.mlp[-1].weight.zero_()
            self.mlp[-1].bias.zero_()

    def scores(self) -> torch.Tensor:
        return self.mlp(self.embedding(torch.arange(self.t_max))).squeeze(-1)

    def _floored(self, scores: torch.Tensor) -> torch.Tensor:
        return self.mix / self.t_max + (1.0 - self.mix) * torch.softmax(scores, dim=0)

    def forward(self) -> torch.Tensor:
        return self._floored(self.scores())

    def alpha(self) -> np.ndarray:
        """α in float64: the aggregation is a convex combination only if α sums to 1, and a float32
        softmax misses that by up to ~1e-7."""
        with torch.no_grad():
            return self._floored(self.scores().double()).numpy()


class MetaUpdater:
    """Back-propagates the summed hypergradient ∂L_val/∂α through the floored softmax and g to update ψ.

    "adam": torch's Adam at `lr` (the original step). Its step is about `lr` on each of ψ's
    parameters whatever the hypergradient's size, so steady pulls and DP noise alike become full
    steps, and ψ's ~1,300 parameters moving together carry u far.
    "sgd": plain SGD on ψ of the hypergradient in units of its own size over the run,
    ĝ_r = c_r / max(‖c_r‖, RMS_{i≤r} ‖c_i‖) with c_r = g_r − mean_t(g_r): the sum's scale (the
    number of validation reports, C_α, σ_α) differs by orders of magnitude between runs and is not
    public under DP, so the rate is set in these units. Only the centred part c moves α (a shift
    common to every α_t leaves the simplex, and the softmax's Jacobian maps it to 0); without DP the
    common part is most of g (every copy's step lowers the loss), and measuring the size with it
    would shrink the steps that matter. ‖ĝ_r‖ ≤ 1, so the steps of a run at lr = travel / rounds add
    up to at most `travel`; a round whose hypergradient is smaller than the run's typical one moves
    ψ less, and zero-mean noise adds up like √rounds against a steady pull's rounds, so at a fixed
    travel it averages out as the run gets longer."""

    def __init__(self, learner: TemporalMetaLearner, lr: float, optimizer: MetaOptimizer = "adam") -> None:
        self.learner = learner
        self.kind = optimizer
        self.optim: torch.optim.Optimizer = (
            torch.optim.SGD(learner.parameters(), lr=lr)
            if optimizer == "sgd"
            else torch.optim.Adam(learner.parameters(), lr=lr)
        )
        self.sum_sq = 0.0  # Σ_r ‖g_r‖² of the steps taken ("sgd"), kept in checkpoints
        self.steps = 0

    def scaled(self, alpha_grad: np.ndarray) -> np.ndarray:
        """The hypergradient the optimiser sees: "sgd"'s ĝ_r (updates the running size), "adam"'s g."""
        grad = np.asarray(alpha_grad, dtype=np.float64)
        if self.kind != "sgd":
            return grad
        centred = grad - grad.mean()
        size = float(np.linalg.norm(centred))
        self.sum_sq += size * size
        self.steps += 1
        scale = max(size, float(np.sqrt(self.sum_sq / self.steps)))
        return centred / scale if scale > 0 else centred

    def step(self, alpha_grad: np.ndarray) -> np.ndarray:
        grad = self.scaled(alpha_grad)
        self.optim.zero_grad()
        alpha = self.learner()
        alpha.backward(torch.tensor(grad, dtype=alpha.dtype))  # a copy: sums may arrive read-only
        self.optim.step()
        return self.learner.alpha()

    def state_dict(self) -> dict[str, float]:
        return {"sum_sq": self.sum_sq, "steps": float(self.steps)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.sum_sq = float(state.get("sum_sq", 0.0))
        self.steps = int(state.get("steps", 0))
