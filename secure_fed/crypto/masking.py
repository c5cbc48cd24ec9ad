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

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes

from secure_fed.crypto.threads import over_ranges, scratch

MASK_KEY_BYTES = 32
_BLOCK_BYTES = 16  # AES-CTR's counter block; a stream starts at counter 0 and 2^128 blocks cannot wrap


_zero_buffer = b""


def _zeros(nbytes: int) -> memoryview:
    # the keystream is AES-CTR applied to zeros; building a fresh zero buffer per mask costs more
    # than the cipher itself at 1M words, so one read-only buffer, grown to the largest request,
    # serves every length (ranges and blocks come in many sizes) as a zero-copy slice
    global _zero_buffer
    buffer = _zero_buffer
    if len(buffer) < nbytes:
        buffer = _zero_buffer = bytes(nbytes)  # a racing thread may build its own: both are zeros
    return memoryview(buffer)[:nbytes]


class Keystream:
    """One key's keystream from byte `start` on (a multiple of the 16-byte AES block), read front
    to back in pieces of any size: a range of coordinates can be masked without the ones before it."""

    def __init__(self, key: bytes, start: int = 0) -> None:
        if len(key) != MASK_KEY_BYTES:
            raise ValueError(f"mask keys are {MASK_KEY_BYTES} bytes, got {len(key)}")
        if start < 0 or start % _BLOCK_BYTES:
            raise ValueError(f"a keystream can start only at a multiple of {_BLOCK_BYTES} bytes, got {start}")
        # CTR increments the whole 128-bit block as a big-endian integer: block b of the stream
        # is AES_k(b), so starting at block start/16 is the same stream, seeked
        counter = (start // _BLOCK_BYTES).to_bytes(_BLOCK_BYTES, "big")
        self._ctx: CipherContext = Cipher(algorithms.AES(key), modes.CTR(counter)).encryptor()

    def fill(self, out: np.ndarray) -> None:
        """Overwrite the contiguous array `out` with the stream's next out.nbytes bytes."""
        raw = out.reshape(-1).view(np.uint8)
        self._ctx.update_into(_zeros(raw.size), raw)


def keystream_words(key: bytes, count: int, dtype: np.dtype) -> np.ndarray:
    """`count` pseudorandom unsigned words of `dtype`, expanded from a 256-bit key."""
    out = np.empty(count, dtype=np.dtype(dtype))
    Keystream(key).fill(out)
    return out


def stream_align(dtype: np.dtype) -> int:
    """Coordinates of `dtype` per AES block: keystream ranges must start at a multiple of this."""
    return _BLOCK_BYTES // np.dtype(dtype).itemsize


def add_masks(acc: np.ndarray, masks: Iterable[tuple[bytes, int]]) -> None:
    """acc <- acc + sum(sign * PRG(key)) over (key, sign) in `masks`, in place, wrapping mod the word.

    `acc` is 1-D and contiguous; its coordinates are split across `crypto_threads()` threads, each
    adding every mask's stretch of keystream to its own range."""
    if acc.ndim != 1 or not acc.flags.c_contiguous or acc.dtype.kind != "u":
        raise ValueError("masks are added to a contiguous 1-D array of unsigned words")
    masks = list(masks)

    def add_range(start: int, stop: int) -> None:
        part = acc[start:stop]
        stream = scratch("mask", stop - start, acc.dtype)
        for key, sign in masks:
            Keystream(key, start * acc.itemsize).fill(stream)
            if sign > 0:
                np.add(part, stream, out=part)
            else:
                np.subtract(part, stream, out=part)

    over_ranges(add_range, acc.shape[0], stream_align(acc.dtype))
