"""What a failed site or server step becomes in our own words: a kind and one line.

Ray's and Flower's error texts carry host details: the out-of-memory monitor lists the machine's
top memory users with their pids and command lines (other users' processes), an actor's death
names its pid, ip and actor id, a traceback names files. Such text may go to Flower's own log file
(`flower/simulation.log`), never to the console as it is, and never into a signed record: a signed
log is handed to auditors and cannot be edited afterwards. Our own exceptions' messages are no
safer: they name the files and hosts they failed on (/srv/…, C:\\Users\\…, a database host).

So a signed record says a failure only as a code and a fixed text from the allow-list
`SIGNED_REASONS` (`signed_reason` for an exception that ends a run, `declined_reason` for a site's
reply), or `classify`'s fixed text for a framework's failure; the console's one line goes through
`console_reason`, which keeps our own words but no framework text, and `one_line`.
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


def console_reason(err: BaseException | str) -> str:
    """One line for the operator's console (never signed): our own exceptions keep their message,
    which names the setting to change; a framework's text, or any holding host details, is reduced
    to its kind, or to its exception type when no kind fits."""
    if isinstance(err, str):
        text, ours, name = err, True, "error"
    else:
        text, ours, name = str(err), _ours(err), type(err).__name__
    if ours and not has_host_detail(text):
        return one_line(text)
    found = classify(err if not ours else text)
    if found.kind != UNKNOWN:
        return found.reason
    return f"the server stopped on an unexpected {name}; see the run's logs"


# What a signed record may say about a failure: a code and the fixed text for it, chosen from this
# allow-list, never an exception's or a reply's words. Those may name files (/srv/…, C:\Users\…),
# hosts or studies, and a blocklist of such shapes always misses one; the message itself goes to
# the console and the unsigned logs (the server's Python logger, a site's debug.log). Each text
# says what kind of failure it was and what class of fix the operator reaches for.
SIGNED_REASONS: dict[str, str] = {
    # why a run ended or stopped (the server's RunAborted codes, raised where the rule is)
    "run_rule": "the run stopped on one of its own rules; the console's last line names the rule and its fix",
    "sites_absent": "more configured sites were absent at the start than fed.dropouts allows; "
    "start the missing sites' nodes or raise fed.dropouts",
    "dropouts_untolerated": "the sites present cannot tolerate the dropouts fed.dropouts asks for; "
    "add sites or lower fed.dropouts (or the SecAgg+ threshold)",
    "too_few_survivors": "fewer sites are left than the run's secure sums need; restart the lost "
    "sites and resume, or start again with more sites",
    "no_round_completed": "no round completed, so there is no model to evaluate; the console says "
    "why the sites declined or dropped out",
    "no_evaluation": "no site evaluated the final model; see the sites' errors on the console",
    "resume_mismatch": "--resume was given settings that do not match the stopped run; resume with "
    "the run's own settings or start a new run",
    "too_few_sites": "too few sites took part in a round, fewer than fed.min_sites; start or fix the "
    "sites that declined or dropped out, or lower fed.min_sites",
    "secagg_abort": "the secure sum could not finish safely (too few sites left or their shares did "
    "not combine); no aggregate was released and the model was kept",
    "alpha_sum_failed": "the sum of the α scalars could not be completed; α kept its value",
    "config": "the run's configuration was refused; fix the setting the console names",
    "data": "a site's data failed validation; fix the records the console names",
    "keys": "key material could not be read or did not match; re-provision the keys",
    "audit_log": "an audit log could not be written or read; check the run folder's audit logs",
    "budget": "the round would exceed the site's privacy budget (site policy dp.budget_epsilon); the "
    "site sits it out",
    # why a site refused a round (its reply's code: `clients.handler`, `clients.runtime`)
    "release_lost": "the round was charged before a restart but its release was lost; the site sits "
    "it out rather than release twice",
    "policy": "the site's policy refused the request; align the server's run with the site's policy",
    "secagg": "the site refused its part of the secure sum; check its SecAgg+ keys and settings",
    "no_keys": "the site holds no provisioned keys for the secure sum; provision its keys",
    "factors": "the site refused the server's weighting factors (below fed.factor_floor)",
    "bad_request": "the site refused a malformed request; the server and site may run different versions",
    "run_finished": "the site had already finished this run; start a new run",
    "no_update": "the site had no update to sum this round",
    "unlogged": "the site could not log the request in its audit log; check its audit folder",
    "internal": "the site could not complete the request; its debug log has the error",
    "dropped": "no reply (dropped out)",
}
# exceptions that carry no code of their own, by class name along their MRO (no import of the
# server's or crypto's modules here)
_CODE_OF_TYPE = {
    "TooFewSites": "too_few_sites",
    "SecAggAbort": "secagg_abort",
    "ScalarAggregationError": "alpha_sum_failed",
    "ConfigError": "config",
    "DataValidationError": "data",
    "KeyFileError": "keys",
    "KeyMaterialError": "keys",
    "NoiseKeyError": "keys",
    "AuditLogError": "audit_log",
    "BudgetExhausted": "budget",
}
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


def _code_of(err: BaseException) -> str | None:
    code = getattr(err, "code", None)
    if isinstance(code, str) and code in SIGNED_REASONS:
        return code
    for cls in type(err).__mro__:
        if cls.__name__ in _CODE_OF_TYPE and cls.__module__.startswith("secure_fed."):
            return _CODE_OF_TYPE[cls.__name__]
    return None


def _lost_sites(err: BaseException) -> tuple[str, str]:
    """`SitesLost`'s sites, each with its kind's fixed reason (site names are the run's own), and
    the fixes of those kinds."""
    lost = getattr(err, "lost", None)
    found = [
        (site, failure(f.kind))
        for site, f in sorted(lost.items() if isinstance(lost, dict) else [])
        if isinstance(site, str) and _NAME.fullmatch(site) and isinstance(f, Failure)
    ]
    who = "; ".join(f"{site}: {f.reason}" for site, f in found)
    fixes = "; ".join(dict.fromkeys(f.fix for _, f in found)) or _MEMORY_FIX
    return (f" ({who})" if who else ""), fixes


def signed_reason(err: BaseException | str) -> tuple[str, str]:
    """(code, reason) for a run's failure: the only failure text that goes into a signed record,
    and all of it from the allow-list `SIGNED_REASONS` (or `classify`'s fixed texts for a lost
    worker), chosen by the exception's code or type. Nothing of the message is kept; unknown
    exceptions read "internal" with their type's name."""
    if isinstance(err, str):
        found = classify(err)
        return (found.kind, found.reason) if found.kind != UNKNOWN else ("error", _UNEXPLAINED)
    code = _code_of(err)
    if code is not None:
        return code, SIGNED_REASONS[code]
    kind = getattr(err, "code", None)
    if kind in LOST_WORKER or kind == "workers_lost":  # SitesLost: whose workers ended, and how
        who, fixes = _lost_sites(err)
        return str(kind), f"sites' worker processes ended{who}: {fixes}, then resume the run"
    found = classify(err)
    if found.kind != UNKNOWN:
        return found.kind, found.reason
    name = type(err).__name__ if _NAME.fullmatch(type(err).__name__) else "error"
    return "internal", f"the server stopped on an unexpected {name}; see the run's logs"


_UNEXPLAINED = "the run stopped on an error; see the run's logs"


def declined_reason(reply: dict | None) -> str:
    """What the server signs about a site that did not train a round (`round_skipped.declined`,
    `budget_refusal.reason`): the fixed text for the reply's code, never the reply's own words,
    which the console shows instead."""
    if reply is None:
        return SIGNED_REASONS["dropped"]
    code = reply.get("code")
    if reply.get("status") == "declined" and code is None:
        code = "budget"  # a site that predates codes on its declines declined for its budget
    if isinstance(code, str) and code in SIGNED_REASONS:
        return SIGNED_REASONS[code]
    if "failure" in reply:  # the transport's own classification of a failed worker
        return failure(str(reply["failure"])).reason
    return "the site refused the round with a code the server does not know; see the site's debug log"
