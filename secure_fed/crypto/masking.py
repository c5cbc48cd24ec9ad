"""Additive one-time masks over Z_{2^w} (w = 32 or 64) drawn from a ChaCha20 keystream.

Every mask key is 32 uniformly random bytes used for exactly one stream (self-mask seeds are fresh
per round; pairwise keys come from HKDF over fresh X25519 secrets bound to the round), so a fixed
nonce is safe. Whole keystream words are uniform mod 2^w and therefore mod any 2^m with m <= w.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

MASK_KEY_BYTES = 32
_NONCE = bytes(16)  # ChaCha20 in `cryptography`: 4-byte block counter + 12-byte nonce, both zero


@lru_cache(maxsize=4)
def _zeros(nbytes: int) -> bytes:
    # the keystream is ChaCha20 applied to zeros; building a fresh zero buffer per mask costs more
    # than the cipher itself at 1M words, so keep a read-only one per vector size
    return bytes(nbytes)


def _fill_keystream(key: bytes, out: np.ndarray) -> None:
    if len(key) != MASK_KEY_BYTES:
        raise ValueError(f"mask keys are {MASK_KEY_BYTES} bytes, got {len(key)}")
    raw = out.view(np.uint8)
    Cipher(algorithms.ChaCha20(key, _NONCE), mode=None).encryptor().update_into(_zeros(raw.size), raw)


def keystream_words(key: bytes, count: int, dtype: np.dtype) -> np.ndarray:
    """`count` pseudorandom unsigned words of `dtype`, expanded from a 256-bit key."""
    out = np.empty(count, dtype=np.dtype(dtype))
    _fill_keystream(key, out)
    return out


def add_masks(acc: np.ndarray, masks: Iterable[tuple[bytes, int]]) -> None:
    """acc <- acc + sum(sign * PRG(key)) over (key, sign) in `masks`, in place, wrapping mod the word."""
    scratch = np.empty_like(acc)
    for key, sign in masks:
        _fill_keystream(key, scratch)
        if sign > 0:
            np.add(acc, scratch, out=acc)
        else:
            np.subtract(acc, scratch, out=acc)
