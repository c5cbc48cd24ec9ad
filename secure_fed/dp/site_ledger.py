"""A site's persistent privacy ledger: the patients' ε belongs to their data, not to a run folder.

One file per (site, data set), named by a digest of the data set, in a folder of the site's choice
(its private area). It holds every run's releases, run by run, so that a new run starts from what
was spent before and its budget guard prices each round on top of it. Nothing in it is sent
anywhere. Deleting it is an operator's decision, made through `secure-fed ledger reset` (logged),
never a side effect of starting a new run folder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from secure_fed.dp.events import Event
from secure_fed.dp.ledger import POPULATIONS, LedgerEntry, LedgerError, PrivacyLedger
from secure_fed.dp.private_files import atomic_write_bytes

SITE_LEDGER_FORMAT = "secure_fed.site_ledger/1"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class SiteLedger:
    """The persistent ledger of one site's data set; `runs` keeps each run's entries in order."""

    path: Path
    site: str
    dataset: str
    runs: dict[str, list[LedgerEntry]]

    @classmethod
    def path_for(cls, folder: Path | str, site: str, dataset: str) -> Path:
        return Path(folder) / f"{_SAFE.sub('_', site)}-{dataset[:16]}.json"

    @classmethod
    def open(cls, folder: Path | str, site: str, dataset: str) -> SiteLedger:
        path = cls.path_for(folder, site, dataset)
        if not path.exists():
            return cls(path, site, dataset, {})
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise LedgerError(f"{path}: not a site ledger ({err}); restore it from a backup") from None
        if not isinstance(data, Mapping) or data.get("format") != SITE_LEDGER_FORMAT:
            raise LedgerError(f"{path}: not a site ledger (expected format {SITE_LEDGER_FORMAT!r})")
        if data.get("site") != site or data.get("dataset") != dataset:
            raise LedgerError(
                f"{path}: ledger of site {data.get('site')!r}, data set {str(data.get('dataset'))[:16]}, "
                f"not {site!r}, {dataset[:16]}"
            )
        runs = data.get("runs")
        if not isinstance(runs, Mapping):
            raise LedgerError(f"{path}: 'runs' must be an object")
        return cls(
            path,
            site,
            dataset,
            {str(run): [LedgerEntry.from_json(e) for e in entries] for run, entries in runs.items()},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SITE_LEDGER_FORMAT,
            "site": self.site,
            "dataset": self.dataset,
            "runs": {run: [e.to_json() for e in entries] for run, entries in self.runs.items()},
        }

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.path, json.dumps(self.to_json()).encode())

    def earlier_events(self, run_id: str) -> dict[str, list[Event]]:
        """Per population, every event of the runs other than `run_id`, run by run."""
        out: dict[str, list[Event]] = {p: [] for p in POPULATIONS}
        for run, entries in self.runs.items():
            if run == run_id:
                continue
            for entry in entries:
                out[entry.population].append(entry.event)
        return out

    def keep_run(self, run_id: str, ledger: PrivacyLedger) -> None:
        """Store this run's entries (all of them so far) and write the file at once: a crash after
        a release must not lose its charge."""
        self.runs[run_id] = [e for e in ledger.entries if e.site == self.site]
        self.save()

    def attach(self, run_id: str, ledger: PrivacyLedger) -> None:
        """Carry the earlier runs into `ledger` and keep every new record of it here."""
        for population, events in self.earlier_events(run_id).items():
            ledger.carry(self.site, population, events)
        ledger.on_record = lambda current: self.keep_run(run_id, current)
        self.keep_run(run_id, ledger)

    def epsilon(self, deltas: Mapping[str, float], run_id: str | None = None) -> dict[str, dict[str, Any]]:
        """ε per population over every run (or only `run_id`), at the given δ per population."""
        out: dict[str, dict[str, Any]] = {}
        for population in POPULATIONS:
            events = [
                e.event
                for run, entries in self.runs.items()
                if run_id is None or run == run_id
                for e in entries
                if e.population == population
            ]
            if events and population in deltas:
                out[population] = PrivacyLedger.price(events, deltas[population])
        return out

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
