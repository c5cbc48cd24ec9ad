"""Distributed DP: each site adds an integer share of Skellam noise to its rotated, rounded sum.

The mechanism (one private round = one DP step over the union of the sites' patients):

1. a site projects its clipped sum S (the sum of its sampled patients' gradients, each clipped to
   L2 norm C) onto the ball of radius `site_bound` (a projection is 1-Lipschitz, so one patient
   still moves it by at most C) and scales it by 1/γ;
2. pads it to D coordinates (a whole number of blocks of B = min(ROTATION_BLOCK, 2^⌈log₂ d⌉),
   B a power of two) and rotates each block, y = H·diag(s)·x / √B with H the B×B Walsh–Hadamard
   matrix and s public random signs derived from the round's seed (the same at every site and the
   server, so the rotations of the sites' vectors sum to the rotation of their sum). Blocks keep
   the padding below one block (68k coordinates pad to 69,632, not 131,072) and the transform
   cache-sized; the rotation is orthogonal either way, which is all the accounting uses;
3. rounds each coordinate at random, floor(y + U) with U uniform on [0, 1) (unbiased);
4. adds Skellam noise Poisson(share_mu/2) − Poisson(share_mu/2) per coordinate, and reduces mod
   2^bits. Sums of independent Skellam variables are Skellam, so the honest sites' shares add up to
   exactly the Skellam noise the accounting assumes; `share_mu = mu_total / (h − c)` so that the
   h − c honest sites among any h survivors carry all of it, whatever c colluders remove.

The server's unmasked sum is decoded by centring the residues, inverting the rotation and
multiplying by γ.

Sensitivity after rounding (what the accounting charges). Kairouz, Liu & Steinke (2021) round each
*unit's* vector and reject roundings whose norm exceeds a bound (conditional rounding), which
bounds that unit's contribution. Here a site rounds the *sum* of many patients' vectors, so the
norm of its rounded vector says nothing about one patient's influence; conditional rounding would
bound the wrong quantity and is not used. Instead: couple the roundings of neighbouring sums S and
S + g through the same uniforms U. Then v = floor(y' + U) − floor(y + U) has |v_i| < |y'_i − y_i| + 1
coordinate-wise, so ‖v‖₂ < ‖g‖₂/γ + √D on every coupled pair, and since Rényi divergence is jointly
quasi-convex the mixture over U is no worse than the worst pair. Hence

    Δ₂ = C/γ + √D + slack,    Δ₁ = min(√D·Δ₂, Δ₂²)

(Δ₁ ≤ Δ₂² because v is an integer vector). The slack (events.ROUNDING_FLOAT_SLACK, one unit)
covers float64 rotation error, kept far below one unit by bounding the scaled site norm by
MAX_SCALED_NORM. γ is chosen as fine as the ring allows, so the inflation √D·γ/C is small
whenever the ring has bits to spare; the plan refuses inflations above MAX_INFLATION.

Wrap-around of the ring is post-processing of the integer sum, so it costs accuracy, never
privacy; γ is sized so that `max_sites` sites' vectors (whatever they are, at norm ≤ site_bound),
roundings and noise shares stay inside [−2^(bits−1), 2^(bits−1)), the noise except with
probability WRAP_TAIL per round (a Chernoff bound and a union bound over coordinates).

Accounting: the Skellam mechanism's RDP (Agarwal, Kairouz & Liu 2021, Thm. for the
multi-dimensional mechanism with Sk(μ/2, μ/2) noise of variance μ per coordinate)

    ε(α) ≤ α·Δ₂²/(2μ) + min( ((2α − 1)·Δ₂² + 6·Δ₁) / (4μ²), 3·Δ₁/(2μ) ),

amplified by Poisson sampling of patients at rate q, composed over steps, and converted to (ε, δ)
as the project's RDP accountant does (Balle et al. 2020). Two amplification bounds
(`SKELLAM_AMPLIFICATIONS`), both at integer orders (computed in dp/skellam.py, which the accountant
prices a logged Skellam sum with):

- "symmetric" (what plans use): the exact binomial expansion of E_P[((1 − q) + q·L)^α], the form
  Mironov, Talwar & Zhang (2019) use for the sampled Gaussian. It needs the reverse direction
  D_α(P || (1 − q)P + qQ) to be no larger, which holds for every *symmetric* pair (an involution T
  with P∘T = Q and Q∘T = P); a Skellam vector and its shift by any v are such a pair (T(x) = v − x).
  Proof in docs/THREAT_MODEL.md, "Why the Skellam sum is amplified like the Gaussian", checked
  against exact divergences in tests/dp/test_symmetric_amplification.py.
- "general": Zhu & Wang (2019), Thm. 6, valid for any base mechanism, a factor 3 on the terms of
  order ≥ 3. Logs written before the symmetric bound existed carry no `amplification` key and are
  priced with it, so their logged ε still re-derives.

No PLD/PRV accountant prices the sum: its pairs have no dominating pair we can prove (docs/THREAT_MODEL.md,
"Why the Skellam sum keeps RDP"; dp/skellam_gdp.py measures what one would be worth).

Pure numpy/math: imports nothing of clients, server or Flower.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from secure_fed.dp.accountants import epsilon_rdp, rdp_curve
from secure_fed.dp.distributed_sizing import calibrate_mu, rdp_to_epsilon, ring_extent
from secure_fed.dp.events import (
    ROUNDING_FLOAT_SLACK,
    UNMARKED_AMPLIFICATION,
    Event,
    SkellamSum,
    rounded_sensitivities,
)
from secure_fed.dp.keystream import NoiseStream
from secure_fed.dp.skellam import ORDERS, check_amplification

# Rotation float error stays far below one integer unit while the site's scaled norm is below
# this (see the module docstring); a finer γ would buy nothing the accounting can use.
MAX_SCALED_NORM = float(2**32)
# numpy's Poisson sampler drifts for huge λ (at λ = 4e14 its variance came out 15% high); up to
# 1e13 its mean, variance and skew matched Poisson's within sampling error, so shares stay below.
MAX_POISSON_LAMBDA = float(2**36)
WRAP_TAIL = 2.0**-40
ROTATION_BLOCK = 4096  # a power of two
MAX_INFLATION = 0.05  # Δ₂ / (C/γ) − 1 above this: the ring is too small to be worth using
_ROTATION_LABEL = b"secure_fed distributed dp rotation v1"


# -- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistributedPlan:
    """Everything a site, the server and an auditor need to run and price one distributed round.

    Units: `gamma` is the float value of one integer unit; `mu_total`, `share_mu` and the
    sensitivities are in integer units (after scaling by 1/γ, rotation and rounding).
    """

    clip: float  # C: per-patient L2 clip
    dim: int  # d: coordinates of the model update
    padded_dim: int  # D: d padded to whole rotation blocks (the share's length)
    gamma: float  # granularity: one integer unit = gamma in the update's units
    bits: int  # the ring is Z_{2^bits}
    honest_min: int  # h: fewest survivors a site unmasks a sum with
    colluders: int  # c: sites that may collude with the server (their shares are discounted)
    site_bound: float  # L2 bound a site's clipped sum is projected onto (ring sizing only)
    mu_total: float  # Skellam variance per coordinate the released sum carries from honest sites
    share_mu: float  # each site's share: mu_total / (h − c)
    l2_sensitivity: float  # Δ₂ after rotation and rounding (accounted)
    l1_sensitivity: float  # Δ₁ after rotation and rounding (accounted)
    max_sites: int  # the site count γ was sized for
    wrap_bound_sites: int  # most sites whose sum stays inside the ring (probability 1 − wrap_tail)
    wrap_tail: float
    amplification: str = "symmetric"  # the subsampling bound mu_total was calibrated with

    def __post_init__(self) -> None:
        if self.padded_dim != padded_size(self.dim):
            raise ValueError(
                f"padded_dim {self.padded_dim} is not {padded_size(self.dim)} for dim {self.dim}"
            )
        if not 2 <= self.bits <= 62:
            raise ValueError(f"bits must lie in [2, 62], got {self.bits}")
        if self.honest_min - self.colluders < 1:
            raise ValueError("honest_min must exceed colluders")
        check_amplification(self.amplification)
        l2, l1 = rounded_sensitivities(self.clip, self.gamma, self.padded_dim)
        if not (
            math.isclose(l2, self.l2_sensitivity, rel_tol=1e-12)
            and math.isclose(l1, self.l1_sensitivity, rel_tol=1e-12)
        ):
            raise ValueError("l2/l1 sensitivities do not follow from clip, gamma and padded_dim")

    @property
    def inflation(self) -> float:
        """Δ₂ / (C/γ) − 1: how much the rounding inflates the sensitivity (and so the noise)."""
        return self.l2_sensitivity * self.gamma / self.clip - 1.0

    @property
    def noise_std(self) -> float:
        """Std of the released sum's noise per coordinate, in the update's units, from h − c shares."""
        return self.gamma * math.sqrt(self.mu_total)

    def event(self, sampling_rate: float, steps: int) -> SkellamSum:
        """The ledger / audit-log event of `steps` rounds of this plan at patient sampling rate q."""
        return SkellamSum(
            sampling_rate=sampling_rate,
            count=steps,
            clip=self.clip,
            gamma=self.gamma,
            dim=self.dim,
            padded_dim=self.padded_dim,
            mu_total=self.mu_total,
            l2_sensitivity=self.l2_sensitivity,
            l1_sensitivity=self.l1_sensitivity,
            bits=self.bits,
            honest_min=self.honest_min,
            colluders=self.colluders,
            amplification=self.amplification,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DistributedPlan:
        fields = set(cls.__dataclass_fields__)
        # plans written before the symmetric bound existed were calibrated with the general one
        data = {"amplification": UNMARKED_AMPLIFICATION, **data}
        if set(data) != fields:
            raise ValueError(
                f"distributed plan: missing keys {sorted(fields - set(data))}, "
                f"unexpected keys {sorted(set(data) - fields)}"
            )
        ints = {"dim", "padded_dim", "bits", "honest_min", "colluders", "max_sites", "wrap_bound_sites"}
        values: dict[str, Any] = {
            k: (int(v) if k in ints else v if k == "amplification" else float(v)) for k, v in data.items()
        }
        return cls(**values)


# -- accounting -------------------------------------------------------------------------------


def distributed_epsilon(plan: DistributedPlan, sample_rate: float, steps: int, delta: float) -> float:
    """ε at δ of `steps` distributed rounds of `plan` with patients Poisson-sampled at `sample_rate`:
    the same value the ledger gives for `plan.event(sample_rate, steps)`."""
    return epsilon_rdp([plan.event(sample_rate, steps)], delta)


# -- calibration and ring sizing --------------------------------------------------------------


def rotation_block(padded_dim: int) -> int:
    """B: the rotation's block length for a share of `padded_dim` coordinates."""
    return min(padded_dim, ROTATION_BLOCK)


