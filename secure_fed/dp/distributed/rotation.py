"""The round's public rotation: blockwise Walsh–Hadamard with signs from the round's seed, the same
at every site and the server (so the rotations of the sites' vectors sum to the rotation of their
sum), and the padding to whole blocks it needs."""

from __future__ import annotations

import functools
import hashlib
import math

import numpy as np

ROTATION_BLOCK = 4096  # a power of two
_ROTATION_LABEL = b"secure_fed distributed dp rotation v1"


def rotation_block(padded_dim: int) -> int:
    """B: the rotation's block length for a share of `padded_dim` coordinates."""
    return min(padded_dim, ROTATION_BLOCK)


def padded_size(dim: int) -> int:
    """D: `dim` padded to whole blocks of B = min(ROTATION_BLOCK, the next power of two ≥ dim)."""
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    block = min(ROTATION_BLOCK, 1 << (dim - 1).bit_length())
    return -(-dim // block) * block


def rotation_signs(round_seed: bytes, padded_dim: int) -> np.ndarray:
    """The public ±1 signs of the round's rotation: SHAKE-256 of the seed, one bit per coordinate
    (the same bytes on every platform and numpy version)."""
    if not isinstance(round_seed, bytes | bytearray) or len(round_seed) < 16:
        raise ValueError("round_seed must be at least 16 bytes")
    xof = hashlib.shake_256(_ROTATION_LABEL + len(round_seed).to_bytes(2, "big") + bytes(round_seed))
    bits = np.unpackbits(np.frombuffer(xof.digest((padded_dim + 7) // 8), dtype=np.uint8), bitorder="little")
    return 1.0 - 2.0 * bits[:padded_dim].astype(np.float64)


@functools.lru_cache(maxsize=16)
def _sylvester(n: int) -> np.ndarray:
    """The n×n Walsh–Hadamard matrix in Sylvester's order (entries ±1), n a power of two."""
    matrix = np.ones((1, 1))
    while matrix.shape[0] < n:
        matrix = np.block([[matrix, matrix], [matrix, -matrix]])
    matrix.setflags(write=False)  # shared by the cache
    return matrix


def _hadamard_blocks(x: np.ndarray, block: int) -> np.ndarray:
    """The unnormalised Walsh–Hadamard transform of each length-`block` run of x.

    H_B = H_a ⊗ H_b with a·b = B, so a run reshaped row-major to an a×b matrix X transforms to
    H_a·X·H_b: two small batched matrix products instead of log₂ B strided butterfly passes."""
    k = block.bit_length() - 1
    a = 1 << (k // 2)
    b = block // a
    return (_sylvester(a) @ x.reshape(-1, a, b) @ _sylvester(b)).reshape(-1)


def rotate(x: np.ndarray, round_seed: bytes, padded_dim: int) -> np.ndarray:
    """Blockwise H·diag(s)·pad(x) / √B: orthogonal, so norms (and the sensitivity) are preserved."""
    block = rotation_block(padded_dim)
    out = np.zeros(padded_dim, dtype=np.float64)
    out[: x.shape[0]] = x
    out *= rotation_signs(round_seed, padded_dim)
    out = _hadamard_blocks(out, block)
    out /= math.sqrt(block)
    return out


def unrotate(y: np.ndarray, round_seed: bytes, dim: int) -> np.ndarray:
    """The inverse of `rotate` (H·H = B·I per block), truncated to the first `dim` coordinates."""
    values = np.asarray(y, dtype=np.float64)
    block = rotation_block(values.shape[0])
    out = _hadamard_blocks(values, block)
    out /= math.sqrt(block)
    out *= rotation_signs(round_seed, out.shape[0])
    return out[:dim]
