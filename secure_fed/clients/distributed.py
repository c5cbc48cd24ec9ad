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


class ClippedSum:
    """A site's work copy of its model and the clipping engine around it, built once and reused
    every round: the copy and the engine cost as much as a third of the round's one step on the
    tiny preset (docs/BENCHMARKS.md, "Distributed DP"), and a distributed round is only that step.

    What a round may leave behind is reset before every round, not after, so that a round that
    failed half way leaks nothing either: the start state is loaded into the copy, its gradients
    and per-row gradients are cleared, its layers' train/eval modes are those `ReportModel.train()`
    set, and the engine draws from the round's own keystream (the clipped sum takes no noise from
    it, but the bytes it draws set where the share's rounding and noise begin). The frozen base is
    the model's as it was when the copy was made; the learner never changes it, and a caller that
    did would build a new ClippedSum. The copy stays in memory between rounds: one more model at
    the site for the run, the size of the one a copy per round would hold at each round's peak.
    """

    def __init__(self, model: ReportModel, clip: float) -> None:
        self.source = model
        self.clip = float(clip)
        self.work = copy.deepcopy(model)
        self.work.train()
        # ReportModel.train() walks every module's parameters (4 ms of a 5 ms round setup on the
        # tiny preset); the copy is this object's alone, so the modes are set once and only checked
        self._modes = [m.training for m in self.work.modules()]
        # built at the first round, around that round's stream: no engine ever holds a stream of
        # its own making
        self.engine: PatientDPSGD | None = None

    def serves(self, model: ReportModel, clip: float) -> bool:
        return model is self.source and float(clip) == self.clip

    def prepare(self, start: OrderedDict[str, torch.Tensor], stream: NoiseStream) -> PatientDPSGD:
        """The engine, ready for this round's step from `start` with this round's `stream`."""
        self.work.load_trainable_state(start)
        if [m.training for m in self.work.modules()] != self._modes:
            self.work.train()
        if self.engine is None:
            self.engine = PatientDPSGD([self.work], self.clip, 0.0, 1.0, stream)
        else:
            self.engine.zero_grad()
            self.engine.noise = stream
        return self.engine


def clipped_gradient_sum(
    model: ReportModel,
    start: OrderedDict[str, torch.Tensor],
    examples: Examples,
    clip: float,
    sampling_rate: float,
    n_patients: int,
    stream: NoiseStream,
    work: ClippedSum | None = None,
) -> tuple[np.ndarray, int]:
    """Σ over the Poisson-sampled patients of their joint gradient clipped to `clip`, flattened in
    `trainable_state()` order (float64), and how many patients were sampled. No noise: the noise
    comes from the sites' shares inside the ring. `work`: the site's ClippedSum for `model`, kept
    across rounds (without it a copy is made for this call); `model` itself is never changed."""
    if work is None:
        work = ClippedSum(model, clip)
    elif not work.serves(model, clip):
        raise ValueError("this ClippedSum was built for another model or clip; build one for this model")
    engine = work.prepare(start, stream)
    chosen = poisson_sample(n_patients, sampling_rate, stream)
    member = torch.zeros(max(n_patients, 1), dtype=torch.bool)
    member[chosen] = True
    rows = torch.nonzero(member[examples.patient_slot]).flatten() if len(examples) else chosen[:0]
    params = engine.trainable_parameters[0]
    try:
        if not rows.numel():
            return np.zeros(sum(p.numel() for p in params), dtype=np.float64), int(chosen.numel())
        assert examples.profiles is not None
        loss = engine.forward_modules[0](
            examples.images[rows], examples.input_ids[rows], examples.profiles[rows]
        )
        loss.sum().backward()
        engine.privatize([examples.patient_slot[rows]], n_patients)
        flat = torch.cat([p.grad.detach().reshape(-1).double().cpu() for p in params])  # type: ignore[union-attr]
        return flat.numpy(), int(chosen.numel())
    finally:
        # the gradients are the sum of this round's patients: not kept in the copy until the next
        engine.zero_grad()


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
