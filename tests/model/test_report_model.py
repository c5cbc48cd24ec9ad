"""The report model: frozen base, shared LoRA + patient hyper-LoRA, DP-compatibility (no BatchNorm,
Opacus per-sample gradients for every trainable leaf).

The base is built unpretrained (pretraining changes weights, not structure), which keeps this file fast.
"""

from __future__ import annotations

from pathlib import Path

import opacus
import pytest
import torch
from torch import nn

from secure_fed.algorithms.fedtar.hyper_lora import HyperLoRALayer
from secure_fed.algorithms.fedtar.profile_gmm import PatientGMM
from secure_fed.config import RunConfig
from secure_fed.data.profile import profile_vector
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.dp.dpsgd import ExpandedWeightsModule
from secure_fed.model.build import build_model
from secure_fed.model.report_model import ReportModel
from tests.conftest import small_config

KEY = b"test-site-key"


def build(cfg: RunConfig) -> ReportModel:
    tok = load_tokenizer(cfg.model.tokenizer_path)
    return build_model(
        cfg.model, tok.vocab_size, tok.pad_id, tok.bos_id, tok.eos_id, cfg.data.synth.image_size
    )


@pytest.fixture(autouse=True, scope="module")
def _threads(one_torch_thread: None) -> None:
    """Model-heavy module: run it on one torch thread (see conftest.one_torch_thread)."""


@pytest.fixture(scope="module")
def config(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> RunConfig:
    return small_config(cache_dir, tmp_path_factory.mktemp("model"))


def inputs(cfg: RunConfig, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    size = cfg.data.synth.image_size
    images = torch.rand(batch, 2, size, size, generator=gen)
    tok = load_tokenizer(cfg.model.tokenizer_path)
    ids = torch.randint(3, tok.vocab_size, (batch, 12), generator=gen)
    ids[:, 0] = tok.bos_id
    ids[:, -3] = tok.eos_id
    ids[:, -2:] = tok.pad_id  # padding rows must not break anything either
    return images, ids


def demographic_profiles(k: int) -> torch.Tensor:
    """q_p for a young woman and an old man under the public prior GMM."""
    gmm = PatientGMM(k)
    v = [profile_vector("P1", 24, "F", KEY), profile_vector("P2", 83, "M", KEY)]
    return torch.from_numpy(gmm.responsibilities(v))


def trainable_kind(name: str) -> str | None:
    if "lora_" in name:
        return "lora"
    if ".hyper." in name:
        return "hyper"
    if name.startswith("proj."):
        return "proj"
    return None


# -- structure ---------------------------------------------------------------------------------------


def test_base_frozen_only_adapters_trainable(config: RunConfig) -> None:
    model = build(config)
    kinds: dict[str, int] = {"lora": 0, "hyper": 0, "proj": 0}
    for name, p in model.named_parameters():
        kind = trainable_kind(name)
        assert p.requires_grad == (kind is not None), name
        if kind:
            kinds[kind] += 1
    assert all(kinds.values()), kinds
    # The hypernetworks wrap every shared-LoRA layer of the decoder.
    n_hyper = sum(isinstance(m, HyperLoRALayer) for m in model.modules())
    assert n_hyper == len(model.adapted_layers) > 0
    assert set(model.trainable_state()) == {n for n, p in model.named_parameters() if p.requires_grad}

    # A training step moves adapters only.
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    images, ids = inputs(config, 2)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model(images, ids, demographic_profiles(config.model.gmm_components)).sum().backward()
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)
    opt.step()
    for n, p in model.named_parameters():
        if not p.requires_grad:
            assert torch.equal(p, frozen[n]), n


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_no_batchnorm(cache_dir: Path, tmp_path: Path, preset: str) -> None:
    """BatchNorm mixes rows of a batch: per-patient gradients (DP-SGD) would no longer be per patient."""
    cfg = small_config(cache_dir, tmp_path, model__preset=preset)
    model = build(cfg)
    offenders = [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm | nn.SyncBatchNorm)
        or "batchnorm" in type(m).__name__.lower()
    ]
    assert offenders == []
    # And the model really is row-separable: a row's loss does not depend on the other rows.
    model.eval()
    images, ids = inputs(cfg, 3, seed=1)
    q = torch.rand(3, cfg.model.gmm_components)
    with torch.no_grad():
        full = model(images, ids, q)
        alone = torch.cat([model(images[i : i + 1], ids[i : i + 1], q[i : i + 1]) for i in range(3)])
    torch.testing.assert_close(full, alone, rtol=1e-4, atol=1e-5)


