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

import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from secure_fed.audits.payloads import RunSettings, round_sites, run_settings
from secure_fed.audits.privacy import PrivacyPayloadError, parse_privacy
from secure_fed.audits.reader import read_log
from secure_fed.audits.records import shape_problem
from secure_fed.audits.verify_results import Verification, time_problem, verification_json


@dataclass(frozen=True)
class MechanismRow:
    party: str
    seq: int
    round: int | None
    time: str
    site: str
    population: str
    mechanism: str
    event_type: str
    sampling_rate: str  # ";"-joined over the leaves of a composed event
    noise_multiplier: str
    steps: int
    clip_norm: Any
    population_size: Any
    delta: float
    epsilon_rdp: float
    epsilon_prv: float | None
    epsilon_reported: float
    rederived_rdp: float | None
    rederived_pld: float | None
    matches: bool | None  # None when the record was not re-derived (verification not run)
    budget: float | None
    within_budget: bool | None
    # whose accountant `epsilon_reported` is ("RDP" or "PRV"): the one every ε of the report's
    # summary uses (`one_accountant`); its population is the row's `population`
    accountant_reported: str = "RDP"


@dataclass(frozen=True)
class Guarantee:
    """The per-patient guarantee of one site: the max over its (disjoint) populations, every one
    priced by the same accountant."""

    site: str
    epsilon: float
    delta: float
    accountant: str  # "RDP" or "PRV": the one accountant of `epsilon` and of every `populations` value
    budget: float | None
    exceeded: bool
    populations: dict[str, float]
    population_sizes: dict[str, Any]
    mechanisms: list[str]
    # Across every run on the site's data set, from its persistent ledger (`site_budget`), by the
    # same accountant; None where no ledger was logged (or, for the total, the run's end was not).
    lifetime_start: float | None = None
    lifetime: float | None = None
    lifetime_budget: float | None = None
    population: str = "train"  # whose ε `epsilon` is: the population with the largest
    lifetime_population: str | None = None  # whose ε `lifetime` is


@dataclass(frozen=True)
class Release:
    """One kind of value that left a site."""

    what: str
    how: str
    covered: bool  # priced in the site's ε by a privacy record
    protection: str = ""  # the same in a table cell's words: "DP-SGD + SecAgg+", "CKKS", "none"


@dataclass
class SiteReport:
    site: str
    rounds: list[int]  # rounds the server's log says the site took part in
    dp: bool  # every release of patient-level training data is covered by a privacy record
    uncovered_rounds: list[int]  # rounds it took part in without any privacy record
    releases: list[Release]
    refused_instructions: dict[str, int]  # code → count, from the site's own `instruction` records
    failed_instructions: dict[str, int]  # code → count of instructions that ended in an error
    instructions_logged: int  # 0: the site's own log (or its instruction records) was not given
    # it scored its test split (its own `instruction` record: evaluate, acted); None: its log not given
    evaluated: bool | None = None
    # rounds its privacy records charge (DP-SGD, α) in which no sum of its values was formed: the ε
    # counts them, nothing of them left the site (a stop or a skipped round cut them short)
    charged_unreleased: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class LogCourse:
    """How one log given ends, from its own records (embedded copies aside)."""

    path: str
    party: str
    last_round: int | None  # the last round any of its records is about
    closed: bool  # ends with a head record
    end: str  # "run_end", "run_aborted", "model_hash" (the server's end), or "" (no end record)
    dropped_in: int | None = None  # the verifier: the server's signed log says the site left then


