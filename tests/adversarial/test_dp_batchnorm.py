"""Attack: a layer that mixes the rows of a batch defeats per-patient clipping.

DP-SGD bounds a patient's influence by clipping the patient's own gradient to C. That presumes a
patient's gradient depends on the patient's rows alone. BatchNorm in training mode normalises every
row by the batch's mean and variance, so one patient (here, an outlier) shifts the normalised rows,
and so the clipped gradients, of all the others: the clipped, noise-free sum moves by far more than
C. A frozen BatchNorm does this as much as a trainable one, and the `paper` preset's CvT encoder has
BatchNorm in its frozen base. PatientDPSGD must refuse such layers; ReportModel keeps its frozen base
in eval mode while training, where the bound holds again.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import CvtConfig, CvtModel, GPT2Config, GPT2LMHeadModel

from secure_fed.config import ModelConfig
from secure_fed.dp.dpsgd import PatientDPSGD
from secure_fed.dp.keystream import NoiseStream
from secure_fed.model.build import build_model
from secure_fed.model.decoder import build_decoder
from secure_fed.model.report_model import ReportModel

C = 1.0
PATIENTS, FEATURES = 16, 4


def stand_in(train_mode_norm: bool) -> nn.Sequential:
    """Frozen BatchNorm (running statistics from public data) before a trainable linear layer."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm1d(FEATURES), nn.Linear(FEATURES, 1))
    model[0].requires_grad_(False)
    with torch.no_grad():
        model[0].running_mean.fill_(0.2)
        model[0].running_var.fill_(1.5)
    model.train()
    if not train_mode_norm:
        model[0].eval()
    return model


def patients() -> torch.Tensor:
    """One row per patient; patient 0, the target, is an outlier."""
    x = torch.randn(PATIENTS, FEATURES, generator=torch.Generator().manual_seed(1))
    x[0] = 100.0
    return x


def engine_sum(model: nn.Module, with_target: bool) -> torch.Tensor:
    """PatientDPSGD's privatized sum (σ = 0, divisor 1) of loss = Σ rows' outputs."""
    model = copy.deepcopy(model)
    rows = patients() if with_target else patients()[1:]
    dp = PatientDPSGD([model], C, 0.0, 1.0, NoiseStream(bytes(32)))
    (forward,) = dp.forward_modules
    forward(rows).sum().backward()
    dp.privatize([torch.arange(len(rows))], num_patients=len(rows))
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])


def hand_sum(model: nn.Sequential, with_target: bool) -> torch.Tensor:
    """What per-row clipping releases, by hand: row i's gradient of Σ outputs w.r.t. (W, b) is
    (h_i, 1), h_i its row after the norm layer in the model's mode; clip each to C and sum."""
    rows = patients() if with_target else patients()[1:]
    with torch.no_grad():
        h = copy.deepcopy(model[0])(rows)  # a copy: train mode would update the running statistics
        grads = torch.cat([h, torch.ones(len(rows), 1)], dim=1)
        factors = torch.clamp(C / torch.linalg.vector_norm(grads, dim=1), max=1.0)
        return (factors[:, None] * grads).sum(0)


def change(total: object, model: nn.Module) -> float:
    return float(torch.linalg.vector_norm(total(model, True) - total(model, False)))  # type: ignore[operator]


def test_one_patient_moves_a_train_mode_batchnorm_sum_far_beyond_c() -> None:
    moved = change(hand_sum, stand_in(train_mode_norm=True))
    assert moved > 5 * C, moved  # ≈ 7.9·C: every other patient's clipped gradient turned
    # the same computation with the norm layer in eval mode is bounded as DP-SGD assumes
    assert change(hand_sum, stand_in(train_mode_norm=False)) <= C + 1e-6


def test_patient_dpsgd_refuses_row_mixing_layers() -> None:
    with pytest.raises(ValueError, match=r"modules\[0\]\.0 \(BatchNorm1d\).*training mode") as error:
        engine_sum(stand_in(train_mode_norm=True), with_target=True)
    assert "eval mode" in str(error.value) and "GroupNorm" in str(error.value)  # says how to fix it
    # without running statistics BatchNorm uses the batch's even in eval mode
    model = stand_in(train_mode_norm=False)
    model[0].track_running_stats = False
    with pytest.raises(ValueError, match="track_running_stats=False"):
        engine_sum(model, with_target=True)
    # Opacus' validator on trainable layers: a trainable BatchNorm is refused even in eval mode
    model = stand_in(train_mode_norm=False)
    model[0].requires_grad_(True)
    with pytest.raises(ValueError, match="BatchNorm cannot support training with differential privacy"):
        engine_sum(model, with_target=True)


def test_a_batchnorm_put_back_in_training_mode_stops_the_step() -> None:
    model = stand_in(train_mode_norm=False)
    dp = PatientDPSGD([model], C, 0.0, 1.0, NoiseStream(bytes(32)))
    model[0].train()
    (forward,) = dp.forward_modules
    forward(patients()).sum().backward()
    with pytest.raises(RuntimeError, match="switched to training mode"):
        dp.privatize([torch.arange(PATIENTS)], num_patients=PATIENTS)


