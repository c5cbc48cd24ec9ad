"""Additive one-time masks over Z_{2^w} (w = 32 or 64) drawn from an AES-256-CTR keystream.

Every mask key is 32 uniformly random bytes used for exactly one stream (self-mask seeds are fresh
per round; pairwise keys come from HKDF over fresh X25519 secrets bound to the round), so a fixed
initial counter is safe. Whole keystream words are uniform mod 2^w and therefore mod any 2^m with
m <= w. AES-CTR rather than ChaCha20 because both are keyed by the full 256-bit secret and, on
CPUs with AES instructions (every server CPU we target), AES-CTR expands a 4 MB mask in 0.48 ms
against ChaCha20's 0.79 ms (benchmarks/secagg.py's machine) — masks are most of a site's SecAgg+ cost.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes

MASK_KEY_BYTES = 32
_COUNTER = bytes(16)  # AES-CTR's 128-bit initial counter block; 2^128 blocks cannot wrap


@lru_cache(maxsize=4)
def _zeros(nbytes: int) -> bytes:
    # the keystream is AES-CTR applied to zeros; building a fresh zero buffer per mask costs more
    # than the cipher itself at 1M words, so keep a read-only one per vector size
    return bytes(nbytes)


class Keystream:
    """One key's keystream, read front to back in pieces of any size (block-wise consumers)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != MASK_KEY_BYTES:
            raise ValueError(f"mask keys are {MASK_KEY_BYTES} bytes, got {len(key)}")
        self._ctx: CipherContext = Cipher(algorithms.AES(key), modes.CTR(_COUNTER)).encryptor()

    def fill(self, out: np.ndarray) -> None:
        """Overwrite the contiguous array `out` with the stream's next out.nbytes bytes."""
        raw = out.reshape(-1).view(np.uint8)
        self._ctx.update_into(_zeros(raw.size), raw)


def keystream_words(key: bytes, count: int, dtype: np.dtype) -> np.ndarray:
    """`count` pseudorandom unsigned words of `dtype`, expanded from a 256-bit key."""
    out = np.empty(count, dtype=np.dtype(dtype))
    Keystream(key).fill(out)
    return out


def add_masks(acc: np.ndarray, masks: Iterable[tuple[bytes, int]]) -> None:
    """acc <- acc + sum(sign * PRG(key)) over (key, sign) in `masks`, in place, wrapping mod the word."""
    scratch = np.empty_like(acc)
    for key, sign in masks:
        Keystream(key).fill(scratch)
        if sign > 0:
            np.add(acc, scratch, out=acc)
        else:
            np.subtract(acc, scratch, out=acc)
