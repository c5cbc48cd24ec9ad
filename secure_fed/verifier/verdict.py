"""The verdict on a set of logs, in the words `audit verify` prints and the report leads with.

One function decides it for both, so the console, the report's title, its first line and
report.json never disagree. The words map to the exit codes: VERIFIED 0, VERIFIED WITH A DROPOUT
3, INCOMPLETE 4 (the run was interrupted by a signal: every record verifies, the run did not
finish, or it closed short of its planned rounds), FAILED 1 (a problem was found), NOT VERIFIED 1 (no
keys were given, so no signature was checked: what else was checked is reported, and nothing is
claimed as verified). Beside the logs' integrity the verdict states the privacy (`privacy_words`):
the largest ε against the budget, or that no differential privacy bounds a release; only a run that
verifies, finished and is within budget everywhere reads as good news.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.markup import escape

from secure_fed.audits.log import ACCOUNTANT_LABELS

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
    # the officer's other question, beside the logs' integrity: what bounds the patients' privacy
    # ("every site within budget: max ε 7.96 of 8 at site1, training patients, RDP over its training
    # and validation patients, δ 1e-05", "NO DIFFERENTIAL PRIVACY (ε = ∞)");
    # "" where the run's records were not read (verification alone)
    privacy: str = ""
    # the privacy holds as stated for every site (within budget, every release covered): only then
    # may the verdict be shown as good news
    private: bool = False

    @property
    def verified(self) -> bool:
        """Every record's hash, chain and signature held: findings may be stated as facts."""
        return self.exit_code in (EXIT_OK, EXIT_DROPOUT, EXIT_INTERRUPTED)

    @property
    def line(self) -> str:
        """'VERIFIED — every site within budget: …': the page's title and the console's first word."""
        return f"{self.word} — {self.privacy}" if self.privacy else self.word

    @property
    def good(self) -> bool:
        """Green: the logs verify, the run finished as planned, and DP bounds every site's releases."""
        return self.exit_code == EXIT_OK and self.private

    def to_json(self) -> dict[str, Any]:
        return {
            "word": self.word,
            "why": self.why,
            "exit_code": self.exit_code,
            "verified": self.verified,
            "privacy": self.privacy,
            "private": self.private,
        }


def _g(value: float) -> str:
    return f"{value:.3g}"


POPULATION_WORDS = {"train": "training patients", "validation": "validation patients"}


def population_words(population: Any) -> str:
    """'training patients' for "train": whose ε a figure is, in the reader's words."""
    return POPULATION_WORDS.get(str(population), f"{population} patients")


def stated_whose(audit: Mapping[str, Any]) -> str:
    """'training patients, RDP': whose patients an `empirical_audit` record's stated ε is and what
    computed it, its accountant's name or, for a single release, what the record says it is for
    ('one release (exact Gaussian ε)'); '' where the record says neither."""
    whose = [population_words(audit["population"])] if audit.get("population") else []
    if audit.get("accountant") in ACCOUNTANT_LABELS:
        whose.append(ACCOUNTANT_LABELS[audit["accountant"]])
    elif isinstance(audit.get("stated_for"), str) and audit["stated_for"]:
        whose.append(str(audit["stated_for"]))
    return ", ".join(whose)


def _where(run: Mapping[str, Any]) -> str:
    """' at site1, training patients': the site and the population whose ε the headline is."""
    if not run.get("site"):
        return ""  # facts from before the headline named its population
    whose = f" at {run['site']}"
    return whose + (f", {population_words(run['population'])}" if run.get("population") else "")


def _whose(run: Mapping[str, Any]) -> str:
    """'RDP over its training and validation patients': the one accountant of the headline ε and
    the populations it is the largest of; why not PRV where the run's accountant was."""
    accountant = str(run.get("accountant") or "RDP")
    populations = [population_words(p).removesuffix(" patients") for p in run.get("populations") or []]
    if len(populations) > 1:
        accountant += f" over its {' and '.join(populations)} patients"
    missing = run.get("prv_missing") or []
    if accountant.startswith("RDP") and missing:
        first = missing[0]
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        accountant += (
            f" (the run's accountant is PRV, but {first[0]}'s {population_words(first[1])}{more} have no "
            "PRV ε, so every figure is RDP's)"
        )
    if run.get("all_runs"):
        accountant += ", all runs on the same data"
    return accountant


