"""The server's side of the sum: take out the noise layers survivors revealed, centre the ring's
residues, undo the rotation and scale by γ."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from secure_fed.dp.distributed.plan import DistributedPlan
from secure_fed.dp.distributed.rotation import unrotate
from secure_fed.dp.distributed.survivors import layer_noise


def remove_layers(
    total: np.ndarray, plan: DistributedPlan, revealed: Sequence[tuple[int, bytes]]
) -> np.ndarray:
    """The ring sum with the revealed layers (index, seed) taken out, mod 2^bits."""
    out = np.asarray(total).astype(np.uint64)
    for index, seed in revealed:
        out -= layer_noise(plan, index, seed).astype(np.uint64)  # two's complement: mod 2^64
    return out & np.uint64((1 << plan.bits) - 1)


def centre(total: np.ndarray, bits: int) -> np.ndarray:
    """Residues mod 2^bits as signed integers in [−2^(bits−1), 2^(bits−1))."""
    words = np.asarray(total).astype(np.uint64) & np.uint64((1 << bits) - 1)
    signed = words.astype(np.int64)
    signed[signed >= (1 << (bits - 1))] -= 1 << bits
    return signed


def decode_sum(total: np.ndarray, plan: DistributedPlan, round_seed: bytes) -> np.ndarray:
    """The released noisy sum (float64, length plan.dim) from the ring sum of the sites' shares."""
    values = np.asarray(total)
    if values.shape != (plan.padded_dim,):
        raise ValueError(f"the ring sum must have length {plan.padded_dim}, got shape {values.shape}")
    signed = centre(values, plan.bits).astype(np.float64)
    return unrotate(signed, round_seed, plan.dim) * plan.gamma
