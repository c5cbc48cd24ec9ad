"""Each site's part of the report: the rounds a sum of its values was formed in, what left it and
how it was protected (its releases), and its line of the summary table (`SiteRow`)."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from secure_fed.audits.payloads import RunSettings, round_sites, run_settings
from secure_fed.verifier.report_types import MechanismRow, Release, ReportData, SiteReport


def merged_settings(configs: list[dict[str, Any]]) -> RunSettings | None:
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
        noised = "; clipped and noised per patient first"
        if settings is not None and settings.noise == "distributed" and he:
            # the noise is the sum's, in shares: this site's alone carries σ·C/√(m − c) of it
            noised = (
                "; clipped per patient, then noised with this site's share of the sum's noise, sized for "
                f"m − c of the m sites in the sum (c = {settings.colluders})"
            )
        out.append(
            Release(
                "α scalars",
                how + (noised if covered else ""),
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


def site_reports(
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
