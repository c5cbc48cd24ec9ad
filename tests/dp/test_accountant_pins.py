"""ε of fixed event histories, pinned to the last digit before the accountants became classes:
the refactor changes how an accountant is named and looked up, never what it counts."""

from __future__ import annotations

import pytest

from secure_fed.dp.accountants import epsilon_rdp, prv_epsilon
from secure_fed.dp.calibration import calibrate_noise
from secure_fed.dp.distributed import rounded_sensitivities
from secure_fed.dp.events import Event, Gaussian, PoissonSampledGaussian, SkellamSum

DELTA = 1e-5


def _skellam() -> SkellamSum:
    l2, l1 = rounded_sensitivities(1.0, 1e-4, 1024)
    return SkellamSum(
        sampling_rate=0.1,
        count=50,
        clip=1.0,
        gamma=1e-4,
        dim=1000,
        padded_dim=1024,
        mu_total=(1.5 * l2) ** 2,
        l2_sensitivity=l2,
        l1_sensitivity=l1,
        bits=48,
        honest_min=4,
        colluders=1,
    )


HISTORIES: dict[str, list[Event]] = {
    "gaussian": [Gaussian(2.0, 3)],
    "dpsgd": [PoissonSampledGaussian(0.1, 1.1, 50)],
    "mixed": [Gaussian(5.0, 1), PoissonSampledGaussian(0.05, 0.9, 200), Gaussian(3.0, 10)],
    "skellam": [_skellam()],
}
# name → (RDP ε, PRV ε or None where PRV cannot price it), computed on commit ecbd2fc
PINNED: dict[str, tuple[float, float | None]] = {
    "gaussian": (4.011321708510027, 3.708634930511884),
    "dpsgd": (4.89909894882855, 4.311304319299475),
    "mixed": (8.641859660629763, 7.84284508418106),
    "skellam": (2.872021777533386, None),
}
# accountant → σ solved for (ε = 8, q = 0.1, 50 steps) and (ε = 1, q = 0.05, 400 steps)
SIGMAS: dict[str, tuple[float, float]] = {"rdp": (0.859375, 4.21875), "prv": (0.8046875, 3.9375)}


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_the_functions_price_each_history_as_pinned(name: str) -> None:
    rdp, prv = PINNED[name]
    assert epsilon_rdp(HISTORIES[name], DELTA) == rdp
    assert prv_epsilon(HISTORIES[name], DELTA).epsilon == prv


@pytest.mark.parametrize("accountant", sorted(SIGMAS))
def test_calibration_solves_the_pinned_sigma(accountant: str) -> None:
    assert (
        calibrate_noise(8.0, DELTA, 0.1, 50, accountant),  # type: ignore[arg-type]
        calibrate_noise(1.0, DELTA, 0.05, 400, accountant),  # type: ignore[arg-type]
    ) == SIGMAS[accountant]
