"""A site's share: its clipped sum projected, scaled by 1/γ, rotated, rounded at random, given its
Skellam noise share (plain, or in survivor layers) and reduced mod 2^bits."""

from __future__ import annotations

import numpy as np

from secure_fed.dp.distributed.plan import MAX_POISSON_LAMBDA, DistributedPlan
from secure_fed.dp.distributed.rotation import rotate
from secure_fed.dp.distributed.survivors import SEED_BYTES, base_variance, layer_noise, removable_layers
from secure_fed.dp.keystream import NoiseStream


def encode_share(
    clipped_sum: np.ndarray, plan: DistributedPlan, round_seed: bytes, noise: NoiseStream
) -> np.ndarray:
    """A site's share of the round, as uint64 residues in [0, 2^bits) of length plan.padded_dim.

    clipped_sum: the site's sum of clipped per-patient updates (length plan.dim). It is projected
    onto the ball of radius plan.site_bound, scaled by 1/γ, rotated with the round's public signs,
    rounded at random and given Skellam(share_mu) noise. `noise` is the release's keystream, secret
    to the site: the rounding uniforms and then the Poisson pairs come from its AES-CTR generator
    (`NoiseStream.cipher_generator`), never from a seeded statistical one.
    """
    rounded, rng = _encode_signal(clipped_sum, plan, round_seed, noise)
    half = plan.share_mu / 2
    noise_vector = rng.poisson(half, plan.padded_dim) - rng.poisson(half, plan.padded_dim)
    share = rounded + noise_vector
    return share.astype(np.uint64) & np.uint64((1 << plan.bits) - 1)


def _encode_signal(
    clipped_sum: np.ndarray, plan: DistributedPlan, round_seed: bytes, noise: NoiseStream
) -> tuple[np.ndarray, np.random.Generator]:
    """The projected, scaled, rotated and randomly rounded sum (int64), and the generator the
    share's noise is then drawn from."""
    if not isinstance(noise, NoiseStream):
        raise TypeError(f"DP noise must come from a NoiseStream (keystream), got {type(noise).__name__}")
    if plan.share_mu / 2 > MAX_POISSON_LAMBDA * 1.01:
        raise ValueError(f"share_mu {plan.share_mu:g} is beyond the Poisson sampler's accurate range")
    rng = noise.cipher_generator()
    x = np.asarray(clipped_sum, dtype=np.float64)
    if x.ndim != 1 or x.shape[0] != plan.dim:
        raise ValueError(f"clipped_sum must be a vector of length {plan.dim}, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("clipped_sum contains NaN or infinity; refusing to encode it")
    norm = float(np.linalg.norm(x))
    scale = 1.0 / plan.gamma
    if norm > plan.site_bound:
        scale *= plan.site_bound / norm  # projection onto the ball: one patient still moves it ≤ C
    y = rotate(x * scale, round_seed, plan.padded_dim)
    y += rng.random(plan.padded_dim)
    return np.floor(y).astype(np.int64), rng


def encode_layered_share(
    clipped_sum: np.ndarray, plan: DistributedPlan, round_seed: bytes, noise: NoiseStream
) -> tuple[np.ndarray, list[bytes]]:
    """`encode_share` with its noise in layers: the share (same distribution as encode_share's) and
    the seeds of its removable layers, one per survivor count h .. n − 1, secret to the site until
    it reveals those a confirmed survivor count no longer needs (`layers_for`). The seeds are
    keystream bytes of the release's own stream, after the generator the base noise is drawn with:
    revealing them tells nothing of the rounding or the base."""
    share, rng = _encode_signal(clipped_sum, plan, round_seed, noise)
    raw = np.empty(len(removable_layers(plan)) * SEED_BYTES, dtype=np.uint8)
    noise.fill(raw)
    seeds = [raw[i : i + SEED_BYTES].tobytes() for i in range(0, raw.size, SEED_BYTES)]
    base = base_variance(plan) / 2
    share += rng.poisson(base, plan.padded_dim) - rng.poisson(base, plan.padded_dim)
    for index, seed in enumerate(seeds):
        share += layer_noise(plan, index, seed)
    return share.astype(np.uint64) & np.uint64((1 << plan.bits) - 1), seeds
