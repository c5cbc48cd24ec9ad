"""A site's persistent privacy ledger: the patients' ε belongs to the site's patients, not to a run
folder and not to one snapshot of their records.

One file per site, named by the site, in a folder of the site's choice (its private area). It is
keyed by the site's identity, not by a digest of its records: a new visit or a corrected report
changes the records, not the patients, so a refreshed data set keeps spending the same ledger
(`datasets` lists the digests it was used with, for the auditors). It holds every run's releases,
run by run, so that a new run starts from what was spent before and its budget guard prices each
round on top of it; the one noisy GMM histogram the patients paid for (kept beside it, later runs
refit from it); and the run that scored the site's test split, once in the site's life. Nothing
in it is sent anywhere.
Deleting it is an operator's decision, made through `secure-fed ledger reset` (logged), never a
side effect of starting a new run folder or pointing `dp.ledger_dir` elsewhere: the site's key
folder records where its ledger is (`anchor`), and a ledger elsewhere is refused until a reset.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from secure_fed.dp.events import Event
from secure_fed.dp.ledger import POPULATIONS, LedgerEntry, LedgerError, PrivacyLedger
from secure_fed.dp.private_files import atomic_write_bytes

SITE_LEDGER_FORMAT = "secure_fed.site_ledger/2"
_LEGACY_FORMAT = "secure_fed.site_ledger/1"  # one file per (site, data digest): merged on open
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class SiteLedger:
    """The persistent ledger of one site's data set; `runs` keeps each run's entries in order."""

    path: Path
    site: str
    dataset: str  # digest of the records this run uses (informational: the key is the site)
    runs: dict[str, list[LedgerEntry]]
    datasets: list[str] = field(default_factory=list)
    # the site → the run that scored its test split (older ledgers: a digest of the test rows)
    scored: dict[str, str] = field(default_factory=dict)

    @classmethod
    def path_for(cls, folder: Path | str, site: str, dataset: str = "") -> Path:
        return Path(folder) / f"{_SAFE.sub('_', site)}.json"

    @property
    def histogram_path(self) -> Path:
        """The noisy GMM histogram these patients paid for once; later runs refit from it."""
        return self.path.with_name(f"{self.path.stem}-gmm-histogram.json")

    @classmethod
    def open(cls, folder: Path | str, site: str, dataset: str) -> SiteLedger:
        path = cls.path_for(folder, site)
        if not path.exists():
            store = cls(path, site, dataset, {}, [dataset])
            store._merge_legacy()
            return store
        data = _read(path, SITE_LEDGER_FORMAT)
        if data.get("site") != site:
            raise LedgerError(f"{path}: ledger of site {data.get('site')!r}, not {site!r}")
        datasets = [str(d) for d in data.get("datasets", [])]
        scored = data.get("scored", {})
        if not isinstance(scored, Mapping):
            raise LedgerError(f"{path}: 'scored' must be an object")
        return cls(
            path,
            site,
            dataset,
            _runs(path, data),
            datasets + ([dataset] if dataset not in datasets else []),
            {str(k): str(v) for k, v in scored.items()},
        )

    def _merge_legacy(self) -> None:
        """Ledgers an earlier version kept per (site, data digest) are this site's spending too:
        merged in (kept as *.migrated), so no data refresh or upgrade starts anyone at ε = 0."""
        for old in sorted(self.path.parent.glob(f"{self.path.stem}-*.json")):
            if old == self.histogram_path:
                continue
            try:
                data = json.loads(old.read_text())
            except json.JSONDecodeError:
                continue
            if not isinstance(data, Mapping) or data.get("format") != _LEGACY_FORMAT:
                continue  # another site's ledger whose name starts with this one's
            if data.get("site") != self.site:
                continue
            for run, entries in _runs(old, data).items():
                self.runs.setdefault(run, entries)
            self.datasets.insert(0, str(data.get("dataset")))
            self.save()
            old.rename(old.with_name(old.name + ".migrated"))

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SITE_LEDGER_FORMAT,
            "site": self.site,
            "datasets": self.datasets,
            "runs": {run: [e.to_json() for e in entries] for run, entries in self.runs.items()},
            "scored": self.scored,
        }

    def released_before(self, run_id: str, mechanism: str) -> bool:
        """Whether a run other than `run_id` released (and was charged for) `mechanism`."""
        return any(e.mechanism == mechanism for run, es in self.runs.items() if run != run_id for e in es)

    def mark_scored(self, site: str, run_id: str) -> None:
        """Record, before the scores exist, that `run_id` scores the site's test split (written at
        once: a crash after scoring must not leave the split scoreable again)."""
        self.scored[site] = run_id
        self.save()

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
        self.histogram_path.unlink(missing_ok=True)


def _read(path: Path, expected: str) -> Mapping[str, Any]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise LedgerError(f"{path}: not a site ledger ({err}); restore it from a backup") from None
    if not isinstance(data, Mapping) or data.get("format") != expected:
        raise LedgerError(f"{path}: not a site ledger (expected format {expected!r})")
    return data


def _runs(path: Path, data: Mapping[str, Any]) -> dict[str, list[LedgerEntry]]:
    runs = data.get("runs")
    if not isinstance(runs, Mapping):
        raise LedgerError(f"{path}: 'runs' must be an object")
    return {str(run): [LedgerEntry.from_json(e) for e in entries] for run, entries in runs.items()}


# -- where the site's ledger is --------------------------------------------------------------------
def _anchor_path(anchor_dir: Path, site: str) -> Path:
    return Path(anchor_dir) / f"ledger-{_SAFE.sub('_', site)}.json"


def check_anchor(anchor_dir: Path, site: str, ledger: Path) -> None:
    """Refuse a ledger other than the one the site's key folder says it keeps, and a ledger that is
    gone without a logged reset: either would start the same patients at ε = 0."""
    anchor = _anchor_path(anchor_dir, site)
    if not anchor.exists():
        return
    try:
        recorded = Path(json.loads(anchor.read_text())["ledger"])
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise LedgerError(f"{anchor}: not a ledger anchor ({err}); restore it from a backup") from None
    here = Path(ledger).resolve()
    if recorded != here:
        raise LedgerError(
            f"site {site}'s privacy ledger is {recorded} (recorded in {anchor}), not {here}: set "
            f'[dp] ledger_dir = "{recorded.parent}", or reset the old one first (secure-fed ledger '
            "reset, logged)"
        )
    if not here.exists():
        raise LedgerError(
            f"site {site}'s privacy ledger {here} is gone and no logged reset says why: restore it "
            "from a backup, or record the decision with `secure-fed ledger reset`"
        )


def write_anchor(anchor_dir: Path, site: str, ledger: Path) -> None:
    anchor = _anchor_path(anchor_dir, site)
    content = json.dumps({"site": site, "ledger": str(Path(ledger).resolve())}).encode()
    if not anchor.exists() or anchor.read_bytes() != content:
        atomic_write_bytes(anchor, content)


def clear_anchor(anchor_dir: Path, site: str) -> Path | None:
    """Forget where the ledger was (a logged reset only): returns the ledger it named."""
    anchor = _anchor_path(anchor_dir, site)
    if not anchor.exists():
        return None
    try:
        recorded = Path(json.loads(anchor.read_text())["ledger"])
    except (json.JSONDecodeError, KeyError, TypeError):
        recorded = None
    anchor.unlink()
    return recorded
