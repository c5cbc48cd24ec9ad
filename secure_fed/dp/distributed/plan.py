"""The plan of distributed rounds: `DistributedPlan` (the public numbers every party derives and
checks) and `plan_distributed` (the Skellam noise calibrated to an ε target, the ring's granularity
sized so the sites' noisy sums cannot wrap). The mechanism and its proofs: the package docstring."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from secure_fed.dp.accountants import epsilon_rdp, rdp_curve
from secure_fed.dp.distributed.rotation import padded_size
from secure_fed.dp.distributed.sizing import calibrate_mu, rdp_to_epsilon, ring_extent
from secure_fed.dp.events import (
    ROUNDING_FLOAT_SLACK,
    UNMARKED_AMPLIFICATION,
    Event,
    SkellamSum,
    rounded_sensitivities,
)
from secure_fed.dp.skellam import ORDERS, check_amplification

# Rotation float error stays far below one integer unit while the site's scaled norm is below
# this (see the module docstring); a finer γ would buy nothing the accounting can use.
MAX_SCALED_NORM = float(2**32)
# numpy's Poisson sampler drifts for huge λ (at λ = 4e14 its variance came out 15% high); up to
# 1e13 its mean, variance and skew matched Poisson's within sampling error, so shares stay below.
MAX_POISSON_LAMBDA = float(2**36)
WRAP_TAIL = 2.0**-40
MAX_INFLATION = 0.05  # Δ₂ / (C/γ) − 1 above this: the ring is too small to be worth using


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