def test_with_the_frozen_norm_in_eval_mode_a_patient_moves_the_sum_by_at_most_c() -> None:
    model = stand_in(train_mode_norm=False)
    moved = change(engine_sum, model)
    assert moved <= C + 1e-5
    assert moved == pytest.approx(C, rel=1e-4)  # the outlier is clipped to exactly C
    # and the hand computation above is what the engine computes
    for with_target in (True, False):
        assert torch.allclose(engine_sum(model, with_target), hand_sum(model, with_target), atol=1e-5)


class ConvBnEncoder(nn.Module):
    """A convolutional encoder with BatchNorm, as CvT's convolutional projections."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 8, 4, stride=4)
        self.norm = nn.BatchNorm2d(8)
        self.out_dim = 8

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(images)).flatten(2).transpose(1, 2)


def _rows(model: ReportModel, n: int, vocab: int, components: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(2)
    images = torch.rand(n, 2, 16, 16, generator=g)
    ids = torch.randint(3, vocab, (n, 6), generator=g)
    ids[:, 0] = model.bos_id
    profiles = torch.softmax(torch.randn(n, components, generator=g), dim=1)
    return images, ids, profiles


def _dp_step(copies: list[nn.Module], n: int, vocab: int, components: int) -> None:
    dp = PatientDPSGD(copies, C, 1.0, 2.0, NoiseStream(bytes(32)))
    rows = _rows(copies[0], n, vocab, components)  # type: ignore[arg-type]
    sum(f(*rows).sum() for f in dp.forward_modules).backward()
    dp.privatize([torch.arange(n)] * len(copies), num_patients=n)


def test_report_model_keeps_its_frozen_base_in_eval_mode_while_training() -> None:
    torch.manual_seed(0)
    vocab, components = 30, 4
    model = ReportModel(ConvBnEncoder(), build_decoder(vocab, 16, 1, 2, 16, 1, 2, 0), 0, 1, 2)
    model.add_adapters(2, 4.0, True, components, 4, 1)
    model.train()
    assert model.training and not model.encoder.norm.training  # type: ignore[union-attr]
    assert all(m.training for m in model.modules() if any(p.requires_grad for p in m.parameters()))
    stats = model.encoder.norm.running_mean.clone()  # type: ignore[union-attr]
    _dp_step([model], 4, vocab, components)  # accepted: no layer mixes rows
    assert torch.equal(model.encoder.norm.running_mean, stats)  # private batches leave no trace
    # the plain nn.Module.train puts the frozen BatchNorm in training mode: refused
    nn.Module.train(model)
    with pytest.raises(ValueError, match=r"encoder\.norm \(BatchNorm2d\)"):
        PatientDPSGD([model], C, 1.0, 2.0, NoiseStream(bytes(32)))


def test_paper_preset_builds_offline_and_takes_a_dp_step(tmp_path: Path) -> None:
    """The `paper` preset (CvT encoder + DistilGPT2-style decoder from local checkpoints), with tiny
    random checkpoints written here: CvT's frozen BatchNorms stay in eval mode and DP-SGD runs."""
    torch.manual_seed(0)
    cvt, gpt2 = tmp_path / "cvt", tmp_path / "gpt2"
    CvtModel(CvtConfig(embed_dim=[8, 16, 24], num_heads=[1, 2, 3], depth=[1, 2, 3])).save_pretrained(cvt)
    decoder = GPT2Config(vocab_size=40, n_positions=16, n_embd=24, n_layer=1, n_head=2, bos_token_id=1)
    GPT2LMHeadModel(decoder).save_pretrained(gpt2)
    vocab, components = 30, 4
    cfg = ModelConfig(
        preset="paper",
        encoder=str(cvt),
        decoder_path=gpt2,
        cache_dir=tmp_path / "cache",
        gmm_components=components,
        lora_rank=2,
    )
    model = build_model(cfg, vocab, 0, 1, 2, 32)
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and not any(p.requires_grad for m in norms for p in m.parameters())
    copies = [copy.deepcopy(model) for _ in range(2)]
    for c in copies:
        c.train()
    before = [m.running_mean.clone() for m in copies[0].modules() if isinstance(m, nn.BatchNorm2d)]
    dp = PatientDPSGD(copies, C, 1.0, 2.0, NoiseStream(bytes(32)))
    g = torch.Generator().manual_seed(3)
    images = torch.rand(3, 2, 32, 32, generator=g)
    ids = torch.randint(3, vocab, (3, 6), generator=g)
    profiles = torch.softmax(torch.randn(3, components, generator=g), dim=1)
    sum(f(images, ids, profiles).sum() for f in dp.forward_modules).backward()
    dp.privatize([torch.arange(3)] * 2, num_patients=3)
    grads = [p.grad for ps in dp.trainable_parameters for p in ps]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    after = [m.running_mean for m in copies[0].modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    nn.Module.train(copies[0])
    with pytest.raises(ValueError, match="BatchNorm2d"):
        PatientDPSGD(copies, C, 1.0, 2.0, NoiseStream(bytes(32)))
