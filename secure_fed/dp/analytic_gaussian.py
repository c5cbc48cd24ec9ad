"""Exact (ε, δ) of composed full-population Gaussian mechanisms (pure math, no state).

k Gaussian releases with sensitivity-normalised noise σ_i compose to one Gaussian mechanism with
μ = sqrt(Σ 1/σ_i²) (μ-GDP, Dong, Roth & Su 2019), whose privacy profile is exact (Balle & Wang
2018, Theorem 8):  δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ).
"""

from __future__ import annotations

import math

from scipy import optimize, special


def composed_mu(noise_multipliers_and_counts: list[tuple[float, int]]) -> float:
    """μ of the composition; inf when any release with count > 0 has no noise."""
    total = 0.0
    for sigma, count in noise_multipliers_and_counts:
        if count == 0:
            continue
        if sigma == 0:
            return math.inf
        total += count / sigma**2
    return math.sqrt(total)


def delta_for_epsilon(mu: float, epsilon: float) -> float:
    if mu == 0:
        return 0.0
    # The second term in log space: e^ε Φ(·) overflows long before the difference does.
    first = special.ndtr(mu / 2 - epsilon / mu)
    second = math.exp(epsilon + special.log_ndtr(-mu / 2 - epsilon / mu))
    return max(0.0, float(first - second))


def epsilon_for_delta(mu: float, delta: float) -> float:
    """Smallest ε with δ(ε) ≤ delta (δ(ε) is decreasing in ε)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if math.isinf(mu):
        return math.inf
    if delta_for_epsilon(mu, 0.0) <= delta:
        return 0.0
    high = max(1.0, mu)
    while delta_for_epsilon(mu, high) > delta:
        high *= 2
    return float(optimize.brentq(lambda eps: delta_for_epsilon(mu, eps) - delta, 0.0, high, xtol=1e-12))
