"""Image encoder: any timm model (tiny presets work offline), or a CvT from a local path."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn


class TimmEncoder(nn.Module):
    """Wraps a timm backbone so it returns visual tokens (B, N, D)."""

    def __init__(self, name: str, in_chans: int, img_size: int, **kwargs: object) -> None:
        super().__init__()
        import timm

        self.backbone = timm.create_model(
            name, pretrained=False, in_chans=in_chans, img_size=img_size, num_classes=0, **kwargs
        )
        self.out_dim = int(self.backbone.num_features)
        # The α hypergradient differentiates a backward pass; fused SDPA kernels have no such derivative.
        for module in self.backbone.modules():
            if hasattr(module, "fused_attn"):
                module.fused_attn = False

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        feats = self.backbone.forward_features(images)
        if feats.dim() == 4:  # convolutional backbones: flatten the spatial grid into tokens
            feats = feats.flatten(2).transpose(1, 2)
        return feats


class CvtEncoder(nn.Module):
    """The paper's Convolutional vision Transformer, loaded from a local transformers checkpoint."""

    def __init__(self, path: Path, in_chans: int) -> None:
        super().__init__()
        from transformers import CvtModel

        self.backbone = CvtModel.from_pretrained(str(path), local_files_only=True)
        self.in_chans = in_chans
        self.out_dim = int(self.backbone.config.embed_dim[-1])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        # CvT expects RGB: current image as grey RGB, the prior study averaged in as a faint channel.
        rgb = torch.cat([images[:, :1], images[:, :1], images[:, -1:]], dim=1)
        feats = self.backbone(pixel_values=rgb).last_hidden_state
        return feats.flatten(2).transpose(1, 2)


def build_encoder(name: str, in_chans: int, img_size: int, **kwargs: object) -> nn.Module:
    path = Path(name)
    if path.exists():
        return CvtEncoder(path, in_chans)
    return TimmEncoder(name, in_chans, img_size, **kwargs)
