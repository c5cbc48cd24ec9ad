"""A site's round under distributed DP (`dp.noise = "distributed"`): one DP step over the union of
the sites' patients, whose noise the sites add between them inside SecAgg+.

The site Poisson-samples its training patients (rate q, from its keystream), sums their joint
gradients (all rows of a patient together, over every copy of the adapters the method trains:
FedTAR's one per visit index) clipped to C, with no noise, and hands the sum to the
mechanism (`secure_fed.dp.distributed.DistributedSum.encode`): scaled, rotated with the round's public
Hadamard signs, rounded into the ring, plus this site's noise share drawn from its keystream. What
leaves the site is that integer vector, masked by SecAgg+; the server unmasks only the sum over the
survivors, which carries every honest survivor's share. Local multi-step training on partially
noised gradients would not be DP, so there is no local optimiser step here: the server takes the
step on the decoded sum.

Nothing here trusts the server: the plan comes from the site's own config and site count (the
function the server uses too, `secure_fed.dp.distributed.run.plan_for`), and the site unmasks only
with at least h sites in its signed view of the survivors (`secure_fed.crypto.secagg_client`).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch

from secure_fed.data.batching import Examples
from secure_fed.dp.dpsgd import PatientDPSGD, clipped_row_sum, poisson_sample
from secure_fed.dp.keystream import NoiseStream
from secure_fed.model.report_model import ReportModel
from secure_fed.site.training import patient_passes, rows_of


class PatientRelease(Protocol):
    """A public map from one patient's gradients (per adapter copy, a row each) to the vector
    released for that patient, which is then clipped to C as one vector: what the patient moves the
    sum by is bounded by the clipping whatever the map, so the step's sensitivity stays C. Applied
    to many patients at once, row i of every block and of the result being patient i's: the map
    must not mix rows (FedTAR's one-vector release: `secure_fed.algorithms.fedtar.release`)."""

    @property
    def dim(self) -> int:
        """The released vector's length."""
        ...

    def __call__(self, per_copy: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """(patients × P) per copy (None: a copy no sampled patient reached) → (patients × dim)."""
        ...


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
    did would build a new ClippedSum. The copies stay in memory between rounds: `copies` more
    models at the site for the run, the size of the ones a copy per round would hold at its peak.

    `copies`: the adapter copies a step trains from the same start, each on its own rows (FedTAR:
    one per visit index); a patient's gradient over all of them is clipped as one vector.
    """

    def __init__(self, model: ReportModel, clip: float, copies: int = 1) -> None:
        if copies < 1:
            raise ValueError(f"copies must be at least 1, got {copies}")
        self.source = model
        self.clip = float(clip)
        self.works = [copy.deepcopy(model) for _ in range(copies)]
        for work in self.works:
            work.train()
        # ReportModel.train() walks every module's parameters (4 ms of a 5 ms round setup on the
        # tiny preset); the copies are this object's alone, so the modes are set once and only checked
        self._modes = [[m.training for m in work.modules()] for work in self.works]
        # built at the first round, around that round's stream: no engine ever holds a stream of
        # its own making
        self.engine: PatientDPSGD | None = None

    @property
    def copies(self) -> int:
        return len(self.works)

    def serves(self, model: ReportModel, clip: float, copies: int = 1) -> bool:
        return model is self.source and float(clip) == self.clip and copies == self.copies

    def prepare(self, start: OrderedDict[str, torch.Tensor], stream: NoiseStream) -> PatientDPSGD:
        """The engine, ready for this round's step from `start` with this round's `stream`."""
        for work, modes in zip(self.works, self._modes, strict=True):
            work.load_trainable_state(start)
            if [m.training for m in work.modules()] != modes:
                work.train()
        if self.engine is None:
            self.engine = PatientDPSGD(self.works, self.clip, 0.0, 1.0, stream)
        else:
            self.engine.zero_grad()
            self.engine.noise = stream
        return self.engine


def clipped_gradient_sum(
    model: ReportModel,
    start: OrderedDict[str, torch.Tensor],
    examples: Examples | Sequence[Examples],
    clip: float,
    sampling_rate: float,
    n_patients: int,
    stream: NoiseStream,
    work: ClippedSum | None = None,
    max_patients_per_pass: int | None = None,
    release: PatientRelease | None = None,
) -> tuple[np.ndarray, int]:
    """Σ over the Poisson-sampled patients of their joint gradient clipped to `clip`, flattened in
    `trainable_state()` order (float64), and how many patients were sampled. No noise: the noise
    comes from the sites' shares inside the ring. `examples`: one set of rows, or one per adapter
    copy (each copy starts at `start` and sees only its rows; the result is the copies' gradients
    one after the other, and a patient's rows in all of them are clipped together). `work`: the
    site's ClippedSum for `model`, kept across rounds (without it one is made for this call);
    `model` itself is never changed. `max_patients_per_pass`: the sample's forward and backward run
    in passes of at most that many patients (memory only; None: one pass). `release`: each patient
    releases `release` of its per-copy gradients instead, clipped to `clip` as one vector, and the
    result is the sum of those (length `release.dim`); the copies' gradients themselves never leave."""
    groups = [examples] if isinstance(examples, Examples) else list(examples)
    if work is None:
        work = ClippedSum(model, clip, copies=len(groups))
    elif not work.serves(model, clip, copies=len(groups)):
        raise ValueError(
            "this ClippedSum was built for another model or clip (or number of copies); build one for "
            "this model"
        )
    engine = work.prepare(start, stream)
    chosen = poisson_sample(n_patients, sampling_rate, stream)
    params = [p for group in engine.trainable_parameters for p in group]
    try:
        ran = False
        passes = patient_passes(chosen, max_patients_per_pass)
        for k, part in enumerate(passes):
            live, index = [], []
            for module, group, rows in zip(
                engine.forward_modules, groups, rows_of(groups, part, n_patients), strict=True
            ):
                if not rows.numel():
                    index.append(None)
                    continue
                assert group.profiles is not None
                live.append(module(group.images[rows], group.input_ids[rows], group.profiles[rows]).sum())
                index.append(group.patient_slot[rows])
            if live:
                sum(live).backward()  # type: ignore[union-attr]
                ran = True
            if k < len(passes) - 1:
                engine.accumulate(index, n_patients)
        if not ran:
            size = release.dim if release is not None else sum(p.numel() for p in params)
            return np.zeros(size, dtype=np.float64), int(chosen.numel())
        if release is not None:
            _, per_copy = engine.patient_gradients(index, n_patients)
            released = clipped_row_sum(release(per_copy), clip)
            return released.cpu().numpy(), int(chosen.numel())
        engine.privatize(index, n_patients)
        # a copy that saw no sampled row has no gradient: its block of the sum is zero
        flat = torch.cat(
            [
                torch.zeros(p.numel(), dtype=torch.float64)
                if p.grad is None
                else p.grad.detach().reshape(-1).double().cpu()
                for p in params
            ]
        )
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
