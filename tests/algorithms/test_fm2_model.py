"""FM2's pieces: what is shared and what stays, the HMA regulariser, the M_d aggregation that a
secure sum can compute, Top-K sampling and CEL."""

from __future__ import annotations

import copy

import pytest
import torch

from secure_fed.algorithms.fm2.model import (
    FM2Model,
    cel_loss,
    dmoe_from_sum,
    dmoe_upload,
    expert_counts,
    modality_index,
    observer_top_k,
)
from secure_fed.algorithms.fm2.site import StepSettings, train_stage2

CLASSES, MODALITIES = 6, 4


def _model(seed: int = 0) -> FM2Model:
    torch.manual_seed(seed)
    return FM2Model(CLASSES, MODALITIES, dim=16, hidden=16, class_experts=3)


def _site_data(seed: int, modalities: list[int], n: int = 24) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 16, 16, generator=g)
    modality = torch.tensor(modalities)[torch.randint(len(modalities), (n,), generator=g)]
    labels = torch.randint(CLASSES, (n,), generator=g)
    return x, modality, labels


def _dmoe_reference(model: FM2Model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.dmoe.named_parameters()}


def test_the_class_moe_is_never_part_of_what_is_shared() -> None:
    model = _model()
    shared, local = model.shared_state(), model.local_state()
    assert shared and local and not set(shared) & set(local)
    assert all(k.startswith(("observer.", "dmoe.")) for k in shared)
    assert any(k.startswith("cmoe.") for k in local) and not any(k.startswith("cmoe.") for k in shared)
    # the M_d upload carries exactly M_d and its counts: no CMoE value can hide in it
    counts = torch.tensor([3.0, 0.0, 5.0, 1.0], dtype=torch.float64)
    zero = {k: torch.zeros_like(v) for k, v in model.dmoe.named_parameters()}
    upload = dmoe_upload(model.dmoe, zero, counts)
    assert upload.numel() == sum(p.numel() for p in model.dmoe.parameters()) + MODALITIES


def test_hma_with_lambda_zero_is_plain_dmoe_training_and_aggregation() -> None:
    """Two sites, one round: with λ = 0, FM2's local step and the secure-sum aggregation give
    exactly the per-expert count-weighted average of plainly trained domain experts."""
    start = _model()
    reference = _dmoe_reference(start)
    uploads, trained, counts_all = [], [], []
    for seed, mods in ((1, [0, 1]), (2, [1, 2])):
        x, modality, labels = _site_data(seed, mods)
        with_hma, plain = copy.deepcopy(start), copy.deepcopy(start)
        settings = StepSettings(lr=0.01, epochs=2, batch=8, seed=seed)
        train_stage2(with_hma, x, modality, labels, reference, 0.0, settings)
        train_stage2(plain, x, modality, labels, {}, 0.0, settings)
        for a, b in zip(with_hma.dmoe.parameters(), plain.dmoe.parameters(), strict=True):
            assert torch.equal(a, b)
        counts = expert_counts(modality, MODALITIES)
        delta = {k: p.detach() - reference[k] for k, p in with_hma.dmoe.named_parameters()}
        uploads.append(dmoe_upload(with_hma.dmoe, delta, counts))
        trained.append(with_hma)
        counts_all.append(counts)
    merged = dmoe_from_sum(sum(uploads), start.dmoe)
    c = torch.stack(counts_all)  # (sites, experts)
    for name, p in start.dmoe.named_parameters():
        site_values = torch.stack([dict(m.dmoe.named_parameters())[name].detach() for m in trained]).double()
        expert = int(name.split(".")[2])
        w = c[:, expert].view(2, *[1] * p.dim())
        if w.sum() > 0:
            expected = (site_values * w).sum(0) / w.sum()
        else:
            expected = p.detach().double()
        torch.testing.assert_close(merged[name].double(), expected, rtol=1e-6, atol=1e-7)
    # expert 3 (no site's modality) keeps the round's starting value; expert 1 (both sites') moved
    for k, p in start.dmoe.named_parameters():
        if k.startswith("experts.experts.3."):
            assert torch.equal(merged[k], p.detach())
        if k.startswith("experts.experts.1."):
            assert not torch.equal(merged[k], p.detach())


def test_hma_pulls_the_domain_experts_towards_the_global_ones() -> None:
    start = _model()
    reference = _dmoe_reference(start)
    x, modality, labels = _site_data(5, [0, 1, 2, 3])

    def drift(lam: float) -> float:
        model = copy.deepcopy(start)
        train_stage2(
            model, x, modality, labels, reference, lam, StepSettings(lr=0.02, epochs=3, batch=8, seed=5)
        )
        return sum(float(((p.detach() - reference[k]) ** 2).sum()) for k, p in model.dmoe.named_parameters())

    assert drift(1.0) < 0.5 * drift(0.0)


def test_top_k_takes_each_class_s_highest_own_class_scores() -> None:
    scores = torch.tensor([[2.0, 0.0], [5.0, 0.0], [1.0, 0.0], [0.0, 3.0], [0.0, -1.0], [0.0, 4.0]])
    labels = torch.tensor([0, 0, 0, 1, 1, 1])
    assert observer_top_k(scores, labels, 2) == [0, 1, 3, 5]
    assert observer_top_k(scores, labels, 10) == [0, 1, 2, 3, 4, 5]


def test_cel_rewards_images_matched_with_their_own_captions() -> None:
    torch.manual_seed(0)
    v = torch.randn(8, 16)
    assert cel_loss(v, v + 0.01 * torch.randn(8, 16)) < cel_loss(v, torch.randn(8, 16))


def test_an_unknown_modality_is_named() -> None:
    assert modality_index(["ct", "mri"], ["xray", "ct", "mri"]).tolist() == [1, 2]
    with pytest.raises(ValueError, match="'pet'"):
        modality_index(["pet"], ["xray", "ct"])
