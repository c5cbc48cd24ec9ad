"""FedTAR's patient-adaptive hyper-LoRA: the report model's patient head.

Effective weight of every adapted layer: W + A Bᵀ (shared, peft: `secure_fed.model.lora`) +
A_p B_pᵀ, where [A_p, B_p] = h(φ_p) is produced per patient by that layer's hypernetwork h from
φ_p = W_proj q_p + b_proj (q_p: the patient's GMM responsibilities). Every module that owns
parameters takes a single tensor (φ for h, x for peft's layers), so Opacus' per-sample gradient
hooks apply to all trainable leaves; the wrapper itself owns no parameters.
"""

from __future__ import annotations

import torch
from torch import nn

from secure_fed.model.report_model import PatientContext, ReportModel


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


def add_hyper_lora(decoder: nn.Module, profile_dim: int, rank: int, ctx: PatientContext) -> list[str]:
    """Wrap every peft LoRA layer with a patient hypernetwork; returns the wrapped layer names."""
    from peft.tuners.lora import LoraLayer

    targets = [(name, mod) for name, mod in decoder.named_modules() if isinstance(mod, LoraLayer)]
    for name, mod in targets:
        parent_name, _, child = name.rpartition(".")
        parent = decoder.get_submodule(parent_name) if parent_name else decoder
        setattr(parent, child, HyperLoRALayer(mod, profile_dim, rank, ctx))
    return [name for name, _ in targets]


def add_patient_head(model: ReportModel, gmm_components: int, profile_dim: int, hyper_rank: int) -> None:
    """W_proj and a hypernetwork on every shared LoRA layer of the decoder, all trainable (the
    base and the shared LoRA keep the trainability `ReportModel.add_adapters` gave them)."""
    model.proj = nn.Linear(gmm_components, profile_dim)
    model.adapted_layers = add_hyper_lora(model.decoder, profile_dim, hyper_rank, model.ctx)
