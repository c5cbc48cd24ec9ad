"""Budget guard: admit a round's releases only if the population stays within its ε budget.

The guard prices the ledger *as it would be* after the round and records the releases only when
that value is within budget, so a ledger used through the guard never holds a composition over
budget. The decision uses RDP by default (the reference, always an upper bound); with "prv" it
uses the tight value and falls back to RDP where PRV is not computable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from secure_fed.dp.events import Event
from secure_fed.dp.ledger import LedgerEntry, PrivacyLedger


class Admission(NamedTuple):
    ok: bool
    would_be_epsilon: float
    reason: str


class BudgetGuard:
    def __init__(
        self,
        ledger: PrivacyLedger,
        budget: float | Mapping[str, float],
        accountant: Literal["rdp", "prv"] = "rdp",
    ) -> None:
        """`budget`: one ε for every site, or per site (a site without an entry is refused)."""
        if accountant not in ("rdp", "prv"):
            raise ValueError(f"accountant must be 'rdp' or 'prv', got {accountant!r}")
        budgets = budget.values() if isinstance(budget, Mapping) else [budget]
        if any(not (value > 0 and math.isfinite(value)) for value in budgets):
            raise ValueError(f"privacy budgets must be positive and finite, got {budget!r}")
        self.ledger = ledger
        self.budget = budget
        self.accountant = accountant

    def budget_of(self, site: str) -> float | None:
        if isinstance(self.budget, Mapping):
            return self.budget.get(site)
        return self.budget

    def admit(
        self,
        site: str,
        population: str,
        events: Sequence[tuple[str, Event]],
        delta: float,
        *,
        round: int,
    ) -> Admission:
        """Check (site, population) after `events` = [(mechanism, event), ...] of `round`; record
        them all if within budget, none otherwise."""
        budget = self.budget_of(site)
        projected = self.ledger.projected_epsilon(
            site, population, [event for _, event in events], delta=delta
        )
        rdp_value = projected["rdp"]
        assert rdp_value is not None  # RDP always prices
        would_be, source = rdp_value, "RDP"
        if self.accountant == "prv" and projected["prv"] is not None:
            would_be, source = projected["prv"], "PRV"
        elif self.accountant == "prv":
            source = "RDP (PRV not computable)"
        if budget is None:
            return Admission(False, would_be, f"site {site!r} has no privacy budget in the policy; refusing")
        if not would_be <= budget:  # also refuses NaN / inf
            return Admission(
                False,
                would_be,
                f"round {round} would bring {site}/{population} to epsilon={would_be:.4g} ({source}, "
                f"delta={delta:g}), over its budget {budget:g}; declining the round",
            )
        self.ledger.record_all(
            [LedgerEntry(site, population, round, mechanism, event) for mechanism, event in events]
        )
        return Admission(
            True, would_be, f"{site}/{population} at epsilon={would_be:.4g} ({source}) of budget {budget:g}"
        )
