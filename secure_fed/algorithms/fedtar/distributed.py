"""FedTAR under distributed DP (`dp.noise = "distributed"`): a round is one DP step over the union
of the sites' patients, taken by the server, for every visit index at once.

Each site's share covers its clipped gradient sum over all T per-visit-index copies of the adapters,
each copy starting at the global state and seeing only its visit's rows; a patient's gradients in
every copy are clipped together to C (secure_fed.site.distributed), so one step costs one
sampled-Gaussian-like event whatever visits a patient has. The server decodes the survivors' sum
(secure_fed.server.strategies.distributed.noisy_gradient), takes one Adam step per visit index from
the global state (the snapshots w̄^(t)), and goes on as FedTAR does: the residual chain, the α
hypergradient scalars (each site's own Gaussian release, summed under CKKS) and ψ's step.

With `train.fedtar_step = "matched"` each copy's step is scaled by 1/√Σ_t c_t² (the chain's weights
from the round's α, public): a private step is mostly independent noise per copy, and the chain
passes on √Σc_t² of it (0.31 at uniform α, T = 5), so FedTAR's model would move about a third as
far a round as FedAvg's at the same train.lr and the same noisy sums.

Every visit index counts as present: which ones a site's sample touched is not released (site
mode's per-index row counts are not DP), so an index no sampled patient reached moves by noise.

With `train.fedtar_release = "one-vector"` (`release.py`) the server sends the round's α in the
training instruction, each patient releases one vector (Σ_t ω_t g_t and a public sketch of each
g_t), and the server takes ONE Adam step from the global state on the model part, as FedAvg's
distributed strategy does; the α directions come from surrogate snapshots built from the sketches,
and the hypergradients are taken at that one step's model. `train.fedtar_step` is the copies' only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from secure_fed.algorithms.fedtar.release import (
    direction_step_norm,
    release_dim,
    sketch_matrix,
    sketch_rows,
    sketch_scales,
    sketch_seed,
    split_release,
    surrogate_snapshots,
    surrogate_steps,
)
from secure_fed.algorithms.fedtar.strategy import FedTAR
from secure_fed.algorithms.fedtar.temporal import matched_step_scale
from secure_fed.config import RunConfig
from secure_fed.server.strategies.base import RoundContext, RoundResult
from secure_fed.server.strategies.distributed import Adam, noisy_gradient


class DistributedFedTAR(FedTAR):
    def __init__(
        self, dim: int, t_max: int, cfg: RunConfig, temporal: bool = True, name: str = "fedtar"
    ) -> None:
        super().__init__(dim, t_max, cfg, temporal=temporal, name=name)
        self.one_vector = cfg.train.fedtar_release == "one-vector"
        # one Adam state of the model's size (FedAvg's) for the one-vector step, else one per copy
        self.adam = Adam((dim,) if self.one_vector else (t_max, dim), cfg.train.lr)

    def step_dim(self) -> int:
        """The released step's length: D + T·k (one vector) or T·D (the copies)."""
        return release_dim(self.cfg, self.name, self.dim) if self.one_vector else self.t_max * self.dim

    def upload_dim(self) -> int:
        from secure_fed.dp.distributed import padded_size

        return padded_size(self.step_dim())

    def train_options(self, round_id: int) -> dict[str, Any]:
        # the one vector's weights come from the α ψ holds at the round's start: public to the sites
        return {"alpha": np.asarray(self.alpha(), dtype=np.float64)} if self.one_vector else {}

    def run_round(self, ctx: RoundContext, global_state: np.ndarray) -> RoundResult:
        if self.one_vector:
            return self._one_vector_round(ctx, global_state)
        participants, declined, info = self.train_phase(ctx, global_state)
        gradient, summed = noisy_gradient(self, ctx, participants, info, self.t_max * self.dim)
        start = np.broadcast_to(global_state, (self.t_max, self.dim))
        snapshots = self.adam.step(start, gradient.reshape(self.t_max, self.dim))
        if self.cfg.train.fedtar_step == "matched":
            # the chain would pass on only √Σc_t² of the copies' (mostly noise) steps
            scale = matched_step_scale(self.alpha(), self.cfg.train.fedtar_chain)
            snapshots = start + scale * (snapshots - start)
        present = np.ones(self.t_max, dtype=bool)
        return self.combine(ctx, global_state, snapshots, present, summed, declined, info)

    def _one_vector_round(self, ctx: RoundContext, global_state: np.ndarray) -> RoundResult:
        participants, declined, info = self.train_phase(ctx, global_state)
        released, summed = noisy_gradient(self, ctx, participants, info, self.step_dim())
        rows = sketch_rows(self.cfg, self.name)
        # the α the sites weighed with: ψ has not stepped since the instruction was sent
        scales = sketch_scales(self.cfg, self.alpha())
        model_part, sketches = split_release(released, self.dim, self.t_max, rows, scales)
        final = self.adam.step(global_state, model_part)
        if rows:
            sketch = sketch_matrix(sketch_seed(self.cfg, ctx.round), rows, self.dim)
            norm = direction_step_norm(self.cfg, self.dim)
            snapshots = surrogate_snapshots(global_state, surrogate_steps(sketch, sketches), norm)
        else:  # fedtar-no-temporal: α is fixed, so no direction is asked for
            snapshots = np.broadcast_to(final, (self.t_max, self.dim))
        present = np.ones(self.t_max, dtype=bool)
        return self.combine(ctx, global_state, snapshots, present, summed, declined, info, final=final)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), **{f"adam.{k}": v for k, v in self.adam.state_dict().items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.adam.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("adam.")})
