"""Choose δ and noise multipliers before round 1 so the planned releases meet an (ε, δ) target.

Budget split rule (`split_budget`). A site's plan releases, on the same patient population, the
GMM histogram once (one Gaussian), DP-SGD (`rounds × steps_per_round` Poisson-sampled Gaussian
steps) and, when the α scalars are computed on that population, one Gaussian per round:

1. the GMM histogram gets `gmm_fraction` of ε, the α scalars `alpha_fraction` of ε, each priced
   on its own at the full δ (exact analytic-Gaussian ε, so the fraction is met exactly, or a
   given σ is kept as is);
2. DP-SGD gets everything that is left: its σ is solved so that the ε of the *composition* of all
   planned events is the target. Composition is sub-additive, so this spends exactly the target
   while steps 1's shares were priced conservatively; the whole plan is then checked once more.

With `accountant="prv"` the DP-SGD solve uses the tight PRV value and falls back to RDP (a valid,
looser bound) where PRV cannot be computed; with "rdp" (the default) it uses RDP throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from secure_fed.dp.accountants import RDP, Accountant, accountant_named
from secure_fed.dp.analytic_gaussian import composed_mu, epsilon_for_delta
from secure_fed.dp.events import Event, Gaussian, PoissonSampledGaussian

MAX_SIGMA = 1e4


class CalibrationError(ValueError):
    """No noise level meets the target (or the target / δ is invalid)."""


def delta_bucket(n_patients: int) -> int:
    """The smallest power of ten ≥ n (at least 10): the only thing about n that the default δ
    depends on, so the released δ names n's decade and nothing finer."""
    if n_patients < 1:
        raise ValueError(f"n_patients must be >= 1, got {n_patients}")
    bucket = 10
    while bucket < n_patients:  # integers: no float log10 rounding at exact powers of ten
        bucket *= 10
    return bucket


def default_delta(n_patients: int) -> float:
    """δ = min(1e-5, 1/(10 B)), B = `delta_bucket(n)` the smallest power of ten ≥ n.

    δ travels in every privacy record and training reply, so it must not be a function of the exact
    n: 1/(10 n) told the server 12,000 from 12,001 patients. B ≥ n, so δ ≤ 1/(10 n), well below
    1/n as before ("release one patient's record" is not ε-cheap); what δ releases is the decade
    of n only (n ≤ 10,000 → 1e-5; 10,000 < n ≤ 100,000 → 1e-6; …), coarser than the power-of-two
    range the privacy records give anyway."""
    return min(1e-5, 1.0 / (10 * delta_bucket(n_patients)))


