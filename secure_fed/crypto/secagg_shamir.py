"""Shamir secret sharing of 32-byte secrets with pycryptodome (GF(2^128), one sharing per half).

Flower's `create_shares`/`combine_shares` wrap the same pycryptodome primitive but PKCS#7-pad a
32-byte secret to 48 bytes, i.e. three sharings instead of two; interpolation is pure Python and
sits on the server's critical path (one rebuild per surviving site), so we call it directly.
A share is a 4-byte little-endian x-coordinate followed by the two 16-byte y-values.
"""

from __future__ import annotations

from Crypto.Protocol.SecretSharing import Shamir

SECRET_BYTES = 32
_HALF = 16
SHARE_BYTES = 4 + SECRET_BYTES


def split_secret(secret: bytes, threshold: int, count: int) -> list[bytes]:
    """`count` shares, any `threshold` of which rebuild `secret` and fewer reveal nothing."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"secrets are {SECRET_BYTES} bytes, got {len(secret)}")
    if not 1 < threshold <= count:
        raise ValueError(f"need 1 < threshold <= count, got threshold={threshold}, count={count}")
    low = Shamir.split(threshold, count, secret[:_HALF])
    high = Shamir.split(threshold, count, secret[_HALF:])
    return [x.to_bytes(4, "little") + a + b for (x, a), (_, b) in zip(low, high, strict=True)]


def combine_secret(shares: list[bytes], threshold: int) -> bytes:
    """Rebuild a secret from at least `threshold` shares with distinct x-coordinates (uses `threshold`)."""
    if any(len(s) != SHARE_BYTES for s in shares):
        raise ValueError("malformed share")
    # a repeated x-coordinate adds no information (and pycryptodome rejects it)
    distinct = list({s[:4]: s for s in shares}.values())
    if len(distinct) < threshold:
        raise ValueError(f"{len(distinct)} distinct shares, {threshold} needed")
    # pycryptodome interpolates through every share it is given: pass exactly `threshold`
    chosen = [(int.from_bytes(s[:4], "little"), s[4:]) for s in distinct[:threshold]]
    low = Shamir.combine([(x, y[:_HALF]) for x, y in chosen])
    high = Shamir.combine([(x, y[_HALF:]) for x, y in chosen])
    return low + high
