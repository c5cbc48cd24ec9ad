"""What `secure-fed run --resume` checks before it starts anything or touches a log.

A resume that fails midway is worse than one refused at the door: it starts Flower and Ray, sends
`hello`, and a failure then may end every party's log (seen: a `state.pt` cut in half failed after
69 s, and the run's logs were sealed for good). So every file the resumed run will need is checked
first, read-only: the key folder (the logs are signed with those keys: a new one would make the
chains unverifiable), each audit log (readable tail, its own party's signature, not closed with its
head record, not held by a live writer) and the checkpoint (its SHA-256 against the one the server's
signed log recorded when it was saved). Each problem is one line naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Any

from secure_fed.audits.reader import TORN, read_log
from secure_fed.config import RunConfig
from secure_fed.data.sites import site_names


class ResumeRefused(ValueError):
    """A file the resumed run needs is missing or damaged; the message names it and the fix."""


def _keys_folder(cfg: RunConfig) -> Path:
    """The run's key folder, as keyring.audit_keys_dir finds it, without making one."""
    if cfg.audit.keys_dir is not None:
        return Path(cfg.audit.keys_dir)
    if cfg.he.enabled and cfg.he.keys_dir is not None:
        return Path(cfg.he.keys_dir)
    return Path(cfg.out) / "keys"


def _check_keys(cfg: RunConfig, parties: list[str]) -> Path:
    from secure_fed.audits.keys import load_private_key, signing_dir

    folder = _keys_folder(cfg)
    if not (folder / "fingerprints.json").is_file() and cfg.audit.keys_dir is None and not cfg.he.keys_dir:
        # the runner would make a new key folder here, and the run's logs would no longer verify
        raise ResumeRefused(
            f"{folder / 'fingerprints.json'}: missing, so the run's key folder is gone; restore {folder} "
            "from a backup (the run's logs are signed with its keys), or start a new run with --out"
        )
    for party in parties:
        path = signing_dir(folder) / f"{party}.pem"
        if not path.is_file():
            raise ResumeRefused(
                f"{path}: missing ({party}'s signing key: its log is signed with it); restore the key "
                f"from {folder}'s backup, or start a new run with --out"
            )
        try:
            load_private_key(folder, party)
        except Exception:  # noqa: BLE001 (any unreadable key is the same refusal)
            raise ResumeRefused(
                f"{path}: not a readable signing key; restore it from {folder}'s backup, or start a new run "
                "with --out"
            ) from None
    return folder


def _held_by_a_writer(path: Path) -> bool:
    """Whether a live process holds the log's lock (the run is still going in another process)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return False


def _check_log(path: Path, party: str, keys: Path | None) -> list[dict[str, Any]]:
    """The log's records (read-only); refuses a torn, foreign, closed or busy log."""
    from secure_fed.audits.keys import load_private_key
    from secure_fed.audits.records import record_hash, signature_holds

    fix = "restore it from a backup, or start a new run with --out"
    try:
        lines = read_log(path)
    except OSError as err:
        raise ResumeRefused(f"{path}: cannot be read ({err}); {fix}") from None
    if lines and lines[-1].error == TORN:
        raise ResumeRefused(
            f"{path}: its last line is torn (the writer stopped mid-record); run `secure-fed audit verify "
            f"{path}`, then {fix}"
        )
    records = []
    for line in lines:
        if line.record is None:
            raise ResumeRefused(f"{path}:{line.number}: not an audit record; {fix}")
        records.append(line.record)
    if not records:
        return records
    last = records[-1]
    if last.get("event") == "head":
        raise ResumeRefused(
            f"{path}: closed with its head record, so the run ended there for {party} and a closed log is "
            "never reopened; start a new run with --out"
        )
    if keys is not None:
        key = load_private_key(keys, party).public_key()
        intact = isinstance(last.get("hash"), str) and record_hash(last) == last["hash"]
        if not intact or not signature_holds(last["hash"], str(last.get("signature", "")), key):
            raise ResumeRefused(
                f"{path}: its last record is not {party}'s signed record (changed, or a different key "
                f"folder); run `secure-fed audit verify {path}`, then {fix}"
            )
    if _held_by_a_writer(path):
        raise ResumeRefused(
            f"{path}: another process is writing it (the run is still going); stop that run first, or "
            "wait for it to end"
        )
    return records


