import pytest

from secure_fed.dp.accountants import epsilon_prv, epsilon_rdp
from secure_fed.dp.calibration import (
    CalibrationError,
    calibrate_gaussian,
    calibrate_noise,
    check_delta,
    default_delta,
    split_budget,
)
from secure_fed.dp.events import Gaussian, PoissonSampledGaussian


def test_default_delta() -> None:
    assert default_delta(100) == 1e-5
    assert default_delta(1_000_000) == pytest.approx(1e-7)
    check_delta(default_delta(37), 37)


def test_default_delta_names_only_the_decade_of_n() -> None:
    # δ is released in every privacy record: n and n + 1 give the same δ inside a decade
    assert default_delta(12_000) == default_delta(12_001) == pytest.approx(1e-6)
    assert default_delta(10_000) == 1e-5 and default_delta(10_001) == pytest.approx(1e-6)
    assert default_delta(100_000) == pytest.approx(1e-6) and default_delta(100_001) == pytest.approx(1e-7)
    for n in (1, 9, 10, 11, 9_999, 10_000, 10_001, 12_345, 99_999, 100_000, 100_001, 3_000_000):
        assert default_delta(n) <= min(1e-5, 1 / (10 * n)) * (1 + 1e-12)  # never above the old rule
        check_delta(default_delta(n), n)


def test_delta_not_below_one_over_n_is_refused_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match=r"not smaller than 1/n_patients = 1/50") as info:
        check_delta(0.02, 50)
    assert "reveal a whole patient" in str(info.value)
    with pytest.raises(ValueError):
        check_delta(1.0 / 50, 50)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_calibrated_sigma_meets_the_target_within_one_percent(accountant: str) -> None:
    target, delta, q, steps = 3.0, 1e-5, 0.05, 200
    sigma = calibrate_noise(target, delta, q, steps, accountant=accountant)
    price = epsilon_rdp if accountant == "rdp" else epsilon_prv
    achieved = price([PoissonSampledGaussian(q, sigma, steps)], delta)
    assert achieved is not None
    assert target * 0.99 <= achieved <= target
    # A little less noise must overshoot: σ is (close to) the least noise that meets the target.
    assert price([PoissonSampledGaussian(q, sigma * 0.97, steps)], delta) > target


def test_calibrate_gaussian_is_exact() -> None:
    sigma = calibrate_gaussian(0.5, 1e-5)
    assert epsilon_prv([Gaussian(sigma, 1)], 1e-5) == pytest.approx(0.5, rel=1e-3)


def test_impossible_target_is_an_error() -> None:
    with pytest.raises(CalibrationError):
        calibrate_noise(1e-9, 1e-5, 1.0, 10**6)


def test_split_budget_spends_the_whole_target_and_no_more() -> None:
    split = split_budget(
        4.0, 1e-5, sampling_rate=0.1, rounds=10, steps_per_round=5, gmm_fraction=0.1, alpha_fraction=0.2
    )
    assert split.gmm_noise_multiplier is not None and split.alpha_noise_multiplier is not None
    assert epsilon_prv([Gaussian(split.gmm_noise_multiplier, 1)], 1e-5) == pytest.approx(0.4, rel=1e-3)
    assert epsilon_prv([Gaussian(split.alpha_noise_multiplier, 10)], 1e-5) == pytest.approx(0.8, rel=1e-3)
    assert split.planned_events[-1] == PoissonSampledGaussian(0.1, split.dpsgd_noise_multiplier, 50)
    assert 4.0 * 0.99 <= epsilon_rdp(split.planned_events, 1e-5) <= 4.0
    assert split.planned_epsilon == epsilon_rdp(split.planned_events, 1e-5)


def test_split_budget_keeps_given_sigmas_and_refuses_overspent_plans() -> None:
    split = split_budget(
        4.0,
        1e-5,
        sampling_rate=0.1,
        rounds=10,
        steps_per_round=5,
        gmm_noise_multiplier=20.0,
        gmm_fraction=None,
    )
    assert split.gmm_noise_multiplier == 20.0 and split.alpha_noise_multiplier is None
    assert len(split.planned_events) == 2
    with pytest.raises(CalibrationError, match="nothing for DP-SGD"):
        split_budget(
            4.0, 1e-5, sampling_rate=0.1, rounds=2, steps_per_round=1, gmm_fraction=0.6, alpha_fraction=0.5
        )
    with pytest.raises(CalibrationError, match="already spend"):
        split_budget(1.0, 1e-5, sampling_rate=0.1, rounds=2, steps_per_round=1, gmm_noise_multiplier=0.5)
