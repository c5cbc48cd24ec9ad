"""Validation hypergradient scalars s_{p,t} = ∂L_p/∂α_t, one T-vector per validation patient.

∂L/∂α_t = ⟨∇_w L(w^(T)), ∂w^(T)/∂α_t⟩: each validation row's gradient at w^(T), projected on the
T directions ∂w^(T)/∂α_t. torch's ExpandedWeights (DP-SGD's per-row gradients,
`dp.dpsgd.expanded_weights` and `row_gradients`) give every row's gradient in one forward and one backward, so
all T products cost one (rows × P)·(P × T) product more, where a Jacobian-vector product costs a
pass per direction (and torch.func.jvp's first call loads torch's forward-mode decompositions
through the deprecated torch.jit.script, whose warning a default run would print). A trainable
parameter used by an op with no per-row rule raises at the forward, never a silent zero.
Rows are then summed per patient, which is the unit the DP clipping of the α scalars needs. Every
report weighs the same (ψ descends Σ_reports ℓ, the validation loss weighted as the test split is
scored, per report): a patient's scalars are the sum over its reports, not their mean, which had
given a one-visit patient's report the weight of a five-visit patient's five (visit 1 then weighed
0.41 of the objective against 0.30 of the reports scored). The returned losses stay per-patient
means: they are the run's reported validation loss, comparable with earlier runs.
"""

from __future__ import annotations

import torch
from torch import nn

from secure_fed.data.batching import Examples
from secure_fed.dp.dpsgd import expanded_weights, row_gradients
from secure_fed.model.report_model import ReportModel
from secure_fed.model.vectors import unflatten


def _owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (model.get_submodule(path) if path else model), attr


def per_patient_hypergradients(
    model: ReportModel,
    final: torch.Tensor,
    directions: torch.Tensor,
    examples: Examples,
    batch_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (S, losses): S[p, t] = Σ_{reports r of p} ∂ℓ_r/∂α_t and the per-patient validation
    loss L_p (the mean over p's reports).

    The model's own parameters are swapped for w^(T) during each forward and put back after."""
    template = model.trainable_state()
    device = next(model.parameters()).device  # the products run where the model is
    at_final = {n: v.to(device).requires_grad_(True) for n, v in unflatten(final.float(), template).items()}
    # (P × T): the directions, in the order the rows' gradients are laid side by side below
    along = directions.double().T.contiguous().to(device)
    slots = [(*_owner(model, n), at_final[n]) for n in template]
    leaves = list(at_final.values())
    n_patients = int(examples.patient_slot.max()) + 1 if len(examples) else 0
    visits = torch.bincount(examples.patient_slot, minlength=n_patients).clamp_min(1).double()
    scalars = torch.zeros(n_patients, directions.shape[0], dtype=torch.float64)
    losses = torch.zeros(n_patients, dtype=torch.float64)
    model.eval()
    try:
        for start in range(0, len(examples), batch_size):
            rows = slice(start, start + batch_size)
            inputs = (examples.images[rows], examples.input_ids[rows], examples.profiles[rows])
            slots_of_rows = examples.patient_slot[rows]
            with expanded_weights(slots, len(slots_of_rows)):
                row_losses = model(*inputs)
            row_losses.sum().backward()
            grads = row_gradients(leaves, len(slots_of_rows))
            for leaf in leaves:
                leaf.grad_sample = None
                leaf.grad = None
            products = (grads.double() @ along).cpu()
            scalars.index_add_(0, slots_of_rows, products)
            losses.index_add_(0, slots_of_rows, row_losses.detach().double().cpu())
    finally:
        model.train()
    return scalars, losses / visits
