"""Fixed-point encoding of float vectors into the ring Z_{2^m} used by secure aggregation.

Values are clipped to [-clip, clip] and scaled by 2^bits / clip, then stochastically rounded, so
each coordinate's encoding is unbiased and off by less than one quantum (1 / scale). The modulus is
chosen so that the signed sum of every client's encoding cannot wrap.
"""

from __future__ import annotations

import numpy as np


def quant_scale(clip: float, bits: int) -> float:
    """Quanta per unit: [-clip, clip] maps onto the integers [-2^bits, 2^bits]."""
    return float(2**bits) / clip


def modulus_bits(num_clients: int, bits: int, max_count: int = 0) -> int:
    """Smallest m such that sums of `num_clients` encodings stay in the signed range of Z_{2^m}.

    Each encoding lies in [-2^bits, 2^bits]; `max_count` bounds any extra non-negative integer
    coordinate a client adds (e.g. its clipped-value count), which must not wrap either.
    """
    if num_clients < 1:
        raise ValueError("num_clients must be positive")
    largest = max(num_clients * 2**bits, num_clients * max_count)
    # 2^(m-1) > largest, so a sum in [-largest, largest] decodes uniquely
    m = largest.bit_length() + 1
    if m > 64:
        raise ValueError(
            f"{num_clients} clients at {bits} bits need a {m}-bit modulus; at most 64 fit a word"
        )
    return m


def ring_dtype(m: int) -> np.dtype:
    """The narrowest unsigned word that holds Z_{2^m}; arithmetic wraps mod the word, a multiple of 2^m."""
    return np.dtype(np.uint32) if m <= 32 else np.dtype(np.uint64)


def stochastic_quantise(
    x: np.ndarray, clip: float, bits: int, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """Encode `x` as int64 in [-2^bits, 2^bits]; return the encoding and how many values were clipped."""
    x = np.asarray(x)
    if not np.all(np.isfinite(x)):
        raise ValueError("vector contains NaN or infinity; refusing to encode it")
    clipped = int(np.count_nonzero(x > clip)) + int(np.count_nonzero(x < -clip))
    scaled = x.astype(np.float64)  # always a fresh copy, so the in-place steps below never touch x
    np.clip(scaled, -clip, clip, out=scaled)
    scaled *= quant_scale(clip, bits)
    # floor(s + u), u ~ U[0, 1), rounds up with probability frac(s): unbiased, error < 1 quantum
    scaled += rng.random(scaled.shape)
    np.floor(scaled, out=scaled)
    return scaled.astype(np.int64), clipped


def to_ring(q: np.ndarray, m: int) -> np.ndarray:
    """Signed integers to their residues in Z_{2^m}, stored in the ring's word type."""
    word = ring_dtype(m)
    # integer -> unsigned casts are modular (as in C), so this is q mod 2^w; then reduce mod 2^m
    residues = np.asarray(q, dtype=np.int64).astype(word)
    if m < word.itemsize * 8:
        residues &= word.type((1 << m) - 1)
    return residues


def from_ring(total: np.ndarray, m: int) -> np.ndarray:
    """Residues in Z_{2^m} (any unsigned word type) back to signed integers in [-2^(m-1), 2^(m-1))."""
    total = np.asarray(total)
    signed = total.view(np.int64) if total.dtype == np.uint64 else total.astype(np.int64)
    if m == 64:
        return signed.copy()
    half = np.int64(1 << (m - 1))
    # keep the low m bits, then sign-extend bit m-1: (r ^ 2^(m-1)) - 2^(m-1)
    signed = signed & np.int64((1 << m) - 1)
    signed ^= half
    signed -= half
    return signed


def dequantise(total: np.ndarray, clip: float, bits: int) -> np.ndarray:
    """Signed sum of encodings back to floats."""
    return np.asarray(total, dtype=np.float64) / quant_scale(clip, bits)


def error_bound(num_clients: int, clip: float, bits: int) -> float:
    """Largest per-coordinate deviation of the decoded sum from the sum of the clipped inputs."""
    return num_clients / quant_scale(clip, bits)
