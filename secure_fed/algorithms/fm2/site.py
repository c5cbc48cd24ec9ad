"""FM2's local steps at a site: stage 1 trains the Observer with a plain head, stage 2 freezes it
and trains both MoEs on the Top-K sample, with the HMA pull towards the round's global M_d."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch.nn import functional as F

from secure_fed.algorithms.fm2.model import FM2Model, hma_penalty


def _sgd_epochs(
    params: Iterable[torch.nn.Parameter],
    batch_loss: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    lr: float,
    epochs: int,
    batch: int,
    seed: int,
) -> float:
    """Plain SGD over shuffled mini-batches of n samples; returns the last epoch's mean loss."""
    opt = torch.optim.SGD(list(params), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    mean = 0.0
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        total, batches = 0.0, 0
        for start in range(0, n, batch):
            loss = batch_loss(order[start : start + batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, batches = total + loss.item(), batches + 1
        mean = total / max(batches, 1)
    return mean


def train_stage1(
    model: FM2Model, x: torch.Tensor, labels: torch.Tensor, lr: float, epochs: int, batch: int, seed: int
) -> float:
    """Observer + head on the site's labelled images; returns the last epoch's mean loss."""
    params = [*model.observer.parameters(), *model.head.parameters()]
    return _sgd_epochs(
        params,
        lambda idx: F.cross_entropy(model.stage1(x[idx]), labels[idx]),
        len(x),
        lr,
        epochs,
        batch,
        seed,
    )


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
    with torch.no_grad():
        features = model.observer(x)

    def batch_loss(idx: torch.Tensor) -> torch.Tensor:
        v = features[idx]
        logits = model.gamma_d * model.dmoe(v, modality[idx]) + model.gamma_c * model.cmoe(v)
        loss = F.cross_entropy(logits, labels[idx])
        return loss + hma_penalty(model.dmoe, reference, lam) if lam else loss

    params = [*model.cmoe.parameters(), *model.dmoe.parameters()]
    return _sgd_epochs(params, batch_loss, len(x), lr, epochs, batch, seed)
