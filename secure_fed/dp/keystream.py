"""Randomness for DP mechanisms: an AES-256-CTR keystream under a fresh key per release.

A DP guarantee holds only if nobody who sees a release can predict its noise. A statistical
generator seeded from a secret fails that twice over: its state may be far smaller than the secret
(torch's CPU generator keeps 32 bits of a 64-bit seed, so two sites collide after ~2^16 keys and a
server can try every seed against a released update), and its output is not designed to hide the
seed. Here every release gets its own 256-bit AES key,

    key = HKDF-SHA256(ikm = site noise key ‖ 32 fresh bytes from the OS, info = purpose, round),

and its randomness is the AES-CTR keystream of that key. The fresh bytes mean that even the site's
own secret, leaked later, does not regenerate a past release's noise (so a restarted site must keep
what it released instead of redrawing it: see `secure_fed.dp.histogram.persisted_gaussian_histogram`).

Draws (all vectorised; one cipher call per request, bytes consumed front to back, so the draws are
the same however the requests are split — for Gaussians, into requests of even sizes):

- uniform float64 in [0, 1): the top 53 bits of a little-endian 64-bit keystream word times
  2^-53 — every multiple of 2^-53 in [0, 1) equally likely, as numpy's and torch's float64 uniforms;
- standard Gaussians in float64 by Box–Muller: (u1, u2) uniform →
  (√(-2 ln(1-u1)) cos 2πu2, √(-2 ln(1-u1)) sin 2πu2). Exact in real arithmetic, a fixed 16 bytes per
  pair (no rejection loop, so the bytes a request consumes do not depend on the values: no timing
  or stream-position side channel), and no table to get wrong. Its floating-point limits
  (|z| ≤ √(2·53·ln 2) ≈ 8.57, and a non-uniform grid of representable outputs) are in
  docs/THREAT_MODEL_dp_randomness.md.

`NoiseStream` offers the part of numpy's Generator API the mechanisms use (`random`, `uniform`,
`normal`, `standard_normal`, `choice`), so mechanism code reads the same with either.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, CipherContext, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

NOISE_KEY_BYTES = 32  # the site's long-lived secret
STREAM_KEY_BYTES = 32  # AES-256: one key per release
FRESH_BYTES = 32  # OS randomness mixed into every release key
_INFO_LABEL = b"secure_fed dp noise v1"
_WORD = np.dtype("<u8")  # little-endian words: the same draws on every platform
_UNIT = 2.0**-53

Size = int | Sequence[int] | None
Entropy = Callable[[int], bytes]

# AES-CTR of zeros is the keystream. A zero buffer per request would cost as much as the cipher
# for large draws, so requests are served in blocks from one read-only buffer of this size.
_BLOCK = 1 << 22
_ZEROS = memoryview(bytes(_BLOCK))


def _info(purpose: str, round_id: int) -> bytes:
    if isinstance(round_id, bool) or not isinstance(round_id, int) or round_id < 0:
        raise ValueError(f"round_id must be a non-negative integer, got {round_id!r}")
    name = purpose.encode()
    if not name:
        raise ValueError("a release needs a purpose (e.g. 'dpsgd')")
    # length-prefixed, so no two (purpose, round) pairs share an info string
    return _INFO_LABEL + len(name).to_bytes(2, "big") + name + round_id.to_bytes(8, "big")


def release_key(noise_key: bytes, purpose: str, round_id: int, fresh: bytes) -> bytes:
    """The AES key of one release: HKDF-SHA256 over the site's noise key and `fresh` OS bytes,
    bound to (purpose, round). Deterministic given `fresh`; callers pass os.urandom output."""
    if len(noise_key) != NOISE_KEY_BYTES:
        raise ValueError(f"the site noise key must be {NOISE_KEY_BYTES} bytes, got {len(noise_key)}")
    if len(fresh) < FRESH_BYTES:
        raise ValueError(f"a release key needs at least {FRESH_BYTES} fresh random bytes, got {len(fresh)}")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=STREAM_KEY_BYTES, salt=None, info=_info(purpose, round_id))
    return hkdf.derive(noise_key + fresh)


def box_muller(u: np.ndarray) -> np.ndarray:
    """Standard Gaussians from uniform pairs u (pairs, 2) in [0, 1): row (u1, u2) gives
    √(-2 ln(1-u1))·(cos 2πu2, sin 2πu2), flattened row by row. On 53-bit uniforms the radius is at
    most √(-2 ln 2^-53) ≈ 8.57: no output lies further out."""
    # 1 - u1 is exact (u1 is a multiple of 2^-53 in [0, 1)) and lies in (0, 1]: log never sees 0
    radius = np.log1p(-u[:, 0])
    radius *= -2.0
    np.sqrt(radius, out=radius)
    angle = u[:, 1] * (2.0 * math.pi)
    # numpy's float64 sin/cos are scalar loops on our CPUs; torch's are vectorised, ~2x faster
    theta, r = torch.from_numpy(angle), torch.from_numpy(radius)
    out = torch.empty((len(u), 2), dtype=torch.float64)
    torch.mul(torch.cos(theta), r, out=out[:, 0])
    torch.mul(torch.sin(theta), r, out=out[:, 1])
    return out.numpy().reshape(-1)


def _shape(size: Size) -> tuple[int, ...]:
    if size is None:
        return ()
    if isinstance(size, int | np.integer):
        shape: tuple[int, ...] = (int(size),)
    else:
        shape = tuple(int(s) for s in size)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimensions are not allowed, got size {size}")
    return shape


def _scalar_or_array(values: np.ndarray, size: Size) -> Any:
    return float(values.reshape(())) if size is None and values.ndim == 0 else values


class NoiseStream:
    """A keystream read front to back as uniform and Gaussian float64 draws."""

    def __init__(self, key: bytes) -> None:
        if len(key) != STREAM_KEY_BYTES:
            raise ValueError(f"a noise stream key is {STREAM_KEY_BYTES} bytes, got {len(key)}")
        # A stream key is used for exactly one stream (fresh per release), so a fixed initial
        # counter is safe; 2^128 blocks cannot wrap.
        self._ctx: CipherContext = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
        self._drawn = 0

    @classmethod
    def for_release(
        cls, noise_key: bytes, purpose: str, round_id: int, entropy: Entropy = os.urandom
    ) -> NoiseStream:
        """The stream of one release; `entropy` is injectable only so tests can pin values."""
        return cls(release_key(noise_key, purpose, round_id, entropy(FRESH_BYTES)))

    @property
    def bytes_drawn(self) -> int:
        """Keystream bytes consumed so far (0: this stream has not produced any randomness)."""
        return self._drawn

    # -- raw material -------------------------------------------------------------------------
    def fill(self, out: np.ndarray) -> None:
        """Overwrite the contiguous array `out` with the next out.nbytes keystream bytes."""
        if not out.flags.c_contiguous:
            raise ValueError("fill needs a contiguous array")
        raw = out.reshape(-1).view(np.uint8)
        for start in range(0, raw.size, _BLOCK):
            block = raw[start : start + _BLOCK]
            self._ctx.update_into(_ZEROS[: block.size], block)
        self._drawn += raw.size

    def _unit(self, count: int) -> np.ndarray:
        """`count` uniform float64 in [0, 1) with 53 random bits each."""
        words = np.empty(count, dtype=_WORD)
        self.fill(words)
        words >>= np.uint64(11)  # the top 53 bits
        out = words.astype(np.float64)
        out *= _UNIT
        return out

    # -- the numpy Generator subset -----------------------------------------------------------
    def random(self, size: Size = None) -> Any:
        shape = _shape(size)
        return _scalar_or_array(self._unit(math.prod(shape)).reshape(shape), size)

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Size = None) -> Any:
        """low + (high - low)·u, as numpy's; `size` None takes the broadcast shape of low, high."""
        low_a, high_a = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        shape = _shape(size) if size is not None else np.broadcast_shapes(low_a.shape, high_a.shape)
        u = self._unit(math.prod(shape)).reshape(shape)
        return _scalar_or_array(low_a + (high_a - low_a) * u, size)

    def standard_normal(self, size: Size = None) -> Any:
        shape = _shape(size)
        return _scalar_or_array(self._gaussians(math.prod(shape)).reshape(shape), size)

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Size = None) -> Any:
        loc_a, scale_a = np.asarray(loc, dtype=np.float64), np.asarray(scale, dtype=np.float64)
        if np.any(scale_a < 0):
            raise ValueError("scale must be >= 0")
        shape = _shape(size) if size is not None else np.broadcast_shapes(loc_a.shape, scale_a.shape)
        z = self._gaussians(math.prod(shape)).reshape(shape)
        return _scalar_or_array(loc_a + scale_a * z, size)

    def choice(self, a: Any, size: Size = None, replace: bool = True, p: Any = None) -> Any:
        """Draws with replacement from range(a) (int a) or from the 1-d array a, uniformly or with
        probabilities p (inverse CDF on 53-bit uniforms: each probability is resolved to 2^-53)."""
        if not replace:
            raise NotImplementedError("NoiseStream.choice draws with replacement only")
        population = np.arange(a) if isinstance(a, int | np.integer) else np.asarray(a)
        if population.ndim != 1 or population.size == 0:
            raise ValueError("choice needs a positive int or a non-empty 1-d array")
        shape = _shape(size)
        u = self._unit(math.prod(shape))
        n = population.size
        if p is None:
            index = np.minimum((u * n).astype(np.int64), n - 1)
        else:
            probabilities = np.asarray(p, dtype=np.float64)
            if probabilities.shape != (n,):
                raise ValueError(f"p must have shape ({n},), got {probabilities.shape}")
            if np.any(probabilities < 0) or not np.all(np.isfinite(probabilities)):
                raise ValueError("probabilities must be finite and non-negative")
            if not math.isclose(float(probabilities.sum()), 1.0, rel_tol=0.0, abs_tol=1e-8):
                raise ValueError("probabilities do not sum to 1")
            cdf = np.cumsum(probabilities)
            cdf /= cdf[-1]
            index = np.minimum(np.searchsorted(cdf, u, side="right"), n - 1)
        picked = population[index].reshape(shape)
        return picked.item() if size is None else picked

    # -- draws numpy samples and this class does not ------------------------------------------
    def cipher_generator(self) -> np.random.Generator:
        """A numpy Generator over an AES-128-CTR keystream (block i is AES of the 128-bit
        little-endian counter i, from 0) under a key read from this stream: for draws numpy
        implements and this class does not (distributed DP's Poisson pairs), with a cipher's output
        still behind every bit, not a statistical generator's. AES-128 (randomgen's `AESCounter`,
        AES-NI where the CPU has it) because the Skellam share is most of a distributed step's noise
        cost: it draws as fast as numpy's PCG64, where ChaCha20 took twice as long (a share's
        2 × 69,632 Poisson draws: 3.9 ms against 7.8 ms on the 2-core machine of BENCHMARKS.md,
        2026-12-03). numpy's samplers may reject and redraw, so the bytes they consume (and
        their time) depend on the values: unlike `NoiseStream`'s own draws, a split request gives
        other draws, and the timing is seen only by whoever watches the site's own CPU."""
        from randomgen import AESCounter

        key = np.empty(2, dtype=_WORD)
        self.fill(key)
        return np.random.Generator(AESCounter(key=key, counter=0))

    # -- Gaussians ----------------------------------------------------------------------------
    def _gaussians(self, count: int) -> np.ndarray:
        """`count` standard Gaussians: Box–Muller on consecutive pairs of uniforms, pair i giving
        values 2i (cos) and 2i+1 (sin), so requests of even sizes split the stream freely; an odd
        count drops its last pair's sine (16 keystream bytes per pair, always)."""
        pairs = (count + 1) // 2
        if pairs == 0:
            return np.empty(0)
        return box_muller(self._unit(2 * pairs).reshape(pairs, 2))[:count]

    def torch_standard_normal(self, count: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """`count` standard Gaussians drawn in float64, then rounded to `dtype` (CPU tensor)."""
        return torch.from_numpy(self._gaussians(count)).to(dtype)

    def torch_random(self, count: int) -> torch.Tensor:
        """`count` float64 uniforms in [0, 1) as a CPU tensor."""
        return torch.from_numpy(self._unit(count))
