import json

import pytest

from secure_fed.dp.accountants import epsilon_prv, epsilon_rdp
from secure_fed.dp.budget import BudgetGuard
from secure_fed.dp.events import Gaussian, PoissonSampledGaussian
from secure_fed.dp.ledger import LedgerError, PrivacyLedger

DELTA = 1e-5


def _ledger() -> PrivacyLedger:
    ledger = PrivacyLedger()
    ledger.record("site-a", "train", 0, "gmm_histogram", Gaussian(10.0, 1))
    ledger.record("site-a", "validation", 0, "gmm_histogram", Gaussian(10.0, 1))
    for r in range(1, 4):
        ledger.record("site-a", "train", r, "dp_sgd", PoissonSampledGaussian(0.1, 1.0 + 0.1 * r, 20))
        ledger.record("site-a", "validation", r, "alpha_scalars", Gaussian(3.0, 1))
    ledger.record("site-b", "train", 1, "dp_sgd", PoissonSampledGaussian(0.2, 0.9, 20))
    return ledger


def test_epsilon_composes_a_population_in_order_and_takes_the_max_over_populations() -> None:
    ledger = _ledger()
    train_events = [Gaussian(10.0, 1)] + [PoissonSampledGaussian(0.1, 1.0 + 0.1 * r, 20) for r in range(1, 4)]
    train = ledger.epsilon("site-a", "train", delta=DELTA)
    assert train == {"rdp": epsilon_rdp(train_events, DELTA), "prv": epsilon_prv(train_events, DELTA)}
    validation = ledger.epsilon("site-a", "validation", delta=DELTA)
    site = ledger.epsilon("site-a", delta=DELTA)
    assert site["rdp"] == max(train["rdp"], validation["rdp"])
    assert site["prv"] == max(train["prv"], validation["prv"])
    # Parallel, not sequential: the site value is not the composition of both populations.
    assert site["rdp"] < epsilon_rdp(
        ledger.events("site-a", "train") + ledger.events("site-a", "validation"), DELTA
    )
    assert ledger.epsilon("nowhere", delta=DELTA) == {"rdp": 0.0, "prv": 0.0}


def test_projected_epsilon_does_not_record() -> None:
    ledger = _ledger()
    extra = [PoissonSampledGaussian(0.1, 1.0, 20)]
    projected = ledger.projected_epsilon("site-a", "train", extra, delta=DELTA)
    assert projected["rdp"] == epsilon_rdp(ledger.events("site-a", "train") + extra, DELTA)
    assert projected["rdp"] > ledger.epsilon("site-a", "train", delta=DELTA)["rdp"]
    assert len(ledger) == 9


def test_json_round_trip_and_replay_give_identical_epsilon() -> None:
    ledger = _ledger()
    restored = PrivacyLedger.from_json(json.loads(json.dumps(ledger.to_json())))
    replayed = PrivacyLedger.replay(ledger.entries)
    assert restored.entries == ledger.entries == replayed.entries
    for site in ("site-a", "site-b"):
        for population in (None, "train", "validation"):
            expected = ledger.epsilon(site, population, delta=DELTA)
            assert restored.epsilon(site, population, delta=DELTA) == expected
            assert replayed.epsilon(site, population, delta=DELTA) == expected


def test_refusals() -> None:
    ledger = _ledger()
    with pytest.raises(LedgerError, match="already recorded"):
        ledger.record("site-a", "train", 2, "dp_sgd", PoissonSampledGaussian(0.1, 1.0, 1))
    with pytest.raises(LedgerError, match="population"):
        ledger.record("site-a", "test", 9, "dp_sgd", PoissonSampledGaussian(0.1, 1.0, 1))
    with pytest.raises(LedgerError, match="mechanism"):
        ledger.record("site-a", "train", 9, "laplace", PoissonSampledGaussian(0.1, 1.0, 1))
    bad = ledger.to_json()
    bad["entries"][0]["event"]["type"] = "laplace"
    with pytest.raises(LedgerError, match="bad event"):
        PrivacyLedger.from_json(bad)
    assert len(ledger) == 9


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
def test_budget_guard_never_lets_the_ledger_exceed_the_budget(accountant: str) -> None:
    ledger = PrivacyLedger()
    budget = 2.6
    guard = BudgetGuard(ledger, {"site-a": budget}, accountant=accountant)
    round_events = [("dp_sgd", PoissonSampledGaussian(0.1, 1.5, 10)), ("gmm_histogram", Gaussian(50.0, 1))]
    admitted, declined = [], None
    for r in range(50):
        ok, would_be, reason = guard.admit("site-a", "train", round_events, DELTA, round=r)
        current = ledger.epsilon("site-a", "train", delta=DELTA)[accountant]
        assert current is not None and current <= budget
        if not ok:
            declined = (r, would_be, reason)
            break
        admitted.append(r)
        assert current == pytest.approx(would_be)
    assert declined is not None, "the budget should run out within 50 rounds"
    r, would_be, reason = declined
    assert would_be > budget and "over its budget" in reason and f"round {r}" in reason
    assert ledger.rounds("site-a", "train") == admitted and admitted  # nothing of the refused round
    assert len(ledger) == 2 * len(admitted)
    ok, _, reason = guard.admit("site-z", "train", round_events, DELTA, round=0)
    assert not ok and "no privacy budget" in reason and len(ledger) == 2 * len(admitted)
