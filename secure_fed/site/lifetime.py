"""A site's privacy budget across runs: the persistent ledger of its patients joined to a run.

Every way a site's data is used joins the same ledger whenever `[dp] ledger_dir` names it: a
deployed node (whose default is <out>/ledgers), `secure-fed run` in process or under the
simulation, and sweeps, since all of them build the site with `SiteRuntime.create`. The ledger is
found by the site's name, not by a run folder, a seed or a digest of the records, so the same
patients meet the same ledger whichever run, folder or server asks and however their records
were refreshed. A run starts from what the earlier runs spent, its budget guard prices every round
(and the one GMM histogram) on top of it, and the site's log says so: a `site_budget` record with
the lifetime ε at the start, and one with the run's and the lifetime ε at the end.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from secure_fed.config import RunConfig
from secure_fed.data.sites import cohort_manifest
from secure_fed.dp.private_files import atomic_write_bytes
from secure_fed.dp.site_ledger import SiteLedger, check_anchor, clear_anchor, write_anchor
from secure_fed.protocol.run_context import run_folder
from secure_fed.site.private import SitePrivacy
from secure_fed.site.trail import SiteTrail

_STARTED = "lifetime-start.json"  # in the run's private folder: the start record is written once


def dataset_digest(cfg: RunConfig, site: str) -> str:
    """SHA-256 over the site's records of the manifest, order-free (images by path, as listed)."""
    if cfg.data.kind == "imaging":
        return _imaging_digest(cfg, site)
    manifest = cohort_manifest(cfg)
    lines = []
    with Path(manifest).open() as handle_:
        for line in handle_:
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("site") == site:
                lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")))
    h = hashlib.sha256(f"secure_fed/site-data/v1|{site}|".encode())
    for line in sorted(lines):
        h.update(line.encode() + b"\n")
    return h.hexdigest()


def _imaging_digest(cfg: RunConfig, site: str) -> str:
    """The same for a site's share of an imaging benchmark (a manifest's own `site`, or the split)."""
    from secure_fed.data.multimodal import imaging_split

    records, split = imaging_split(cfg)
    lines = sorted(
        json.dumps(records[i].model_dump(), sort_keys=True, separators=(",", ":"))
        for i in split.sites.get(site, [])
    )
    h = hashlib.sha256(f"secure_fed/site-images/v1|{site}|".encode())
    for line in lines:
        h.update(line.encode() + b"\n")
    return h.hexdigest()


def ledger_folder(cfg: RunConfig, base_out: Path) -> Path:
    return Path(cfg.dp.ledger_dir) if cfg.dp.ledger_dir is not None else Path(base_out) / "ledgers"


def site_run_config(cfg: RunConfig, run_id: str) -> RunConfig:
    """A deployed site's configuration for one run: its folder <out>/runs/<run id>, its ledger where
    the policy keeps it (<out>/ledgers unless `[dp] ledger_dir` says otherwise)."""
    dp = cfg.dp.model_copy(update={"ledger_dir": ledger_folder(cfg, Path(cfg.out))})
    return cfg.model_copy(update={"out": run_folder(cfg, run_id), "dp": dp})


def _anchor_dir(cfg: RunConfig, keys_dir: Path | None) -> Path | None:
    """The site's own key folder records where its ledger is, when it outlives the run folder (a
    deployed site's --keys; a simulation's keys made inside the run folder are no anchor)."""
    if keys_dir is None:
        return None
    keys, out = Path(keys_dir).resolve(), Path(cfg.out).resolve()
    return None if keys == out or out in keys.parents else keys


def open_lifetime(cfg: RunConfig, site: str, keys_dir: Path | None) -> SiteLedger | None:
    """The site's persistent ledger when `[dp] ledger_dir` names one (None: this run's ε only).
    Refused (LedgerError) when the site's key folder says its ledger is elsewhere or was deleted
    without a logged reset."""
    if cfg.dp.ledger_dir is None:
        return None
    store = SiteLedger.open(cfg.dp.ledger_dir, site, dataset_digest(cfg, site))
    anchor = _anchor_dir(cfg, keys_dir)
    if anchor is not None:
        check_anchor(anchor, site, store.path)
    return store


