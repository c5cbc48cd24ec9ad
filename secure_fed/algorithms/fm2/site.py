"""FM2's local steps at a site: stage 1 trains the Observer with a plain head, stage 2 freezes it
and trains both MoEs on the Top-K sample, with the HMA pull towards the round's global M_d."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from secure_fed.algorithms.fm2.model import FM2Model, hma_penalty


def train_stage1(
    model: FM2Model, x: torch.Tensor, labels: torch.Tensor, lr: float, epochs: int, batch: int, seed: int
) -> float:
    """Observer + head on the site's labelled images; returns the last epoch's mean loss."""
    params = [*model.observer.parameters(), *model.head.parameters()]
    opt = torch.optim.SGD(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    loss_sum = 0.0
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        loss_sum, batches = 0.0, 0
        for start in range(0, len(x), batch):
            idx = order[start : start + batch]
            loss = F.cross_entropy(model.stage1(x[idx]), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum, batches = loss_sum + loss.item(), batches + 1
        loss_sum /= max(batches, 1)
    return loss_sum


def train_stage2(
    model: FM2Model,
    x: torch.Tensor,
    modality: torch.Tensor,
    labels: torch.Tensor,
    reference: dict[str, torch.Tensor],
    lam: float,
    lr: float,
    epochs: int,
    batch: int,
    seed: int,
) -> float:
    """Both MoEs on (the Top-K sample of) the site's images, the Observer frozen; the loss adds
    λ‖M_d − M̂_d‖² against `reference`, the global M_d the round started from."""
    params = [*model.cmoe.parameters(), *model.dmoe.parameters()]
    opt = torch.optim.SGD(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        features = model.observer(x)
    loss_sum = 0.0
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        loss_sum, batches = 0.0, 0
        for start in range(0, len(x), batch):
            idx = order[start : start + batch]
            v = features[idx]
            logits = model.gamma_d * model.dmoe(v, modality[idx]) + model.gamma_c * model.cmoe(v)
            loss = F.cross_entropy(logits, labels[idx])
            if lam:
                loss = loss + hma_penalty(model.dmoe, reference, lam)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum, batches = loss_sum + loss.item(), batches + 1
        loss_sum /= max(batches, 1)
    return loss_sum