def check_delta(delta: float, n_patients: int) -> None:
    """Refuse δ ≥ 1/n: such a δ admits mechanisms that publish one whole patient's data outright."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if n_patients < 1:
        raise ValueError(f"n_patients must be >= 1, got {n_patients}")
    if delta >= 1.0 / n_patients:
        raise ValueError(
            f"delta={delta:g} is not smaller than 1/n_patients = 1/{n_patients} = {1.0 / n_patients:g}: "
            "with such a delta a mechanism may reveal a whole patient's data and still count as private. "
            f"Use delta < 1/n, e.g. the default {default_delta(n_patients):g} "
            "(min(1e-5, 1/(10 B)), B = n rounded up to a power of ten)."
        )


def epsilon_of(events: Sequence[Event], delta: float, accountant: Accountant | str) -> float:
    """ε of `events` under `accountant` (or the one its config string names); PRV falls back to
    RDP when it is not computable (`Accountant.bound`)."""
    return accountant_named(accountant).bound(events, delta)


def _solve_sigma(epsilon_at: Callable[[float], float], target_epsilon: float, tolerance: float) -> float:
    """Smallest-ish σ with target·(1 − tolerance) ≤ ε(σ) ≤ target, ε decreasing in σ (bisection)."""
    if target_epsilon <= 0 or not math.isfinite(target_epsilon):
        raise CalibrationError(f"target epsilon must be positive and finite, got {target_epsilon}")
    low, high = 0.0, 1.0
    eps_high = epsilon_at(high)
    while eps_high > target_epsilon:
        low, high = high, 2 * high
        if high > MAX_SIGMA:
            raise CalibrationError(
                f"no noise multiplier up to {MAX_SIGMA:g} reaches epsilon <= {target_epsilon:g}: "
                "the target is too small for this plan (or the fixed releases already exceed it)"
            )
        eps_high = epsilon_at(high)
    # Invariant: ε(high) ≤ target < ε(low) (ε(0) = inf for any release that touches a patient).
    while eps_high < target_epsilon * (1 - tolerance) and high - low > 1e-9 * high:
        middle = (low + high) / 2
        eps_middle = epsilon_at(middle)
        if eps_middle <= target_epsilon:
            high, eps_high = middle, eps_middle
        else:
            low = middle
    return high


def calibrate_noise(
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    accountant: Accountant | str = RDP,
    tolerance: float = 0.01,
) -> float:
    """σ for `steps` Poisson-sampled Gaussian steps at rate q so that target(1 − tol) ≤ ε ≤ target."""
    if steps < 1:
        raise CalibrationError(f"steps must be >= 1, got {steps}")
    if sampling_rate <= 0:
        raise CalibrationError("sampling_rate must be > 0 (nothing is released at q = 0)")
    return _solve_sigma(
        lambda sigma: epsilon_of([PoissonSampledGaussian(sampling_rate, sigma, steps)], delta, accountant),
        target_epsilon,
        tolerance,
    )


def calibrate_gaussian(target_epsilon: float, delta: float, count: int = 1, tolerance: float = 1e-3) -> float:
    """σ for `count` full-population Gaussian releases (exact analytic-Gaussian ε)."""
    if count < 1:
        raise CalibrationError(f"count must be >= 1, got {count}")
    return _solve_sigma(
        lambda sigma: epsilon_for_delta(composed_mu([(sigma, count)]), delta), target_epsilon, tolerance
    )


@dataclass(frozen=True)
class BudgetSplit:
    dpsgd_noise_multiplier: float
    gmm_noise_multiplier: float | None
    alpha_noise_multiplier: float | None
    planned_events: tuple[Event, ...]
    planned_epsilon: float


def split_budget(
    total_epsilon: float,
    delta: float,
    *,
    sampling_rate: float,
    rounds: int,
    steps_per_round: int,
    gmm_fraction: float | None = 0.1,
    alpha_fraction: float | None = None,
    gmm_noise_multiplier: float | None = None,
    alpha_noise_multiplier: float | None = None,
    accountant: Accountant | str = RDP,
    tolerance: float = 0.01,
) -> BudgetSplit:
    """Noise multipliers for one population's planned releases (rule in the module docstring).

    A mechanism is left out of the plan when both its fraction and its σ are None (e.g. the
    α scalars for the train population). A given σ overrides the fraction.
    """
    if rounds < 1 or steps_per_round < 1:
        raise CalibrationError("rounds and steps_per_round must be >= 1")
    fixed: list[Event] = []
    fractions = 0.0
    sigmas: dict[str, float | None] = {}
    for name, fraction, sigma, count in (
        ("gmm", gmm_fraction, gmm_noise_multiplier, 1),
        ("alpha", alpha_fraction, alpha_noise_multiplier, rounds),
    ):
        if sigma is None and fraction is not None:
            if not 0 < fraction < 1:
                raise CalibrationError(f"{name}_fraction must lie in (0, 1), got {fraction}")
            fractions += fraction
            sigma = calibrate_gaussian(fraction * total_epsilon, delta, count)
        sigmas[name] = sigma
        if sigma is not None:
            fixed.append(Gaussian(sigma, count))
    if fractions >= 1:
        raise CalibrationError(f"gmm_fraction + alpha_fraction = {fractions:g} leaves nothing for DP-SGD")
    if fixed and epsilon_of(fixed, delta, accountant) >= total_epsilon:
        raise CalibrationError("the GMM and α releases alone already spend the whole epsilon target")
    steps = rounds * steps_per_round
    dpsgd_sigma = _solve_sigma(
        lambda sigma: epsilon_of(
            [*fixed, PoissonSampledGaussian(sampling_rate, sigma, steps)], delta, accountant
        ),
        total_epsilon,
        tolerance,
    )
    planned = (*fixed, PoissonSampledGaussian(sampling_rate, dpsgd_sigma, steps))
    return BudgetSplit(
        dpsgd_noise_multiplier=dpsgd_sigma,
        gmm_noise_multiplier=sigmas["gmm"],
        alpha_noise_multiplier=sigmas["alpha"],
        planned_events=planned,
        planned_epsilon=epsilon_of(planned, delta, accountant),
    )


def calibrate_gaussian_for(
    target_epsilon: float, delta: float, count: int, accountant: Accountant | str, tolerance: float = 0.01
) -> float:
    """σ for `count` Gaussian releases priced by the same accountant the budget guard uses, so the
    plan cannot be refused by a looser bound than the one it was solved with."""
    if count < 1:
        raise CalibrationError(f"count must be >= 1, got {count}")
    return _solve_sigma(
        lambda sigma: epsilon_of([Gaussian(sigma, count)], delta, accountant), target_epsilon, tolerance
    )