# -- patient personalisation -----------------------------------------------------------------------


def test_hyper_lora_personalises(config: RunConfig) -> None:
    model = build(config)
    model.eval()
    q = demographic_profiles(config.model.gmm_components)
    assert not torch.allclose(q[0], q[1], atol=1e-3)
    images, ids = inputs(config, 1)
    images, ids = images.expand(2, -1, -1, -1), ids.expand(2, -1)  # same image and tokens

    with torch.no_grad():
        before = model.logits(images, ids, q)
    # Like LoRA, the patient term starts at zero (B_p = 0), so nobody is personalised yet.
    torch.testing.assert_close(before[0], before[1], rtol=0, atol=1e-5)

    # A couple of training steps on patient-specific targets give the hypernetworks non-zero B_p.
    model.train()
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    _, targets = inputs(config, 2, seed=7)
    for _ in range(3):
        opt.zero_grad()
        model(images, targets, q).sum().backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        after = model.logits(images, ids, q)
    assert (after[0] - after[1]).abs().max() > 1e-3


def test_without_hyper_lora_profiles_do_not_matter(cache_dir: Path, tmp_path: Path) -> None:
    cfg = small_config(cache_dir, tmp_path, model__hyper_lora=False)
    model = build(cfg)
    assert model.proj is None and model.adapted_layers == []
    assert not any(isinstance(m, HyperLoRALayer) for m in model.modules())
    assert all(trainable_kind(n) == "lora" for n, p in model.named_parameters() if p.requires_grad)
    # Make the shared LoRA non-trivial, so equality below is not an artefact of zero adapters.
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    model.eval()
    images, ids = inputs(cfg, 1)
    images, ids = images.expand(2, -1, -1, -1), ids.expand(2, -1)
    q = demographic_profiles(cfg.model.gmm_components)
    with torch.no_grad():
        a = model.logits(images, ids, q)
        b = model.logits(images, ids, q.flip(0))
        base = model.logits(images, ids, torch.zeros_like(q))
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(a, base, rtol=0, atol=0)


# -- Opacus -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["ew", "hooks"])
def test_opacus_per_sample_grads_for_every_trainable_parameter(config: RunConfig, mode: str) -> None:
    model = build(config)
    # Non-zero adapters everywhere, so every factor of every per-sample gradient is exercised.
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.02)
    model.train()
    batch = 3
    images, ids = inputs(config, batch, seed=3)
    q = torch.softmax(torch.randn(batch, config.model.gmm_components) * 3, dim=1)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}

    # Reference: each row's gradient from its own backward pass, before Opacus touches the model.
    reference = []
    for i in range(batch):
        grads = torch.autograd.grad(
            model(images[i : i + 1], ids[i : i + 1], q[i : i + 1]).sum(), list(trainable.values())
        )
        reference.append(dict(zip(trainable, grads, strict=True)))

    if mode == "ew":  # what DP training uses (secure_fed.dp.dpsgd)
        gsm: nn.Module = ExpandedWeightsModule(model, loss_reduction="sum")
    else:
        gsm = opacus.GradSampleModule(model, batch_first=True, loss_reduction="sum", strict=True)
    try:
        gsm(images, ids, q).sum().backward()
        missing = [n for n, p in trainable.items() if getattr(p, "grad_sample", None) is None]
        assert missing == []
        for name, p in trainable.items():
            gs = p.grad_sample
            assert gs.shape == (batch, *p.shape), name
            if mode == "hooks":  # hooks leave autograd's summed gradient; ExpandedWeights skip it
                torch.testing.assert_close(gs.sum(0), p.grad, rtol=1e-4, atol=1e-6, msg=name)
            else:
                assert p.grad is None, name
            torch.testing.assert_close(
                gs.sum(0), sum(r[name] for r in reference), rtol=1e-3, atol=1e-6, msg=name
            )
            for i in range(batch):
                torch.testing.assert_close(gs[i], reference[i][name], rtol=1e-3, atol=1e-6, msg=name)
        assert all(getattr(p, "grad_sample", None) is None for p in model.parameters() if not p.requires_grad)
    finally:
        gsm.to_standard_module()


