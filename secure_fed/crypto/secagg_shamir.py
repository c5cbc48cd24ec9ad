"""Shamir secret sharing of 128-bit secrets with pycryptodome: one GF(2^128) sharing per secret.

The one secret SecAgg+ shares is a site's 16-byte self-mask seed (mask keys are never shared:
secagg_client.py), because 128 bits is X25519's own security level and exactly one element of
pycryptodome's field. A 32-byte secret would need two sharings
(Flower's helper PKCS#7-pads it to 48 bytes: three), and interpolation is pure Python on the
server's critical path, one rebuild per surviving site.
A share is a 4-byte little-endian x-coordinate followed by the 16-byte y-value.
"""

from __future__ import annotations

from Crypto.Protocol.SecretSharing import Shamir

SECRET_BYTES = 16
SHARE_BYTES = 4 + SECRET_BYTES


def split_secret(secret: bytes, threshold: int, count: int) -> list[bytes]:
    """`count` shares, any `threshold` of which rebuild `secret` and fewer reveal nothing."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"secrets are {SECRET_BYTES} bytes, got {len(secret)}")
    if not 1 < threshold <= count:
        raise ValueError(f"need 1 < threshold <= count, got threshold={threshold}, count={count}")
    return [x.to_bytes(4, "little") + y for x, y in Shamir.split(threshold, count, secret)]


def combine_secret(shares: list[bytes], threshold: int) -> bytes:
    """Rebuild a secret from at least `threshold` shares with distinct x-coordinates (uses `threshold`)."""
    if any(len(s) != SHARE_BYTES for s in shares):
        raise ValueError("malformed share")
    # a repeated x-coordinate adds no information (and pycryptodome rejects it)
    distinct = list({s[:4]: s for s in shares}.values())
    if len(distinct) < threshold:
        raise ValueError(f"{len(distinct)} distinct shares, {threshold} needed")
    # pycryptodome interpolates through every share it is given: pass exactly `threshold`
    return Shamir.combine([(int.from_bytes(s[:4], "little"), s[4:]) for s in distinct[:threshold]])
