"""The report's summary: the headline, how the run went, what left the sites and how it was
protected (the run's norm said once), one table row per site, the sites that differ, and the
terms in plain words."""

from __future__ import annotations

import math
from typing import Any

from secure_fed.verifier.report_course import run_course
from secure_fed.verifier.report_markup import (
    codes_words,
    esc,
    grouped,
    num,
    plural,
    round_spans,
    rounds_words,
    unverified_mark,
)
from secure_fed.verifier.report_plot import protected
from secure_fed.verifier.report_sites import SiteRow
from secure_fed.verifier.report_types import ReportData
from secure_fed.verifier.verdict import Verdict, population_words


def _headline(data: ReportData, rows: list[SiteRow]) -> str:
    """What the run released, and whether differential privacy covered it: one sentence or two."""
    period = f" ({esc(data.period[0][:19])} to {esc(data.period[1][:19])} UTC)" if data.period else ""
    run = f"run <b>{esc(', '.join(data.run_ids))}</b>{period}"
    # a site named only by its refusals released nothing: it is neither exposed nor protected
    active = [row for row in rows if row.released]
    exposed = [row.site for row in active if not row.dp]
    covered = [row.site for row in active if row.dp]
    count = plural(len(active), "site")
    if not rows:
        return (
            f"The logs of {run} name no site that took part and hold no privacy record: they show no "
            "release of patient data, and no protection of one either."
        )
    if not active:
        return (
            f"The logs of {run} name {plural(len(rows), 'site')}, none of which took part in a round or "
            "released anything: they show no release of patient data, and no protection of one either."
        )
    if not covered:
        configured = data.settings is not None and data.settings.get("dp") is False
        why = (
            "the run was configured without differential privacy"
            if configured
            else "no privacy record covers their releases, as listed below"
        )
        return (
            f"Patient data was released without differential privacy (ε = ∞) in {run}: nothing bounds what "
            f"could be learned about one patient from what the {count} sent out ({why}). Each trained the "
            "shared model on its own patients' data, which stayed at the site."
        )
    if exposed:
        return (
            f"Patient data of {esc(', '.join(exposed))} was released without differential privacy (ε = ∞) "
            f"in {run}, as listed below; the releases of training data of the other "
            f"{plural(len(covered), 'site')} are covered by differential privacy, as the table shows."
        )
    return (
        f"In {run}, {count} trained the shared model on their own patients' data, which stayed at each "
        "site; every release of training data is covered by differential privacy, with each site's "
        "privacy loss per patient in the table."
    )


def _release_norms(data: ReportData) -> tuple[list[str], list[str]]:
    """(what left the sites and how, one item per kind of release; the sites that differ, in words).

    A kind's norm is how most sites released it; a site that released it otherwise, or not at all
    where the others did, is an exception, grouped with the sites that share it."""
    taking_part = [site for site in data.sites if site.releases]
    kinds: dict[str, dict[tuple[str, bool], list[str]]] = {}
    for site in taking_part:
        for release in site.releases:
            kinds.setdefault(release.what, {}).setdefault((release.how, release.covered), []).append(
                site.site
            )
    norms, exceptions = [], []
    for what, groups in kinds.items():
        ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
        (how, covered), sites = ordered[0]
        who = "every site" if len(sites) == len(taking_part) else f"{len(sites)} of {len(taking_part)} sites"
        # Under DP a release outside ε must say so; without DP the headline already says nothing is.
        uncovered = " Not covered by ε: no noise was added." if not covered and data.mechanisms else ""
        norms.append(f"<li><b>{esc(what)}</b> ({who}): {esc(how)}.{uncovered}</li>")
        for (other, _), names in ordered[1:]:
            exceptions.append(f"{esc(', '.join(names))}: {esc(what)} {esc(other)}.")
        released = {site for _, names in groups.items() for site in names}
        without = [site.site for site in taking_part if site.site not in released]
        if without and what == "test-set scores":
            exceptions.append(
                f"{esc(', '.join(without))} released no test-set scores (no scoring in the site's log)."
            )
        elif without:
            exceptions.append(f"{esc(', '.join(without))}: no {esc(what)} recorded in the logs given.")
    if taking_part and all(site.evaluated is False for site in taking_part):
        # silence would leave a reader to guess; each site's own log says it scored nothing
        norms.append("<li><b>test-set scores</b>: none released (no scoring in any site's log).</li>")
    return norms, exceptions


