"""ε of fixed event histories, pinned to the last digit before the accountants became classes:
the refactor changes how an accountant is named and looked up, never what it counts."""

from __future__ import annotations

from typing import get_args

import pytest

from secure_fed.audits.log import ACCOUNTANT_LABELS
from secure_fed.config import ConfigError, DPConfig, load_config
from secure_fed.dp.accountants import ACCOUNTANTS, PRV, RDP, accountant_named, epsilon_rdp, prv_epsilon
from secure_fed.dp.budget import BudgetGuard
from secure_fed.dp.calibration import calibrate_noise
from secure_fed.dp.events import Event, Gaussian, PoissonSampledGaussian, SkellamSum, rounded_sensitivities
from secure_fed.dp.ledger import PrivacyLedger

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


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_each_accountant_class_prices_each_history_as_pinned(name: str) -> None:
    rdp, prv = PINNED[name]
    assert accountant_named("rdp").epsilon(HISTORIES[name], DELTA) == rdp
    assert accountant_named("prv").epsilon(HISTORIES[name], DELTA) == prv
    # the ledger's record carries every accountant under its name, the same numbers
    assert PrivacyLedger.price(HISTORIES[name], DELTA) == {"rdp": rdp, "prv": prv}
    # PRV's bound is RDP's where PRV cannot price (the calibration and the guard rely on it)
    assert PRV.bound(HISTORIES[name], DELTA) == (prv if prv is not None else rdp)


@pytest.mark.parametrize("accountant", sorted(SIGMAS))
def test_calibration_by_class_solves_the_same_sigma(accountant: str) -> None:
    counted = accountant_named(accountant)
    assert (
        calibrate_noise(8.0, DELTA, 0.1, 50, counted),
        calibrate_noise(1.0, DELTA, 0.05, 400, counted),
    ) == (SIGMAS[accountant])


def test_an_unknown_accountant_is_refused_in_one_line_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"^'moments' is not an accountant; set one of 'rdp', 'prv'$"):
        accountant_named("moments")
    with pytest.raises(ConfigError) as refused:
        load_config(overrides={"dp": {"accountant": "moments"}})
    message = str(refused.value)
    assert "\n" not in message and message.startswith("dp.accountant: ")
    assert all(repr(name) in message for name in ACCOUNTANTS)


def test_the_names_config_logs_and_classes_use_are_one_set() -> None:
    # the config's schema, the verifier's log contract and the classes cannot drift apart
    assert set(get_args(DPConfig.model_fields["accountant"].annotation)) == set(ACCOUNTANTS)
    assert {name: a.label for name, a in ACCOUNTANTS.items()} == ACCOUNTANT_LABELS
    assert all(a.name == name for name, a in ACCOUNTANTS.items()) and list(ACCOUNTANTS)[0] == RDP.name


def test_the_guard_says_whose_epsilon_it_enforced() -> None:
    skellam = _skellam()
    for accountant, source in ((RDP, "(RDP)"), (PRV, "(RDP (PRV not computable))")):
        guard = BudgetGuard(PrivacyLedger(), 100.0, accountant=accountant.name)
        admission = guard.admit("s", "train", [("dp_sgd", skellam)], DELTA, round=1)
        assert admission.ok and source in admission.reason
    guard = BudgetGuard(PrivacyLedger(), 100.0, accountant="prv")
    admission = guard.admit("s", "train", [("dp_sgd", HISTORIES["dpsgd"][0])], DELTA, round=1)
    assert admission.would_be_epsilon == PINNED["dpsgd"][1] and "(PRV)" in admission.reason
