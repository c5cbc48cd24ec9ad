"""What the compliance report is made of (report_data gathers it from the logs): the mechanism
table's rows, each site's guarantee and releases, how each log ends, and the whole as JSON."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


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
    # one-run canary audits (`secure-fed lower-bound`): payload + party + re-derived ε̂
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
