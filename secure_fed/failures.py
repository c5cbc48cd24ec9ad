"""What a failed site or server step becomes in our own words: a kind and one line.

Ray's and Flower's error texts carry host details: the out-of-memory monitor lists the machine's
top memory users with their pids and command lines (other users' processes), an actor's death
names its pid, ip and actor id, a traceback names files. Such text may go to Flower's own log file
(`flower/simulation.log`), never to the console as it is, and never into a signed record: a signed
log is handed to auditors and cannot be edited afterwards. So every failure text that reaches a
signed record, the report or the console's one line goes through `classify` (an error a site's
reply or a framework raised) or `signed_reason` (an exception that ends a run), which keep nothing
of the original text but what they recognise, and `one_line`, which cuts the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The kinds a site's failure is sorted into. The first three end the site's worker process: the
# run cannot go on with it, and `--resume` continues once memory is free.
OUT_OF_MEMORY = "out_of_memory"
WORKER_KILLED = "worker_killed"
WORKER_CRASHED = "worker_crashed"
SITE_ERROR = "site_error"
UNKNOWN = "error"
LOST_WORKER = frozenset({OUT_OF_MEMORY, WORKER_KILLED, WORKER_CRASHED})

# a signed reason's length cap: a reason names every site that declined and why (three sites' budget
# refusals run to ~400 characters); a longer text is no reason but a dump
MAX_LINE = 1000


@dataclass(frozen=True)
class Failure:
    """A failure in our words: ``kind`` (a code), ``reason`` (what happened, one line, safe to sign)
    and ``fix`` (what the operator does about it)."""

    kind: str
    reason: str
    fix: str

    def line(self, who: str, resume: str | None = None) -> str:
        """The console's one line for one party and this kind of failure."""
        then = f", then {resume}" if resume else ""
        return f"{who}: {self.reason}: {self.fix}{then}"


_MEMORY_FIX = "free memory or lower `[train] threads`"
_LOG_FIX = "its error is in flower/simulation.log, and on the console with --verbose"

_FAILURES = {
    OUT_OF_MEMORY: Failure(OUT_OF_MEMORY, "its worker was ended by the out-of-memory monitor", _MEMORY_FIX),
    WORKER_KILLED: Failure(
        WORKER_KILLED,
        "its worker process was killed (SIGKILL, as the system's out-of-memory killer does)",
        _MEMORY_FIX,
    ),
    WORKER_CRASHED: Failure(WORKER_CRASHED, "its worker process crashed", f"{_LOG_FIX}; {_MEMORY_FIX}"),
    SITE_ERROR: Failure(SITE_ERROR, "its ClientApp raised an error", _LOG_FIX),
    UNKNOWN: Failure(UNKNOWN, "its reply was an error", _LOG_FIX),
}

# What each kind looks like in Ray's and Flower's texts (Ray 2.x: OutOfMemoryError, an actor's death
# context with its worker's exit type, WorkerCrashedError; Flower wraps them as
# "<class 'ray.exceptions.ActorDiedError'>:<'...'>" in an error reply). Order matters: the memory
# monitor's kill is also an actor's death, and a SIGKILL's text lists the OOM killer as a cause.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        OUT_OF_MEMORY,
        re.compile(r"OutOfMemoryError|NODE_OUT_OF_MEMORY|running low on memory|memory usage threshold", re.I),
    ),
    (
        WORKER_KILLED,
        re.compile(
            r"ActorDiedError|RayActorError|ActorUnavailableError|actor died|actor is dead|"
            r"worker process has died|UNEXPECTED_SYSTEM_EXIT|SIGKILL",
            re.I,
        ),
    ),
    (
        WORKER_CRASHED,
        re.compile(r"WorkerCrashedError|LocalRayletDiedError|NodeDiedError|RaySystemError|worker died", re.I),
    ),
    (SITE_ERROR, re.compile(r"ClientAppException|LoadClientAppError|ClientApp", re.I)),
)

# Text that must never pass into a signed record: a host's processes (the memory monitor's table),
# pids, addresses, ids, paths under /proc or a home folder, tracebacks, framework class reprs.
_HOST_DETAIL = re.compile(
    r"top \d+ memory|(?-i:\bPID\b|MEM\(GB\)|\bCOMMAND\b)|\bpid[:=]|\bpid \d|/proc/|/home/|/tmp/|/root/|"
    r"Traceback|File \"|<class '|\bip[:=]\s*\d|\b\d{1,3}(?:\.\d{1,3}){3}\b|actor_id|node_id|"
    r"\bID: [0-9a-f]{8,}|\b[0-9a-f]{24,}\b|ray::|python-core-worker",
    re.I,
)


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` on one line, at most ``limit`` characters (a longer one ends with '…')."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def has_host_detail(text: str) -> bool:
    return bool(_HOST_DETAIL.search(text))


def classify(error: BaseException | str | None) -> Failure:
    """A site's failed reply (Flower's error reason, an exception a transport caught) as a kind and
    our own one-line reason; nothing of the original text is kept."""
    if error is None:
        return _FAILURES[UNKNOWN]
    text = error if isinstance(error, str) else f"{type(error).__module__}.{type(error).__name__}: {error}"
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return _FAILURES[kind]
    return _FAILURES[UNKNOWN]


def failure(kind: str) -> Failure:
    """The failure of a known kind (an unknown kind reads as a plain error)."""
    return _FAILURES.get(kind, _FAILURES[UNKNOWN])


def _ours(err: BaseException) -> bool:
    return type(err).__module__.startswith("secure_fed.")


def signed_reason(err: BaseException | str) -> tuple[str, str]:
    """(code, one-line reason) for a run's failure, the only text a failure path puts into a signed
    record. Our own exceptions keep their message (they are composed of our words and of reasons
    `classify` already rewrote); anything else, or any message holding host details, is reduced to
    its kind, or to its exception type when no kind fits."""
    if isinstance(err, str):
        text, ours, name, code = err, True, "error", "reason"
    else:
        text, ours, name = str(err), _ours(err), type(err).__name__
        code = str(getattr(err, "code", None) or "run_rule")
    if ours and not has_host_detail(text):
        return code, one_line(text)
    found = classify(err if not ours else text)
    if found.kind != UNKNOWN:
        return found.kind, found.reason
    return "internal", f"the server stopped on an unexpected {name}; see the run's logs"
