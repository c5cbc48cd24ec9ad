"""Local steps at a site for FM2 and the image-classification baselines.

FM2's stage 1 trains the Observer with a plain head; stage 2 freezes it and trains both MoEs on
(the Top-K sample of) the site's images, with the HMA pull towards the round's global M_d. Every
stage runs through one step loop that takes the site's gradient rule: plain shuffled minibatches,
or DP-SGD with the patient as the privacy unit (`secure_fed.site.private.DPGradients`: a step
Poisson-samples patients, and all images of a sampled patient enter it, clipped jointly). Terms
that do not depend on any image (HMA, FedProx) are added to the gradient after it was privatised:
post-processing, so clipping and noise cover exactly the data-dependent part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from secure_fed.algorithms.fm2.model import FM2Model, cel_loss
from secure_fed.site.training import MinibatchGradients, PatientGradients, patient_passes

RowLoss = Callable[[nn.Module, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class StepSettings:
    lr: float
    epochs: int
    batch: int
    seed: int


@dataclass(frozen=True)
class StageResult:
    mean_loss: float
    steps: int


def run_steps(
    module: nn.Module,
    row_loss: RowLoss,
    n: int,
    settings: StepSettings,
    gradients: PatientGradients | None = None,
    extra_grad: Callable[[], None] | None = None,
    patients: torch.Tensor | None = None,
) -> StageResult:
    """SGD on `module`'s trainable parameters; `row_loss(forward, idx)` gives one loss per image in
    `idx` through `forward` (the module, or its per-row-gradient wrapper under DP). `patients`: each
    of the n images' patient slot; a step then samples patients and takes all their images, and
    the gradient rule sees each row's patient (None: every image is its own unit)."""
    params = [p for p in module.parameters() if p.requires_grad]
    grads = gradients or MinibatchGradients(settings.batch, torch.Generator().manual_seed(settings.seed))
    [forward] = grads.wrap([module])
    opt = torch.optim.Adam(params, lr=settings.lr)
    if patients is not None and len(patients) != n:
        raise ValueError(f"{len(patients)} patient slots for {n} images")
    units = n if patients is None else (int(patients.max()) + 1 if n else 0)
    steps = settings.epochs * grads.steps_per_epoch(units) if units else 0
    total, rows = 0.0, 0
    for _ in range(steps):
        chosen = grads.sample(units)
        opt.zero_grad(set_to_none=True)
        passes = patient_passes(chosen, grads.max_patients_per_pass)
        for k, part in enumerate(passes):
            if patients is None:
                idx, slot = part, part
            else:
                member = torch.zeros(units, dtype=torch.bool)
                member[part] = True
                idx = torch.nonzero(member[patients]).flatten()
                slot = patients[idx]
            losses = row_loss(forward, idx) if idx.numel() else torch.zeros(0)
            # an empty DP step still adds its noise: the accountant counted it
            grads.backward([forward], [losses], [slot], last_pass=k == len(passes) - 1)
            total, rows = total + float(losses.detach().sum()), rows + idx.numel()
        if extra_grad is not None:
            extra_grad()
        opt.step()
    return StageResult(total / max(rows, 1), steps)


def add_pull(params: Mapping[str, nn.Parameter], reference: Mapping[str, torch.Tensor], lam: float) -> None:
    """Adds the gradient of λ‖w − w_ref‖² (HMA, FedProx's μ/2 with λ = μ/2) to each parameter."""
    for name, p in params.items():
        pull = 2 * lam * (p.detach() - reference[name].to(p.device))
        p.grad = pull if p.grad is None else p.grad + pull


@contextmanager
def training_only(model: nn.Module, parts: Iterable[nn.Module]) -> Iterator[None]:
    """Only `parts` of `model` train inside; every parameter is trainable again after."""
    for p in model.parameters():
        p.requires_grad_(False)
    for part in parts:
        for p in part.parameters():
            p.requires_grad_(True)
    try:
        yield
    finally:
        for p in model.parameters():
            p.requires_grad_(True)


class _Stage1(nn.Module):
    """Observer + head; with CEL, the caption encoder trains beside them (same optimiser)."""

    def __init__(self, model: FM2Model, text: nn.Module | None = None) -> None:
        super().__init__()
        self.observer, self.head, self.text = model.observer, model.head, text

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.observer(x))


class _Stage2(nn.Module):
    """Both MoEs on Observer features; the Observer is not part of it (frozen in stage 2)."""

    def __init__(self, model: FM2Model) -> None:
        super().__init__()
        self.cmoe, self.dmoe = model.cmoe, model.dmoe
        self.gamma_d, self.gamma_c = model.gamma_d, model.gamma_c

    def forward(self, v: torch.Tensor, modality: torch.Tensor) -> torch.Tensor:
        return self.gamma_d * self.dmoe(v, modality) + self.gamma_c * self.cmoe(v)


def train_stage1(
    model: FM2Model,
    x: torch.Tensor,
    labels: torch.Tensor,
    settings: StepSettings,
    gradients: PatientGradients | None = None,
    captions: tuple[torch.Tensor, torch.Tensor] | None = None,
    cel_weight: float = 0.0,
    patients: torch.Tensor | None = None,
) -> StageResult:
    """Observer + head on the site's labelled images. With `captions` ((n, words) token ids, 0 =
    padding) and a weight, Caption-Enhanced Learning pulls each image's features towards its own
    caption's (non-private only: a contrastive loss mixes the images of a batch)."""
    use_cel = captions is not None and cel_weight > 0 and model.text is not None
    stage = _Stage1(model, model.text if use_cel else None)

    def row_loss(forward: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(forward(x[idx]), labels[idx], reduction="none")
        if use_cel and len(idx) > 1:
            assert captions is not None and model.text is not None
            tokens, lengths = captions[0][idx], captions[1][idx]
            flat = torch.cat([t[:n] for t, n in zip(tokens, lengths, strict=True)])
            offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
            loss = loss + cel_weight * cel_loss(model.observer(x[idx]), model.text(flat, offsets))
        return loss

    with training_only(model, [stage]):
        return run_steps(stage, row_loss, len(x), settings, gradients, patients=patients)


def train_stage2(
    model: FM2Model,
    x: torch.Tensor,
    modality: torch.Tensor,
    labels: torch.Tensor,
    reference: Mapping[str, torch.Tensor],
    lam: float,
    settings: StepSettings,
    gradients: PatientGradients | None = None,
    patients: torch.Tensor | None = None,
) -> StageResult:
    """Both MoEs on the site's images, the Observer frozen; λ‖M_d − M̂_d‖² pulls the domain experts
    towards `reference`, the global M_d the round started from."""
    with torch.no_grad():
        features = model.observer(x)
    stage = _Stage2(model)
    dmoe = dict(model.dmoe.named_parameters())

    def row_loss(forward: nn.Module, idx: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(forward(features[idx], modality[idx]), labels[idx], reduction="none")

    with training_only(model, [stage]):
        return run_steps(
            stage,
            row_loss,
            len(x),
            settings,
            gradients,
            extra_grad=(lambda: add_pull(dmoe, reference, lam)) if lam else None,
            patients=patients,
        )
