"""FedProx under patient-level DP: the proximal pull reaches the update, and one patient still moves
the privatised gradient by at most C.

The finding: FedProx's proximal term μ/2‖w − w_global‖² was spread over the step's rows inside the
loss (μ/2·prox / rows per row). Under DP-SGD only the per-row gradients of the wrapped forward are
kept, and `privatize` replaces `.grad` with their clipped, noised sum, so the term was silently
dropped (FedProx under DP trained as FedAvg); in a per-sample mode that did see it, each patient
would carry a share that depends on the other patients' row count, and clipping would break the
sensitivity. The fix adds μ(w − w_global) to the gradient after privatising (post-processing, as
FM2 does): the release stays a function of clipped patient gradients alone.

Two neighbouring cohorts (with and without patient A) run the real `train_copies` loop with the
site's own `DPGradients` at σ = 0; step 1 samples the same patient in both (so the weights at step
2 are the same and away from w_global), step 2 samples four quiet patients and, in the first, A.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from secure_fed.dp.keystream import NoiseStream
from secure_fed.site.private import DPGradients
from secure_fed.site.training import LocalTrainSettings, State, train_copies

CLIP, MU, LR, N = 2.0, 15.0, 0.1, 6
QUIET, B, A = [0, 1, 2, 3], 4, 5  # quiet patients (tiny data gradient), a step-1 patient, A


class TinyCopy(nn.Module):
    """Stands in for ReportModel: per-row loss from (images, input_ids, profiles)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, images: torch.Tensor, input_ids: torch.Tensor, profiles: torch.Tensor) -> torch.Tensor:
        return ((self.lin(images) - profiles) ** 2).sum(-1)

    def load_trainable_state(self, state: State) -> None:
        with torch.no_grad():
            for name, p in self.named_parameters():
                p.copy_(state[name])


@dataclass
class Rows:
    images: torch.Tensor
    input_ids: torch.Tensor
    profiles: torch.Tensor
    patient_slot: torch.Tensor

    def __len__(self) -> int:
        return len(self.patient_slot)


class Recording(DPGradients):
    """The site's DPGradients with a scripted sample, recording each step's privatised gradient
    (what DP-SGD released) and the gradient the optimiser then used."""

    def __init__(self, batches: list[list[int]]) -> None:
        noise = NoiseStream(hashlib.sha256(b"fedprox sensitivity").digest())
        super().__init__(0.5, CLIP, 0.0, N, steps=len(batches), noise=noise)
        self.batches: Iterator[list[int]] = iter(batches)
        self.released: list[torch.Tensor] = []

    def sample(self, n_patients: int) -> torch.Tensor:
        return torch.tensor(next(self.batches), dtype=torch.long)

    def backward(
        self,
        copies: list[torch.nn.Module],
        losses: list[torch.Tensor],
        patient_index: list[torch.Tensor],
        last_pass: bool = True,
    ) -> None:
        super().backward(copies, losses, patient_index, last_pass)
        assert self.engine is not None and last_pass  # a few patients a step: one pass
        self.released.append(
            torch.cat([p.grad.reshape(-1).clone() for ps in self.engine.trainable_parameters for p in ps])
        )


def _cohort(model: TinyCopy, with_a: bool) -> Rows:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(N, 4, generator=g)
    x[QUIET] *= 0.1
    with torch.no_grad():
        y = model.lin(x)  # the quiet patients' loss starts at 0 and stays small
    y[B] += 3.0  # B moves the weights away from w_global in step 1
    y[A] = 100.0  # A's gradient is far above C, so clipping scales it (and any share it carries)
    keep = N if with_a else N - 1
    return Rows(x[:keep], torch.zeros(keep, 1, dtype=torch.long), y[:keep], torch.arange(keep))


def _run(with_a: bool, mu: float, steps_seen: list[torch.Tensor] | None = None) -> Recording:
    torch.manual_seed(0)
    model = TinyCopy()
    start: State = State((n, p.detach().clone()) for n, p in model.named_parameters())
    grads = Recording([[B], QUIET + [A] if with_a else QUIET])
    hook = None
    if steps_seen is not None:
        # the gradient each optimiser step used (after any post-processing)
        hook = register_optimizer_step_pre_hook(
            lambda opt, *_: steps_seen.append(
                torch.cat([p.grad.reshape(-1).clone() for group in opt.param_groups for p in group["params"]])
            )
        )
    try:
        train_copies(model, start, [_cohort(model, with_a)], LocalTrainSettings(lr=LR, prox_mu=mu), 0, grads)
    finally:
        if hook is not None:
            hook.remove()
    return grads


@pytest.mark.parametrize("mu", [0.0, MU])
def test_one_patient_moves_the_privatised_gradient_by_at_most_c(mu: float) -> None:
    with_a, without_a = _run(True, mu), _run(False, mu)
    # step 1 is the same in both cohorts, so step 2 starts from the same weights
    assert torch.allclose(with_a.released[0], without_a.released[0])
    # the released gradient is the clipped sum over the expected batch size (q·n)
    moved = float((with_a.released[1] - without_a.released[1]).norm()) * 0.5 * N
    assert moved <= CLIP * (1 + 1e-5), f"patient A moved the clipped sum by {moved:.3f} > C = {CLIP}"


def test_the_proximal_pull_still_reaches_the_update() -> None:
    """Post-processing, not dropped: the optimiser's gradient is the release plus μ(w − w_global)."""
    seen: list[torch.Tensor] = []
    grads = _run(False, MU, seen)
    assert len(seen) == 2
    assert torch.allclose(seen[0], grads.released[0])  # w = w_global at step 1: no pull yet
    pull = seen[1] - grads.released[1]
    assert float(pull.norm()) > 0.1  # the weights moved in step 1, so μ(w − w_global) is not 0