def test_base_cache_is_keyed_by_the_architecture_not_just_the_preset_name(
    config: RunConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preset whose sizes change must not load a cached base of the old shape."""
    from dataclasses import replace

    from secure_fed.model import build as build_module

    before = build_module.base_cache_path(config.model, 100, 32, 0)
    resized = {**build_module.PRESETS}
    resized[config.model.preset] = replace(resized[config.model.preset], n_layer=3)
    monkeypatch.setattr(build_module, "PRESETS", resized)
    after = build_module.base_cache_path(config.model, 100, 32, 0)
    assert after != before and after.parent == before.parent


def test_a_base_pretrained_on_other_public_data_is_not_loaded(config: RunConfig) -> None:
    """Reports encoded to another length (or another tokenizer) make another pretraining recipe,
    so another cached base."""
    from secure_fed.model import build as build_module
    from secure_fed.model.setup import pretraining_recipe

    longer = config.model_copy(update={"data": config.data.model_copy(update={"max_report_tokens": 64})})
    recipes = {pretraining_recipe(c) for c in (config, longer)}
    paths = {build_module.base_cache_path(config.model, 100, 32, 0, recipe=r) for r in recipes}
    assert len(recipes) == 2 and len(paths) == 2


def test_trimmed_padding_leaves_every_row_loss_and_gradient_as_it_was(config: RunConfig) -> None:
    """`forward` drops the batch's all-padding columns (the decoder's cost grows with them): each
    row's loss and the adapters' gradients are those of the full padded batch, computed here the
    way `forward` did before the trim."""
    import torch.nn.functional as F

    model = build(config)
    model.train()
    images, ids = inputs(config, 4)
    wide = torch.cat([ids, torch.full((4, 20), model.pad_id)], dim=1)  # 20 more columns of padding
    wide[0, 5:] = model.pad_id  # rows of unequal length: a short row's padding stays inside
    wide[0, 4] = model.eos_id
    profiles = demographic_profiles(config.model.gmm_components).repeat(2, 1)

    def full_loss() -> torch.Tensor:
        logits = model.logits(images, wide, profiles)
        targets = wide[:, 1:]
        mask = (targets != model.pad_id).float()
        nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")
        return (nll * mask).sum(1) / mask.sum(1).clamp_min(1.0)

    from secure_fed.model.report_model import trim_padding

    assert trim_padding(wide, model.pad_id).shape[1] == ids.shape[1] - 2  # the trim does happen
    params = [p for p in model.parameters() if p.requires_grad]
    reference = full_loss()
    ref_grads = torch.autograd.grad(reference.sum(), params)
    trimmed = model(images, wide, profiles)
    grads = torch.autograd.grad(trimmed.sum(), params)
    torch.testing.assert_close(trimmed, reference, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
    assert any(float(g.abs().max()) > 0 for g in grads)


def test_the_base_digest_names_the_frozen_base_weights(config: RunConfig) -> None:
    """Two builds on one machine load the same cached base and name it alike, whatever adapter seed;
    one changed base weight (what another machine's pretraining gives) is another base."""
    from secure_fed.model.build import weights_digest
    from secure_fed.model.setup import build_report_model

    first = build_report_model(config)
    again = build_report_model(config.model_copy(update={"seed": config.seed + 1}))
    assert len(first.base_digest) == 16 and first.base_digest == again.base_digest
    base = {k: v for k, v in first.state_dict().items() if "lora" not in k and "hyper" not in k}
    assert weights_digest(base) != weights_digest(base | {"vis_proj.bias": base["vis_proj.bias"] + 1e-6})


def test_the_default_base_is_the_shipped_one_on_every_machine(tmp_path: Path, monkeypatch) -> None:
    """The tiny preset's default base ships with the package: an empty cache does not pretrain it,
    and a base this machine pretrained and cached for the same recipe does not replace it, so two
    machines run on one base (their own pretraining gives different ones)."""
    from secure_fed.model.build import SHIPPED_BASES, weights_digest
    from secure_fed.model.setup import build_report_model

    def no_pretraining(*args: object, **kwargs: object) -> None:
        raise AssertionError("the shipped base was pretrained again")

    monkeypatch.setattr("secure_fed.model.setup.pretrain_base", no_pretraining)
    cfg = RunConfig()
    cfg.model.cache_dir = str(tmp_path / "empty-cache")
    model = build_report_model(cfg)
    (shipped,) = SHIPPED_BASES.glob(f"base-{cfg.model.preset}-*.pt")
    state = torch.load(shipped, map_location="cpu", weights_only=True)
    assert model.base_digest == weights_digest(state)
    own = {k: v + 1e-3 for k, v in state.items()}  # this machine's own pretraining of the recipe
    mine = tmp_path / "empty-cache" / shipped.name
    mine.parent.mkdir(parents=True, exist_ok=True)
    torch.save(own, mine)
    assert build_report_model(cfg).base_digest == weights_digest(state)
