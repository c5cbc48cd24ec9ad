"""The verdict on a set of logs, in the words `audit verify` prints and the report leads with.

One function decides it for both, so the console, the report's title, its first line and
report.json never disagree. The words map to the exit codes: VERIFIED 0, VERIFIED WITH A DROPOUT
3, INCOMPLETE 4 (the run was interrupted by a signal: every record verifies, the run did not
finish), FAILED 1 (a problem was found), NOT VERIFIED 1 (no keys were given, so no signature was
checked: what else was checked is reported, and nothing is claimed as verified).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_DROPOUT = 3
EXIT_INTERRUPTED = 4

NO_KEYS = "signatures not checked: no keys given"


@dataclass(frozen=True)
class Verdict:
    word: str  # VERIFIED, VERIFIED WITH A DROPOUT, INCOMPLETE, FAILED or NOT VERIFIED
    why: str  # one line, no trailing full stop
    exit_code: int

    @property
    def verified(self) -> bool:
        """Every record's hash, chain and signature held: findings may be stated as facts."""
        return self.exit_code in (EXIT_OK, EXIT_DROPOUT, EXIT_INTERRUPTED)

    def to_json(self) -> dict[str, Any]:
        return {"word": self.word, "why": self.why, "exit_code": self.exit_code, "verified": self.verified}


def stop_words(stops: Sequence[Mapping[str, Any]]) -> str:
    """'SIGINT in round 2: server, site0, site1' — who signed which stop."""
    groups: dict[str, list[str]] = {}
    for stop in stops:
        where = f" in round {stop['round']}" if stop.get("round") is not None else ""
        groups.setdefault(f"{stop['signal']}{where}", []).append(str(stop["party"]))
    return "; ".join(f"{what}: {', '.join(parties)}" for what, parties in groups.items())


def _gone(dropouts: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(f"{d['site']} in round {d['round']}" for d in dropouts)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def verdict(result: Mapping[str, Any]) -> Verdict:
    """The verdict on a verification (as `verification_json` writes it)."""
    figures = (
        f"{_plural(result.get('rederived', 0), 'privacy record')} re-derived with dp_accounting and matching"
        if result.get("rederived")
        else "no privacy record in them, so no ε to re-derive"
    )
    problems = result.get("problems") or []
    if not result.get("ran", True):
        return Verdict("NOT VERIFIED", "the logs were not verified (`secure-fed audit verify`)", EXIT_PROBLEM)
    if problems:
        unchecked = f"; {NO_KEYS}" if not result.get("keys_checked") else ""
        first = result.get("first_problem") or problems[0]
        return Verdict(
            "FAILED",
            f"{_plural(len(problems), 'problem')} in the logs{unchecked}; the first: {first}",
            EXIT_PROBLEM,
        )
    if not result.get("keys_checked"):
        return Verdict(
            "NOT VERIFIED",
            f"{NO_KEYS} (pass --keys DIR, the parties' public keys); every other check holds: "
            f"chains, hashes, completeness, {figures}",
            EXIT_PROBLEM,
        )
    stops = result.get("interruptions") or []
    if stops:
        return Verdict(
            "INCOMPLETE",
            f"the run was interrupted ({stop_words(stops)}) and did not finish; every record verifies and "
            f"every signature holds, {figures}",
            EXIT_INTERRUPTED,
        )
    dropouts = result.get("dropouts") or []
    if dropouts:
        return Verdict(
            "VERIFIED WITH A DROPOUT",
            f"{_gone(dropouts)} left the run, as the server's signed log says; every record verifies and "
            f"every signature holds, {figures}",
            EXIT_DROPOUT,
        )
    return Verdict(
        "VERIFIED",
        f"every log is complete and unmodified, every signature holds, {figures}",
        EXIT_OK,
    )
