"""FedTAR's one-vector release under distributed DP (`train.fedtar_release = "one-vector"`), both sides.

The T-copy release sends each sampled patient's gradients of the T visit-index copies, clipped
together to C: the patient's signal is spread over T blocks and its release keeps at most
‖s‖₂ ≈ 0.47 of FedAvg's signal-to-noise (issue 63). Here a patient sends ONE vector

    v_p = [ Σ_t ω_t g_{p,t} ; (κ·ω_t·P g_{p,t})_{t=1..T} ]      (D + T·k entries)

clipped as one vector to C, summed and encoded like FedAvg's gradient. g_{p,t} is the gradient at
the round's global state of p's loss on its visit-t rows (what copy t computes); ω_t = T·c_t / Σ_s c_s
with c = `temporal.chain_weights(α)` from the round's α, which the server sends in the training
instruction (public: ψ's state is post-processing of earlier releases). The scale T/Σc puts the
model part at FedAvg's size: at equal ω it is Σ_t g_{p,t}, the patient's whole gradient, which is
FedAvg's. The server's Adam step does not see the scale; an unclipped patient's signal-to-noise does.

P is a public k×D Gaussian sketch (entries N(0, 1/k), so E[PᵀP] = I), drawn from a seed of the run
and the round that nobody chooses. κ = ρ/√(1 − ρ²) (ρ = `train.fedtar_sketch_share`). Visit t's
sketch is weighed by ω_t as its gradient is in the model part, so that whatever α is, a patient
with one visit, or with orthogonal per-visit gradients, gives the sketch exactly ρ of its norm
(‖P g‖ ≈ ‖g‖ whatever g is: JL), and aligned gradients give it less: a clipped patient's model part
keeps at least about √(1 − ρ²) of C (0.954 at ρ = 0.3). With one κ for every t (the first design)
a patient whose visits have small ω_t was mostly sketch: at the floor's extreme α (0.6 on the last
of 5 visit indices) the sketch took a median 0.66 of the norm and the model part's effective noise
rose to 1.57× FedAvg's (benchmarks/fedtar_release_noise.py). The price: the server divides
sketch t by κ·ω_t, so a visit index ψ weighs little gets a noisier α hypergradient.

The server takes its Adam step on the first D entries. For α it forms surrogate snapshots
w̄_t = w_g − η·Pᵀŝ_t from the sketches ŝ_t (the rest over κ), and the chain's directions from them:
a site's ⟨∇L_val, Pᵀŝ_t⟩ is ⟨P∇L_val, ŝ_t⟩, a JL estimate of the hypergradient along the
per-visit-index mean gradients (unbiased over P; relative error about √(2/k)). η is one scale for
every t: ψ's update normalises the hypergradient's size (`temporal.MetaUpdater`), so η matters only
through C_α's clipping and the sites' `dp.alpha_direction_norm`, which the directions stay within.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from secure_fed.algorithms.fedtar.temporal import ChainKind, alpha_bounds, chain_weights
from secure_fed.config import RunConfig

ALPHA_TOLERANCE = 1e-6  # α's sum and floor bounds, as float64 arrives over the wire


def sketch_scale(share: float) -> float:
    """κ = ρ/√(1 − ρ²): the sketch's share ρ of a patient's norm when its visits' gradients are
    orthogonal and weighed alike."""
    if not 0 < share < 1:
        raise ValueError(f"the sketch's share must lie in (0, 1), got {share}")
    return share / math.sqrt(1.0 - share * share)


def sketch_seed(cfg: RunConfig, round_id: int) -> bytes:
    """The round's public sketch seed: a hash of the run's seed and the round, chosen by nobody."""
    return hashlib.sha256(f"secure_fed/fedtar/one-vector-sketch|{cfg.seed}|{round_id}".encode()).digest()


def sketch_matrix(seed: bytes, rows: int, dim: int) -> np.ndarray:
    """P (rows × dim), entries N(0, 1/rows) from the seed: E[PᵀP] = I."""
    words = np.frombuffer(seed, dtype=np.uint32)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(words.tolist())))
    return rng.standard_normal((rows, dim)) / math.sqrt(rows)


def sketch_rows(cfg: RunConfig, method: str) -> int:
    """k for `method`: only a method whose ψ learns needs the sketch (fedtar-no-temporal's α is fixed)."""
    return cfg.train.fedtar_sketch_dim if method in ("fedtar", "fedtar-no-gmm") else 0


def release_dim(cfg: RunConfig, method: str, dim: int) -> int:
    """The length of the one-vector release: D + T·k."""
    return dim + cfg.data.max_visits * sketch_rows(cfg, method)


def check_alpha(value: object, t_max: int, floor: float) -> np.ndarray:
    """α from a training instruction, or ValueError naming what is wrong: T finite weights on the
    simplex, within the floor's bounds (`train.alpha_floor`: every α ψ can produce is)."""
    try:
        alpha = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("α must be a list of numbers") from None
    if alpha.shape != (t_max,):
        raise ValueError(f"α must hold {t_max} weights (data.max_visits), got shape {alpha.shape}")
    if not np.all(np.isfinite(alpha)):
        raise ValueError("α must be finite")
    if abs(float(alpha.sum()) - 1.0) > ALPHA_TOLERANCE:
        raise ValueError(f"α must sum to 1, got {float(alpha.sum()):.9g}")
    low, high = alpha_bounds(t_max, floor)
    if alpha.min() < low - ALPHA_TOLERANCE or alpha.max() > high + ALPHA_TOLERANCE:
        raise ValueError(f"every α_t must lie in [{low:.6g}, {high:.6g}] (train.alpha_floor = {floor:g})")
    return alpha


def release_weights(alpha: np.ndarray, kind: ChainKind = "residual") -> np.ndarray:
    """ω_t = T·c_t / Σ_s c_s: the chain's weights at FedAvg's scale (all 1 where c is uniform)."""
    c = chain_weights(np.asarray(alpha, dtype=np.float64), kind=kind)
    return len(c) * c / c.sum()


def sketch_scales(cfg: RunConfig, alpha: np.ndarray) -> np.ndarray:
    """κ·ω_t: the factor on visit t's sketch, which the server divides out."""
    return sketch_scale(cfg.train.fedtar_sketch_share) * release_weights(alpha, cfg.train.fedtar_chain)


@dataclass(frozen=True)
class OneVectorRelease:
    """A site's map from a patient's per-visit-index gradients to the vector it releases for it.

    `weights` ω (T,), `sketch` P (k × D, or None: no sketch), `scales` κ·ω_t (T,). Applied row by row: a
    patient's vector depends on its own gradients only, so clipping it bounds the patient's effect
    on the sum by C (`secure_fed.site.distributed.clipped_gradient_sum`)."""

    weights: np.ndarray
    sketch: np.ndarray | None
    scales: np.ndarray
    grad_dim: int

    @classmethod
    def for_round(
        cls, cfg: RunConfig, method: str, round_id: int, alpha: np.ndarray, dim: int
    ) -> OneVectorRelease:
        k = sketch_rows(cfg, method)
        sketch = sketch_matrix(sketch_seed(cfg, round_id), k, dim) if k else None
        weights = release_weights(alpha, cfg.train.fedtar_chain)
        return cls(weights, sketch, sketch_scales(cfg, alpha), dim)

    @property
    def dim(self) -> int:
        k = 0 if self.sketch is None else self.sketch.shape[0]
        return self.grad_dim + len(self.weights) * k

    def __call__(self, per_copy: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """(patients × D) gradients per visit index (None: no patient's rows) → (patients × dim)."""
        if len(per_copy) != len(self.weights):
            raise ValueError(f"{len(per_copy)} gradient blocks for {len(self.weights)} visit indices")
        live = [g for g in per_copy if g is not None]
        if not live:
            raise ValueError("no visit index has gradients")
        n, device = live[0].shape[0], live[0].device
        model = torch.zeros((n, self.grad_dim), dtype=torch.float64, device=device)
        parts = [model]
        sketch = None if self.sketch is None else torch.as_tensor(self.sketch, device=device)
        for w, s, g in zip(self.weights, self.scales, per_copy, strict=True):
            block = None if g is None else g.double()
            if block is not None:
                model.add_(block, alpha=float(w))
            if sketch is not None:
                k = sketch.shape[0]
                parts.append(
                    torch.zeros((n, k), dtype=torch.float64, device=device)
                    if block is None
                    else float(s) * (block @ sketch.T)
                )
        return torch.cat(parts, dim=1)


def split_release(
    released: np.ndarray, dim: int, t_max: int, rows: int, scales: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The server's reading of the decoded release: (G, the model part, D; ŝ, the sketches, T × k,
    each over its scale κ·ω_t; a visit index of weight 0, possible only without a floor, reads 0)."""
    if released.shape != (dim + t_max * rows,):
        raise ValueError(f"the release must have {dim + t_max * rows} entries, got {released.shape}")
    scales = np.asarray(scales, dtype=np.float64)
    sketches = released[dim:].reshape(t_max, rows)
    safe = np.where(scales > 0, scales, 1.0)
    return released[:dim], np.where(scales[:, None] > 0, sketches / safe[:, None], 0.0)


def surrogate_steps(sketch: np.ndarray, sketches: np.ndarray) -> np.ndarray:
    """Pᵀŝ_t for every t (T × D): each visit index's mean gradient as the sketch sees it. For any
    vector a, ⟨a, Pᵀŝ_t⟩ = ⟨P a, ŝ_t⟩, whose mean over P is ⟨a, ĝ_t⟩ (E[PᵀP] = I)."""
    return sketches @ sketch


def surrogate_snapshots(start: np.ndarray, steps: np.ndarray, step_norm: float) -> np.ndarray:
    """w̄_t = w_g − η·steps_t, η one scale for every t such that the longest step is `step_norm`
    long (a visit index whose sketch is all zero keeps w_g). The chain's directions from these are
    sums of the steps, at most twice the longest (`temporal.residual_chain`: w^(t−1) − w_g is a
    combination of earlier steps with weights summing to at most 1)."""
    longest = float(np.linalg.norm(steps, axis=1).max()) if len(steps) else 0.0
    eta = step_norm / longest if longest > 0 else 0.0
    return start[None, :] - eta * steps


def direction_step_norm(cfg: RunConfig, dim: int) -> float:
    """The surrogate steps' longest length: that of an Adam step that moves every coordinate by
    train.lr (lr·√D), within half of what a site accepts (`dp.alpha_direction_norm`), so that the
    chain's directions, at most twice the longest step, are never refused."""
    return min(cfg.train.lr * math.sqrt(dim), 0.5 * cfg.dp.alpha_direction_norm)
