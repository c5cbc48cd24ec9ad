"""A site's round under distributed DP (`dp.noise = "distributed"`): one DP step over the union of
the sites' patients, whose noise the sites add between them inside SecAgg+.

The site Poisson-samples its training patients (rate q, from its keystream), sums their joint
gradients (all rows of a patient together) clipped to C, with no noise, and hands the sum to the
mechanism (`secure_fed.dp.distributed.encode_share`): scaled, rotated with the round's public
Hadamard signs, rounded into the ring, plus this site's noise share drawn from its keystream. What
leaves the site is that integer vector, masked by SecAgg+; the server unmasks only the sum over the
survivors, which carries every honest survivor's share. Local multi-step training on partially
noised gradients would not be DP, so there is no local optimiser step here: the server takes the
step on the decoded sum.

Nothing here trusts the server: the plan comes from the site's own config and site count (the
function the server uses too, `secure_fed.distributed_plan.plan_for`), and the site unmasks only
with at least h sites in its signed view of the survivors (`secure_fed.crypto.secagg_client`).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from secure_fed.data.batching import Examples
from secure_fed.dp.dpsgd import PatientDPSGD, poisson_sample
from secure_fed.dp.keystream import NoiseStream
from secure_fed.model.report_model import ReportModel


def clipped_gradient_sum(
    model: ReportModel,
    start: OrderedDict[str, torch.Tensor],
    examples: Examples,
    clip: float,
    sampling_rate: float,
    n_patients: int,
    stream: NoiseStream,
) -> tuple[np.ndarray, int]:
    """Σ over the Poisson-sampled patients of their joint gradient clipped to `clip`, flattened in
    `trainable_state()` order (float64), and how many patients were sampled. No noise: the noise
    comes from the sites' shares inside the ring."""
    work = copy.deepcopy(model)
    work.load_trainable_state(start)
    work.train()
    # noise_multiplier 0 and divisor 1: the engine's clipping and per-patient sum, nothing else
    engine = PatientDPSGD([work], clip, 0.0, 1.0, stream)
    chosen = poisson_sample(n_patients, sampling_rate, stream)
    member = torch.zeros(max(n_patients, 1), dtype=torch.bool)
    member[chosen] = True
    rows = torch.nonzero(member[examples.patient_slot]).flatten() if len(examples) else chosen[:0]
    params = [p for _, p in work.named_parameters() if p.requires_grad]
    if rows.numel():
        assert examples.profiles is not None
        loss = engine.forward_modules[0](
            examples.images[rows], examples.input_ids[rows], examples.profiles[rows]
        )
        loss.sum().backward()
        engine.privatize([examples.patient_slot[rows]], n_patients)
        flat = torch.cat([p.grad.detach().reshape(-1).double().cpu() for p in params])  # type: ignore[union-attr]
    else:
        flat = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64)
    engine.zero_grad()
    return flat.numpy(), int(chosen.numel())


def plan_summary(plan: Any) -> dict[str, Any]:
    """The plan's public numbers as they go into the signed logs (JSON-safe)."""
    out: dict[str, Any] = {}
    for name in (
        "clip",
        "dim",
        "gamma",
        "bits",
        "honest_min",
        "colluders",
        "mu_total",
        "share_mu",
    ):
        value = getattr(plan, name, None)
        if isinstance(value, int | float | str | bool):
            out[name] = value
    return out
