"""Shamir secret sharing of 128-bit secrets: one sharing per secret over GF(2^128).

The one secret SecAgg+ shares is a site's 16-byte self-mask seed (mask keys are never shared:
secagg_client/), because 128 bits is X25519's own security level and exactly one field element.
A 32-byte secret would need two sharings (Flower's helper PKCS#7-pads it to 48 bytes: three), and
interpolation runs on the server's critical path, one rebuild per surviving site.
A share is a 4-byte little-endian x-coordinate followed by the 16-byte y-value.

The field, the encoding and the polynomial are pycryptodome's `Crypto.Protocol.SecretSharing`
(GF(2) polynomials mod x^128 + x^7 + x^2 + x + 1, an element as the big-endian integer of its
coefficients, x-coordinates 1..n, the secret as the constant term), so shares made by either
implementation combine with the other (tests/crypto/test_secagg_units.py checks both ways). Its
arithmetic is written out here because pycryptodome multiplies bit by bit, with 128 masked steps
and two string conversions per bit: rebuilding one seed at threshold 5 took 1 ms, ten of them
were the largest non-mask cost of a 10-site round. Here a product takes 4-bit windows, and the
Lagrange weights at 0, which depend only on the public x-coordinates, are computed once per set.
"""

from __future__ import annotations

import os
from functools import lru_cache

SECRET_BYTES = 16
SHARE_BYTES = 4 + SECRET_BYTES

_BITS = 128
_MASK = (1 << _BITS) - 1
# x^128 + x^7 + x^2 + x + 1 without its leading term: what x^128 reduces to
_REDUCTION = (1 << 7) | (1 << 2) | (1 << 1) | 1
_MODULUS = (1 << _BITS) | _REDUCTION


def _fold(z: int) -> int:
    # the high part h stands for h * x^128 = h * (x^7 + x^2 + x + 1)
    high = z >> _BITS
    return (z & _MASK) ^ high ^ (high << 1) ^ (high << 2) ^ (high << 7)


def _reduce(z: int) -> int:
    # twice, because h * x^7 can itself reach past x^128 (by at most 7 bits, which the second
    # fold brings back)
    return _fold(_fold(z))


def _mul(a: int, b: int) -> int:
    """a * b in GF(2^128): carry-less product in 4-bit windows of b, then one reduction."""
    table = [0] * 16
    table[1] = a
    for i in range(2, 16):
        table[i] = table[i >> 1] << 1 if i % 2 == 0 else table[i - 1] ^ a
    z = 0
    for shift in range(_BITS - 4, -1, -4):
        z = (z << 4) ^ table[(b >> shift) & 15]
    return _reduce(z)


def _set_bits(x: int) -> tuple[int, ...]:
    """The positions of x's one bits (x public: an x-coordinate, 4 bytes on the wire)."""
    if not 0 <= x < 1 << 32:
        raise ValueError(f"x-coordinates are 32-bit, got {x}")
    return tuple(j for j in range(x.bit_length()) if x >> j & 1)


def _mul_shifts(v: int, shifts: tuple[int, ...]) -> int:
    """v * x for a public x given as `_set_bits(x)`: the carry-less product (a shift and XOR per one
    bit of x), then one reduction. Only x picks the loop; nothing branches on v (secret data).
    Half the big-integer operations of a doubling per bit, on Horner's path at every share."""
    z = 0
    for j in shifts:
        z ^= v << j
    # x < 2^32, so the part past x^128 is under 32 bits and its x^7 term stays under x^128: one
    # fold suffices
    return _fold(z)


def _mul_public(v: int, x: int) -> int:
    """v * x for a public x-coordinate x."""
    return _mul_shifts(v, _set_bits(x))


def _inverse(a: int) -> int:
    """a^-1 in GF(2^128) by the extended Euclidean algorithm over GF(2)[x]."""
    if a == 0:
        raise ValueError("zero has no inverse")
    r0, r1, s0, s1 = _MODULUS, a, 0, 1  # invariant: s_i * a = r_i mod the modulus
    while r1 > 1:
        shift = r0.bit_length() - r1.bit_length()
        if shift < 0:
            r0, r1, s0, s1 = r1, r0, s1, s0
            continue
        r0 ^= r1 << shift
        s0 ^= s1 << shift
    return _reduce(s1)  # r1 == 1: the modulus is irreducible and a is not a multiple of it


@lru_cache(maxsize=4096)
def _lagrange_at_zero(xs: tuple[int, ...]) -> tuple[int, ...]:
    # l_j(0) = prod_{m != j} x_m / (x_j - x_m); subtraction is XOR in characteristic 2
    weights = []
    for j, x_j in enumerate(xs):
        numerator = denominator = 1
        for m, x_m in enumerate(xs):
            if m != j:
                numerator = _mul(numerator, x_m)
                denominator = _mul(denominator, x_j ^ x_m)
        weights.append(_mul(numerator, _inverse(denominator)))
    return tuple(weights)


def split_secret(secret: bytes, threshold: int, count: int) -> list[bytes]:
    """`count` shares, any `threshold` of which rebuild `secret` and fewer reveal nothing."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"secrets are {SECRET_BYTES} bytes, got {len(secret)}")
    if not 1 < threshold <= count:
        raise ValueError(f"need 1 < threshold <= count, got threshold={threshold}, count={count}")
    # p(x) = secret + c_1 x + ... + c_{t-1} x^{t-1}, the c_i uniform: highest degree first for Horner
    random = os.urandom(SECRET_BYTES * (threshold - 1))
    coeffs = [
        int.from_bytes(random[i : i + SECRET_BYTES], "big") for i in range(0, len(random), SECRET_BYTES)
    ]
    coeffs.append(int.from_bytes(secret, "big"))
    shares = []
    for x in range(1, count + 1):
        shifts = _set_bits(x)
        y = 0
        for c in coeffs:
            y = _mul_shifts(y, shifts) ^ c
        shares.append(x.to_bytes(4, "little") + y.to_bytes(SECRET_BYTES, "big"))
    return shares


def combine_secret(shares: list[bytes], threshold: int) -> bytes:
    """Rebuild a secret from at least `threshold` shares with distinct x-coordinates (uses `threshold`)."""
    if any(len(s) != SHARE_BYTES for s in shares):
        raise ValueError("malformed share")
    # a repeated x-coordinate adds no information (and would divide by zero)
    distinct = list({s[:4]: s for s in shares}.values())
    if len(distinct) < threshold:
        raise ValueError(f"{len(distinct)} distinct shares, {threshold} needed")
    # interpolate through exactly `threshold` shares: a polynomial of degree threshold - 1
    used = distinct[:threshold]
    weights = _lagrange_at_zero(tuple(int.from_bytes(s[:4], "little") for s in used))
    secret = 0
    for share, weight in zip(used, weights, strict=True):
        secret ^= _mul(int.from_bytes(share[4:], "big"), weight)
    return secret.to_bytes(SECRET_BYTES, "big")
