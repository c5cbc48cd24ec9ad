import numpy as np
import pytest

from secure_fed.crypto.quantize import (
    dequantise,
    error_bound,
    from_ring,
    modulus_bits,
    quant_scale,
    ring_dtype,
    stochastic_quantise,
    to_ring,
)


@pytest.mark.parametrize(("clients", "bits"), [(3, 24), (10, 24), (1000, 30), (50, 40)])
def test_extreme_sums_do_not_wrap(clients, bits):
    m = modulus_bits(clients, bits)
    word = ring_dtype(m)
    for extreme in (2**bits, -(2**bits)):
        total = np.zeros(4, dtype=word)
        for _ in range(clients):
            total += to_ring(np.full(4, extreme, dtype=np.int64), m)
        assert np.all(from_ring(total, m) == clients * extreme)


def test_modulus_is_as_small_as_it_can_be():
    m = modulus_bits(10, 24)
    assert 10 * 2**24 >= 2 ** (m - 2)  # one bit fewer would not hold the sum
    assert ring_dtype(m) == np.uint32
    assert ring_dtype(modulus_bits(100, 32)) == np.uint64


def test_modulus_covers_the_count_coordinate():
    assert 2 ** (modulus_bits(10, 8, max_count=10**9) - 1) > 10 * 10**9


def test_modulus_over_64_bits_is_refused():
    with pytest.raises(ValueError, match="64"):
        modulus_bits(2**30, 40)


def test_quantisation_error_is_below_one_quantum_and_clipping_is_counted():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 4, 50_000)
    q, clipped = stochastic_quantise(x, clip=8.0, bits=16, rng=rng)
    clipped_x = np.clip(x, -8, 8)
    assert clipped == np.count_nonzero(np.abs(x) > 8) > 0
    assert np.max(np.abs(dequantise(q, 8.0, 16) - clipped_x)) < 1 / quant_scale(8.0, 16)
    assert q.min() >= -(2**16) and q.max() <= 2**16


def test_stochastic_rounding_is_unbiased():
    rng = np.random.default_rng(1)
    value = 0.3 / quant_scale(1.0, 8)  # 0.3 of a quantum: rounds up 30% of the time
    q, _ = stochastic_quantise(np.full(200_000, value), clip=1.0, bits=8, rng=rng)
    assert set(np.unique(q)) == {0, 1}
    assert abs(q.mean() - 0.3) < 0.005  # ~5 standard errors


def test_error_bound_covers_a_sum():
    rng = np.random.default_rng(2)
    xs = [rng.uniform(-1, 1, 10_000) for _ in range(7)]
    m = modulus_bits(7, 12)
    total = np.zeros(10_000, dtype=ring_dtype(m))
    for x in xs:
        total += to_ring(stochastic_quantise(x, 1.0, 12, rng)[0], m)
    err = np.abs(dequantise(from_ring(total, m), 1.0, 12) - np.sum(xs, axis=0))
    assert err.max() <= error_bound(7, 1.0, 12)
    assert err.max() > error_bound(7, 1.0, 12) / 10  # the bound is not vacuous


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused(bad):
    with pytest.raises(ValueError, match="NaN or infinity"):
        stochastic_quantise(np.array([0.0, bad]), 1.0, 8, np.random.default_rng(0))


def test_input_is_not_modified():
    x = np.array([10.0, -10.0, 0.5], dtype=np.float64)
    stochastic_quantise(x, 1.0, 8, np.random.default_rng(0))
    assert x.tolist() == [10.0, -10.0, 0.5]


def test_ring_round_trip_at_64_bits():
    q = np.array([-(2**62), -1, 0, 1, 2**62], dtype=np.int64)
    assert from_ring(to_ring(q, 64), 64).tolist() == q.tolist()
    assert from_ring(to_ring(q, 40), 40).tolist() != q.tolist()  # 2^62 does not fit a 40-bit ring


def test_from_ring_of_a_full_word_is_the_signed_view():
    rng = np.random.default_rng(7)
    q = rng.integers(-(2**31), 2**31, 1000)
    for word, m in ((np.uint32, 32), (np.uint64, 64)):
        residues = to_ring(q, m).astype(word)
        signed = from_ring(residues, m)
        assert np.array_equal(signed, q) and np.shares_memory(signed, residues)
    # a narrower ring in the same word still sign-extends from bit m - 1
    assert np.array_equal(from_ring(to_ring(q % 2**20 - 2**19, 20), 20), q % 2**20 - 2**19)
