"""The figures of the compliance report, gathered from the logs (no rendering here).

Privacy records are taken from every log given, own and embedded copies alike, once each (by
record hash), so the report works from the server's log alone or from the sites' logs alone.

What left each site is not taken from the privacy records: a run without DP writes none, some
releases are never priced, and a site is charged a round's ε when it is admitted to train, before
anything leaves it, so a stop can charge a round nothing of which was released. A site's update left
it in a round only where a sum of it was formed: the server's `secagg_round` record of that round
names it (without the server's log: the site's own acted `train` instruction). Its α scalars left
only in a round whose α sum the server logged (`alpha`). Rounds charged without a formed sum are
"charged, not released". How updates and α scalars were summed comes from those records and the
run's configuration. A site is protected by differential privacy only where privacy records
cover every round it took part in; anything else is reported as released with ε = ∞.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from secure_fed.audits.reader import read_log
from secure_fed.audits.records import shape_problem
from secure_fed.verifier.report_epsilon import (
    as_reported,
    by_accountant,
    empirical_row,
    mechanism_row,
    one_accountant,
    run_accountant,
    site_guarantees,
    with_lifetime,
)
from secure_fed.verifier.report_epsilon import epsilon_series as epsilon_series  # importable from here too
from secure_fed.verifier.report_epsilon import lifetime_epsilon as lifetime_epsilon
from secure_fed.verifier.report_sites import SiteRow as SiteRow
from secure_fed.verifier.report_sites import merged_settings, site_reports
from secure_fed.verifier.report_sites import site_rows as site_rows
from secure_fed.verifier.report_types import Guarantee as Guarantee
from secure_fed.verifier.report_types import LogCourse, ReportData
from secure_fed.verifier.report_types import MechanismRow as MechanismRow
from secure_fed.verifier.report_types import Release as Release
from secure_fed.verifier.report_types import SiteReport as SiteReport
from secure_fed.verifier.report_types import finite_json as finite_json
from secure_fed.verifier.verify_results import Verification, time_problem, verification_json

# the helpers tests import from here, as before the split
_as_reported, _run_accountant, _guarantees = as_reported, run_accountant, site_guarantees


def _records(paths: Sequence[Path | str]) -> Iterator[dict[str, Any]]:
    """Every well-formed record of every log, with embedded copies opened (copies after their carrier)."""
    for path in paths:
        try:
            lines = read_log(path)
        except OSError:
            continue  # the verification section already names the unreadable file
        for line in lines:
            record = line.record
            if record is None or shape_problem(record):
                continue
            yield record
            inner = record["payload"]
            if record["event"] == "site_record" and not shape_problem(inner):
                yield inner


def collect(paths: Sequence[Path | str], verification: Verification | None) -> ReportData:
    """The report's figures from the logs given; `verification` (None: not run) brings the ε it
    re-derived and the dropouts it recognised."""
    data = ReportData(verification=verification_json(verification))
    aborts: list[dict[str, Any]] = []
    ongoing: dict[str, int] = {}  # party → seq of its last record of a run going on
    seen: set[str] = set()
    times: list[str] = []
    configs: list[dict[str, Any]] = []
    instructions: list[tuple[str, dict[str, Any]]] = []
    for record in _records(paths):
        if record["hash"] in seen:
            continue
        seen.add(record["hash"])
        if record["run_id"] not in data.run_ids:
            data.run_ids.append(record["run_id"])
        if record["party"] not in data.parties:
            data.parties.append(record["party"])
        if time_problem(record["time"]) is None:  # a forged time is the verifier's finding, never a period
            times.append(record["time"])
        if record["event"] in _ONGOING:
            ongoing[record["party"]] = max(ongoing.get(record["party"], -1), record["seq"])
        _note(data, record, verification, aborts, configs, instructions)
    data.mechanisms.sort(key=lambda row: (row.site, row.party, row.seq))
    data.accountant = run_accountant(configs)
    data.mechanisms = [as_reported(row, data.accountant) for row in data.mechanisms]
    data.epsilon_accountant, data.prv_missing = one_accountant(
        data.mechanisms, data.accountant, data.site_budgets
    )
    data.mechanisms = [by_accountant(row, data.epsilon_accountant) for row in data.mechanisms]
    data.guarantees = site_guarantees(data.mechanisms, data.epsilon_accountant)
    data.period = (min(times), max(times)) if times else None
    settings = merged_settings(configs)
    data.settings = None if settings is None else asdict(settings)
    data.sites = site_reports(data, settings, instructions)
    dropped_in = {d.path: d.round for d in verification.dropouts} if verification is not None else {}
    data.courses = [replace(course, dropped_in=dropped_in.get(course.path)) for course in _courses(paths)]
    _judge_aborts(data, aborts, ongoing)
    rounds = [
        config.get("fed", {}).get("rounds") for config in configs if isinstance(config.get("fed"), dict)
    ]
    data.planned_rounds = next((r for r in reversed(rounds) if isinstance(r, int)), None)
    data.rounds_done = sorted(
        {item["round"] for item in data.secagg_rounds if isinstance(item.get("round"), int)}
        - {item["round"] for item in data.skipped_rounds}
    )
    data.guarantees = [
        with_lifetime(g, data.site_budgets.get(g.site), data.epsilon_accountant, data.accountant)
        for g in data.guarantees
    ]
    return data


def _note(
    data: ReportData,
    record: dict[str, Any],
    verification: Verification | None,
    aborts: list[dict[str, Any]],
    configs: list[dict[str, Any]],
    instructions: list[tuple[str, dict[str, Any]]],
) -> None:
    """Take one record's figures into `data`; its run_aborted, run_config and instruction records
    are kept aside (`aborts`, `configs`, `instructions`) for `collect` to judge with every log read."""
    event, payload = record["event"], record["payload"]
    if event == "privacy":
        row = mechanism_row(record, verification)
        if row is not None:
            data.mechanisms.append(row)
    elif event == "budget_refusal":
        # the site and the server both log a refusal: one declined round, counted once
        refusal = {"party": record["party"], "round": record["round"], **payload}
        key = (refusal.get("site", refusal["party"]), refusal["round"])
        if key not in {(r.get("site", r["party"]), r["round"]) for r in data.refusals}:
            data.refusals.append(refusal)
    elif event == "run_stopped":
        data.stopped = str(payload.get("reason", ""))
    elif event == "run_aborted":
        aborts.append(
            {
                "party": record["party"],
                "seq": record["seq"],
                "reason": str(payload.get("reason") or ""),
                "round": payload.get("round"),
                "signal": payload.get("signal"),
            }
        )
    elif event == "sites_absent":
        data.absent = dict(payload)
    elif event == "round_skipped":
        if record["round"] not in {r["round"] for r in data.skipped_rounds}:
            data.skipped_rounds.append({"round": record["round"], **payload})
    elif event == "site_budget":
        site = str(payload.get("site", record["party"]))
        if "lifetime" in payload or site not in data.site_budgets:
            data.site_budgets[site] = dict(payload)
    elif event == "secagg_round":
        data.secagg_rounds.append({"party": record["party"], "round": record["round"], **payload})
    elif event == "secagg_survivors" and record["party"] == payload.get("site"):
        data.survivor_sets.append({"round": record["round"], **payload})
    elif event == "alpha":
        data.alpha = payload
        if isinstance(record["round"], int) and record["round"] not in data.alpha_rounds:
            data.alpha_rounds.append(record["round"])
        data.alpha_events.append({"round": record["round"], **payload})
    elif event == "model_hash":
        data.model_hash = payload
    elif event == "empirical_audit":
        data.empirical_audits.append(empirical_row(record, verification))
    elif event in ("code", "code_refused"):
        data.code.append({"party": record["party"], "event": event, **payload})
    elif event == "run_config":
        configs.append(payload)
    elif event == "instruction":
        instructions.append((record["party"], payload))
        if payload.get("outcome") in ("refused", "error"):
            data.instructions.append({"site": record["party"], "round": record["round"], **payload})


def run_facts(data: ReportData) -> dict[str, Any]:
    """What the verdict says beside the logs' integrity (verdict.py): whether DP was on, the
    largest ε of a site DP covers against its budget (all runs' where it keeps a ledger), the
    accountant and δ, the sites over budget or released without DP, and the rounds done of those
    planned. Each figure is one the report's table shows."""
    covered = {site.site for site in data.sites if site.dp}
    guarantees = [g for g in data.guarantees if g.site in covered]
    worst = max(guarantees, key=lambda g: g.lifetime if g.lifetime is not None else g.epsilon, default=None)
    dp = None if data.settings is None else data.settings.get("dp")
    facts: dict[str, Any] = {
        "dp": bool(data.mechanisms) if dp is None else dp,
        "exposed": [site.site for site in data.sites if site.rounds and not site.dp],
        "exceeded": [g.site for g in guarantees if g.exceeded],
        "max_epsilon": None,
        "budget": None,
        "accountant": None,
        "delta": None,
        "planned_rounds": data.planned_rounds,
        "rounds_done": list(data.rounds_done),
        "skipped_rounds": [item["round"] for item in data.skipped_rounds],
        # who the server's round_skipped record says was gone, so the verdict can name them
        "skipped_gone": {str(item["round"]): list(item.get("dropped") or []) for item in data.skipped_rounds},
        "stopped": data.stopped,
    }
    if worst is not None:
        ledger = worst.lifetime is not None
        facts |= {
            "max_epsilon": worst.lifetime if ledger else worst.epsilon,
            "budget": worst.lifetime_budget if ledger else worst.budget,
            # whose ε it is: the site, the population with the largest ε there, every population
            # that ε is the largest of, and the one accountant all of them were priced by
            "site": worst.site,
            "population": (worst.lifetime_population or worst.population) if ledger else worst.population,
            "populations": sorted(worst.populations),
            "accountant": worst.accountant,
            "all_runs": ledger,
            "prv_missing": [list(pair) for pair in data.prv_missing],
            "delta": max(g.delta for g in guarantees),
        }
    return facts


def _courses(paths: Sequence[Path | str]) -> list[LogCourse]:
    """How each log given ends, from its own records."""
    out = []
    for path in paths:
        try:
            lines = read_log(path)
        except OSError:
            continue
        own = [line.record for line in lines if line.record is not None and not shape_problem(line.record)]
        if not own:
            continue
        rounds = [r["round"] for r in own if isinstance(r["round"], int) and not isinstance(r["round"], bool)]
        ends = [r["event"] for r in own if r["event"] in ("run_end", "run_aborted", "model_hash")]
        out.append(
            LogCourse(
                path=str(path),
                party=str(own[0]["party"]),
                last_round=max(rounds) if rounds else None,
                closed=own[-1]["event"] == "head" and lines[-1].record is not None,
                end=ends[-1] if ends else "",
            )
        )
    return out


_ONGOING = frozenset({"run_config", "secagg_round", "privacy", "instruction", "alpha", "site_record"})


def _judge_aborts(data: ReportData, aborts: list[dict[str, Any]], later: dict[str, int]) -> None:
    """An abort whose log goes on with the run (a resume) is an interruption the run recovered from;
    the last one that nothing follows ended the run. Every party logs an abort: the server's stands.
    A site that dropped out (the server's signed log says it left) and signed its own stop as it
    left (its node was stopped) ended its part, not the run."""
    left = {course.party for course in data.courses if course.dropped_in is not None}
    final = []
    for abort in aborts:
        if later.get(abort["party"], -1) > abort["seq"]:
            if abort["round"] not in {item["round"] for item in data.resumed}:
                data.resumed.append({k: abort[k] for k in ("party", "round", "signal", "reason")})
        elif abort["party"] not in left:
            final.append(abort)
    if final:
        chosen = next((a for a in final if a["party"] == "server"), final[0])
        data.aborted = {k: chosen[k] for k in ("reason", "round", "signal")}
