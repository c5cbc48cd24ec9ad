"""A DP step whose Poisson sample is large runs its forward and backward in passes of at most
`dp.max_patients_per_pass` patients, so its memory is one pass's, not the whole sample's
(docs/BENCHMARKS.md, "DP step memory in passes"). Memory only: the released
gradient, and so the trained adapters, must be the one-pass step's, in site mode (`train_copies`
with the site's `DPGradients`, FedTAR-style copies per visit index) and in distributed mode (the
clipped sum a site encodes). The tiny preset, unpretrained, 16 patients a site: a few seconds."""

from __future__ import annotations

import pytest
import torch

from secure_fed.algorithms.fedtar.profile import fit_gmm
from secure_fed.config import RunConfig
from secure_fed.data.batching import Examples
from secure_fed.dp.keystream import NoiseStream
from secure_fed.model.report_model import ReportModel
from secure_fed.model.setup import build_report_model, visit_slots
from secure_fed.site.distributed import clipped_gradient_sum
from secure_fed.site.private import DPGradients
from secure_fed.site.site import SiteData, attach_profiles, load_site, patient_profiles
from secure_fed.site.training import LocalTrainSettings, patient_passes, train_copies
from tests.conftest import small_config

CLIP = 0.05  # below the typical per-patient norm: a patient clipped per pass would differ


@pytest.fixture(scope="module")
def prepared(
    tmp_path_factory: pytest.TempPathFactory, one_torch_thread: None
) -> tuple[RunConfig, SiteData, ReportModel]:
    root = tmp_path_factory.mktemp("passes")
    cfg = small_config(root / "cache", root / "out", model__pretrain_steps=0, fed__method="fedtar")
    data = load_site(cfg, "site0")
    gmm, _ = fit_gmm(patient_profiles(data.train), cfg.model.gmm_components, cfg.model.gmm_reg_covar, 0, None)
    attach_profiles(data, gmm, visit_slots(cfg))
    return cfg, data, build_report_model(cfg)


def _by_visit(examples: Examples) -> list[Examples]:
    """FedTAR's copies: one per visit index, so a patient's rows are in several copies."""
    visits = sorted({int(v) for v in examples.visit_index})
    return [examples.subset(torch.nonzero(examples.visit_index == v).flatten()) for v in visits]


class Recording(DPGradients):
    """The site's DPGradients, recording the patients of every forward/backward pass."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.passes: list[tuple[int, bool]] = []

    def backward(self, copies, losses, patient_index, last_pass=True) -> None:  # type: ignore[no-untyped-def]
        seen = torch.cat([i for i in patient_index if i.numel()] or [torch.zeros(0, dtype=torch.long)])
        self.passes.append((len(torch.unique(seen)), last_pass))
        super().backward(copies, losses, patient_index, last_pass)


def _train(
    model: ReportModel, groups: list[Examples], n: int, per_pass: int | None
) -> tuple[list, Recording]:
    grads = Recording(0.8, CLIP, 1.0, n, 4, NoiseStream(b"\x07" * 32), per_pass)
    result = train_copies(
        model, model.trainable_state(), groups, LocalTrainSettings(lr=1e-2, epochs=2), seed=0, gradients=grads
    )
    return result.states, grads


def test_site_mode_trains_the_same_adapters_in_passes(
    prepared: tuple[RunConfig, SiteData, ReportModel],
) -> None:
    _, data, model = prepared
    groups = _by_visit(data.train)
    assert len(groups) > 1
    n = 1 + int(data.train.patient_slot.max())
    one, whole = _train(model, groups, n, None)
    split, parted = _train(model, groups, n, 3)
    assert all(last for _, last in whole.passes)  # one pass a step
    assert max(p for p, _ in parted.passes) <= 3
    assert len(parted.passes) > len(whole.passes)  # the samples really were split
    assert sum(last for _, last in parted.passes) == len(whole.passes)  # each step ended once
    assert [p for p, _ in whole.passes] == [
        sum(p for p, _ in parted.passes[start:end])
        for start, end in zip(
            [0] + [i + 1 for i, (_, last) in enumerate(parted.passes) if last][:-1],
            [i + 1 for i, (_, last) in enumerate(parted.passes) if last],
            strict=True,
        )
    ]  # the same patients each step, none twice
    assert whole.clipped and max(whole.clipped) > 0  # clipping bites
    for a, b in zip(one, split, strict=True):
        for name in a:
            assert torch.allclose(a[name], b[name], atol=1e-5, rtol=0), name
    moved = max(float((s[k] - model.trainable_state()[k]).abs().max()) for s in one for k in s)
    assert moved > 1e-3  # the comparison is of trained adapters, not of the start


def test_distributed_clipped_sum_is_the_same_in_passes(
    prepared: tuple[RunConfig, SiteData, ReportModel],
) -> None:
    _, data, model = prepared
    groups = _by_visit(data.train)
    n = 1 + int(data.train.patient_slot.max())
    start = model.trainable_state()
    one, sampled_one = clipped_gradient_sum(model, start, groups, CLIP, 0.9, n, NoiseStream(b"\x05" * 32))
    parted, sampled = clipped_gradient_sum(
        model, start, groups, CLIP, 0.9, n, NoiseStream(b"\x05" * 32), max_patients_per_pass=2
    )
    assert sampled == sampled_one > 2
    assert float(abs(one).max()) > 0
    assert torch.allclose(torch.from_numpy(one), torch.from_numpy(parted), atol=1e-6, rtol=0)


def test_patient_passes() -> None:
    chosen = torch.arange(7)
    assert [p.tolist() for p in patient_passes(chosen, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [p.tolist() for p in patient_passes(chosen, None)] == [list(range(7))]
    empty = patient_passes(torch.zeros(0, dtype=torch.long), 3)
    assert len(empty) == 1 and not empty[0].numel()  # an empty step still ends (and releases noise)


def test_fm2_steps_are_the_same_in_passes() -> None:
    """FM2's stages take their DP steps through the same pass rule (images, several per patient)."""
    from torch import nn

    from secure_fed.algorithms.fm2.site import StepSettings, run_steps

    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(24, 6, generator=g) * 3, torch.randn(24, 2, generator=g)
    patients = torch.arange(24) // 2  # two images a patient

    def trained(per_pass: int | None) -> tuple[torch.Tensor, int]:
        torch.manual_seed(0)
        module = nn.Linear(6, 2)
        grads = Recording(0.9, CLIP, 1.0, 12, 3, NoiseStream(b"\x09" * 32), per_pass)
        run_steps(
            module,
            lambda forward, idx: ((forward(x[idx]) - y[idx]) ** 2).sum(1),
            24,
            StepSettings(lr=0.05, epochs=3, batch=4, seed=0),
            grads,
            patients=patients,
        )
        assert max(p for p, _ in grads.passes) <= (per_pass or 12)
        return torch.cat([p.detach().flatten() for p in module.parameters()]), len(grads.passes)

    one, one_passes = trained(None)
    split, passes = trained(2)
    assert passes > one_passes  # the samples really were split
    assert torch.allclose(one, split, atol=1e-6, rtol=0)