def _check_checkpoint(out: Path, server: list[dict[str, Any]]) -> None:
    from secure_fed.server.checkpoint import STATE_FILE, file_sha256

    state = out / "checkpoint" / STATE_FILE
    saved = [
        r["payload"]
        for r in server
        if r.get("event") == "checkpoint"
        and isinstance(r.get("payload"), dict)
        and r["payload"].get("sha256")
    ]
    if saved:
        last = saved[-1]
        expected = (
            f"SHA-256 {last['sha256']}, as the server's signed log recorded after round {last['round']}"
        )
        if not state.is_file():
            raise ResumeRefused(
                f"{state}: missing; restore it from a backup ({expected}) and resume again, or start a "
                "new run with --out"
            )
        digest = file_sha256(state)
        if digest not in {item["sha256"] for item in saved}:
            raise ResumeRefused(
                f"{state}: damaged (its SHA-256 is {digest[:16]}…, not {expected}); restore it from a "
                "backup and resume again, or start a new run with --out"
            )
        return
    if not state.is_file():
        return  # stopped in round 1: the run goes on from its start
    # a folder from before the checkpoint's hash was signed, or a run without an audit log: the
    # file must at least load
    import torch

    try:
        torch.load(state, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 (whatever torch raises, the file cannot be resumed from)
        raise ResumeRefused(
            f"{state}: damaged (it cannot be loaded, and no signed SHA-256 of it is logged); restore it "
            "from a backup and resume again, or start a new run with --out"
        ) from None


def check_average(cfg: RunConfig, out: Path) -> None:
    """The checkpoint's iterate average must be the one this run's settings make: the server would
    otherwise refuse it only once the federation had started, and a run it refused then was closed
    for good, though resuming with the settings it began with would have gone on."""
    from secure_fed.server.averaging import AverageMismatch, IterateAverage
    from secure_fed.server.checkpoint import STATE_FILE, load_checkpoint

    average = IterateAverage.from_config(cfg, cfg.fed.rounds)
    if average is None or not (out / "checkpoint" / STATE_FILE).is_file():
        return  # no average asked for: a run may always release its last iterate instead
    saved = load_checkpoint(out / "checkpoint")
    if saved is None:
        return
    state = out / "checkpoint" / STATE_FILE
    if saved.average is None:
        raise ResumeRefused(
            f"{state}: kept no iterate average, but train.average = {cfg.train.average!r}: resume with "
            "the train settings the run was started with, or start a new run with --out"
        )
    try:
        average.load_state_dict(saved.average)
    except AverageMismatch as err:
        raise ResumeRefused(f"{state}: {err}") from None


def check_resume(cfg: RunConfig, out: Path) -> None:
    """Raise `ResumeRefused` for the first file the resumed run in `out` cannot go on with.

    Read-only: nothing is written, locked for long, or started."""
    out = Path(out)
    cfg = cfg.model_copy(update={"out": out})
    names = site_names(cfg)
    needs_keys = cfg.audit.enabled or cfg.secagg_on or cfg.he.enabled
    keys = _check_keys(cfg, ["server", *names]) if needs_keys else None
    server: list[dict[str, Any]] = []
    if cfg.audit.enabled:
        for party in ["server", *names]:
            path = out / "audit" / f"{party}.jsonl"
            if path.exists():
                records = _check_log(path, party, keys)
                if party == "server":
                    server = records
    _check_checkpoint(out, server)
    check_average(cfg, out)