def privacy_words(run: Mapping[str, Any] | None) -> tuple[str, bool]:
    """(the verdict's privacy clause, whether it is good news) from the run's facts (report_data's
    `run_facts`): ε against the budget, the accountant and δ; or that no DP bounds a release."""
    if not run:
        return "", False
    exposed = list(run.get("exposed") or [])
    if run.get("dp") is False or (exposed and run.get("max_epsilon") is None):
        return "NO DIFFERENTIAL PRIVACY (ε = ∞)", False
    if run.get("max_epsilon") is None:
        return "no release of patient data recorded, and no ε", False
    eps, budget = float(run["max_epsilon"]), run.get("budget")
    delta = run.get("delta")
    tail = f"{_whose(run)}" + (f", δ {delta:g}" if isinstance(delta, int | float) else "")
    of = f" of {budget:g}" if isinstance(budget, int | float) else " (no budget set)"
    of += _where(run)
    exceeded = list(run.get("exceeded") or [])
    if exceeded:
        return f"PRIVACY BUDGET EXCEEDED at {', '.join(exceeded)}: max ε {_g(eps)}{of}, {tail}", False
    if exposed:
        return (
            f"{', '.join(exposed)} released without differential privacy (ε = ∞); the others: max ε "
            f"{_g(eps)}{of}, {tail}",
            False,
        )
    if not isinstance(budget, int | float):
        return f"every site under DP: max ε {_g(eps)}{of}, {tail}", True
    if eps > budget and run.get("prv_missing"):
        # only where RDP stands in for a PRV run's accountant: each site's guard held every
        # population to the budget by its tighter PRV ε where it had one (the mechanism table)
        return (
            f"every site within budget by its guard's PRV ε per population: max ε {_g(eps)}{of}, {tail}",
            True,
        )
    return f"every site within budget: max ε {_g(eps)}{of}, {tail}", True


def _short(run: Mapping[str, Any] | None) -> str | None:
    """'1 of 2 planned rounds completed (round 2 skipped: …)' for a run that closed short of its
    rounds; None for one that did all of them, or whose rounds the records do not say."""
    if not run or not isinstance(run.get("planned_rounds"), int):
        return None
    done, skipped = list(run.get("rounds_done") or []), list(run.get("skipped_rounds") or [])
    if not (done or skipped) or len(done) >= run["planned_rounds"]:
        return None
    gone = run.get("skipped_gone") or {}
    why = [
        f"round {item} skipped" + (f", {', '.join(gone[str(item)])} gone" if gone.get(str(item)) else "")
        for item in skipped
    ]
    if run.get("stopped"):
        why.append(f"stopped early: {run['stopped']}")
    detail = f" ({'; '.join(why)})" if why else ""
    return f"{len(done)} of {run['planned_rounds']} planned rounds completed{detail}"


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


def verdict(result: Mapping[str, Any], run: Mapping[str, Any] | None = None) -> Verdict:
    """The verdict on a verification (as `verification_json` writes it) and, with `run` (the run's
    facts, report_data.run_facts), on the privacy and the rounds those logs record."""
    said = _integrity(result, run)
    privacy, private = privacy_words(run) if said.verified else ("", False)
    return Verdict(said.word, said.why, said.exit_code, privacy, private)


def _integrity(result: Mapping[str, Any], run: Mapping[str, Any] | None) -> Verdict:
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
    short = _short(run)
    if short:
        # closed cleanly, but not the run that was asked for: `secure-fed run` exits 3 for it
        return Verdict(
            "INCOMPLETE",
            f"{short}; every record verifies and every signature holds, {figures}",
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


def tone(said: Verdict) -> str:
    """Green only for good news on both counts: the logs verify and the run finished (VERIFIED),
    and DP bounds every site's releases within its budget. A run without DP, or over a budget, is
    never shown green, however intact its logs."""
    if not said.verified or said.privacy.startswith("PRIVACY BUDGET EXCEEDED"):
        return "bad"
    return "ok" if said.good else "warn"


def verdict_markup(said: Verdict) -> str:
    """The verdict for a console, as the report's first two lines: its title (integrity and privacy
    together, green only where the report's is: `tone`), then why."""
    colour = {"ok": "bold green", "warn": "bold yellow"}.get(tone(said), "bold red")
    why = f"[{colour}]{escape(said.word)}[/]: {escape(said.why)}"
    return f"[{colour}]{escape(said.line)}[/]\n{why}" if said.privacy else why
