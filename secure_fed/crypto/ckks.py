"""CKKS vectors through TenSEAL: contexts, encrypt, server-side add, decrypt.

Only addition is ever needed (the α scalars are summed), so contexts are built without Galois
keys and serialized without relinearisation keys; the server's context is public-key only.
Ciphertexts travel as TenSEAL's serialized bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import tenseal as ts

# TenSEAL's own message when a context without a secret key is asked to decrypt; tests and
# `decryption_refusal` rely on it to tell "no secret key" apart from any other failure.
NO_SECRET_KEY_MESSAGE = "doesn't hold a secret_key"


class CiphertextError(ValueError):
    """Bytes that are not a CKKS vector of this context, or vectors that cannot be combined."""


def make_context(
    poly_modulus_degree: int = 8192,
    coeff_mod_bit_sizes: Sequence[int] = (60, 40, 40, 60),
    scale_bits: int = 40,
) -> ts.Context:
    """A fresh CKKS context holding a new secret key (and no Galois keys)."""
    ctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree, -1, list(coeff_mod_bit_sizes))
    ctx.global_scale = 2.0**scale_bits
    return ctx


def serialize_secret(ctx: ts.Context) -> bytes:
    """The sites' context: secret and public key, nothing needed only for multiplication."""
    return ctx.serialize(save_secret_key=True, save_galois_keys=False, save_relin_keys=False)


def serialize_public(ctx: ts.Context) -> bytes:
    """The server's context: the public key alone, enough to encrypt and to add."""
    return ctx.serialize(save_secret_key=False, save_galois_keys=False, save_relin_keys=False)


def he_key_id(ctx: ts.Context) -> str:
    """SHA-256 of the public serialization: equal for a secret context and its public one.

    TenSEAL serializes deterministically (checked in tests), so a site can compare the key id of
    its secret context with the `he_public` fingerprint the server announces.
    """
    return hashlib.sha256(serialize_public(ctx)).hexdigest()


def slot_count(ctx: ts.Context) -> int:
    return ctx.seal_context().data.key_context_data().parms().poly_modulus_degree() // 2


def encrypt_vector(ctx: ts.Context, values: np.ndarray) -> bytes:
    """One ciphertext holding the whole 1-D vector (its length must fit the slots)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"expected a non-empty 1-D vector, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("cannot encrypt NaN or infinite values")
    if arr.size > slot_count(ctx):
        raise ValueError(f"{arr.size} values do not fit one ciphertext ({slot_count(ctx)} slots)")
    return ts.ckks_vector(ctx, arr.tolist()).serialize()


def load_vector(ctx: ts.Context, ciphertext: bytes) -> ts.CKKSVector:
    try:
        return ts.ckks_vector_from(ctx, ciphertext)
    except (ValueError, RuntimeError, TypeError) as err:
        raise CiphertextError(f"not a CKKS vector of this context ({len(ciphertext)} bytes): {err}") from None


def vector_size(ctx: ts.Context, ciphertext: bytes) -> int:
    """Number of values in a serialized vector; readable with the public context alone."""
    return load_vector(ctx, ciphertext).size()


def add_ciphertexts(ctx: ts.Context, ciphertexts: Sequence[bytes]) -> bytes:
    """Homomorphic sum; needs only the public context. Modular addition is exact, so the result
    (bytes included) does not depend on the order of the terms."""
    if not ciphertexts:
        raise ValueError("nothing to add")
    vectors = [load_vector(ctx, c) for c in ciphertexts]
    sizes = {v.size() for v in vectors}
    if len(sizes) != 1:
        raise CiphertextError(f"ciphertexts hold vectors of different lengths {sorted(sizes)}")
    total = vectors[0]
    for v in vectors[1:]:
        total = total + v
    return total.serialize()


def canonical(ctx: ts.Context, ciphertext: bytes) -> bytes:
    """Re-serialize locally so that byte comparison does not depend on the sender's encoder."""
    return load_vector(ctx, ciphertext).serialize()


def decrypt_vector(ctx: ts.Context, ciphertext: bytes) -> np.ndarray:
    if not ctx.is_private():
        raise ValueError("this context holds no secret key and cannot decrypt")
    return np.asarray(load_vector(ctx, ciphertext).decrypt(), dtype=np.float64)


def decryption_refusal(ctx: ts.Context, ciphertext: bytes) -> str | None:
    """TenSEAL's error when `ctx` tries to decrypt, or None if it decrypted (it holds a secret).

    Goes straight to TenSEAL (not through `decrypt_vector`'s own guard) so that the refusal shown
    is the library's, i.e. the key really is absent rather than merely unused.
    """
    vector = load_vector(ctx, ciphertext)
    try:
        vector.decrypt()
    except ValueError as err:
        return str(err)
    return None
