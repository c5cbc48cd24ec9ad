"""The one place that turns ``train.device`` into a torch device; nothing else picks a device.

Everything trainable (base, adapters, hypernetworks, their per-copy clones, the per-row gradients
of DP-SGD and of the α hypergradient) lives where the model was put; inputs follow the model
(``ReportModel`` moves them). Values that leave the site (states, uploads) come back to the CPU.
"""

from __future__ import annotations

import torch

DEVICE_CHOICES: tuple[str, ...] = ("auto", "cpu", "cuda")


class DeviceUnavailable(ValueError):
    """``train.device`` asks for a device this machine does not have."""


def resolve_device(setting: str) -> torch.device:
    """ "auto": CUDA when present, else CPU; "cuda" without CUDA fails now, not mid-round."""
    if setting not in DEVICE_CHOICES:
        raise DeviceUnavailable(f"train.device = {setting!r}: expected one of {', '.join(DEVICE_CHOICES)}")
    cuda = torch.cuda.is_available()
    if setting == "cuda" and not cuda:
        raise DeviceUnavailable(
            "train.device = 'cuda' but this machine has no usable CUDA device "
            "(torch.cuda.is_available() is False); set train.device = 'cpu' or 'auto'"
        )
    return torch.device("cuda" if setting == "cuda" or (setting == "auto" and cuda) else "cpu")
