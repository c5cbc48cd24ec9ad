"""Noise sized for the confirmed survivors: a share's Skellam noise in layers, those a confirmed
survivor count frees revealed and taken out of the sum (secure_fed.dp.distributed, add-then-remove).

What must hold: the layers add up to exactly the share the ring and the ledger were sized for; for
every survivor count m in [h, n] a site keeps mu/(m − c), so m − c honest survivors carry mu_total;
a layer regenerated from its seed is the layer that was added (the server's subtraction is exact);
and the measured noise of a decoded sum is what the kept variances say."""

from __future__ import annotations

import math

import numpy as np
import pytest

from secure_fed.dp.distributed import (
    SEED_BYTES,
    TOP_RUNGS,
    base_variance,
    centre,
    encode_layered_share,
    encode_share,
    kept_variance,
    layer_noise,
    layers_for,
    plan_distributed,
    removable_layers,
    remove_layers,
    rungs,
)
from secure_fed.dp.keystream import NoiseStream

SEED = bytes(range(32))
DIM = 16_384


def _plan(h: int = 3, c: int = 1, n: int = 5):  # noqa: ANN202
    return plan_distributed(
        target_epsilon=2.0,
        delta=1e-5,
        sample_rate=0.02,
        steps=300,
        clip=1.0,
        dim=DIM,
        honest_min=h,
        colluders=c,
        bits=32,
        max_sites=n,
        site_bound=4.0,
    )


@pytest.mark.parametrize(
    ("h", "c", "n"), [(3, 1, 5), (4, 1, 5), (5, 1, 5), (2, 0, 6), (3, 2, 9), (13, 1, 50)]
)
def test_layers_add_up_to_the_share_and_every_count_keeps_mu_total(h: int, c: int, n: int) -> None:
    plan = _plan(h, c, n)
    counts = rungs(plan)
    layers = removable_layers(plan)
    # h and the top TOP_RUNGS counts: at most that many layers, whatever n − h
    assert counts[0] == h and counts[-1] == n and len(layers) == len(counts) - 1 <= TOP_RUNGS
    assert all(v > 0 for v in layers)
    assert math.isclose(base_variance(plan) + sum(layers), plan.share_mu, rel_tol=1e-12)
    for m in range(h, n + 1):
        freed = sum(layers[i] for i in layers_for(plan, m))
        assert math.isclose(plan.share_mu - freed, kept_variance(plan, m), rel_tol=1e-12)
        # the c-colluder guarantee: the m − c honest survivors carry at least the accounted noise,
        # exactly it at a rung
        assert (m - c) * kept_variance(plan, m) >= plan.mu_total * (1 - 1e-12)
        if m in counts:
            assert math.isclose((m - c) * kept_variance(plan, m), plan.mu_total, rel_tol=1e-12)
    assert layers_for(plan, h) == []
    assert layers_for(plan, n) == list(range(len(layers)))


@pytest.mark.parametrize("m", [2, 6, True])
def test_a_count_outside_h_to_n_frees_nothing(m: int) -> None:
    plan = _plan(3, 1, 5)
    with pytest.raises(ValueError):
        layers_for(plan, m)
    with pytest.raises(ValueError):
        kept_variance(plan, m)


def test_a_layer_comes_back_from_its_seed_only() -> None:
    plan = _plan(3, 1, 5)
    seed = bytes(range(SEED_BYTES))
    assert np.array_equal(layer_noise(plan, 1, seed), layer_noise(plan, 1, seed))
    assert not np.array_equal(layer_noise(plan, 1, seed), layer_noise(plan, 1, bytes(SEED_BYTES)))
    for index, bad in ((2, seed), (-1, seed), (0, seed[:16])):
        with pytest.raises(ValueError):
            layer_noise(plan, index, bad)


def test_removing_every_layer_leaves_the_rounded_sum_plus_the_base_exactly() -> None:
    """The server's subtraction is exact: the share less all its layers is the same share encoded
    with the same stream, minus noise the size of the base only (measured) — no residue of a layer."""
    plan = _plan(3, 1, 5)
    x = np.random.default_rng(0).normal(size=DIM)
    x *= 2.0 / np.linalg.norm(x)
    share, seeds = encode_layered_share(x, plan, SEED, NoiseStream(bytes(32)))
    again, seeds_again = encode_layered_share(x, plan, SEED, NoiseStream(bytes(32)))
    assert np.array_equal(share, again) and seeds == seeds_again  # one stream, one share
    assert len(seeds) == 2 and len(set(seeds)) == 2
    bare = remove_layers(share, plan, list(enumerate(seeds)))
    from secure_fed.dp.distributed import rotate

    signal = rotate(x / plan.gamma, SEED, plan.padded_dim)
    residual = centre(bare, plan.bits).astype(np.float64) - signal
    # rounding adds < 1 unit; the base's std is √(mu/(n − c)), ~10^5 units here
    assert residual.var() == pytest.approx(base_variance(plan), rel=0.05)


@pytest.mark.parametrize("m", [3, 4, 5])
def test_the_decoded_sum_carries_m_times_the_kept_variance(m: int) -> None:
    """m sites encode, each reveals its layers for m, the server removes them and decodes: the noise
    per coordinate is m·mu/(m − c) (measured over the coordinates), against m·share_mu without."""
    plan = _plan(3, 1, 5)
    total = np.zeros(plan.padded_dim, dtype=np.uint64)
    revealed: list[tuple[int, bytes]] = []
    for k in range(m):
        share, seeds = encode_layered_share(np.zeros(DIM), plan, SEED, NoiseStream(bytes([k + 1]) * 32))
        total += share
        revealed += [(i, seeds[i]) for i in layers_for(plan, m)]
    noise = centre(remove_layers(total, plan, revealed), plan.bits).astype(np.float64)
    assert noise.var() == pytest.approx(m * kept_variance(plan, m), rel=0.05)
    if m > 3:  # more than h survived: the sum carries strictly less than the unlayered shares'
        assert m * kept_variance(plan, m) < m * plan.share_mu


def test_a_layered_share_has_the_unlayered_shares_noise() -> None:
    """Before anything is revealed the layered share is the share encode_share makes (Skellam of
    share_mu: the ring's sizing and every other site's assumption are unchanged)."""
    plan = _plan(3, 1, 5)
    layered, _ = encode_layered_share(np.zeros(DIM), plan, SEED, NoiseStream(bytes([7]) * 32))
    plain = encode_share(np.zeros(DIM), plan, SEED, NoiseStream(bytes([8]) * 32))
    for share in (layered, plain):
        assert centre(share, plan.bits).astype(np.float64).var() == pytest.approx(plan.share_mu, rel=0.05)