def _exceptions(data: ReportData, rows: list[SiteRow]) -> list[str]:
    """Every way a site departed from the run's norm, in words, sites that share one together."""
    out: list[str] = []
    configured_off = data.settings is not None and data.settings.get("dp") is False
    if not configured_off and any(row.dp for row in rows):
        bare = {
            s.site: tuple(s.uncovered_rounds) for s in data.sites if not s.dp and (s.rounds or s.releases)
        }
        for rounds, names in grouped(bare).items():
            if rounds:
                which = "that round" if len(rounds) == 1 else "those rounds"
                out.append(
                    f"{esc(', '.join(names))} took part in {rounds_words(list(rounds))}, "
                    "but no privacy record "
                    f"covers {which}: what it released there is bounded by no ε (ε = ∞)."
                )
            else:
                out.append(f"No privacy record covers what {esc(', '.join(names))} released (ε = ∞).")
    exceeded = [row.site for row in rows if row.exceeded]
    if exceeded:
        out.append(f"<b>Privacy budget EXCEEDED at {esc(', '.join(exceeded))}</b> (see the table).")
    declined: dict[str, tuple[str, tuple[int, ...]]] = {}
    for refusal in data.refusals:
        site = str(refusal.get("site", refusal.get("party")))
        reason = str(refusal.get("reason") or "it would have exceeded its privacy budget")
        rounds = declined.get(site, (reason, ()))[1]
        declined[site] = (reason, (*rounds, refusal.get("round")))
    for (reason, rounds), names in grouped(declined).items():
        said = (
            rounds_words([r for r in rounds if r is not None])
            if any(r is not None for r in rounds)
            else "a round"
        )
        out.append(f"{esc(', '.join(names))} declined {esc(said)}: {esc(reason)}.")
    dropped = {c.party: c.dropped_in for c in data.courses if c.dropped_in is not None}
    for round_, names in grouped(dict(sorted(dropped.items()))).items():
        logs = "its log stops" if len(names) == 1 else "their logs stop"
        out.append(
            f"<b>{esc(', '.join(names))} dropped out in round {esc(round_)}</b>: {logs} there without a head "
            "record, as the server's signed log of that round says (a site that left, not tampering)."
        )
    for attribute, verb in (
        ("refused_instructions", "refused"),
        ("failed_instructions", "could not complete"),
    ):
        counts = {
            s.site: tuple(sorted(getattr(s, attribute).items())) for s in data.sites if getattr(s, attribute)
        }
        for key, names in grouped(counts).items():
            total = sum(n for _, n in key)
            each = " each" if len(names) > 1 else ""
            noun = "server instruction" if total == 1 else "server instructions"
            out.append(f"{esc(', '.join(names))}{each} {verb} {total} {noun}: {esc(codes_words(dict(key)))}.")
    unlogged = [g.site for g in protected(data) if g.lifetime_start is not None and g.lifetime is None]
    if unlogged:
        out.append(
            f"The ledger total after this run of {esc(', '.join(unlogged))} was not logged (the run did not "
            "reach its end): the table shows what earlier runs had spent, and no bound across runs."
        )
    _, differing = _release_norms(data)
    out += differing
    unsupplied = data.verification.get("unsupplied") or []
    if unsupplied:
        # Refusals live only in a site's own log; silence about them would read as "none".
        out.append(
            f"Which server instructions {esc(', '.join(unsupplied))} refused is not known: their own logs "
            "were not supplied."
        )
    return out


