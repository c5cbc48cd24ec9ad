"""The figures of the compliance report, gathered from the logs (no rendering here).

Privacy records are taken from every log given, own and embedded copies alike, once each (by
record hash), so the report works from the server's log alone or from the sites' logs alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from secure_fed.audits.privacy import PrivacyPayloadError, parse_privacy
from secure_fed.audits.reader import read_log
from secure_fed.audits.records import shape_problem
from secure_fed.audits.verify import Verification


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


@dataclass(frozen=True)
class Guarantee:
    """The per-patient guarantee of one site: the max over its (disjoint) populations."""

    site: str
    epsilon: float
    delta: float
    accountant: str
    budget: float | None
    exceeded: bool
    populations: dict[str, float]
    population_sizes: dict[str, Any]
    mechanisms: list[str]


@dataclass
class ReportData:
    run_ids: list[str] = field(default_factory=list)
    parties: list[str] = field(default_factory=list)
    period: tuple[str, str] | None = None
    guarantees: list[Guarantee] = field(default_factory=list)
    mechanisms: list[MechanismRow] = field(default_factory=list)
    refusals: list[dict[str, Any]] = field(default_factory=list)
    secagg_rounds: list[dict[str, Any]] = field(default_factory=list)
    alpha: Any = None
    model_hash: Any = None
    verification: dict[str, Any] = field(default_factory=dict)

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
        population_size=entry.extras.get("population_size"),
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


def _guarantees(rows: list[MechanismRow]) -> list[Guarantee]:
    result = []
    for site in sorted({row.site for row in rows}):
        own = [row for row in rows if row.site == site]
        # Rows are in log order per signer, so the last row of a population is its cumulative ε.
        last = {row.population: row for row in own}
        worst = max(last.values(), key=lambda row: row.epsilon_reported)
        budgets = [row.budget for row in own if row.budget is not None]
        result.append(
            Guarantee(
                site=site,
                epsilon=worst.epsilon_reported,
                delta=max(row.delta for row in last.values()),
                accountant="PRV" if worst.epsilon_prv is not None else "RDP",
                budget=min(budgets) if budgets else None,
                exceeded=any(row.within_budget is False for row in own),
                populations={pop: row.epsilon_reported for pop, row in last.items()},
                population_sizes={
                    pop: row.population_size for pop, row in last.items() if row.population_size is not None
                },
                mechanisms=sorted({row.mechanism for row in own}),
            )
        )
    return result


def _verification_json(verification: Verification | None) -> dict[str, Any]:
    if verification is None:
        return {"ok": False, "keys_checked": False, "problems": ["verification was not run"]}
    return {
        "ok": verification.ok,
        "keys_checked": verification.keys_checked,
        "problems": [str(problem) for problem in verification.problems],
        "logs": [asdict(log) for log in verification.logs],
    }


def collect(paths: Sequence[Path | str], verification: Verification | None) -> ReportData:
    data = ReportData(verification=_verification_json(verification))
    seen: set[str] = set()
    times: list[str] = []
    for record in _records(paths):
        if record["hash"] in seen:
            continue
        seen.add(record["hash"])
        if record["run_id"] not in data.run_ids:
            data.run_ids.append(record["run_id"])
        if record["party"] not in data.parties:
            data.parties.append(record["party"])
        times.append(record["time"])
        event, payload = record["event"], record["payload"]
        if event == "privacy":
            row = _row(record, verification)
            if row is not None:
                data.mechanisms.append(row)
        elif event == "budget_refusal":
            data.refusals.append({"party": record["party"], "round": record["round"], **payload})
        elif event == "secagg_round":
            data.secagg_rounds.append({"party": record["party"], "round": record["round"], **payload})
        elif event == "alpha":
            data.alpha = payload
        elif event == "model_hash":
            data.model_hash = payload
    data.mechanisms.sort(key=lambda row: (row.site, row.party, row.seq))
    data.guarantees = _guarantees(data.mechanisms)
    data.period = (min(times), max(times)) if times else None
    return data


def epsilon_series(rows: list[MechanismRow]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """Cumulative reported ε at the end of each round, per (site, population).

    Releases logged outside a round (round None, e.g. the GMM histogram at setup) count as round 0.
    """
    series: dict[tuple[str, str], dict[int, float]] = {}
    for row in rows:
        by_round = series.setdefault((row.site, row.population), {})
        by_round[row.round if row.round is not None else 0] = row.epsilon_reported
    return {key: sorted(points.items()) for key, points in series.items()}
