"""Model presets. `tiny` runs everywhere offline; `small` (~10M parameters) sizes the DP benchmark;
`paper` is CvT + DistilGPT2 from local checkpoints, as in the FedTAR paper."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Preset:
    encoder: str
    encoder_kwargs: dict[str, object] = field(default_factory=dict)
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 2
    n_positions: int = 64


PRESETS: dict[str, Preset] = {
    # Patches of 4 pixels: 64 visual tokens from a 32-pixel image, the grid of the paper's backbones
    # (CvT's last stage and R2Gen's ResNet give 7 x 7 = 49). Patches of 8 gave 16 tokens, and at
    # that grid the generator named a nodule in a quarter of the test reports that have one
    # (central fine-tune), while a linear probe on the same frozen tokens read it at F1 0.84
    # (benchmarks/finding_probe.py; docs/experiments/where-ce-f1-is-lost.md).
    "tiny": Preset(
        encoder="vit_tiny_patch16_224",
        encoder_kwargs={"patch_size": 4, "embed_dim": 64, "depth": 2, "num_heads": 2},
        n_embd=64,
        n_layer=2,
        n_head=2,
    ),
    "small": Preset(
        encoder="vit_tiny_patch16_224",
        encoder_kwargs={"patch_size": 8, "embed_dim": 192, "depth": 4, "num_heads": 3},
        n_embd=256,
        n_layer=7,
        n_head=4,
        n_positions=128,
    ),
    # The paper's backbones have no offline default: model.encoder and model.decoder_path must
    # point at local checkpoints.
    "paper": Preset(encoder="", n_embd=768, n_layer=6, n_head=12, n_positions=256),
}
