"""Greedy decoding with a key/value cache gives the token ids of recomputing the whole prefix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from secure_fed.config import RunConfig
from secure_fed.data.tokenizer import load_tokenizer
from secure_fed.model.build import build_model
from secure_fed.model.report_model import ReportModel
from tests.conftest import small_config

MAX_LEN = 20
EOS_SCALE = 6.0  # rows end at steps 4, 8, 13, 14 and one runs to MAX_LEN


@pytest.fixture(autouse=True, scope="module")
def _threads(one_torch_thread: None) -> None:
    """Model-heavy module: run it on one torch thread (see conftest.one_torch_thread)."""


@pytest.fixture(scope="module")
def config(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> RunConfig:
    return small_config(cache_dir, tmp_path_factory.mktemp("generate"))


def trained_looking_model(cfg: RunConfig) -> ReportModel:
    """Adapters away from their zero start, so the shared LoRA and the patient term both change the
    output; the EOS embedding (tied to its output row) scaled so that rows end at different steps."""
    tok = load_tokenizer(cfg.model.tokenizer_path)
    model = build_model(
        cfg.model, tok.vocab_size, tok.pad_id, tok.bos_id, tok.eos_id, cfg.data.synth.image_size
    )
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        model.decoder.get_output_embeddings().weight[tok.eos_id] *= EOS_SCALE
    return model


def prefix_reference(model: ReportModel, images: torch.Tensor, profiles: torch.Tensor) -> list[list[int]]:
    """The decoding `generate` replaced: the whole prefix through the decoder at every step."""
    model.eval()
    with torch.no_grad():
        ids = torch.full((images.shape[0], 1), model.bos_id, dtype=torch.long)
        done = torch.zeros(images.shape[0], dtype=torch.bool)
        visual = model.visual_tokens(images)
        model.ctx.phi = model.proj(profiles) if model.proj is not None else None
        try:
            for _ in range(MAX_LEN):
                nxt = model.decoder(input_ids=ids, encoder_hidden_states=visual).logits[:, -1].argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
                ids = torch.cat([ids, nxt[:, None]], dim=1)
                done |= nxt == model.eos_id
                if bool(done.all()):
                    break
        finally:
            model.ctx.phi = None
    return [row[1:].tolist() for row in ids]


def test_cached_greedy_decoding_equals_prefix_recomputation(config: RunConfig) -> None:
    model = trained_looking_model(config)
    gen = torch.Generator().manual_seed(0)
    size = config.data.synth.image_size
    batch = 8
    images = torch.rand(batch, 2, size, size, generator=gen)
    profiles = torch.softmax(3 * torch.randn(batch, config.model.gmm_components, generator=gen), -1)

    # Each decoder call after the first must see one new token: the prefix is not recomputed.
    widths: list[int] = []
    hook = model.decoder.register_forward_pre_hook(
        lambda _m, _a, kw: widths.append(int(kw["input_ids"].shape[1])), with_kwargs=True
    )
    try:
        with_phi = model.generate(images, profiles, MAX_LEN)
    finally:
        hook.remove()
    assert widths and set(widths) == {1}

    assert with_phi == prefix_reference(model, images, profiles)
    eos_at = [row.index(model.eos_id) if model.eos_id in row else None for row in with_phi]
    ended = {i for i in eos_at if i is not None}
    assert len(ended) >= 2 and min(ended) < len(with_phi[0]) - 1, eos_at  # different lengths, early EOS
    for row, i in zip(with_phi, eos_at, strict=True):
        if i is not None:
            assert set(row[i + 1 :]) <= {model.pad_id}

    proj, model.proj = model.proj, None  # no profile projection: the hyper-LoRA term is off
    try:
        without_phi = model.generate(images, profiles, MAX_LEN)
        assert without_phi == prefix_reference(model, images, profiles)
    finally:
        model.proj = proj
    assert without_phi != with_phi  # φ changed the output, so its handling was exercised
    assert model.ctx.phi is None
