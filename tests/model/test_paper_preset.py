"""The `paper` preset offline: a random-weight CvT and a DistilGPT2-shaped GPT-2 saved with
save_pretrained into a temporary folder, then one DP round through them (shrunk hidden sizes:
the preset takes local checkpoints, so the test picks the sizes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from secure_fed.model.lora import ENCODER_LORA_TARGETS


@pytest.fixture(scope="module")
def paper_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from transformers import CvtConfig, CvtModel, GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("paper")
    torch.manual_seed(0)
    # CvT-13's layout (3 stages, BatchNorm in the convolutional projections) at toy widths
    CvtModel(CvtConfig(embed_dim=[16, 32, 48], num_heads=[1, 2, 3], depth=[1, 2, 3])).save_pretrained(
        folder / "cvt"
    )
    # DistilGPT2's layout is GPT-2 with 6 layers; the widths are shrunk for a CPU test
    GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=6, n_head=4, n_positions=128)).save_pretrained(
        folder / "distilgpt2"
    )
    return folder / "cvt", folder / "distilgpt2"


def _paper_config(make_config, paper_checkpoints, **overrides):
    cvt, gpt = paper_checkpoints
    return make_config(
        "paper",
        model__preset="paper",
        model__encoder=str(cvt),
        model__decoder_path=str(gpt),
        **overrides,
    )


def test_paper_model_has_lora_on_every_transformer_layer_and_a_frozen_eval_base(
    make_config, paper_checkpoints, one_torch_thread
):
    from secure_fed.model.setup import build_report_model

    cfg = _paper_config(make_config, paper_checkpoints)
    assert (cfg.model.lora_rank, cfg.model.lora_alpha) == (4, 128.0)
    model = build_report_model(cfg)
    model.train()
    encoder_layers = {
        name.rsplit(".", 1)[0] for name, _ in model.encoder.named_modules() if name.endswith(".lora_A")
    }
    expected = {n for n, _ in model.encoder.named_modules() if re.fullmatch(ENCODER_LORA_TARGETS, n)}
    assert len(expected) == 4 * (1 + 2 + 3) and encoder_layers == expected  # q, k, v, out of each block
    decoder_blocks = {
        int(m.group(1))
        for n, _ in model.decoder.named_modules()
        if (m := re.search(r"\.h\.(\d+)\..*lora_A$", n))
    }
    assert decoder_blocks == set(range(6))
    ranks = {p.shape[0] for n, p in model.named_parameters() if n.endswith("lora_A.default.weight")}
    assert ranks == {4}
    norms = [m for m in model.encoder.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms and not any(m.training for m in norms)  # batch statistics never mix patients
    assert not any(
        p.requires_grad
        for n, p in model.named_parameters()
        if "lora_" not in n and "hyper" not in n and not n.startswith("proj.")
    )


@pytest.mark.slow
def test_one_dp_round_through_the_paper_preset(make_config, paper_checkpoints, one_torch_thread):
    from secure_fed.launch.runner import run_inprocess

    cfg = _paper_config(
        make_config,
        paper_checkpoints,
        dp__enabled=True,
        dp__target_epsilon=8.0,
        dp__sample_rate=0.5,
        fed__rounds=1,
        train__local_epochs=1,
    )
    outcome = run_inprocess(cfg, cfg.out)
    metrics = json.loads((cfg.out / "metrics.json").read_text())
    assert outcome.metrics["rounds"] == 1 and metrics["rounds"] == 1
    assert all(0 < e["rdp"] <= 8.0 + 1e-9 for e in metrics["privacy"]["epsilon"].values())
