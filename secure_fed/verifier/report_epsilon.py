"""The report's privacy figures: a privacy record as a mechanism-table row, every ε by one
accountant (`one_accountant`), each site's guarantee with its lifetime ε beside it, ε over rounds,
and the empirical lower bounds as the verifier re-derived them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from secure_fed.audits.privacy import PrivacyPayloadError, parse_privacy
from secure_fed.verifier.report_types import Guarantee, MechanismRow
from secure_fed.verifier.verify_results import Verification


def _leaves(event: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    if event.get("type") == "composed":
        for item in event.get("events", []):
            yield from _leaves(item)
    else:
        yield event


def mechanism_row(record: dict[str, Any], verification: Verification | None) -> MechanismRow | None:
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


def run_accountant(configs: list[dict[str, Any]]) -> str:
    """dp.accountant of the latest run_config that states one; else RDP, the guard's default."""
    for config in reversed(configs):
        dp = config.get("dp")
        if isinstance(dp, dict) and dp.get("accountant") in ("rdp", "prv"):
            return str(dp["accountant"])
    return "rdp"


def as_reported(row: MechanismRow, accountant: str) -> MechanismRow:
    """The row's ε as the site's guard judged it against its budget: the run's accountant, RDP where
    no PRV ε was logged (each population on its own, a patient being in one). What the report then
    shows is one accountant's for every row (`one_accountant`, `by_accountant`); the verdict on the budget
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


def by_accountant(row: MechanismRow, accountant: str) -> MechanismRow:
    """The row's reported ε by `accountant` (one of `one_accountant`'s, so logged for this row)."""
    value = row.epsilon_prv if accountant == "prv" and row.epsilon_prv is not None else row.epsilon_rdp
    return replace(row, epsilon_reported=value, accountant_reported=accountant.upper())


def site_guarantees(rows: list[MechanismRow], accountant: str = "rdp") -> list[Guarantee]:
    """Each site's guarantee, every ε in it by one accountant (`one_accountant`) over every
    population that released; `accountant`: the run's."""
    chosen, _ = one_accountant(rows, accountant)
    rows = [by_accountant(row, chosen) for row in rows]
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


def with_lifetime(
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