@dataclass
class ReportData:
    run_ids: list[str] = field(default_factory=list)
    parties: list[str] = field(default_factory=list)
    period: tuple[str, str] | None = None
    guarantees: list[Guarantee] = field(default_factory=list)
    mechanisms: list[MechanismRow] = field(default_factory=list)
    refusals: list[dict[str, Any]] = field(default_factory=list)
    secagg_rounds: list[dict[str, Any]] = field(default_factory=list)
    # distributed DP: each site's signed survivor set, {"round", "site", "survivors", "honest_min"}
    survivor_sets: list[dict[str, Any]] = field(default_factory=list)
    alpha: Any = None
    alpha_rounds: list[int] = field(default_factory=list)  # rounds whose α sum the server logged
    alpha_events: list[dict[str, Any]] = field(default_factory=list)  # each "alpha" event: alpha_path.py
    model_hash: Any = None
    verification: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] | None = None  # RunSettings of the logged run_config; None: none logged
    # The accountant the run's budget guard used (run_config dp.accountant): whether a site stayed
    # within its budget is judged by it, per population, as the guard did.
    accountant: str = "rdp"
    # The accountant every ε of the summary, the table and the plot is by: the run's, where it
    # prices every population of every site; else RDP for all (a population whose mechanism has no
    # PRV accountant would otherwise put one population's PRV ε beside another's RDP ε).
    epsilon_accountant: str = "rdp"
    # (site, population) pairs without a PRV ε in a run whose accountant is PRV: why RDP is shown
    prv_missing: list[tuple[str, str]] = field(default_factory=list)
    sites: list[SiteReport] = field(default_factory=list)
    instructions: list[dict[str, Any]] = field(default_factory=list)  # refused or failed ones
    stopped: str | None = None  # why the run ended before its planned rounds (server's run_stopped)
    aborted: dict[str, Any] | None = None  # the run failed: {"reason", "round", "signal"} (run_aborted)
    # aborts a later record of the same log shows were resumed from: {"party", "round", "signal", ...}
    resumed: list[dict[str, Any]] = field(default_factory=list)
    courses: list[LogCourse] = field(default_factory=list)
    planned_rounds: int | None = None  # fed.rounds of the logged run_config
    rounds_done: list[int] = field(default_factory=list)  # rounds whose sum the server logged
    skipped_rounds: list[dict[str, Any]] = field(default_factory=list)  # round_skipped, one per round
    absent: dict[str, Any] | None = None  # fewer sites came than configured (sites_absent)
    # each site's budget across runs (site_budget): its latest record, the run's end when logged
    site_budgets: dict[str, dict[str, Any]] = field(default_factory=dict)
    # one-run canary audits (`secure-fed audit empirical`): payload + party + re-derived ε̂
    empirical_audits: list[dict[str, Any]] = field(default_factory=list)
    # the code each deployed site ran or refused (`code` / `code_refused`): party + event + payload
    code: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["period"] = list(self.period) if self.period else None
        return _finite(data)


def _finite(value: Any) -> Any:
    # JSON has no infinity; an infinite ε (σ = 0) is written as the string "inf".
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def finite_json(value: Any) -> Any:
    """`value` with every infinite float as the string "inf" (JSON has no infinity)."""
    return _finite(value)


