from __future__ import annotations

import numpy as np
import pytest
import tenseal as ts

from secure_fed.crypto import ckks


@pytest.fixture(scope="module")
def contexts() -> tuple[ts.Context, ts.Context]:
    secret = ckks.make_context()
    public = ts.context_from(ckks.serialize_public(secret))
    return secret, public


def test_encrypt_add_decrypt(contexts: tuple[ts.Context, ts.Context]) -> None:
    secret, public = contexts
    rng = np.random.default_rng(0)
    values = [rng.normal(size=5) for _ in range(4)]
    cts = [ckks.encrypt_vector(public if i % 2 else secret, v) for i, v in enumerate(values)]
    total = ckks.add_ciphertexts(public, cts)
    assert ckks.vector_size(public, total) == 5
    np.testing.assert_allclose(ckks.decrypt_vector(secret, total), np.sum(values, axis=0), atol=1e-6)


def test_addition_is_exact_so_bytes_do_not_depend_on_order(contexts: tuple[ts.Context, ts.Context]) -> None:
    secret, public = contexts
    cts = [ckks.encrypt_vector(public, np.arange(3.0) + i) for i in range(3)]
    forward = ckks.add_ciphertexts(public, cts)
    backward = ckks.add_ciphertexts(secret, cts[::-1])
    assert ckks.canonical(secret, forward) == ckks.canonical(secret, backward)
    assert ckks.canonical(secret, forward) != ckks.canonical(secret, ckks.add_ciphertexts(public, cts[:2]))


def test_server_context_cannot_decrypt(contexts: tuple[ts.Context, ts.Context]) -> None:
    secret, public = contexts
    ct = ckks.encrypt_vector(public, np.array([1.0, 2.0]))
    refusal = ckks.decryption_refusal(public, ct)
    assert refusal is not None and ckks.NO_SECRET_KEY_MESSAGE in refusal
    with pytest.raises(ValueError, match="doesn't hold a secret_key"):
        ts.ckks_vector_from(public, ct).decrypt()
    assert ckks.decryption_refusal(secret, ct) is None


def test_key_id_pairs_secret_and_public(contexts: tuple[ts.Context, ts.Context]) -> None:
    secret, public = contexts
    assert ckks.he_key_id(secret) == ckks.he_key_id(public)
    assert ckks.he_key_id(ckks.make_context()) != ckks.he_key_id(public)


def test_bad_inputs(contexts: tuple[ts.Context, ts.Context]) -> None:
    secret, public = contexts
    with pytest.raises(ValueError, match="NaN"):
        ckks.encrypt_vector(public, np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="slots"):
        ckks.encrypt_vector(public, np.zeros(ckks.slot_count(public) + 1))
    with pytest.raises(ckks.CiphertextError, match="not a CKKS vector"):
        ckks.vector_size(public, b"garbage")
    ct = ckks.encrypt_vector(public, np.ones(3))
    with pytest.raises(ckks.CiphertextError, match="not a CKKS vector"):
        ckks.decrypt_vector(secret, ct[: len(ct) // 2])
    with pytest.raises(ckks.CiphertextError, match="different lengths"):
        ckks.add_ciphertexts(public, [ct, ckks.encrypt_vector(public, np.ones(4))])
    with pytest.raises(ValueError, match="cannot decrypt"):
        ckks.decrypt_vector(public, ct)