def _no_exceptions(data: ReportData, rows: list[SiteRow]) -> str:
    """What the logs show no site did, naming only what they could show."""
    checked = ["declined a round", "dropped out"]
    if rows and all(row.instructions_known for row in rows):
        checked.append("refused a server instruction")
    if any(row.dp for row in rows):
        checked.append("exceeded its privacy budget")
    listed = ", ".join(checked[:-1]) + " or " + checked[-1]
    return f"The logs record no site that {listed}."


def _plain_words(data: ReportData, rows: list[SiteRow]) -> str:
    """The terms the table uses, each explained once for the run (only those it uses)."""
    protections = " ".join(protection for row in rows for _, protection in row.released)
    words = []
    if any(row.dp for row in rows):
        words.append(
            "ε (epsilon) bounds how much anyone could learn about one patient from everything a site "
            "released: smaller is stronger (below about 1 is very strong, around 10 is weak); δ is the small "
            "chance that this bound does not hold. A site's ε is the larger of its training and validation "
            "patients' (different people; the table names whose it is), as one accountant (RDP or PRV) "
            "added it up over every release to either: the same accountant for every ε of the summary, "
            "the table and the plot."
        )
        if data.prv_missing:
            site, population = data.prv_missing[0]
            more = f" and {len(data.prv_missing) - 1} more" if len(data.prv_missing) > 1 else ""
            words.append(
                f"The run's accountant is PRV, but no PRV ε was logged for {site}'s "
                f"{population_words(population)}{more} (its mechanism has no PRV accountant), so every ε "
                "of the summary, the table and the plot is RDP's; a PRV figure for the other patients "
                "alone would be no site's ε. Each site's budget was held per population as its guard "
                "logged it (PRV where it had one), as the mechanism table shows."
            )
        if any(row.budget_all_runs for row in rows):
            words.append(
                "ε this run counts this run's releases; ε all runs counts every run on the same patients' "
                "data, from the site's own ledger, and that is what its budget holds."
            )
    if any(row.epsilon_run is not None and math.isinf(row.epsilon_run) for row in rows):
        words.append("ε = ∞: nothing bounds what could be learned about one patient from what the site sent.")
    if "DP-SGD" in protections:
        words.append(
            "DP-SGD: each training step limits how much any one patient can change the update, then adds "
            "random noise, so that no single patient can be singled out."
        )
    if "SecAgg+" in protections:
        words.append(
            "SecAgg+ (secure aggregation): each site masks its update so that the server can only add them "
            "up: it learns the sum over the sites, never one site's own update."
        )
    if "CKKS" in protections:
        words.append(
            "CKKS: homomorphic encryption; the sites' α scalars are added up while encrypted, and only "
            "the total is decrypted."
        )
    if not words:
        return ""
    return "<p id='words'><b>In plain words.</b> " + " ".join(esc(w) for w in words) + "</p>"


def _whose(population: str | None) -> str:
    """' (training patients)': whose ε a cell's figure is."""
    return f" ({esc(population_words(population))})" if population else ""


def _epsilon_cell(row: SiteRow) -> str:
    if row.epsilon_run is None:
        return "—"
    if math.isinf(row.epsilon_run):
        return "<b>∞</b> (no DP)"
    return num(row.epsilon_run, 3) + _whose(row.epsilon_population)


def _all_runs_cell(row: SiteRow) -> str:
    if row.epsilon_all_runs is not None:
        return num(row.epsilon_all_runs, 3) + _whose(row.all_runs_population)
    if row.epsilon_before is not None:
        return f"{num(row.epsilon_before, 3)} before this run; total not logged"
    return "—"


def _budget_cell(row: SiteRow) -> str:
    if not row.dp:
        return "—"
    if row.budget is None:
        return "none set"
    text = num(row.budget) + (" (all runs)" if row.budget_all_runs else "")
    return text + (" <b>EXCEEDED</b>" if row.exceeded else "")


