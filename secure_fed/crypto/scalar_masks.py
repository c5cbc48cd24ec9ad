"""Zero-sum pairwise masks for the α scalars, added before CKKS encryption.

Every hospital holds the CKKS secret context, so whoever is handed one site's ciphertext (the
round's decryptor is handed all of them, to check the aggregate) could decrypt it. Each site
therefore adds, before encrypting, one mask per other participant, agreed by X25519 with that
participant's fresh key of this round (signed with its provisioned Ed25519 key, so the server
cannot stand in for a peer): +m_ij at the site whose name sorts first, −m_ij at the other. The masks
cancel in the sum over all participants and nowhere else: one ciphertext decrypts to noise for
anyone, and the server with one colluding site still misses the masks the victim shares with every
other honest participant.

Exactness: values are put on a grid of 2^-30 and masks are whole multiples of it, so a site's
masked vector is computed exactly in float64 while its magnitude stays below 2^23; masks are
uniform on ±2^(23 − ⌈log2(participants + 1)⌉). CKKS is real-valued, so the hiding is statistical,
not perfect: a value of size |v| shifts the distribution of a masked coordinate by |v| / (2M) in
total variation (M ≥ 2^19 for up to 15 participants: |v| = 10 gives < 1e-5).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence

import numpy as np

from secure_fed.crypto import secagg_channel
from secure_fed.crypto.masking import keystream_words

GRID = 2.0**-30
_EXACT_BITS = 23  # float64 holds multiples of 2^-30 exactly below 2^23


def new_keypair() -> tuple[bytes, bytes]:
    """(raw secret, raw public) X25519 keys, fresh for one round's α masks."""
    return secagg_channel.new_keypair(os.urandom)


def mask_bits(participants: int) -> int:
    """log2 of the mask bound M for a sum over `participants` sites (each site adds n − 1 masks)."""
    return _EXACT_BITS - math.ceil(math.log2(participants + 1))


def quantise(values: np.ndarray) -> np.ndarray:
    """Values on the mask grid (error ≤ 2^-31, far below the DP noise and CKKS's own error)."""
    values = np.asarray(values, dtype=np.float64)
    if np.abs(values).max(initial=0.0) >= 2.0**_EXACT_BITS / 4:
        raise ValueError("α scalars too large to mask exactly; they are clipped and DP-noised, so ≪ 2^21")
    return np.round(values / GRID) * GRID


def pair_mask(shared_key: bytes, length: int, bits: int) -> np.ndarray:
    """`length` values uniform on [−2^bits, 2^bits) in steps of GRID, from a 256-bit pair key."""
    words = keystream_words(shared_key, length, np.dtype(np.uint64))
    steps = bits + 30 + 1  # bits of a whole number of grid steps covering [−2^bits, 2^bits)
    signed = (words >> np.uint64(64 - steps)).astype(np.int64) - (1 << (steps - 1))
    return signed.astype(np.float64) * GRID


def pair_key(secret: bytes, peer_public: bytes, context: bytes) -> bytes:
    """The 256-bit key two participants share for this round (`context` binds run and round)."""
    info = b"secure_fed/alpha-mask/v1|" + hashlib.sha256(context).digest()
    return secagg_channel.agree(secret, [peer_public], info)[0]


def masked(
    values: np.ndarray, me: str, secret: bytes, peers: Sequence[tuple[str, bytes]], context: bytes
) -> np.ndarray:
    """values (on the grid) + Σ_j ±m_ij over the other participants `peers` = [(site, public key)]."""
    out = quantise(values)
    bits = mask_bits(len(peers) + 1)
    for site, public in peers:
        mask = pair_mask(pair_key(secret, public, context), out.size, bits)
        out = out + mask if me < site else out - mask
    return out
