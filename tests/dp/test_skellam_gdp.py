"""Why the Skellam sum keeps its RDP accountant, and what the Gaussian-dominated PLD route would
give (secure_fed/dp/skellam_gdp.py; docs/THREAT_MODEL.md, "Why the Skellam sum keeps RDP")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from secure_fed.dp.skellam_gdp import (
    centre_step,
    gaussian_hockey_stick,
    gdp_calibrated_multiplier,
    gdp_epsilon,
    gdp_noise_multiplier,
    quantile_steps,
    shift_hockey_stick,
)

EPSILONS = np.linspace(0.0, 8.0, 81)


def test_equal_norm_shifts_have_crossing_profiles() -> None:
    """(5, 0) and (3, 4): integer, ‖·‖₂ = 5, ‖·‖₁ ≤ 7, at mu = 8. Neither profile lies above the other,
    so no single Δ is the worst case the norms allow and a PLD of one chosen pair is not sound."""
    concentrated = shift_hockey_stick(8.0, [5, 0], EPSILONS)
    spread = shift_hockey_stick(8.0, [3, 4], EPSILONS)
    gap = concentrated - spread
    assert gap.max() > 5e-3  # the concentrated shift leaks more at small ε ...
    assert gap.min() < -1e-2  # ... the spread one at large ε
    assert gap[0] > 0 and gap[-1] < 0


def test_two_dimensional_profile_is_exact() -> None:
    """A zero coordinate adds nothing; at ε = 0 the profile is the total variation, which for one
    coordinate is P(X ≥ 0) − P(X ≥ k) summed directly."""
    one = shift_hockey_stick(8.0, [5], EPSILONS)
    assert np.allclose(shift_hockey_stick(8.0, [5, 0], EPSILONS), one, atol=1e-14)
    from secure_fed.dp.skellam_gdp import skellam_pmf

    support = np.arange(-400, 401)
    p = skellam_pmf(8.0, support)
    tv = 0.5 * np.abs(p - skellam_pmf(8.0, support - 5)).sum()
    assert one[0] == pytest.approx(tv, abs=1e-12)


def test_gaussian_pair_at_the_same_variance_does_not_dominate() -> None:
    """The pair the PRV accountant would price without the step constant, (N(0, 1), N(‖v‖₂/√mu, 1)),
    lies below the exact Skellam profile somewhere: the Skellam sum is not as private as the Gaussian
    of its variance, so 'price it as a Gaussian' is not sound as it stands."""
    for mu, shift in ((2.0, [3]), (8.0, [5, 0]), (8.0, [3, 4]), (32.0, [2, 2])):
        s = math.hypot(*shift) / math.sqrt(mu)
        exact = shift_hockey_stick(mu, shift, EPSILONS)
        assert np.min(gaussian_hockey_stick(s, EPSILONS) - exact) < -1e-4, (mu, shift)


@pytest.mark.slow  # a dense numerical sweep: make test-fast leaves it out
def test_centre_step_pair_dominates_every_checked_shift() -> None:
    """(N(0, 1), N(M·‖v‖₂, 1)) with M the centre step lies above every exact profile checked, the
    crossing pair included: the envelope the route needs, here where it can be computed."""
    for mu, shift in (
        (2.0, [3]),
        (2.0, [2, 2]),
        (2.0, [1, 1, 1, 1]),
        (8.0, [5, 0]),
        (8.0, [3, 4]),
        (8.0, [1, 1, 1, 1]),
        (32.0, [2, 2]),
    ):
        s = centre_step(mu) * math.hypot(*shift)
        exact = shift_hockey_stick(mu, shift, EPSILONS)
        assert np.all(gaussian_hockey_stick(s, EPSILONS) >= exact - 1e-12), (mu, shift)


@pytest.mark.parametrize("mu", [0.05, 0.5, 2.0, 8.0, 100.0, 1e4, 1e6])
def test_quantile_steps_peak_at_the_centre(mu: float) -> None:
    """The lemma the route rests on, checked over every threshold float64 resolves: the steps of
    G = Φ⁻¹∘F grow towards the centre, so the centre step is M."""
    steps = quantile_steps(mu)
    assert len(steps) > 50
    assert np.all(np.diff(steps) > 0)
    assert steps[-1] == max(steps)


def test_centre_step_tends_to_the_gaussian_as_one_sixth_over_mu() -> None:
    for mu in (1e2, 1e4, 1e6, 1e8):
        excess = centre_step(mu) * math.sqrt(mu) - 1
        assert excess * mu == pytest.approx(1 / 6, rel=2e-2), mu
    assert centre_step(1e2) * 10 > 1 + 1 / 600  # above the Gaussian: the 1-D pair needs the factor


@pytest.mark.slow  # a numerical check at the hospital recipe: make test-fast leaves it out
def test_hospital_gap_pinned() -> None:
    """The hospital plan's numbers (benchmarks/skellam_gdp.py): its RDP-calibrated z = 0.8357 would
    price at ε ≈ 7.06 on the route, which would calibrate z = 0.7903 for ε = 8. Inputs pinned from
    plan_for(configs/hospital-scale-distributed.toml, d = 68,000, 5 sites)."""
    from secure_fed.dp.events import Gaussian

    mu, l2 = 122543939085.12067, 418910.0448527683
    fixed = (Gaussian(noise_multiplier=4.57421875, count=1),)
    z = math.sqrt(mu) / l2
    assert z == pytest.approx(0.83565, abs=1e-5)
    assert gdp_noise_multiplier(mu, l2) == pytest.approx(z, rel=1e-11)
    assert gdp_epsilon(mu, l2, 0.05, 200, 1e-5, fixed) == pytest.approx(7.062, abs=0.01)
    assert gdp_calibrated_multiplier(8.0, l2, 0.05, 200, 1e-5, fixed) == pytest.approx(0.7903, abs=2e-4)


def test_inputs_refused() -> None:
    with pytest.raises(ValueError, match="mu"):
        centre_step(0.0)
    with pytest.raises(ValueError, match="integer"):
        shift_hockey_stick(8.0, [1.5], EPSILONS)
    with pytest.raises(ValueError, match="l2_sensitivity"):
        gdp_noise_multiplier(8.0, 0.0)
