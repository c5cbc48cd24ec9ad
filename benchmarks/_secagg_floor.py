"""The vector arithmetic no SecAgg+ implementation with given parameters can skip, for benchmarks:
a site's stochastic quantisation into ring words and its 1 + k masks (self + one per neighbour),
the server's removal of n self masks. Random seeds stand in for the agreed ones: a keystream costs
the same whatever its key. Benchmarks only; the protocol itself is secure_fed.crypto."""

from __future__ import annotations

import numpy as np

from secure_fed.crypto.masking import add_masks
from secure_fed.crypto.quantize import quantise_to_ring, ring_dtype
from secure_fed.crypto.secagg_protocol import RoundParams, SecAggSettings


def site_floor(
    x: np.ndarray, params: RoundParams, settings: SecAggSettings, rng: np.random.Generator
) -> np.ndarray:
    """A site's masked ring vector (one word more: the clipped count's slot), at the floor's cost."""
    y = np.empty(x.shape[0] + 1, dtype=ring_dtype(params.modulus_bits))
    y[-1] = 0
    quantise_to_ring(x, settings.clip, params.bits, params.modulus_bits, rng, y[:-1])
    add_masks(y, [(rng.bytes(32), +1) for _ in range(1 + params.degree)])
    return y


def server_floor(total: np.ndarray, sites: int, rng: np.random.Generator) -> None:
    """Remove `sites` self masks from the summed ring vector, in place."""
    add_masks(total, [(rng.bytes(32), -1) for _ in range(sites)])
