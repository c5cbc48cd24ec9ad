"""The survivor top-up: a share's noise as a base and removable layers, sized for the survivor
counts a site can confirm (add-then-remove). Why it is safe: the comment below."""

from __future__ import annotations

import numpy as np

from secure_fed.dp.distributed.plan import DistributedPlan
from secure_fed.dp.keystream import NoiseStream

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