def padded_size(dim: int) -> int:
    """D: `dim` padded to whole blocks of B = min(ROTATION_BLOCK, the next power of two ≥ dim)."""
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    block = min(ROTATION_BLOCK, 1 << (dim - 1).bit_length())
    return -(-dim // block) * block


def _checked_site_bound(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    clip: float,
    dim: int,
    honest_min: int,
    colluders: int,
    bits: int,
    max_sites: int,
    site_bound: float | None,
) -> float:
    """plan_distributed's arguments checked in its documented order; the site bound it plans for."""
    for name, value in (("steps", steps), ("dim", dim), ("max_sites", max_sites)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must lie in (0, 1], got {sample_rate}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise ValueError(f"target_epsilon must be positive and finite, got {target_epsilon}")
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    if colluders < 0 or honest_min - colluders < 1:
        raise ValueError(
            f"honest_min ({honest_min}) must exceed colluders ({colluders}): the noise is carried by the "
            "honest_min − colluders honest survivors"
        )
    if max_sites < honest_min:
        raise ValueError(f"max_sites ({max_sites}) is below honest_min ({honest_min})")
    if not 8 <= bits <= 62:
        raise ValueError(f"bits must lie in [8, 62], got {bits} (dp.ring_bits)")
    bound = clip if site_bound is None else float(site_bound)
    if bound < clip:
        raise ValueError(f"site_bound ({bound}) is below clip ({clip}): it bounds a sum of clipped patients")
    return bound


def _solve_granularity(
    mu_for: Callable[[float], float],
    fits: Callable[[float, float, int], bool],
    clip: float,
    padded: int,
    shares: int,
    bound: float,
    bits: int,
    max_sites: int,
) -> tuple[float, float]:
    """(γ, mu_total): the finest granularity whose noisy sums of `max_sites` sites fit the ring,
    with the noise calibrated at that γ. Raises ValueError naming dp.ring_bits when none is worth it."""
    floor_gamma = bound / MAX_SCALED_NORM
    # z = √mu / Δ₂ barely depends on γ; solve γ at a fixed z, re-calibrate, repeat until it fits.
    gamma = floor_gamma
    mu = mu_for(gamma)
    for _ in range(20):
        l2, _ = rounded_sensitivities(clip, gamma, padded)
        z = math.sqrt(mu) / l2
        # share's Poisson λ must stay sampleable: (z·(C/γ + √D))² / (2·shares) ≤ MAX_POISSON_LAMBDA
        lam_gamma = clip / max(
            math.sqrt(2 * shares * MAX_POISSON_LAMBDA) / z - math.sqrt(padded) - ROUNDING_FLOAT_SLACK, 1e-300
        )
        low = max(floor_gamma, lam_gamma)
        if fits(low, z, max_sites):
            new_gamma = low
        else:
            high = low
            while not fits(high, z, max_sites):
                high *= 2
                if high > 1e12 * bound:
                    raise ValueError(
                        f"bits={bits}: no granularity fits {max_sites} sites' noisy sums in a 2^{bits} ring; "
                        "raise the ring's bits (dp.ring_bits) or lower the site count"
                    )
            for _ in range(100):
                middle = math.sqrt(low * high)
                if fits(middle, z, max_sites):
                    high = middle
                else:
                    low = middle
                if high / low < 1 + 1e-9:
                    break
            new_gamma = high
        new_mu = mu_for(new_gamma)
        l2_new, _ = rounded_sensitivities(clip, new_gamma, padded)
        if fits(new_gamma, math.sqrt(new_mu) / l2_new, max_sites):
            gamma, mu = new_gamma, new_mu
            break
        gamma, mu = new_gamma * (1 + 1e-6), new_mu
    else:  # pragma: no cover - the fixed point converges in two or three passes
        raise ValueError(f"bits={bits}: could not size the ring for {max_sites} sites (dp.ring_bits)")
    l2, _ = rounded_sensitivities(clip, gamma, padded)
    inflation = l2 * gamma / clip - 1
    if inflation > MAX_INFLATION:
        raise ValueError(
            f"bits={bits}: a 2^{bits} ring holds {max_sites} sites' sums only at a granularity whose "
            f"rounding inflates the noise by {inflation:.1%} (> {MAX_INFLATION:.0%}); raise the ring's "
            "bits (dp.ring_bits), lower the site count or the site_bound"
        )
    return gamma, mu


def _last_site_count_inside(inside: Callable[[int], bool], max_sites: int) -> int:
    """The largest site count (from max_sites up, capped near 2^24) whose sum `inside` accepts."""
    # the extent grows with the site count: double past the last fitting count, then bisect
    good, bad = max_sites, 2 * max_sites
    while inside(bad) and bad < 1 << 24:
        good, bad = bad, 2 * bad
    while bad - good > 1:
        middle = (good + bad) // 2
        good, bad = (middle, bad) if inside(middle) else (good, middle)
    return good


def plan_distributed(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    clip: float,
    dim: int,
    honest_min: int,
    colluders: int,
    bits: int,
    max_sites: int,
    site_bound: float | None = None,
    wrap_tail: float = WRAP_TAIL,
    fixed_events: Sequence[Event] = (),
    amplification: str = "symmetric",
) -> DistributedPlan:
    """Calibrate the Skellam noise and the granularity γ for `steps` distributed rounds.

    mu_total is solved (bisection) so that the Poisson-sampled Skellam sum meets `target_epsilon`
    at `delta` over `steps` rounds (ε within 1e-5·target below the target); γ is the finest
    granularity for which `max_sites` sites' shares cannot wrap the 2^bits ring (except with
    probability `wrap_tail`). `site_bound` is the L2 norm a site's clipped sum is projected onto
    before encoding (None = clip, right only when a site's sum holds at most one patient; pass
    the largest sum norm you expect, e.g. clip × patients per step). `fixed_events` are the other
    releases on the same patients (e.g. the GMM histogram's Gaussian): the target is then the ε of
    their composition with the rounds, as the ledger prices it, not of the rounds alone.
    `amplification` is the subsampling bound (module docstring); "general" reproduces plans made
    before the symmetric bound. Raises ValueError naming the knob when the ring is too small.
    """
    bound = _checked_site_bound(
        target_epsilon,
        delta,
        sample_rate,
        steps,
        clip,
        dim,
        honest_min,
        colluders,
        bits,
        max_sites,
        site_bound,
    )
    padded = padded_size(dim)
    shares = honest_min - colluders
    fixed = rdp_curve(list(fixed_events), [float(a) for a in ORDERS])
    if rdp_to_epsilon(np.asarray(ORDERS, dtype=np.float64), fixed, delta) >= target_epsilon:
        raise ValueError("the fixed releases alone already spend the whole epsilon target")
    limit = float(2 ** (bits - 1) - 1)

    def mu_for(gamma: float) -> float:
        l2, l1 = rounded_sensitivities(clip, gamma, padded)
        return calibrate_mu(target_epsilon, delta, sample_rate, steps, l1, l2, fixed, amplification)

    def fits(gamma: float, z: float, sites: int) -> bool:
        l2, _ = rounded_sensitivities(clip, gamma, padded)
        share = (z * l2) ** 2 / shares
        extent = ring_extent(
            sites, site_bound=bound, gamma=gamma, padded_dim=padded, share_mu=share, tail=wrap_tail
        )
        return extent <= limit

    gamma, mu = _solve_granularity(mu_for, fits, clip, padded, shares, bound, bits, max_sites)
    l2, l1 = rounded_sensitivities(clip, gamma, padded)
    share = mu / shares

    def inside(sites: int) -> bool:
        extent = ring_extent(
            sites, site_bound=bound, gamma=gamma, padded_dim=padded, share_mu=share, tail=wrap_tail
        )
        return extent <= limit

    good = _last_site_count_inside(inside, max_sites)
    return DistributedPlan(
        clip=float(clip),
        dim=dim,
        padded_dim=padded,
        gamma=gamma,
        bits=bits,
        honest_min=honest_min,
        colluders=colluders,
        site_bound=bound,
        mu_total=mu,
        share_mu=share,
        l2_sensitivity=l2,
        l1_sensitivity=l1,
        max_sites=max_sites,
        wrap_bound_sites=good,
        wrap_tail=wrap_tail,
        amplification=amplification,
    )


# -- encoding and decoding --------------------------------------------------------------------


def rotation_signs(round_seed: bytes, padded_dim: int) -> np.ndarray:
    """The public ±1 signs of the round's rotation: SHAKE-256 of the seed, one bit per coordinate
    (the same bytes on every platform and numpy version)."""
    if not isinstance(round_seed, bytes | bytearray) or len(round_seed) < 16:
        raise ValueError("round_seed must be at least 16 bytes")
    xof = hashlib.shake_256(_ROTATION_LABEL + len(round_seed).to_bytes(2, "big") + bytes(round_seed))
    bits = np.unpackbits(np.frombuffer(xof.digest((padded_dim + 7) // 8), dtype=np.uint8), bitorder="little")
    return 1.0 - 2.0 * bits[:padded_dim].astype(np.float64)


@functools.lru_cache(maxsize=16)
def _sylvester(n: int) -> np.ndarray:
    """The n×n Walsh–Hadamard matrix in Sylvester's order (entries ±1), n a power of two."""
    matrix = np.ones((1, 1))
    while matrix.shape[0] < n:
        matrix = np.block([[matrix, matrix], [matrix, -matrix]])
    matrix.setflags(write=False)  # shared by the cache
    return matrix


def _hadamard_blocks(x: np.ndarray, block: int) -> np.ndarray:
    """The unnormalised Walsh–Hadamard transform of each length-`block` run of x.

    H_B = H_a ⊗ H_b with a·b = B, so a run reshaped row-major to an a×b matrix X transforms to
    H_a·X·H_b: two small batched matrix products instead of log₂ B strided butterfly passes."""
    k = block.bit_length() - 1
    a = 1 << (k // 2)
    b = block // a
    return (_sylvester(a) @ x.reshape(-1, a, b) @ _sylvester(b)).reshape(-1)


def rotate(x: np.ndarray, round_seed: bytes, padded_dim: int) -> np.ndarray:
    """Blockwise H·diag(s)·pad(x) / √B: orthogonal, so norms (and the sensitivity) are preserved."""
    block = rotation_block(padded_dim)
    out = np.zeros(padded_dim, dtype=np.float64)
    out[: x.shape[0]] = x
    out *= rotation_signs(round_seed, padded_dim)
    out = _hadamard_blocks(out, block)
    out /= math.sqrt(block)
    return out


def unrotate(y: np.ndarray, round_seed: bytes, dim: int) -> np.ndarray:
    """The inverse of `rotate` (H·H = B·I per block), truncated to the first `dim` coordinates."""
    values = np.asarray(y, dtype=np.float64)
    block = rotation_block(values.shape[0])
    out = _hadamard_blocks(values, block)
    out /= math.sqrt(block)
    out *= rotation_signs(round_seed, out.shape[0])
    return out[:dim]


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


# -- noise sized for the confirmed survivors (add-then-remove) -----------------------------------
#
# A site cannot know, when it encodes, how many sites will survive. It adds share_mu = mu/(h − c),
# enough for the fewest survivors it unmasks with, but as independent Skellam layers over the
# survivor counts it can size for, its rungs h = r_0 < r_1 < … < r_L = n (n = plan.max_sites, the
# run's sites): a base of variance mu/(n − c) from its secret keystream and one removable layer i of
# variance mu/(r_i − c) − mu/(r_(i+1) − c), each drawn from a seed of its own. Skellam variables add
# (independent Poisson differences), so the layers sum to exactly Skellam(share_mu), the share the
# ring and the accounting were sized for. Once m survivors are confirmed a site reveals the seeds of
# the layers i with r_(i+1) ≤ m and the server subtracts them: the site keeps mu/(r − c) for r the
# largest rung ≤ m, at least mu/(m − c), so the m − c honest survivors the c-colluder assumption
# leaves still carry at least mu_total, the noise the ledger charged for. A site that confirms and
# then drops reveals nothing and keeps more. Each layer costs the site one more Skellam draw and the
# server one per revealing site, so the rungs are h and the top TOP_RUNGS counts only (every count
# at the default h = n − c with one colluder; a dropout past them keeps the noise sized for h).

SEED_BYTES = 32  # a removable layer's seed: the key of its own AES-CTR noise stream
TOP_RUNGS = 2  # survivor counts sized for below n: all surviving, and one dropout


def rungs(plan: DistributedPlan) -> list[int]:
    """The survivor counts a share can be sized for: h and the TOP_RUNGS highest counts above it."""
    h, n = plan.honest_min, plan.max_sites
    return sorted({h} | {r for r in range(n - TOP_RUNGS + 1, n + 1) if r > h})


def removable_layers(plan: DistributedPlan) -> list[float]:
    """Variances of the removable layers: layer i, mu/(r_i − c) − mu/(r_(i+1) − c) over consecutive
    rungs. Empty when h = n (nothing can be removed)."""
    c, mu, counts = plan.colluders, plan.mu_total, rungs(plan)
    return [mu / (low - c) - mu / (high - c) for low, high in zip(counts, counts[1:], strict=False)]


def base_variance(plan: DistributedPlan) -> float:
    """The part of a share no survivor count removes: mu/(n − c)."""
    return plan.mu_total / (plan.max_sites - plan.colluders)


def sized_for(plan: DistributedPlan, survivors: int) -> int:
    """The largest rung at most `survivors`: the count a share's kept noise is sized for."""
    check_survivors(plan, survivors)
    return max(r for r in rungs(plan) if r <= survivors)


def kept_variance(plan: DistributedPlan, survivors: int) -> float:
    """What a site's share keeps once it has revealed its layers for `survivors` confirmed survivors:
    mu/(r − c) for r = sized_for(m) ≤ m, so that m − c honest survivors carry at least mu_total."""
    return plan.mu_total / (sized_for(plan, survivors) - plan.colluders)


def check_survivors(plan: DistributedPlan, survivors: int) -> int:
    if isinstance(survivors, bool) or not isinstance(survivors, int):
        raise ValueError(f"the survivor count must be an int, got {survivors!r}")
    if not plan.honest_min <= survivors <= plan.max_sites:
        raise ValueError(
            f"{survivors} survivors lies outside [h = {plan.honest_min}, n = {plan.max_sites}]: "
            "no layer removal is defined for it"
        )
    return survivors


def layers_for(plan: DistributedPlan, survivors: int) -> list[int]:
    """The indices of the layers a site reveals for `survivors` confirmed survivors: those whose upper
    rung is at most m."""
    check_survivors(plan, survivors)
    counts = rungs(plan)
    return [i for i in range(len(counts) - 1) if counts[i + 1] <= survivors]


def layer_noise(plan: DistributedPlan, index: int, seed: bytes) -> np.ndarray:
    """Removable layer `index` of a share (int64, length padded_dim), regenerated from its seed:
    the site adds it when it encodes, the server subtracts it when the seed is revealed."""
    variances = removable_layers(plan)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(variances):
        raise ValueError(f"layer index {index!r} is not one of this plan's {len(variances)} layers")
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        raise ValueError(f"a layer seed is {SEED_BYTES} bytes")
    rng = NoiseStream(seed).cipher_generator()
    half = variances[index] / 2
    return rng.poisson(half, plan.padded_dim) - rng.poisson(half, plan.padded_dim)


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


def remove_layers(
    total: np.ndarray, plan: DistributedPlan, revealed: Sequence[tuple[int, bytes]]
) -> np.ndarray:
    """The ring sum with the revealed layers (index, seed) taken out, mod 2^bits."""
    out = np.asarray(total).astype(np.uint64)
    for index, seed in revealed:
        out -= layer_noise(plan, index, seed).astype(np.uint64)  # two's complement: mod 2^64
    return out & np.uint64((1 << plan.bits) - 1)


def centre(total: np.ndarray, bits: int) -> np.ndarray:
    """Residues mod 2^bits as signed integers in [−2^(bits−1), 2^(bits−1))."""
    words = np.asarray(total).astype(np.uint64) & np.uint64((1 << bits) - 1)
    signed = words.astype(np.int64)
    signed[signed >= (1 << (bits - 1))] -= 1 << bits
    return signed


def decode_sum(total: np.ndarray, plan: DistributedPlan, round_seed: bytes) -> np.ndarray:
    """The released noisy sum (float64, length plan.dim) from the ring sum of the sites' shares."""
    values = np.asarray(total)
    if values.shape != (plan.padded_dim,):
        raise ValueError(f"the ring sum must have length {plan.padded_dim}, got shape {values.shape}")
    signed = centre(values, plan.bits).astype(np.float64)
    return unrotate(signed, round_seed, plan.dim) * plan.gamma
