"""What `audit verify` finds: its problems, the logs it read, the ε it re-derived, the dropouts
and stops it recognised, and the JSON of it the report keeps."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

# What AuditLog writes: datetime.now(UTC).isoformat(timespec="microseconds"). Anything else in a
# `time` field was not written by the log (and would reach the report's page as text).
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?\+00:00", re.ASCII)


def time_problem(value: str) -> str | None:
    """Why a record's `time` is not the ISO 8601 UTC stamp the log writes, or None."""
    if not _TIME.fullmatch(value):
        return f"time {value[:40]!r} is not an ISO 8601 UTC time (YYYY-MM-DDTHH:MM:SS.ffffff+00:00)"
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return f"time {value!r} is no calendar time"
    return None


@dataclass(frozen=True)
class Problem:
    path: str
    line: int | None
    reason: str
    seq: int | None = None

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.reason}"
            if self.line is not None
            else f"{self.path}: {self.reason}"
        )


@dataclass(frozen=True)
class Rederived:
    """ε of a privacy record as re-derived by dp_accounting (at the record's δ)."""

    rdp: float
    pld: float
    rdp_ok: bool
    prv_ok: bool | None  # None when no PRV ε was logged


@dataclass(frozen=True)
class LogSummary:
    path: str
    party: str | None
    run_id: str | None
    records: int
    privacy_records: int  # own and copied, counted whether or not their signatures verify
    closed: bool  # ends with a valid head record
    dropped_in: int | None = None  # not closed: the round the server's signed log says the site left
    interrupted_by: str | None = None  # not closed: the signal its party's last, signed record names


@dataclass(frozen=True)
class Dropout:
    """A site's log without a head record that the server's signed log explains: the site left the
    run (killed, lost) in `round`, and its log holds nothing of a later round."""

    site: str
    path: str
    round: int
    records: int  # records of the site's log up to where it stops
    evidence: str  # the server's record that says so, in words

    def __str__(self) -> str:
        return (
            f"{self.path}: {self.site} dropped out in round {self.round}: its log stops after "
            f"{self.records} record(s) with no head record, as {self.evidence} says"
        )


@dataclass
class Verification:
    ok: bool
    problems: list[Problem]
    logs: list[LogSummary] = field(default_factory=list)
    # By record hash; embedded copies share their original's hash.
    rederived: dict[str, Rederived] = field(default_factory=dict)
    keys_checked: bool = True
    # Findings that do not make the logs wrong but limit what was checked; they never change `ok`.
    warnings: list[str] = field(default_factory=list)
    # Sites named in a log whose own log was not given: checked only through the copies of others.
    unsupplied: list[str] = field(default_factory=list)
    # empirical_audit records (by hash) → ε̂ re-derived from their logged counts
    empirical: dict[str, float] = field(default_factory=dict)
    # logs that stop without a head record where the server's signed log says their site left
    dropouts: list[Dropout] = field(default_factory=list)
    # logs that end with their party's signed run_aborted naming a stop signal (an interrupted run)
    interruptions: list[Interruption] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Verified, and every log closed: no site dropped out, the run was not interrupted."""
        return self.ok and not self.dropouts and not self.interruptions


@dataclass(frozen=True)
class Interruption:
    """A log without a head record that ends with its own party's signed `run_aborted` naming a stop
    signal (Ctrl-C, a service manager's SIGTERM), in a run whose server log ends the same way: the
    run was stopped there and may be resumed; nothing after it was cut off."""

    party: str
    path: str
    signal: str
    round: int | None
    records: int

    def __str__(self) -> str:
        where = f" in round {self.round}" if self.round is not None else ""
        return (
            f"{self.path}: {self.party}'s log ends with its signed run_aborted: the run was "
            f"interrupted by {self.signal}{where} ({self.records} record(s), no head record)"
        )


# `audit verify` / `audit report` exit codes (secure_fed/verifier/verdict.py words them): 0 every log
# verifies and is closed; 1 a problem (a record changed, missing, unsigned, a wrong ε, a log cut
# short) or no keys given; 3 every record verifies but a site's log stops where the server's signed
# log says that site left the run (a dropout); 4 every record verifies but the run was interrupted
# by a signal (each log ends with its signed run_aborted).


def problem_line(problem: Problem) -> str:
    """A problem named by the log's file name, not the folder it was read from (a host detail)."""
    where = Path(problem.path).name + (f":{problem.line}" if problem.line is not None else "")
    return f"{where}: {problem.reason}"


def verification_json(verification: Verification | None) -> dict[str, Any]:
    """What the report keeps of a verification: JSON-ready, and what `verdict` reads."""
    if verification is None:
        return {
            "ok": False,
            "ran": False,
            "keys_checked": False,
            "problems": [],
            "first_problem": None,
            "warnings": [],
            "unsupplied": [],
            "rederived": 0,
        }
    return {
        "ok": verification.ok,
        "ran": True,
        "complete": verification.complete,
        "dropouts": [asdict(dropout) for dropout in verification.dropouts],
        "interruptions": [asdict(stop) for stop in verification.interruptions],
        "keys_checked": verification.keys_checked,
        "problems": [str(problem) for problem in verification.problems],
        "first_problem": problem_line(verification.problems[0]) if verification.problems else None,
        "warnings": list(verification.warnings),
        "unsupplied": list(verification.unsupplied),
        "logs": [asdict(log) for log in verification.logs],
        "rederived": len(verification.rederived),
    }