def _refusals_cell(row: SiteRow) -> str:
    parts = []
    if row.declined_rounds:
        parts.append(f"declined {rounds_words(row.declined_rounds)}")
    for counts, verb in (
        (row.refused_instructions, "refused"),
        (row.failed_instructions, "could not complete"),
    ):
        if counts:
            parts.append(f"{verb} {plural(sum(counts.values()), 'instruction')} ({codes_words(counts)})")
    if not row.instructions_known:
        parts.append("instructions not known (own log not given)")
    return esc("; ".join(parts) or "none")


def _site_table(rows: list[SiteRow], said: Verdict) -> str:
    """One row per site: the same figures as report.csv."""
    dp = any(row.dp for row in rows)
    ledger = any(row.epsilon_before is not None for row in rows)
    columns: list[tuple[str, Any]] = [("site", lambda r: f"<b>{esc(r.site)}</b>")]
    if any(row.patients_train or row.patients_validation for row in rows):
        # the ranges come from privacy records: a run without DP has none, and a column of "— / —"
        # on every row would read as sites without patients
        columns.append(
            (
                "patients (train / validation)",
                lambda r: (
                    f"{esc(r.patients_train or 'not logged')} / {esc(r.patients_validation or 'not logged')}"
                ),
            )
        )
    columns += [
        (
            "rounds taken part in",
            lambda r: (
                esc(round_spans(r.rounds) or "none")
                + (f" (left in {esc(r.dropped_in)})" if r.dropped_in is not None else "")
            ),
        ),
        ("ε this run", _epsilon_cell),
    ]
    if ledger:
        columns.append(("ε all runs", _all_runs_cell))
    if dp:
        columns += [
            ("budget ε", _budget_cell),
            ("δ", lambda r: "—" if r.delta is None else f"{r.delta:g}"),
            ("accountant", lambda r: esc(r.accountant)),
        ]
    columns += [
        (
            "what left the site: protection",
            lambda r: esc("; ".join(f"{what}: {how}" for what, how in r.released) or "nothing recorded"),
        ),
        ("refusals", _refusals_cell),
    ]
    head = "".join(f"<th>{esc(title)}</th>" for title, _ in columns)
    numeric = {"ε this run", "ε all runs", "budget ε", "δ"}
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='num'>{cell(row)}</td>" if title in numeric else f"<td>{cell(row)}</td>"
            for title, cell in columns
        )
        + "</tr>"
        for row in rows
    )
    caption = (
        f"{unverified_mark(said)}{plural(len(rows), 'site')}, one row each (the same figures as report.csv)"
    )
    return f"<table id='sites'><caption>{caption}</caption><tr>{head}</tr>{body}</table>"


def summary(data: ReportData, said: Verdict, rows: list[SiteRow]) -> str:
    mark = unverified_mark(said)
    parts = []
    if not said.verified:
        why = (
            "no signature was checked (no keys given)"
            if said.word == "NOT VERIFIED"
            else "the logs did not pass verification (the problems are listed under Verification)"
        )
        parts.append(
            f"<p id='unverified' class='unv'><b>Every finding below is unverified</b>: {why}. Each is what "
            "the logs state, not what they prove, and is marked so.</p>"
        )
    parts.append(f"<p id='headline'>{mark}{_headline(data, rows)}</p>")
    parts += [f"<p id='{key}'>{mark}{text}</p>" for key, text in run_course(data)]
    norms, _ = _release_norms(data)
    if norms:
        parts.append(
            f"<p>{mark}What left the sites, and how it was protected:</p>"
            f"<ul id='releases'>{''.join(norm.replace('<li>', '<li>' + mark, 1) for norm in norms)}</ul>"
        )
    if rows:
        parts.append(_site_table(rows, said))
    exceptions = _exceptions(data, rows)
    if exceptions:
        items = "".join(f"<li>{mark}{text}</li>" for text in exceptions)
        parts.append(f"<p>{mark}Where a site differs from the rest:</p><ul id='exceptions'>{items}</ul>")
    elif rows:
        parts.append(f"<p id='exceptions'>{mark}{_no_exceptions(data, rows)}</p>")
    parts.append(_plain_words(data, rows))
    return '<div class="summary" id="summary">' + "".join(parts) + "</div>"
