"""The privacy ledger: every release, per site and patient population, in the order it happened.

Populations of one site are disjoint sets of patients (train / validation), so they compose in
parallel: a patient's ε is that of their own population, and the site's per-patient ε is the
maximum over populations. Within a population everything composes sequentially.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from secure_fed.dp.accountants import ACCOUNTANTS
from secure_fed.dp.events import Event, EventFormatError, from_json

POPULATIONS = ("train", "validation")
MECHANISMS = ("dp_sgd", "gmm_histogram", "alpha_scalars")
LEDGER_FORMAT = "secure_fed.privacy_ledger/1"


class LedgerError(ValueError):
    """A record the ledger refuses (unknown population or mechanism, duplicate, bad JSON)."""


@dataclass(frozen=True)
class LedgerEntry:
    site: str
    population: str
    round: int
    mechanism: str
    event: Event

    def to_json(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "population": self.population,
            "round": self.round,
            "mechanism": self.mechanism,
            "event": self.event.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LedgerEntry:
        expected = {"site", "population", "round", "mechanism", "event"}
        if not isinstance(data, Mapping) or set(data) != expected:
            raise LedgerError(f"a ledger entry needs exactly the keys {sorted(expected)}, got {data!r}")
        try:
            event = from_json(data["event"])
        except EventFormatError as error:
            raise LedgerError(f"bad event in ledger entry: {error}") from error
        return cls(data["site"], data["population"], data["round"], data["mechanism"], event)


def _max_or_none(values: Iterable[float | None]) -> float | None:
    values = list(values)
    if any(value is None for value in values):
        return None  # one unknown population makes the site maximum unknown
    return max((value for value in values if value is not None), default=0.0)


class PrivacyLedger:
    """One run's releases. `carry` adds what the same patients released in earlier runs: it counts
    towards every projection (so the budget holds for life) but not towards `epsilon`, which stays
    the run's own composition, as its audit log re-derives it."""

    def __init__(self) -> None:
        self._entries: list[LedgerEntry] = []
        self._keys: set[tuple[str, str, int, str]] = set()
        self._prior: dict[tuple[str, str], list[Event]] = {}
        # called after every successful record (a persistent store keeps the run's entries)
        self.on_record: Callable[[PrivacyLedger], None] | None = None

    # --- recording -------------------------------------------------------------------------
    def record(self, site: str, population: str, round: int, mechanism: str, event: Event) -> LedgerEntry:
        entry = LedgerEntry(site, population, round, mechanism, event)
        self.record_all([entry])
        return entry

    def record_all(self, entries: Sequence[LedgerEntry]) -> None:
        """Record all of `entries` or, if any is refused, none of them."""
        keys = set(self._keys)
        for entry in entries:
            self._validate(entry, keys)
            keys.add((entry.site, entry.population, entry.round, entry.mechanism))
        self._entries.extend(entries)
        self._keys = keys
        if self.on_record is not None and entries:
            self.on_record(self)

    def carry(self, site: str, population: str, events: Sequence[Event]) -> None:
        """Events the (site, population) released before this run (earlier runs on the same data)."""
        if population not in POPULATIONS:
            raise LedgerError(f"population must be one of {POPULATIONS}, got {population!r}")
        if not all(isinstance(event, Event) for event in events):
            raise LedgerError("carried events must be privacy events")
        self._prior[(site, population)] = list(events)

    def prior_events(self, site: str, population: str) -> list[Event]:
        return list(self._prior.get((site, population), []))

    @staticmethod
    def _validate(entry: LedgerEntry, keys: set[tuple[str, str, int, str]]) -> None:
        if not isinstance(entry.event, Event):
            raise LedgerError(f"not a privacy event: {entry.event!r}")
        if not isinstance(entry.site, str) or not entry.site:
            raise LedgerError(f"site must be a non-empty string, got {entry.site!r}")
        if entry.population not in POPULATIONS:
            raise LedgerError(f"population must be one of {POPULATIONS}, got {entry.population!r}")
        if entry.mechanism not in MECHANISMS:
            raise LedgerError(f"mechanism must be one of {MECHANISMS}, got {entry.mechanism!r}")
        if isinstance(entry.round, bool) or not isinstance(entry.round, int) or entry.round < 0:
            raise LedgerError(f"round must be a non-negative integer, got {entry.round!r}")
        # A resumed run that re-records a round would count that round's loss twice.
        if (entry.site, entry.population, entry.round, entry.mechanism) in keys:
            raise LedgerError(
                f"{entry.mechanism} of round {entry.round} is already recorded for "
                f"site {entry.site!r}, population {entry.population!r}; record a round's release once "
                "(compose several events with Composed)"
            )

    # --- reading ---------------------------------------------------------------------------
    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        return tuple(self._entries)

    def sites(self) -> list[str]:
        return sorted({entry.site for entry in self._entries})

    def populations(self, site: str) -> list[str]:
        return [p for p in POPULATIONS if any(e.site == site and e.population == p for e in self._entries)]

    def events(self, site: str, population: str) -> list[Event]:
        return [e.event for e in self._entries if e.site == site and e.population == population]

    def rounds(self, site: str, population: str) -> list[int]:
        return sorted({e.round for e in self._entries if e.site == site and e.population == population})

    # --- pricing ---------------------------------------------------------------------------
    @staticmethod
    def price(events: Sequence[Event], delta: float) -> dict[str, float | None]:
        """{"rdp": ε, "prv": ε or None} of one population's events, by every accountant under the
        name a privacy record carries: the audit payload shape."""
        return {name: accountant.epsilon(events, delta) for name, accountant in ACCOUNTANTS.items()}

    def epsilon(self, site: str, population: str | None = None, *, delta: float) -> dict[str, float | None]:
        """Cumulative ε of (site, population); population None = the site's per-patient maximum."""
        if population is not None:
            return self.price(self.events(site, population), delta)
        per_population = [self.price(self.events(site, p), delta) for p in self.populations(site)]
        return {
            "rdp": max((value["rdp"] for value in per_population if value["rdp"] is not None), default=0.0),
            "prv": _max_or_none(value["prv"] for value in per_population),
        }

    def projected_epsilon(
        self, site: str, population: str, extra_events: Sequence[Event], *, delta: float
    ) -> dict[str, float | None]:
        """ε (site, population) would have after also releasing `extra_events` (nothing recorded)."""
        if population not in POPULATIONS:
            raise LedgerError(f"population must be one of {POPULATIONS}, got {population!r}")
        return self.price(
            [*self.prior_events(site, population), *self.events(site, population), *extra_events], delta
        )

    def lifetime_epsilon(self, site: str, population: str, *, delta: float) -> dict[str, float | None]:
        """ε of (site, population) over every run so far: what was carried, then this run."""
        return self.price([*self.prior_events(site, population), *self.events(site, population)], delta)

    # --- persistence -----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format": LEDGER_FORMAT, "entries": [entry.to_json() for entry in self._entries]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PrivacyLedger:
        if not isinstance(data, Mapping) or data.get("format") != LEDGER_FORMAT:
            raise LedgerError(f"not a privacy ledger (expected format {LEDGER_FORMAT!r})")
        entries = data.get("entries")
        if not isinstance(entries, list):
            raise LedgerError("privacy ledger: 'entries' must be a list")
        return cls.replay(LedgerEntry.from_json(item) for item in entries)

    @classmethod
    def replay(cls, entries: Iterable[LedgerEntry]) -> PrivacyLedger:
        """A ledger that recorded `entries` in order (same validation as live recording)."""
        ledger = cls()
        for entry in entries:
            ledger.record(entry.site, entry.population, entry.round, entry.mechanism, entry.event)
        return ledger

    def __len__(self) -> int:
        return len(self._entries)
