"""Gaussian mechanism on a sum of per-patient vectors clipped in L2 (the α hypergradient scalars).

Each patient contributes one T-vector (one scalar per visit index), clipped to ‖v‖₂ ≤ C, so adding
or removing a patient moves the sum by at most C: noise std σ·C.
"""

from __future__ import annotations

import numpy as np

from secure_fed.dp.events import Gaussian
from secure_fed.dp.keystream import NoiseStream


def clip_rows(vectors: np.ndarray, clip: float) -> np.ndarray:
    """Scale each row to L2 norm ≤ clip (rows already inside are unchanged)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    if vectors.ndim != 2:
        raise ValueError(f"per-patient vectors must be 2-d [patients, T], got shape {vectors.shape}")
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    if not np.all(np.isfinite(vectors)):
        raise ValueError("per-patient vectors contain NaN or inf")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    scale = np.minimum(1.0, clip / np.maximum(norms, np.finfo(np.float64).tiny))
    return vectors * scale


def clip_and_noise_sum(vectors: np.ndarray, clip: float, sigma: float, noise: NoiseStream) -> np.ndarray:
    """Σ_p clip(v_p) + N(0, (σC)² I): the released T-vector; the noise from a keystream."""
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    if not isinstance(noise, NoiseStream):
        # a seeded statistical generator is predictable from its seed: no DP noise may come from one
        raise TypeError(f"DP noise must come from a NoiseStream (keystream), got {type(noise).__name__}")
    clipped = clip_rows(vectors, clip)
    return clipped.sum(axis=0) + noise.normal(0.0, sigma * clip, size=clipped.shape[1])


def clipped_sum_event(sigma: float) -> Gaussian:
    """The ledger event for one `clip_and_noise_sum` release over the whole population."""
    return Gaussian(noise_multiplier=sigma, count=1)
