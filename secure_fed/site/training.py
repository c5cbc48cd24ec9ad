"""Local training: one adapter copy per visit index, trained on that visit index's rows.

The same loop serves the centralised entry point, FedTAR's per-timestep copies (one group per
visit index) and the pooled baselines (one group). A step samples a set of patients and every
copy trains on those patients' rows of its group, so a DP step can bound each patient's joint
contribution across all copies.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from secure_fed.data.batching import Examples
from secure_fed.model.report_model import ReportModel

State = OrderedDict[str, torch.Tensor]


class PatientGradients(Protocol):
    """Turns per-row losses of all copies into parameter gradients (e.g. patient-level DP-SGD).

    `max_patients_per_pass`: a step whose sample holds more patients runs its forward and backward
    in passes of at most that many (None: one pass); `backward` is called once per pass, with
    `last_pass` true for the pass that ends the step."""

    max_patients_per_pass: int | None

    def sample(self, n_patients: int) -> torch.Tensor: ...

    def steps_per_epoch(self, n_patients: int) -> int: ...

    def wrap(self, copies: list[torch.nn.Module]) -> list[torch.nn.Module]: ...

    def backward(
        self,
        copies: list[torch.nn.Module],
        losses: list[torch.Tensor],
        patient_index: list[torch.Tensor],
        last_pass: bool = True,
    ) -> None: ...


def rows_of(groups: Sequence[Examples], patients: torch.Tensor, n_patients: int) -> list[torch.Tensor]:
    """Per group, the rows that belong to `patients` (slots below `n_patients`)."""
    member = torch.zeros(max(n_patients, 1), dtype=torch.bool)
    member[patients] = True
    return [
        torch.nonzero(member[g.patient_slot]).flatten() if len(g) else torch.zeros(0, dtype=torch.long)
        for g in groups
    ]


def patient_passes(chosen: torch.Tensor, max_patients: int | None) -> list[torch.Tensor]:
    """The step's sampled patients in passes of at most `max_patients` (one pass if None, and for
    an empty sample: a step with no patient still ends, and a private one still releases noise)."""
    if max_patients is None or len(chosen) <= max_patients:
        return [chosen]
    return list(chosen.split(max_patients))


@dataclass
class LocalTrainSettings:
    lr: float
    epochs: int = 1
    batch_patients: int = 16
    prox_mu: float = 0.0  # FedProx proximal term
    grad_correction: dict[str, torch.Tensor] | None = None  # SCAFFOLD's c − c_i
    weight_decay: float = 0.0


@dataclass
class TrainResult:
    states: list[State]
    rows: list[int]
    steps: int
    mean_loss: float
    extra: dict[str, float] = field(default_factory=dict)


class MinibatchGradients:
    """Non-private default: shuffled patient minibatches, mean loss per copy."""

    max_patients_per_pass = None  # a minibatch is small: one pass, and its loss is the batch mean

    def __init__(self, batch_patients: int, generator: torch.Generator) -> None:
        self.batch_patients = batch_patients
        self.generator = generator
        self._queue: list[int] = []

    def steps_per_epoch(self, n_patients: int) -> int:
        return max(1, -(-n_patients // self.batch_patients))

    def sample(self, n_patients: int) -> torch.Tensor:
        if len(self._queue) < min(self.batch_patients, n_patients):
            self._queue = torch.randperm(n_patients, generator=self.generator).tolist()
        batch, self._queue = self._queue[: self.batch_patients], self._queue[self.batch_patients :]
        return torch.tensor(batch, dtype=torch.long)

    def wrap(self, copies: list[torch.nn.Module]) -> list[torch.nn.Module]:
        return copies

    def backward(
        self,
        copies: list[torch.nn.Module],
        losses: list[torch.Tensor],
        patient_index: list[torch.Tensor],
        last_pass: bool = True,
    ) -> None:
        if not last_pass:
            raise ValueError("a non-private minibatch runs in one pass (its loss is the batch mean)")
        total = sum((loss.mean() for loss in losses if loss.numel()), torch.zeros(()))
        if total.requires_grad:
            total.backward()


def _trainable(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n.removeprefix("_module."), p) for n, p in module.named_parameters() if p.requires_grad]


def _state(module: torch.nn.Module) -> State:
    return OrderedDict((n, p.detach().to("cpu", copy=True)) for n, p in _trainable(module))


def train_copies(
    model: ReportModel,
    start: State,
    groups: Sequence[Examples],
    settings: LocalTrainSettings,
    seed: int,
    gradients: PatientGradients | None = None,
    progress: Callable[[int, int], None] | None = None,
    after_step: Callable[[int, list[State]], None] | None = None,
) -> TrainResult:
    """Train len(groups) copies of the adapters from `start`; copy i sees only groups[i].
    `after_step(step, states)` sees every copy's state after each optimiser step (1-based): the
    iterates an average is taken over (train.average)."""
    gen = torch.Generator().manual_seed(seed)
    grads = gradients or MinibatchGradients(settings.batch_patients, gen)
    n_patients = 1 + max((int(g.patient_slot.max()) for g in groups if len(g)), default=-1)
    copies: list[torch.nn.Module] = []
    for _ in groups:
        c = copy.deepcopy(model)
        c.load_trainable_state(start)
        c.train()
        copies.append(c)
    copies = grads.wrap(copies)
    # the copies live on the model's device; `start` (and SCAFFOLD's correction) arrive on the CPU
    device = next(model.parameters()).device
    start_on = {n: v.to(device) for n, v in start.items()} if settings.prox_mu > 0 else start
    correction = (
        None
        if settings.grad_correction is None
        else {n: v.to(device) for n, v in settings.grad_correction.items()}
    )
    optims = [
        torch.optim.AdamW([p for _, p in _trainable(c)], lr=settings.lr, weight_decay=settings.weight_decay)
        for c in copies
    ]
    steps = settings.epochs * grads.steps_per_epoch(max(n_patients, 1)) if n_patients else 0
    loss_sum, loss_rows = 0.0, 0
    for step in range(steps):
        chosen = grads.sample(n_patients)
        for opt in optims:
            opt.zero_grad(set_to_none=True)
        passes = patient_passes(chosen, grads.max_patients_per_pass)
        for k, part in enumerate(passes):
            losses, index = [], []
            for c, g, rows in zip(copies, groups, rows_of(groups, part, n_patients), strict=True):
                if rows.numel() == 0:
                    losses.append(torch.zeros(0))
                    index.append(torch.zeros(0, dtype=torch.long))
                    continue
                loss = c(g.images[rows], g.input_ids[rows], g.profiles[rows])
                losses.append(loss)
                index.append(g.patient_slot[rows])
                loss_sum += float(loss.detach().sum())
                loss_rows += rows.numel()
            grads.backward(copies, losses, index, last_pass=k == len(passes) - 1)
        if settings.prox_mu > 0:
            # FedProx's μ/2 ‖w − w_global‖² depends on no patient: its gradient is added after the
            # gradient was privatised (post-processing, as FM2 adds it). Inside the loss it never
            # reached DP-SGD's per-row gradients, so privatising dropped it, and a share of it in
            # each row would tie one patient's clipped gradient to the others' row count.
            for c in copies:
                for n, p in _trainable(c):
                    pull = settings.prox_mu * (p.detach() - start_on[n])
                    p.grad = pull if p.grad is None else p.grad + pull
        for c, opt in zip(copies, optims, strict=True):
            if correction is not None:
                for n, p in _trainable(c):
                    if p.grad is not None:
                        p.grad.add_(correction[n])
            opt.step()
        if after_step is not None:
            after_step(step + 1, [_state(c) for c in copies])
        if progress is not None:
            progress(step + 1, steps)
    states = [_state(c) for c in copies]
    return TrainResult(
        states=states, rows=[len(g) for g in groups], steps=steps, mean_loss=loss_sum / max(loss_rows, 1)
    )


@torch.no_grad()
def evaluate_loss(model: ReportModel, examples: Examples, batch_size: int = 64) -> float:
    model.eval()
    total = 0.0
    for i in range(0, len(examples), batch_size):
        sl = slice(i, i + batch_size)
        total += float(model(examples.images[sl], examples.input_ids[sl], examples.profiles[sl]).sum())
    model.train()
    return total / max(len(examples), 1)
