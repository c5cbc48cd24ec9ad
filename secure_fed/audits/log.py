"""The append-only, hash-chained, Ed25519-signed audit log (one JSONL file per party).

Each line is one record (see `records.py`): `seq` counts from 0, `prev_hash` is the previous
record's hash (64 zeros for the first), and every record is flushed and fsynced before `append`
returns, so a crash loses at most the record being written. `close()` writes a signed `head` record
(payload: count of records before it and the last hash); a log that does not end with one was
truncated or did not stop cleanly, and `verify` says so.

Events (payload shapes are what the writers send; `privacy` is a contract, see ARCHITECTURE.md):
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from secure_fed.audits.payloads import instruction_problem
from secure_fed.audits.privacy import PrivacyPayloadError, parse_privacy
from secure_fed.audits.records import (
    GENESIS_HASH,
    canonical_json,
    record_hash,
    seal,
    shape_problem,
    signature_holds,
)

# The accountants a privacy record, a refusal or an empirical bound may name, by the string it
# carries, and the name people read. The sites' classes (secure_fed.dp.accountants.ACCOUNTANTS) are
# pinned to it by a test; the verifier reads the names here, so it never runs the sites' accounting.
ACCOUNTANT_LABELS: dict[str, str] = {"rdp": "RDP", "prv": "PRV"}

EVENTS: dict[str, str] = {
    "run_config": "the run's configuration snapshot (the RunConfig as JSON)",
    "policy": "a site's privacy policy snapshot (budget, delta, allowed mechanisms and limits)",
    "key_fingerprints": "SHA-256 fingerprints of the keys in use (KEYS/fingerprints.json)",
    "privacy": "one mechanism release and the cumulative (ε, δ) of its (site, population) after it",
    "budget_refusal": 'a site declined a round: {"site", "population"?, "epsilon_after"?, '
    '"accountant"? ("rdp" or "prv": whose epsilon_after is), "budget", "reason"}',
    "secagg_round": 'secure aggregation of one round: {"participants": [...], "dropped": [...]}',
    "secagg_survivors": "the survivor set a site confirmed in a distributed-DP round's consistency step, "
    'the only set it unmasks for: {"site", "survivors": [sites], "members": [[node, site]], "honest_min"}',
    "noise_layers_revealed": "a distributed-DP site's unmask: the removable noise layers it revealed for the "
    'survivor count it confirmed itself: {"site", "survivors", "confirmed": [sites], "layers": [index], '
    '"kept_variance", "sized_for", "rungs", "honest_min", "colluders", "mu_total"}',
    "noise_layers_removed": "the server took survivors' revealed noise layers out of a distributed-DP sum "
    'before decoding it: {"round", "removed": {site: survivor count}}',
    "alpha_share": "a distributed-DP site's share of its α scalars' noise in their CKKS sum, sized for the "
    'participants whose signed keys it verified: {"site", "participants": m, "colluders": c, "members": '
    '[[node, site]], "alpha_sigma", "clip_norm", "share_std" (σ_α·C_α/√(m − c)), "share_over_sigma"}',
    "alpha": "the aggregated (final) α",
    "alpha_skipped": 'the round\'s α sum could not be completed and α kept its value: {"reason"}',
    "participation": 'the sites sampled for a round: {"fraction", "sampled": [...]}',
    "run_stopped": 'the run ended before its planned rounds: {"reason"}',
    "run_aborted": 'the run failed and ended here; nothing more was released: {"reason", "code"?, "round"?, '
    '"signal"?, "resumable"? (a stop of the server\'s own: the sites stopped with it, --resume goes on; '
    "its code names lost site workers, out_of_memory, worker_killed, worker_crashed or workers_lost, or else "
    "a failure of the server's own code)}",
    "sites_absent": "fewer sites than configured came to the run; each absent one counts as a dropout: "
    '{"expected", "present": [...]}',
    "round_skipped": 'sites left mid-round: no aggregate, the model kept: {"reason", "dropped": [...]}',
    "site_budget": 'a site\'s privacy budget across runs, from its persistent ledger: {"site", '
    '"dataset", "run_id", "lifetime_start", "run"?, "lifetime"?, "delta", "budget"} (ε per population; '
    'at the start of a run, and with "run" and "lifetime" at its end)',
    "ledger_reset": 'an operator deleted a site\'s persistent ledger: {"site", "dataset", "file", "runs", '
    '"releases", "epsilon", "delta", "reason"}',
    "model_hash": 'hash of the released model: {"sha256": hex, ...}',
    "checkpoint": 'the server saved its state after a round: {"round", "file": "state.pt", "sha256": hex}; '
    "`--resume` refuses a state file whose hash no such record names",
    "instruction": 'a server instruction a site acted on or refused: {"phase", "round", "digest" (SHA-256 '
    'of the parameters), "outcome": "acted" | "refused" | "error", "code", "detail"?}',
    "population_sizes": 'a site\'s exact patient counts {"train", "validation", "test"} (site log only: '
    "records the server copies carry a power-of-two range)",
    "run_end": 'a site ended its run: {"stopped_early": reason | null}',
    "empirical_audit": "a one-run canary audit of a site's DP-SGD (secure-fed lower-bound): "
    '{"site", "canaries", "guesses", "correct", "delta", "confidence", "epsilon_hat", "stated_epsilon", ...}',
    "code": 'the code a deployed site ran for a run (once per run): {"site", "fab_sha256" (the FAB it '
    'approved), "package_digest" (SHA-256 over its installed secure_fed .py files), "version"}',
    "code_refused": 'a deployed site refused a run\'s FAB it had not approved; nothing of it ran: {"site", '
    '"fab_sha256", "fab_id"}',
    "site_record": "a site's signed record copied verbatim into the server's log (payload = the record)",
    "head": "written by close(): {count: records before it, last_hash}",
}
__doc__ = (__doc__ or "") + "".join(f"\n- `{name}`: {text}" for name, text in EVENTS.items()) + "\n"

# Only the log itself writes these, through close() and copy_record().
_RESERVED = frozenset({"head", "site_record"})


class AuditLogError(RuntimeError):
    """The log cannot be opened or written safely."""


class AuditLogBusy(AuditLogError):
    """Another open file holds this log's lock: a live writer, or one whose exit has not yet
    released it (the kernel drops a killed process's lock a moment after its fds are gone)."""


def _plain(value: Any) -> Any:
    # numpy numbers and arrays turn up in payloads (ε, α); store them as their JSON equivalents.
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable in an audit payload")


def normalise_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload exactly as it will read back from the log (so the hash covers what is stored)."""
    try:
        text = json.dumps(payload, default=_plain, allow_nan=False, ensure_ascii=False)
    except ValueError as err:
        raise ValueError(f"audit payload is not valid JSON (NaN or infinity?): {err}") from err
    return json.loads(text)


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def read_tail(path: Path) -> tuple[int, dict[str, Any] | None, dict[str, Any] | None]:
    """(number of lines, last record, the record before it); raises on a torn or unreadable tail."""
    data = path.read_bytes()
    if not data:
        return 0, None, None
    lines = data.split(b"\n")
    complete = lines[:-1]
    if lines[-1]:
        raise AuditLogError(
            f"{path}:{len(lines)}: torn last line (the writer stopped mid-record); refusing to extend it. "
            "Run `secure-fed audit verify` and repair or archive the log explicitly."
        )
    records: list[dict[str, Any]] = []
    for offset in (2, 1):
        if len(complete) >= offset:
            try:
                records.append(json.loads(complete[-offset].decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                line = len(complete) - offset + 1
                raise AuditLogError(f"{path}:{line}: unreadable record near the tail ({err})") from err
    last = records[-1]
    before = records[0] if len(records) == 2 else None
    return len(complete), last, before


class AuditLog:
    """Append-only signed log of one party. Reopening an existing file continues its chain, unless
    it ends with a head record: then it opens closed (`closed` is true) and refuses every append."""

    def __init__(self, path: Path | str, party: str, run_id: str, signing_key: Ed25519PrivateKey) -> None:
        self.path = Path(path)
        self.party = party
        self.run_id = run_id
        self._key = signing_key
        self._closed = False
        self._ended_with_head = False
        self._lock = threading.RLock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (held open for the run)
        try:
            # Two writers on one file would fork the chain; the second one must fail loudly.
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            self._file.close()
            raise AuditLogBusy(f"{self.path}: another process is writing this audit log") from err
        try:
            self._next_seq, self._last_hash = self._resume_point(signing_key.public_key())
        except Exception:
            self._file.close()
            raise
        if self._ended_with_head:
            # A head record ends its run for good: anything after it (a second run in the same
            # folder, a late message) would make the signed head a lie and the log read truncated.
            self._closed = True
            self._file.close()
        if created:
            self._fsync_dir()

    @property
    def closed(self) -> bool:
        return self._closed

    def _resume_point(self, own_key: Ed25519PublicKey) -> tuple[int, str]:
        count, last, before = read_tail(self.path)
        self._ended_with_head = last is not None and last.get("event") == "head"
        if last is None:
            return 0, GENESIS_HASH
        where = f"{self.path}:{count}"
        problem = shape_problem(last)
        if problem:
            raise AuditLogError(f"{where}: last record is malformed: {problem}")
        if record_hash(last) != last["hash"]:
            raise AuditLogError(f"{where}: last record's hash does not match its content (modified?)")
        if not signature_holds(last["hash"], last["signature"], own_key):
            raise AuditLogError(f"{where}: last record is not signed with {self.party}'s key")
        if last["party"] != self.party or last["run_id"] != self.run_id:
            raise AuditLogError(
                f"{where}: log belongs to party {last['party']!r}, run {last['run_id']!r}, "
                f"not {self.party!r}, run {self.run_id!r}"
            )
        if last["seq"] != count - 1:
            raise AuditLogError(f"{where}: last record has seq {last['seq']}, expected {count - 1}")
        if before is not None and before.get("hash") != last["prev_hash"]:
            raise AuditLogError(f"{where}: last record does not chain to the one before it")
        return count, last["hash"]

    def _fsync_dir(self) -> None:
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write(self, event: str, payload: dict[str, Any], round: int | None) -> dict[str, Any]:
        if round is not None and (isinstance(round, bool) or not isinstance(round, int)):
            raise TypeError(f"round must be an int or None, got {round!r}")
        # the simulation's stop handler (main thread) signs `run_aborted` while the ServerApp's
        # thread may be writing: one record at a time
        with self._lock:
            if self._closed:
                raise AuditLogError(
                    f"{self.path}: the log is closed (it ends with its head record); a closed log is "
                    "never reopened: a new run writes to a new run folder"
                )
            body = {
                "seq": self._next_seq,
                "time": _utc_now(),
                "run_id": self.run_id,
                "round": round,
                "event": event,
                "party": self.party,
                "payload": normalise_payload(payload),
                "prev_hash": self._last_hash,
            }
            record = seal(body, self._key)
            line = canonical_json(record) + "\n"
            try:
                self._file.write(line)
            finally:
                # Ctrl-C raises at the next bytecode: once the line is written, the chain moves on
                # with it, or the signed `run_aborted` after it would repeat its seq
                self._next_seq += 1
                self._last_hash = record["hash"]
            self._file.flush()
            os.fsync(self._file.fileno())
            return record

    def append(self, event: str, payload: dict[str, Any], round: int | None = None) -> dict[str, Any]:
        """Sign and write one record; returns it as stored."""
        if event not in EVENTS or event in _RESERVED:
            allowed = sorted(set(EVENTS) - _RESERVED)
            raise ValueError(f"unknown audit event {event!r}; allowed: {allowed} (site_record: copy_record)")
        if not isinstance(payload, dict):
            raise TypeError("an audit payload must be a dict")
        if event == "privacy":
            try:
                parse_privacy(normalise_payload(payload))
            except PrivacyPayloadError as err:
                raise ValueError(f"privacy record does not follow the contract: {err}") from err
        elif event == "instruction":
            # The writer learns of a bad payload now, not when an auditor's verify rejects the log.
            plain = normalise_payload(payload)
            problem = instruction_problem(plain)
            if problem is None and plain["round"] != round:
                problem = f"round {plain['round']!r} differs from the record's round {round!r}"
            if problem:
                raise ValueError(f"instruction record malformed: {problem}")
        return self._write(event, payload, round)

    def copy_record(
        self, record: dict[str, Any], public_key: Ed25519PublicKey | None = None, round: int | None = None
    ) -> dict[str, Any]:
        """Embed another party's signed record verbatim (event `site_record`).

        The record must be intact (its hash matches its content); with `public_key`, its signature
        is checked too, so the server never countersigns a record it could not attribute.
        """
        problem = shape_problem(record)
        if problem:
            raise ValueError(f"not an audit record: {problem}")
        if record_hash(record) != record["hash"]:
            raise ValueError(
                f"record seq {record['seq']} of {record['party']}: hash does not match its content"
            )
        if public_key is not None and not signature_holds(record["hash"], record["signature"], public_key):
            raise ValueError(
                f"record seq {record['seq']}: signature does not verify with {record['party']}'s key"
            )
        return self._write("site_record", record, record["round"] if round is None else round)

    def close(self) -> dict[str, Any] | None:
        """Write the signed head record and release the file; a second call does nothing."""
        with self._lock:
            if self._closed:
                return None
            head = self._write("head", {"count": self._next_seq, "last_hash": self._last_hash}, None)
            self._closed = True
            self._file.close()
            return head

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No other thread's record lands while the block runs: a stop handler's last records stay
        the last ones (the simulation's ServerApp thread may be copying a reply meanwhile)."""
        with self._lock:
            yield

    def abandon(self) -> None:
        """Release the file without a head record (an unclean stop; verify will report it)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._file.close()

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def last_hash(self) -> str:
        return self._last_hash

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        # Only a clean stop earns a head record; after an exception the missing head is the evidence.
        if kind is None:
            self.close()
        else:
            self.abandon()
