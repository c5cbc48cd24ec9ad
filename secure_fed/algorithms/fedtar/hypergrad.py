"""Validation hypergradient scalars s_{p,t} = ∂L_p/∂α_t, one T-vector per validation patient.

∂L/∂α_t = ⟨∇_w L(w^(T)), ∂w^(T)/∂α_t⟩ is a directional derivative, so forward-mode AD
(torch.func.jvp) gives it per row of the validation batch without per-sample gradients: one
forward pass per visit index t. Rows are then summed per patient (a patient's loss is the mean over
its visits), which is the unit the DP clipping of the α scalars needs.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch.func import functional_call, jvp

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
    device = next(model.parameters()).device  # the JVPs run where the model is
    primals = OrderedDict((n, v.to(device)) for n, v in unflatten(final.float(), template).items())
    n_patients = int(examples.patient_slot.max()) + 1 if len(examples) else 0
    visits = torch.bincount(examples.patient_slot, minlength=n_patients).clamp_min(1).double()
    scalars = torch.zeros(n_patients, directions.shape[0], dtype=torch.float64)
    losses = torch.zeros(n_patients, dtype=torch.float64)
    model.eval()
    for start in range(0, len(examples), batch_size):
        rows = slice(start, start + batch_size)
        inputs = (examples.images[rows], examples.input_ids[rows], examples.profiles[rows])
        slots = examples.patient_slot[rows]

        def loss_fn(params: OrderedDict[str, torch.Tensor], inputs: tuple = inputs) -> torch.Tensor:
            return functional_call(model, params, inputs, strict=False)

        for t in range(directions.shape[0]):
            tangent = OrderedDict(
                (n, v.to(device)) for n, v in unflatten(directions[t].float(), template).items()
            )
            value, derivative = jvp(loss_fn, (primals,), (tangent,))
            scalars[:, t].index_add_(0, slots, derivative.double().cpu())
        losses.index_add_(0, slots, value.detach().double().cpu())
    model.train()
    return scalars / visits[:, None], losses / visits
