"""The persistent site ledger: ε carried across runs, the budget held for life, per-run ε intact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from secure_fed.dp.accountants import epsilon_rdp
from secure_fed.dp.budget import BudgetGuard
from secure_fed.dp.events import Gaussian, PoissonSampledGaussian
from secure_fed.dp.ledger import LedgerError, PrivacyLedger
from secure_fed.dp.site_ledger import SiteLedger

DELTA = 1e-5
DIGEST = "ab" * 32
STEP = PoissonSampledGaussian(0.5, 2.0, 4)


def _run(folder: Path, run_id: str, rounds: int, budget: float) -> tuple[PrivacyLedger, list[bool]]:
    """One run's site: a fresh run ledger joined to the persistent one, `rounds` admissions."""
    store = SiteLedger.open(folder, "site0", DIGEST)
    ledger = PrivacyLedger()
    store.attach(run_id, ledger)
    guard = BudgetGuard(ledger, budget)
    admitted = [
        guard.admit("site0", "train", [("dp_sgd", STEP)], DELTA, round=r).ok for r in range(1, rounds + 1)
    ]
    return ledger, admitted


def test_a_second_run_starts_from_the_first_runs_total(tmp_path: Path) -> None:
    first, admitted = _run(tmp_path, "run-a", 2, budget=100.0)
    assert admitted == [True, True]
    first_total = first.epsilon("site0", "train", delta=DELTA)["rdp"]
    second = PrivacyLedger()
    store = SiteLedger.open(tmp_path, "site0", DIGEST)
    store.attach("run-b", second)
    # before it released anything, the second run stands where the first one ended
    assert second.lifetime_epsilon("site0", "train", delta=DELTA)["rdp"] == first_total
    assert second.epsilon("site0", "train", delta=DELTA)["rdp"] == 0.0  # its own log starts at 0
    BudgetGuard(second, 100.0).admit("site0", "train", [("dp_sgd", STEP)], DELTA, round=1)
    # the run's own ε (what its audit log re-derives) is one round; the lifetime ε is three
    assert second.epsilon("site0", "train", delta=DELTA)["rdp"] == epsilon_rdp([STEP], DELTA)
    assert second.lifetime_epsilon("site0", "train", delta=DELTA)["rdp"] == epsilon_rdp([STEP] * 3, DELTA)
    reopened = SiteLedger.open(tmp_path, "site0", DIGEST)
    assert list(reopened.runs) == ["run-a", "run-b"] and len(reopened.runs["run-b"]) == 1
    assert reopened.epsilon({"train": DELTA})["train"]["rdp"] == epsilon_rdp([STEP] * 3, DELTA)
    assert reopened.epsilon({"train": DELTA}, "run-a")["train"]["rdp"] == first_total


def test_the_budget_holds_across_runs(tmp_path: Path) -> None:
    one_round = epsilon_rdp([STEP], DELTA)
    two_rounds = epsilon_rdp([STEP] * 2, DELTA)
    budget = (two_rounds + epsilon_rdp([STEP] * 3, DELTA)) / 2  # room for two rounds, not three
    _, admitted = _run(tmp_path, "run-a", 2, budget)
    assert admitted == [True, True]
    again, admitted = _run(tmp_path, "run-b", 2, budget)
    assert admitted == [False, False]  # alone, each run would have admitted both rounds
    assert one_round < two_rounds <= budget
    assert len(again) == 0
    # a refreshed data set (a new visit, a corrected report: another digest of the records) holds
    # the same patients: the ledger is the site's, so their spending still counts
    other = SiteLedger.open(tmp_path, "site0", "cd" * 32)
    fresh = PrivacyLedger()
    other.attach("run-c", fresh)
    assert not BudgetGuard(fresh, budget).admit("site0", "train", [("dp_sgd", STEP)], DELTA, round=1).ok
    assert other.datasets == [DIGEST, "cd" * 32]


def test_a_restarted_run_is_not_counted_twice_and_a_foreign_file_is_refused(tmp_path: Path) -> None:
    _run(tmp_path, "run-a", 1, budget=100.0)
    ledger = PrivacyLedger()
    ledger.record("site0", "train", 1, "dp_sgd", STEP)  # the run's own ledger.json after a restart
    store = SiteLedger.open(tmp_path, "site0", DIGEST)
    store.attach("run-a", ledger)  # the same run again: nothing carried from itself
    assert ledger.prior_events("site0", "train") == []
    assert len(SiteLedger.open(tmp_path, "site0", DIGEST).runs["run-a"]) == 1
    path = SiteLedger.path_for(tmp_path, "site0", DIGEST)
    data = json.loads(path.read_text())
    data["site"] = "site1"
    path.write_text(json.dumps(data))
    with pytest.raises(LedgerError, match="not 'site0'"):
        SiteLedger.open(tmp_path, "site0", DIGEST)
    path.write_text("{")
    with pytest.raises(LedgerError, match="restore it from a backup"):
        SiteLedger.open(tmp_path, "site0", DIGEST)


def test_carry_refuses_what_is_not_an_event() -> None:
    ledger = PrivacyLedger()
    with pytest.raises(LedgerError):
        ledger.carry("site0", "everyone", [Gaussian(1.0, 1)])
    with pytest.raises(LedgerError):
        ledger.carry("site0", "train", [{"type": "gaussian"}])  # type: ignore[list-item]