def _leaves(event: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    if event.get("type") == "composed":
        for item in event.get("events", []):
            yield from _leaves(item)
    else:
        yield event


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


def _row(record: dict[str, Any], verification: Verification | None) -> MechanismRow | None:
    try:
        entry = parse_privacy(record["payload"])
    except PrivacyPayloadError:
        return None
    leaves = list(_leaves(entry.event))
    rates = ";".join(f"{leaf.get('sampling_rate', 1.0):g}" for leaf in leaves)
    sigmas = ";".join(f"{leaf.get('noise_multiplier', float('nan')):g}" for leaf in leaves)
    steps = sum(int(leaf.get("count", 0)) for leaf in leaves)
    again = verification.rederived.get(record["hash"]) if verification else None
    matches = None if again is None else (again.rdp_ok and again.prv_ok is not False)
    within = None if entry.budget is None else entry.epsilon <= entry.budget
    return MechanismRow(
        party=record["party"],
        seq=record["seq"],
        round=record["round"],
        time=record["time"],
        site=entry.site,
        population=entry.population,
        mechanism=entry.mechanism,
        event_type=str(entry.event.get("type")),
        sampling_rate=rates,
        noise_multiplier=sigmas,
        steps=steps,
        clip_norm=entry.extras.get("clip_norm"),
        population_size=entry.extras.get("population_bucket", entry.extras.get("population_size")),
        delta=entry.delta,
        epsilon_rdp=entry.epsilon_rdp,
        epsilon_prv=entry.epsilon_prv,
        epsilon_reported=entry.epsilon,
        rederived_rdp=None if again is None else again.rdp,
        rederived_pld=None if again is None else again.pld,
        matches=matches,
        budget=entry.budget,
        within_budget=within,
    )


def _run_accountant(configs: list[dict[str, Any]]) -> str:
    """dp.accountant of the latest run_config that states one; else RDP, the guard's default."""
    for config in reversed(configs):
        dp = config.get("dp")
        if isinstance(dp, dict) and dp.get("accountant") in ("rdp", "prv"):
            return str(dp["accountant"])
    return "rdp"


def _as_reported(row: MechanismRow, accountant: str) -> MechanismRow:
    """The row's ε as the site's guard judged it against its budget: the run's accountant, RDP where
    no PRV ε was logged (each population on its own, a patient being in one). What the report then
    shows is one accountant's for every row (`one_accountant`, `_by`); the verdict on the budget
    stays the guard's."""
    prv = accountant == "prv" and row.epsilon_prv is not None
    value = row.epsilon_prv if prv and row.epsilon_prv is not None else row.epsilon_rdp
    within = None if row.budget is None else value <= row.budget
    return replace(
        row, epsilon_reported=value, within_budget=within, accountant_reported="PRV" if prv else "RDP"
    )


def _last_rows(rows: list[MechanismRow]) -> dict[tuple[str, str], MechanismRow]:
    # rows are in log order per signer, so the last row of a (site, population) is its cumulative ε
    return {(row.site, row.population): row for row in rows}


def one_accountant(
    rows: list[MechanismRow], accountant: str, budgets: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[str, list[tuple[str, str]]]:
    """(the accountant every reported ε is by, the (site, population) pairs that ruled PRV out).

    PRV only where the run's accountant is PRV and a PRV ε was logged for every population of every
    site, in this run (its last privacy record) and in each site's ledger (`site_budget`): a headline
    or a table that took one population's PRV ε and another's RDP ε would state an ε no accountant
    computed. Else RDP, which prices every mechanism."""
    if accountant != "prv":
        return "rdp", []
    missing = [key for key, row in _last_rows(rows).items() if row.epsilon_prv is None]
    for site, budget in (budgets or {}).items():
        for name in ("lifetime_start", "lifetime"):
            by_population = budget.get(name)
            for pop, value in by_population.items() if isinstance(by_population, dict) else ():
                if isinstance(value, dict) and value.get("prv") is None and (site, pop) not in missing:
                    missing.append((site, pop))
    return ("rdp" if missing else "prv"), sorted(missing)


def _by(row: MechanismRow, accountant: str) -> MechanismRow:
    """The row's reported ε by `accountant` (one of `one_accountant`'s, so logged for this row)."""
    value = row.epsilon_prv if accountant == "prv" and row.epsilon_prv is not None else row.epsilon_rdp
    return replace(row, epsilon_reported=value, accountant_reported=accountant.upper())


def _guarantees(rows: list[MechanismRow], accountant: str = "rdp") -> list[Guarantee]:
    """Each site's guarantee, every ε in it by one accountant (`one_accountant`) over every
    population that released; `accountant`: the run's."""
    chosen, _ = one_accountant(rows, accountant)
    rows = [_by(row, chosen) for row in rows]
    result = []
    for site in sorted({row.site for row in rows}):
        own = [row for row in rows if row.site == site]
        last = {row.population: row for row in own}
        worst = max(last.values(), key=lambda row: row.epsilon_reported)
        budgets = [row.budget for row in own if row.budget is not None]
        result.append(
            Guarantee(
                site=site,
                epsilon=worst.epsilon_reported,
                delta=max(row.delta for row in last.values()),
                accountant=chosen.upper(),
                budget=min(budgets) if budgets else None,
                exceeded=any(row.within_budget is False for row in own),
                populations={pop: row.epsilon_reported for pop, row in last.items()},
                population_sizes={
                    pop: row.population_size for pop, row in last.items() if row.population_size is not None
                },
                mechanisms=sorted({row.mechanism for row in own}),
                population=worst.population,
            )
        )
    return result


def _settings(configs: list[dict[str, Any]]) -> RunSettings | None:
    """One view of every logged run_config (a resumed run logs it again); a switch counts as on
    only if every snapshot that states it has it on."""
    if not configs:
        return None
    views = [run_settings(config) for config in configs]

    def all_on(values: list[bool | None]) -> bool | None:
        known = [value for value in values if value is not None]
        return all(known) if known else None

    return RunSettings(
        dp=all_on([view.dp for view in views]),
        secagg=all_on([view.secagg for view in views]),
        he=all_on([view.he for view in views]),
        method=next((view.method for view in views if view.method), None),
        noise=next((view.noise for view in views if view.noise), None),
        honest_min=next((view.honest_min for view in views if view.honest_min is not None), None),
        colluders=next((view.colluders for view in views if view.colluders is not None), None),
        amplification=next((view.amplification for view in views if view.amplification), None),
    )


def _summed(secure: bool | None, secure_how: str, plain_how: str) -> str:
    if secure is None:
        return "how it was summed is not recorded in the logs"
    return secure_how if secure else plain_how


def _label(secure: bool | None, name: str, dp: str | None) -> str:
    """'DP-SGD + SecAgg+', 'CKKS', 'plain sum', 'DP + plain sum', 'sum not recorded'."""
    summed = "sum not recorded" if secure is None else name if secure else "plain sum"
    return f"{dp} + {summed}" if dp else summed


def _releases(
    rounds: list[int],
    rows: list[MechanismRow],
    modes: set[str],
    settings: RunSettings | None,
    alpha_logged: bool,
    dp: bool,
    evaluated: bool | None = None,
) -> list[Release]:
    """What left the site: `rounds` are those with a formed sum of its update, `alpha_logged` that
    an α sum it was in was formed; a charge alone (a privacy record) releases nothing."""
    mechanisms = {row.mechanism for row in rows}
    out: list[Release] = []
    if not rounds:
        if evaluated:
            out.append(Release("test-set scores", _SCORES, False, "not covered by ε"))
        return out
    # One plain round is enough to lose SecAgg+'s protection for this site's updates.
    if "plain" in modes:
        secagg: bool | None = False
    elif modes == {"secagg+"}:
        secagg = True
    else:
        secagg = None if settings is None else settings.secagg
    covered = dp and "dp_sgd" in mechanisms
    how = _summed(
        secagg,
        "summed with SecAgg+: the server saw only the sum over the sites",
        "sent for a plain sum: the server saw this site's own update",
    )
    out += [
        Release(
            "model updates",
            how + ("; clipped and noised per patient (DP-SGD) first" if covered else ""),
            covered,
            _label(secagg, "SecAgg+", "DP-SGD" if covered else None),
        )
    ]
    if alpha_logged:
        covered = dp and "alpha_scalars" in mechanisms
        he = None if settings is None else settings.he
        how = _summed(
            he,
            "summed under CKKS encryption: the server saw only the total",
            "summed as plain values: the server saw this site's own values",
        )
        out.append(
            Release(
                "α scalars",
                how + ("; clipped and noised per patient first" if covered else ""),
                covered,
                _label(he, "CKKS", "DP" if covered else None),
            )
        )
    if not dp and secagg is False:
        # sites keep these at home under DP or SecAgg+ (there they would sit beside a protected sum)
        losses = "the site's own training loss and validation loss sum and count, each round, in the clear"
        out.append(Release("losses", losses, False, "none"))
    if evaluated:
        out.append(Release("test-set scores", _SCORES, False, "not covered by ε"))
    elif evaluated is None:
        unknown = (
            "whether they were released is not known: the site's own log, which records it, was not given"
        )
        out.append(Release("test-set scores", unknown, False, "not known"))
    return out


_SCORES = (
    "corpus-level scores of the final model on the site's test split, released once at the end "
    "of the run (its log records the scoring)"
)


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """site2 before site10: a table of twenty sites reads in their order."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part)


def _sites(
    data: ReportData, settings: RunSettings | None, instructions: list[tuple[str, dict[str, Any]]]
) -> list[SiteReport]:
    took_part: dict[str, set[int]] = {}
    modes: dict[str, set[str]] = {}
    for item in data.secagg_rounds:
        round_ = item.get("round")
        participants, _ = round_sites(item)
        for site in participants:
            if isinstance(round_, int) and not isinstance(round_, bool):
                took_part.setdefault(site, set()).add(round_)
            if isinstance(item.get("mode"), str):
                modes.setdefault(site, set()).add(item["mode"])
    names = set(took_part) | {row.site for row in data.mechanisms} | {party for party, _ in instructions}
    names |= {str(r["site"]) for r in data.refusals if isinstance(r.get("site"), str)}
    server_given = "server" in data.parties
    out = []
    for site in sorted(names, key=_natural):
        rows = [row for row in data.mechanisms if row.site == site]
        formed = took_part.get(site, set())
        if not server_given:
            # no server log: the site's own word that it acted on a round's training request
            formed = {
                p["round"]
                for party, p in instructions
                if party == site
                and p.get("phase") == "train"
                and p.get("outcome") == "acted"
                and isinstance(p.get("round"), int)
            }
        rounds = sorted(formed)
        charged = {
            row.round for row in rows if row.mechanism != "gmm_histogram" and isinstance(row.round, int)
        }
        priced = {row.round for row in rows}
        uncovered = [round_ for round_ in rounds if round_ not in priced]
        dp = bool(rows) and not uncovered and (settings is None or settings.dp is not False)
        own = [payload for party, payload in instructions if party == site]
        evaluated = (
            any(p.get("phase") == "evaluate" and p.get("outcome") == "acted" for p in own) if own else None
        )
        out.append(
            SiteReport(
                site=site,
                rounds=rounds,
                dp=dp,
                uncovered_rounds=uncovered,
                releases=_releases(
                    rounds,
                    rows,
                    modes.get(site, set()),
                    settings,
                    bool(set(rounds) & set(data.alpha_rounds))
                    or (
                        not server_given
                        and bool(rounds)
                        and any(r.mechanism == "alpha_scalars" for r in rows)
                    ),
                    dp,
                    evaluated,
                ),
                refused_instructions=dict(
                    Counter(str(p.get("code") or "no code") for p in own if p.get("outcome") == "refused")
                ),
                failed_instructions=dict(
                    Counter(str(p.get("code") or "no code") for p in own if p.get("outcome") == "error")
                ),
                instructions_logged=len(own),
                evaluated=evaluated,
                charged_unreleased=sorted(charged - formed),
            )
        )
    return out


def collect(paths: Sequence[Path | str], verification: Verification | None) -> ReportData:
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
        event, payload = record["event"], record["payload"]
        if event in _ONGOING:
            ongoing[record["party"]] = max(ongoing.get(record["party"], -1), record["seq"])
        if event == "privacy":
            row = _row(record, verification)
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
    data.mechanisms.sort(key=lambda row: (row.site, row.party, row.seq))
    data.accountant = _run_accountant(configs)
    data.mechanisms = [_as_reported(row, data.accountant) for row in data.mechanisms]
    data.epsilon_accountant, data.prv_missing = one_accountant(
        data.mechanisms, data.accountant, data.site_budgets
    )
    data.mechanisms = [_by(row, data.epsilon_accountant) for row in data.mechanisms]
    data.guarantees = _guarantees(data.mechanisms, data.epsilon_accountant)
    data.period = (min(times), max(times)) if times else None
    settings = _settings(configs)
    data.settings = None if settings is None else asdict(settings)
    data.sites = _sites(data, settings, instructions)
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
        _with_lifetime(g, data.site_budgets.get(g.site), data.epsilon_accountant, data.accountant)
        for g in data.guarantees
    ]
    return data


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


@dataclass(frozen=True)
class SiteRow:
    """One site's line of the report's table, and of report.csv: the same figures, once each."""

    site: str
    patients_train: str | None  # the population range the logs hold ("32-63"), never an exact count
    patients_validation: str | None
    rounds: list[int]  # rounds it took part in, as the server's log says
    dropped_in: int | None  # the server's signed log says it left the run in this round
    dp: bool
    epsilon_run: float | None  # this run's ε per patient (inf: released without DP; None: no release)
    epsilon_population: str | None  # whose ε epsilon_run is: the population with the largest
    epsilon_before: float | None  # spent by earlier runs on the same data (its ledger)
    epsilon_all_runs: float | None  # the ledger's total after this run
    all_runs_population: str | None  # whose ε epsilon_all_runs is
    budget: float | None  # the budget it was held to: all runs' where it keeps a ledger
    budget_all_runs: bool
    exceeded: bool
    delta: float | None
    accountant: str | None  # "RDP" or "PRV": the one accountant of every ε in the row
    released: list[tuple[str, str]]  # (what, protection), e.g. ("model updates", "DP-SGD + SecAgg+")
    declined_rounds: list[int]  # budget refusals
    refused_instructions: dict[str, int]
    failed_instructions: dict[str, int]
    instructions_known: bool  # its own log (which holds its instruction records) was given
    verified: bool  # the logs it comes from passed verification with keys


def site_rows(data: ReportData, verified: bool) -> list[SiteRow]:
    """The table of the report's summary: one row per site that took part or is named."""
    guarantees = {g.site: g for g in data.guarantees}
    dropped = {c.party: c.dropped_in for c in data.courses if c.dropped_in is not None}
    rows = []
    for site in data.sites:
        g = guarantees.get(site.site) if site.dp else None
        sizes = g.population_sizes if g is not None else {}
        released_anything = bool(site.rounds or site.releases)
        declined = sorted(
            {
                int(r["round"])
                for r in data.refusals
                if r.get("site", r.get("party")) == site.site and isinstance(r.get("round"), int)
            }
        )
        ledger = g is not None and (g.lifetime_start is not None or g.lifetime is not None)
        rows.append(
            SiteRow(
                site=site.site,
                patients_train=None if sizes.get("train") is None else str(sizes["train"]),
                patients_validation=None if sizes.get("validation") is None else str(sizes["validation"]),
                rounds=list(site.rounds),
                dropped_in=dropped.get(site.site),
                dp=site.dp,
                epsilon_run=g.epsilon if g is not None else (math.inf if released_anything else None),
                epsilon_population=g.population if g is not None else None,
                epsilon_before=g.lifetime_start if g is not None else None,
                epsilon_all_runs=g.lifetime if g is not None else None,
                all_runs_population=g.lifetime_population if g is not None else None,
                budget=(g.lifetime_budget if ledger else g.budget) if g is not None else None,
                budget_all_runs=ledger,
                exceeded=g.exceeded if g is not None else False,
                delta=g.delta if g is not None else None,
                accountant=g.accountant if g is not None else None,
                released=[(r.what, r.protection) for r in site.releases],
                declined_rounds=declined,
                refused_instructions=dict(site.refused_instructions),
                failed_instructions=dict(site.failed_instructions),
                instructions_known=site.instructions_logged > 0,
                verified=verified,
            )
        )
    return rows


def lifetime_epsilon(by_population: Any, accountant: str) -> float | None:
    """The largest ε over a `site_budget` record's populations by `accountant` (one accountant for
    all: `one_accountant` chose it where every population has it); None where the record holds none."""
    worst = _lifetime_worst(by_population, accountant)
    return None if worst is None else worst[1]


def _lifetime_worst(by_population: Any, accountant: str) -> tuple[str, float] | None:
    """(population, ε): the largest of a `site_budget` record's populations by `accountant`."""
    values = []
    for pop, value in by_population.items() if isinstance(by_population, dict) else ():
        if isinstance(value, dict):
            chosen = value.get(accountant) if value.get(accountant) is not None else value.get("rdp")
            if isinstance(chosen, int | float) and not isinstance(chosen, bool):
                values.append((str(pop), float(chosen)))
    return max(values, key=lambda item: item[1]) if values else None


def _with_lifetime(
    g: Guarantee, budget: dict[str, Any] | None, accountant: str, guard: str | None = None
) -> Guarantee:
    """A site's guarantee with its lifetime ε beside it: the budget it keeps belongs to its data.
    `accountant`: the one every shown ε is by; `guard`: the one its budget guard held each
    population to (PRV where it had one, under a PRV run), which says whether it was exceeded."""
    if budget is None:
        return g
    start = lifetime_epsilon(budget.get("lifetime_start"), accountant)
    worst = _lifetime_worst(budget.get("lifetime"), accountant)
    total = None if worst is None else worst[1]
    held = lifetime_epsilon(budget.get("lifetime"), guard or accountant)
    limit = budget.get("budget")
    limit = float(limit) if isinstance(limit, int | float) and not isinstance(limit, bool) else None
    exceeded = g.exceeded or (held is not None and limit is not None and held > limit)
    return replace(
        g,
        lifetime_start=start,
        lifetime=total,
        lifetime_budget=limit,
        exceeded=exceeded,
        lifetime_population=None if worst is None else worst[0],
    )


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


def epsilon_series(rows: list[MechanismRow]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """Cumulative reported ε at the end of each round, per (site, population).

    Releases logged outside a round (round None, e.g. the GMM histogram at setup) count as round 0.
    """
    series: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        by_round = series.setdefault((row.site, row.population), {})
        by_round[row.round if row.round is not None else 0] = row.epsilon_reported
    return {key: sorted(points.items()) for key, points in series.items()}


def empirical_row(record: dict[str, Any], verification: Verification | None) -> dict[str, Any]:
    """An `empirical_audit` record for the report: its payload, who signed it, and ε̂ as re-derived
    by the verifier (None when verification did not run or could not read the record)."""
    again = verification.empirical.get(record["hash"]) if verification is not None else None
    return {
        "party": record["party"],
        "time": record["time"],
        **record["payload"],
        "rederived_epsilon_hat": again,
    }
