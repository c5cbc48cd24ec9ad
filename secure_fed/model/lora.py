"""The report model's shared LoRA (peft) on the decoder and the image encoder.

Effective weight of every adapted layer: W + A Bᵀ, the same at every site and for every patient (a
patient-adaptive head, such as FedTAR's hyper-LoRA, wraps these layers: `secure_fed.registry`).
"""

from __future__ import annotations

import re

from peft import LoraConfig, inject_adapter_in_model
from torch import nn

# Every attention projection of the decoder (self- and cross-attention) and its MLPs: measured on the
# tiny preset, adapters on attention alone barely moved the decoder's greedy output (840 pooled steps
# stayed within 1-2 seed std of the base), while LoRA on mlp.c_fc / mlp.c_proj lifted CIDEr clearly.
LORA_TARGETS = r".*\.(attn\.(c_attn|c_proj)|crossattention\.(c_attn|q_attn|c_proj)|mlp\.(c_fc|c_proj))$"


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
