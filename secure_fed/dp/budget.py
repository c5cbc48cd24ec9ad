"""Budget guard: admit a round's releases only if the population stays within its ε budget.

The guard prices the ledger *as it would be* after the round and records the releases only when
that value is within budget, so a ledger used through the guard never holds a composition over
budget. The decision uses RDP by default (the reference, always an upper bound); with PRV it
uses the tight value and falls back to RDP where PRV is not computable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from secure_fed.dp.accountants import RDP, Accountant, accountant_named
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
        accountant: Accountant | str = RDP,
    ) -> None:
        """`budget`: one ε for every site, or per site (a site without an entry is refused);
        `accountant`: the one it enforces, or the config string naming it."""
        budgets = budget.values() if isinstance(budget, Mapping) else [budget]
        if any(not (value > 0 and math.isfinite(value)) for value in budgets):
            raise ValueError(f"privacy budgets must be positive and finite, got {budget!r}")
        self.ledger = ledger
        self.budget = budget
        self.accountant = accountant_named(accountant)

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
        value, used = self.accountant.pick(projected)
        assert value is not None  # RDP always prices
        would_be, source = value, used.label
        if used is not self.accountant:
            source = f"{used.label} ({self.accountant.label} not computable)"
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
