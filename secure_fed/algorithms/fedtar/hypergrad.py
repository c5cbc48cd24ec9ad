"""Validation hypergradient scalars s_{p,t} = ∂L_p/∂α_t, one T-vector per validation patient.

∂L/∂α_t = ⟨∇_w L(w^(T)), ∂w^(T)/∂α_t⟩ is a directional derivative of every validation row's loss,
i.e. a Jacobian-vector product J·d_t. Reverse mode gives it without per-sample gradients and
without forward-mode AD: g(u) = Jᵀu is linear in a dummy cotangent u, so ∂⟨g(u), d_t⟩/∂u = J·d_t.
One forward and one differentiable backward per batch serve all T directions, each then one more
backward. (torch.func.jvp would do the same, but the first call loads torch's forward-mode
decompositions through the deprecated torch.jit.script, whose warning a default run would print.)
Rows are then summed per patient (a patient's loss is the mean over its visits), which is the unit
the DP clipping of the α scalars needs.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch.func import functional_call

from secure_fed.data.batching import Examples
from secure_fed.model.report_model import ReportModel
from secure_fed.model.vectors import unflatten


def per_patient_hypergradients(
    model: ReportModel,
    final: torch.Tensor,
    directions: torch.Tensor,
    examples: Examples,
    batch_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (S, losses): S[p, t] = ∂L_p/∂α_t and the per-patient validation loss L_p."""
    template = model.trainable_state()
    device = next(model.parameters()).device  # the products run where the model is
    params = OrderedDict(
        (n, v.to(device).requires_grad_(True)) for n, v in unflatten(final.float(), template).items()
    )
    tangents = [
        [v.to(device) for v in unflatten(directions[t].float(), template).values()]
        for t in range(directions.shape[0])
    ]
    n_patients = int(examples.patient_slot.max()) + 1 if len(examples) else 0
    visits = torch.bincount(examples.patient_slot, minlength=n_patients).clamp_min(1).double()
    scalars = torch.zeros(n_patients, directions.shape[0], dtype=torch.float64)
    losses = torch.zeros(n_patients, dtype=torch.float64)
    model.eval()
    try:
        for start in range(0, len(examples), batch_size):
            rows = slice(start, start + batch_size)
            inputs = (examples.images[rows], examples.input_ids[rows], examples.profiles[rows])
            slots = examples.patient_slot[rows]
            row_losses = functional_call(model, params, inputs, strict=False)
            cotangent = torch.zeros_like(row_losses, requires_grad=True)
            pulled = torch.autograd.grad(
                row_losses,
                list(params.values()),
                grad_outputs=cotangent,
                create_graph=True,
                allow_unused=True,
            )
            used = [(g, i) for i, g in enumerate(pulled) if g is not None]
            for t, tangent in enumerate(tangents):
                along = sum((g * tangent[i]).sum() for g, i in used)
                if not isinstance(along, torch.Tensor) or not along.requires_grad:
                    continue  # no adapter this direction moves reaches the loss: ∂L/∂α_t = 0
                (derivative,) = torch.autograd.grad(along, cotangent, retain_graph=True)
                scalars[:, t].index_add_(0, slots, derivative.detach().double().cpu())
            losses.index_add_(0, slots, row_losses.detach().double().cpu())
    finally:
        model.train()
    return scalars / visits[:, None], losses / visits
