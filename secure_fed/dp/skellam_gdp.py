"""A PLD route for the vector Skellam sum, and why it is not the accountant (docs/THREAT_MODEL.md,
"Why the Skellam sum keeps RDP").

PLD/PRV composition needs one dominating pair for every neighbouring pair the mechanism can produce.
For the Skellam sum those are (N, N + v) with N i.i.d. Skellam of variance mu per coordinate and v
any integer vector with ‖v‖₂ ≤ Δ₂ (and ‖v‖₁ ≤ Δ₁). Skellam noise is not rotation invariant, so the
norms do not fix the worst v: `shift_hockey_stick` gives the exact privacy profile of one such pair,
and two vectors of equal norms have profiles that cross (tests/dp/test_skellam_gdp.py), so no v is
"the" worst case and pricing the pair at one chosen v is not sound.

A pair that dominates them all exists if each coordinate is Gaussian-DP: with X ~ Sk(mu) and
G(t) = Φ⁻¹(P(X < t)), the shift-by-k pair of one coordinate has trade-off curve ≥ that of
(N(0, 1), N(s, 1)) iff G(t) − G(t − k) ≤ s at every integer t (its trade-off curve is the
piecewise-linear curve through those thresholds' errors, and the Gaussian's is convex), so
s = |k|·M with M = max_t (G(t + 1) − G(t)) works. Gaussian pairs compose in ℓ₂, so every v is then
dominated by (N(0, 1), N(M·‖v‖₂, 1)): the Poisson-sampled Gaussian with noise multiplier
1 / (M·Δ₂), which the PRV accountant prices. `quantile_steps` computes the steps; in every case
checked the largest is the centre's, M = 2√2·erfinv(e^−mu·I₀(mu)) (`centre_step`), and
M·√mu = 1 + 1/(6·mu) + O(mu⁻²). That the centre step is the largest for every mu is checked
numerically (steps resolvable in float64, mu ≤ 1e6), not proved, which is why `gdp_epsilon` is
not what plans are calibrated with or what the ledger charges: it is the measured gap.

Pure numpy/scipy: imports nothing of clients, server or Flower.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from secure_fed.dp.accountants import prv_epsilon
from secure_fed.dp.events import Event, PoissonSampledGaussian

# Below this cumulative probability float64's Φ⁻¹ and cumulative sums no longer resolve a step.
_RESOLVABLE = 1e-290


def skellam_pmf(mu: float, support: np.ndarray) -> np.ndarray:
    """P(X = x) for X = Poisson(mu/2) − Poisson(mu/2) (variance mu): e^−mu·I_|x|(mu)."""
    from scipy.special import ive

    if not mu > 0:
        raise ValueError(f"mu must be > 0, got {mu}")
    return np.asarray(ive(np.abs(support), mu), dtype=np.float64)


def centre_step(mu: float) -> float:
    """G(1) − G(0) = 2·Φ⁻¹((1 + p₀)/2) = 2√2·erfinv(p₀), p₀ = P(X = 0), in a form exact for tiny p₀."""
    from scipy.special import erfinv, i0e

    if not mu > 0:
        raise ValueError(f"mu must be > 0, got {mu}")
    # i0e, not ive(0, ·): scipy's ive returns NaN for arguments past about 1e9
    return float(2.0 * math.sqrt(2.0) * erfinv(i0e(mu)))


def quantile_steps(mu: float) -> np.ndarray:
    """G(t + 1) − G(t) for t = −R, …, 0 (the lower half, ending with the centre step; the upper
    half mirrors it), over the thresholds float64 resolves. R reaches 60 standard deviations."""
    from scipy.special import ndtri

    reach = int(60 * math.sqrt(mu) + 200)
    t = np.arange(-reach, 0)  # P(X ≤ t) for t ≤ −1, summed from the far tail for relative accuracy
    below = np.cumsum(skellam_pmf(mu, t))
    quantiles = ndtri(below[below > _RESOLVABLE])
    return np.append(np.diff(quantiles), centre_step(mu))


def gdp_noise_multiplier(mu: float, l2_sensitivity: float) -> float:
    """1 / (M·Δ₂): the Gaussian noise multiplier whose pair dominates every shift of norm ≤ Δ₂,
    M being the centre step (conditional on it being the largest: module docstring)."""
    if not l2_sensitivity > 0:
        raise ValueError(f"l2_sensitivity must be > 0, got {l2_sensitivity}")
    return 1.0 / (centre_step(mu) * l2_sensitivity)


def gdp_epsilon(
    mu: float,
    l2_sensitivity: float,
    sample_rate: float,
    steps: int,
    delta: float,
    fixed_events: Sequence[Event] = (),
) -> float:
    """ε at δ of `steps` Poisson-sampled Skellam sums (variance mu, ‖v‖₂ ≤ Δ₂) composed with
    `fixed_events`, priced with the PRV accountant on the Gaussian dominating pair. Conditional on
    the centre-step lemma (module docstring); raises when the PRV accountant cannot price it."""
    event = PoissonSampledGaussian(
        sampling_rate=sample_rate, noise_multiplier=gdp_noise_multiplier(mu, l2_sensitivity), count=steps
    )
    result = prv_epsilon([*fixed_events, event], delta)
    if result.epsilon is None:
        raise ValueError(f"the PRV accountant cannot price this schedule: {result.reason}")
    return result.epsilon


def gdp_calibrated_multiplier(
    target_epsilon: float,
    l2_sensitivity: float,
    sample_rate: float,
    steps: int,
    delta: float,
    fixed_events: Sequence[Event] = (),
    tolerance: float = 1e-4,
) -> float:
    """The z = √mu / Δ₂ at which `gdp_epsilon` meets `target_epsilon` (bisection, ε within
    tolerance·target below it): what a plan calibrated this way would add."""

    def eps(z: float) -> float:
        return gdp_epsilon((z * l2_sensitivity) ** 2, l2_sensitivity, sample_rate, steps, delta, fixed_events)

    low, high = 0.0, 1.0
    while eps(high) > target_epsilon:
        low, high = high, 2 * high
        if high > 1e6:
            raise ValueError(f"no noise up to z = 1e6 reaches epsilon <= {target_epsilon:g}")
    while True:
        middle = (low + high) / 2
        if eps(middle) <= target_epsilon:
            high = middle
        else:
            low = middle
        if eps(high) >= target_epsilon * (1 - tolerance) or high - low < 1e-9 * high:
            return high


def shift_hockey_stick(mu: float, shift: Sequence[int], epsilons: Sequence[float]) -> np.ndarray:
    """Exact δ(ε) = Σ_x max(0, Q(x) − e^ε·P(x)) for P = Sk(mu)^d, Q = P shifted by the integer vector
    `shift` (a few coordinates at small mu: the joint support is enumerated). Skellam noise is
    symmetric, so the reverse direction gives the same curve."""
    if not shift or any(int(k) != k for k in shift):
        raise ValueError(f"shift must be a non-empty integer vector, got {shift!r}")
    reach = int(40 * math.sqrt(mu) + max(abs(int(k)) for k in shift) + 40)
    support = np.arange(-reach, reach + 1)
    p = skellam_pmf(mu, support)
    losses, weights = np.zeros(1), np.ones(1)
    for k in (int(k) for k in shift):
        q = skellam_pmf(mu, support - k)  # Q's coordinate: P(X + k = x)
        keep = (q > 1e-300) & (p > 0)
        losses = (losses[:, None] + np.log(q[keep] / p[keep])[None, :]).ravel()
        weights = (weights[:, None] * q[keep][None, :]).ravel()
        # mass this small cannot move δ at the precision the comparisons use
        kept = weights > 1e-30
        losses, weights = losses[kept], weights[kept]
    return np.array([float(np.sum(weights * -np.expm1(np.minimum(e - losses, 0.0)))) for e in epsilons])


def gaussian_hockey_stick(s: float, epsilons: Sequence[float]) -> np.ndarray:
    """δ(ε) of the pair (N(0, 1), N(s, 1)): Φ(s/2 − ε/s) − e^ε·Φ(−s/2 − ε/s)."""
    from scipy.special import ndtr

    e = np.asarray(epsilons, dtype=np.float64)
    return np.asarray(ndtr(s / 2 - e / s) - np.exp(e) * ndtr(-s / 2 - e / s))
