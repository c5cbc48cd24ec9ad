"""Shared LoRA (peft) plus the patient-adaptive hyper-LoRA of FedTAR.

Effective weight of every adapted layer: W + A Bᵀ (shared, peft) + A_p B_pᵀ, where
[A_p, B_p] = h(φ_p) is produced per patient by that layer's hypernetwork h. Every module that owns
parameters takes a single tensor (φ for h, x for peft's layers), so Opacus' per-sample gradient
hooks apply to all trainable leaves; the wrapper itself owns no parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from peft import LoraConfig, inject_adapter_in_model
from torch import nn

# Every attention projection of the decoder (self- and cross-attention) and its MLPs: measured on the
# tiny preset, adapters on attention alone barely moved the decoder's greedy output (840 pooled steps
# stayed within 1-2 seed std of the base), while LoRA on mlp.c_fc / mlp.c_proj lifted CIDEr clearly.
LORA_TARGETS = r".*\.(attn\.(c_attn|c_proj)|crossattention\.(c_attn|q_attn|c_proj)|mlp\.(c_fc|c_proj))$"


@dataclass
class PatientContext:
    """Per-batch patient embedding φ (B, profile_dim), shared by every wrapped layer."""

    phi: torch.Tensor | None = None


class HyperLoRALayer(nn.Module):
    def __init__(self, inner: nn.Module, profile_dim: int, rank: int, ctx: PatientContext) -> None:
        super().__init__()
        self.inner = inner
        self.d_in = int(inner.in_features)
        self.d_out = int(inner.out_features)
        self.rank = rank
        self.ctx = ctx
        self.hyper = nn.Linear(profile_dim, rank * (self.d_in + self.d_out))
        # As in LoRA, the patient term starts at zero: A_p random, B_p zero.
        with torch.no_grad():
            self.hyper.weight.zero_()
            self.hyper.bias.zero_()
            a_bias = self.hyper.bias[: rank * self.d_in]
            a_bias.normal_(0.0, self.d_in**-0.5)
            self.hyper.weight[: rank * self.d_in].normal_(0.0, 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        phi = self.ctx.phi
        if phi is None:
            return out
        factors = self.hyper(phi)
        split = self.rank * self.d_in
        a = factors[:, :split].reshape(-1, self.d_in, self.rank)
        b = factors[:, split:].reshape(-1, self.d_out, self.rank)
        return out + torch.bmm(torch.bmm(x, a), b.transpose(1, 2))


# The image encoder's attention projections, "every transformer layer" in the paper: timm ViT
# naming (qkv, proj) and the transformers CvT of the `paper` preset (query/key/value, output).
ENCODER_LORA_TARGETS = (
    r".*(attn\.(qkv|proj)|attention\.attention\.projection_(query|key|value)|attention\.output\.dense)$"
)


def add_encoder_lora(encoder: nn.Module, rank: int, alpha: float) -> nn.Module:
    if not any(re.fullmatch(ENCODER_LORA_TARGETS, name) for name, _ in encoder.named_modules()):
        return encoder  # e.g. a convolutional backbone: nothing to adapt
    config = LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=ENCODER_LORA_TARGETS, bias="none"
    )
    return inject_adapter_in_model(config, encoder)


def add_shared_lora(decoder: nn.Module, rank: int, alpha: float) -> nn.Module:
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=0.0,
        target_modules=LORA_TARGETS,
        fan_in_fan_out=True,
        bias="none",
    )
    return inject_adapter_in_model(config, decoder)


def add_hyper_lora(decoder: nn.Module, profile_dim: int, rank: int, ctx: PatientContext) -> list[str]:
    """Wrap every peft LoRA layer with a patient hypernetwork; returns the wrapped layer names."""
    from peft.tuners.lora import LoraLayer

    targets = [(name, mod) for name, mod in decoder.named_modules() if isinstance(mod, LoraLayer)]
    for name, mod in targets:
        parent_name, _, child = name.rpartition(".")
        parent = decoder.get_submodule(parent_name) if parent_name else decoder
        setattr(parent, child, HyperLoRALayer(mod, profile_dim, rank, ctx))
    return [name for name, _ in targets]
