"""A model's trainable state as one float64 vector (what is summed, sent and stored) and back."""

from __future__ import annotations

from collections import OrderedDict

import torch


def unflatten(vector: torch.Tensor, like: OrderedDict[str, torch.Tensor]) -> OrderedDict[str, torch.Tensor]:
    out, offset = OrderedDict(), 0
    for name, ref in like.items():
        out[name] = vector[offset : offset + ref.numel()].view_as(ref).to(ref.dtype)
        offset += ref.numel()
    if offset != vector.numel():
        raise ValueError(f"vector has {vector.numel()} values, the adapters {offset}")
    return out


def flatten(state: OrderedDict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).double() for t in state.values()])
