"""The numeric solvers behind plan_distributed: (ε, δ) from an RDP curve, the Skellam noise that
meets an ε target, and how far the ring's integer sum can reach. Kept apart from plan.py so that
file stays one job (the plan); nothing here knows a plan."""

from __future__ import annotations

import math

import numpy as np

from secure_fed.dp.skellam import ORDERS, skellam_subsampled_curve


def rdp_to_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    """(ε, δ) from an RDP curve with Opacus' conversion (Balle et al. 2020), as dp.accountants."""
    from opacus.accountants.analysis import rdp as rdp_analysis

    if not np.any(rdp):
        return 0.0
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        eps, _ = rdp_analysis.get_privacy_spent(orders=list(orders), rdp=rdp, delta=delta)
    return max(0.0, float(eps))


def _epsilon_for(
    q: float,
    steps: int,
    delta: float,
    l1: float,
    l2: float,
    mu: float,
    fixed: np.ndarray,
    amplification: str,
) -> float:
    curve = np.asarray(skellam_subsampled_curve(q, l1, l2, mu, amplification)) * steps + fixed
    return rdp_to_epsilon(np.asarray(ORDERS, dtype=np.float64), curve, delta)


def calibrate_mu(
    target: float,
    delta: float,
    q: float,
    steps: int,
    l1: float,
    l2: float,
    fixed: np.ndarray,
    amplification: str,
    tolerance: float = 1e-5,
) -> float:
    """Smallest-ish mu (bisection on the noise multiplier z = √mu / Δ₂) with ε ≤ target and
    ε ≥ target − tolerance·target."""

    def eps(z: float) -> float:
        return _epsilon_for(q, steps, delta, l1, l2, (z * l2) ** 2, fixed, amplification)

    low, high = 0.0, 1.0
    while eps(high) > target:
        low, high = high, 2 * high
        if high > 1e6:
            raise ValueError(f"no Skellam noise up to z = 1e6 reaches epsilon <= {target:g}")
    for _ in range(200):
        middle = (low + high) / 2
        if eps(middle) <= target:
            high = middle
        else:
            low = middle
        if eps(high) >= target * (1 - tolerance) or high - low < 1e-12 * high:
            break
    return (high * l2) ** 2


def skellam_tail(total_mu: float, log_prob: float) -> float:
    """t with P(|Skellam(variance total_mu)| > t) ≤ exp(log_prob), by the Chernoff bound
    log P(X > t) ≤ V(√(1 + (t/V)²) − 1) − t·asinh(t/V) (both tails: + log 2)."""
    if total_mu <= 0:
        return 0.0

    def log_tail(t: float) -> float:
        r = t / total_mu
        return math.log(2.0) + total_mu * (math.sqrt(1 + r * r) - 1) - t * math.asinh(r)

    low, high = 0.0, math.sqrt(total_mu) + 1.0
    while log_tail(high) > log_prob:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        if log_tail(middle) > log_prob:
            low = middle
        else:
            high = middle
    return high


def ring_extent(
    sites: int, *, site_bound: float, gamma: float, padded_dim: int, share_mu: float, tail: float
) -> float:
    """Bound on |coordinate| of the integer sum of `sites` shares, except with probability `tail`.

    The signal part holds for every input, even one chosen knowing the round's rotation: a
    coordinate of the rotated sum is at most its norm, sites·site_bound/γ; each site's rounding
    adds less than one unit; the Skellam noise of all the sites' shares exceeds its bound on some
    coordinate with probability at most `tail` (Chernoff bound, union over the D coordinates)."""
    signal = sites * site_bound / gamma
    noise = skellam_tail(sites * share_mu, math.log(tail) - math.log(padded_dim))
    return signal + sites + noise