def keep_anchor(cfg: RunConfig, store: SiteLedger, keys_dir: Path | None) -> None:
    """Once the ledger file exists, the site's key folder remembers where it is."""
    anchor = _anchor_dir(cfg, keys_dir)
    if anchor is not None and store.path.exists():
        write_anchor(anchor, store.site, store.path)


def _payload(site: str, privacy: SitePrivacy, store: SiteLedger, run_id: str, end: bool) -> dict[str, Any]:
    deltas = privacy.delta
    earlier = SiteLedger(
        store.path, store.site, store.dataset, {r: e for r, e in store.runs.items() if r != run_id}
    )
    budget = privacy.budget
    payload: dict[str, Any] = {
        "site": site,
        "dataset": store.dataset[:16],
        "run_id": run_id,
        "lifetime_start": earlier.epsilon(deltas),
        "delta": dict(deltas),
        "budget": budget if budget != float("inf") else None,
    }
    if end:
        payload["run"] = store.epsilon(deltas, run_id)
        payload["lifetime"] = store.epsilon(deltas)
    return payload


def log_lifetime_start(
    trail: SiteTrail | None, folder: Path, site: str, privacy: SitePrivacy, store: SiteLedger, run_id: str
) -> None:
    """The lifetime ε at the start of the run, once per run (a restarted node does not repeat it)."""
    marker = folder / _STARTED
    if trail is not None and not marker.exists():
        trail.append("site_budget", _payload(site, privacy, store, run_id, end=False))
        atomic_write_bytes(marker, b"{}")


def log_lifetime_end(
    trail: SiteTrail | None, site: str, privacy: SitePrivacy | None, store: SiteLedger | None, run_id: str
) -> None:
    """The run's and the lifetime ε, in the site's log before it closes."""
    if store is None or privacy is None or trail is None or trail.log.closed:
        return
    trail.append("site_budget", _payload(site, privacy, store, run_id, end=True))


def site_ledger_of(cfg: RunConfig, site: str) -> SiteLedger:
    """The persistent ledger a site's policy file leads to (for `secure-fed ledger`)."""
    return SiteLedger.open(ledger_folder(cfg, Path(cfg.out)), site, dataset_digest(cfg, site))


def reset_site_ledger(cfg: RunConfig, site: str, keys_dir: Path, reason: str) -> tuple[SiteLedger, Path]:
    """Delete a site's persistent ledger, logged first: a signed `ledger_reset` record (what it
    held) in a log of its own beside the ledgers, then the file goes."""
    import datetime

    from secure_fed.audits.keys import load_private_key
    from secure_fed.audits.log import AuditLog

    store = site_ledger_of(cfg, site)
    anchored = clear_anchor(keys_dir, site)  # the reset is the logged decision to start afresh
    delta = cfg.dp.delta if cfg.dp.delta is not None else 1e-5
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = store.path.parent / "operations" / f"ledger-reset-{site}-{stamp}.jsonl"
    log = AuditLog(path, site, f"ledger-reset-{stamp}", load_private_key(keys_dir, site))
    log.append(
        "ledger_reset",
        {
            "site": site,
            "dataset": store.dataset[:16],
            "file": str(store.path.resolve()),
            "anchored": str(anchored) if anchored is not None else None,
            "scored_test_splits": len(store.scored),
            "runs": list(store.runs),
            "releases": sum(len(entries) for entries in store.runs.values()),
            "epsilon": store.epsilon({"train": delta, "validation": delta}),
            "delta": delta,
            "reason": reason,
        },
    )
    log.close()
    store.delete()
    return store, path
