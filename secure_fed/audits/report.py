"""`audit report`: one self-contained HTML page for a compliance officer, plus JSON and CSV.

Self-contained means no network fetch of any kind: inline CSS, the plot as inline SVG (a bare
matplotlib Figure, no pyplot or GUI backend, glyphs as paths), no scripts. The JSON holds every
figure on the page; the CSV is the summary's site table (one row per site), the -mechanisms.csv
the mechanism table.

The page leads with the verdict (verdict.py, the words `audit verify` prints), then a summary that
stays as long at 30 sites as at 3: the run's norm said once, one table row per site, and prose only
for the sites that differ from it. Where the logs did not verify, every finding is marked so.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from rich.console import Console

from secure_fed.audits.alpha_path import alpha_path
from secure_fed.audits.alpha_path import report_html as alpha_report_html
from secure_fed.audits.keys import keys_for_cli
from secure_fed.audits.report_data import (
    Guarantee,
    MechanismRow,
    ReportData,
    SiteRow,
    collect,
    epsilon_series,
    finite_json,
    run_facts,
    site_rows,
)
from secure_fed.audits.verdict import Verdict, population_words, stated_whose, tone, verdict, verdict_markup
from secure_fed.audits.verify import verify_logs

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1d2430; line-height: 1.5; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
.muted { color: #5b6575; font-size: .9rem; }
.verdict { padding: .8rem 1rem; border-radius: 6px; font-weight: 600; }
.ok { background: #e3f5e8; border: 1px solid #58a86b; }
.warn { background: #fff4d6; border: 1px solid #c99a2e; }
.unv { color: #a32020; }
caption { text-align: left; font-weight: 600; padding: .4rem 0; }
.bad { background: #fbe5e5; border: 1px solid #c84a4a; }
.summary { background: #f3f6fa; border-left: 4px solid #3b6fb6; padding: .8rem 1.2rem; }
table { border-collapse: collapse; font-size: .85rem; width: 100%; }
th, td { border: 1px solid #d5dae2; padding: .3rem .5rem; text-align: left; }
th { background: #eef1f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
#sites td.num { white-space: nowrap; }
.plot svg { max-width: 100%; height: auto; }
#mechanisms { font-size: .78rem; } #mechanisms th, #mechanisms td { padding: .25rem .3rem; }
"""


def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and math.isinf(value):
        return "∞"
    return f"{value:.{digits}g}"


def _e(value: Any) -> str:
    return html.escape("—" if value is None else str(value))


def protected(data: ReportData) -> list[Guarantee]:
    """The guarantees that hold: of sites whose every release of training data a privacy record
    covers. Any other site's ε would understate what it released, so it is never shown as a bound."""
    covered = {site.site for site in data.sites if site.dp}
    return [g for g in data.guarantees if g.site in covered]


PLOT_COLUMNS = 2  # panels in a row of the ε plot


def plot_svg(data: ReportData) -> str:
    """ε over rounds, one panel per protected site, each population a line, the site's budget dotted."""
    series = epsilon_series(data.mechanisms)
    guarantees = protected(data)
    if not guarantees:
        return "<p>No site's releases are covered by differential privacy: there is no ε to plot.</p>"
    # At most two panels a row: side by side, six sites made a figure three times the report's
    # column, shrunk to fit with its text (~5 px); two 5.2-inch panels fit the column unshrunk.
    columns = min(len(guarantees), PLOT_COLUMNS)
    rows = math.ceil(len(guarantees) / columns)
    figure = Figure(figsize=(5.2 * columns, 3.6 * rows))
    grid = figure.subplots(rows, columns, squeeze=False).flatten()
    for spare in grid[len(guarantees) :]:
        figure.delaxes(spare)
    for axis, guarantee in zip(grid, guarantees, strict=False):
        ledger = guarantee.lifetime_start is not None
        last = 0
        for (site, population), points in sorted(series.items()):
            if site == guarantee.site:
                style = "-o" if population == "train" else "--s"
                label = f"{'this run: ' if ledger else ''}{population_words(population)}"
                axis.plot([p[0] for p in points], [p[1] for p in points], style, label=label)
                last = max(last, points[-1][0])
        budget = guarantee.budget
        if ledger:
            # The budget is spent across runs: the patients' ε starts where earlier runs left it.
            xs, ys = [0], [guarantee.lifetime_start or 0.0]
            if guarantee.lifetime is not None:
                xs, ys = [*xs, last], [*ys, guarantee.lifetime]
                budget = guarantee.lifetime_budget
            axis.plot(xs, ys, "-D", color="#222222", label="all runs on this data (ledger)")
        if budget is not None:
            label = f"budget ε = {budget:g}" + (" (all runs)" if ledger else "")
            axis.axhline(budget, color="#c84a4a", linestyle=":", label=label)
        axis.set_ylim(bottom=0)
        axis.set_title(f"{guarantee.site}: ε per patient (δ = {guarantee.delta:g})", fontsize=10)
        axis.set_xlabel("round (0 = before training)")
        axis.set_ylabel(f"cumulative ε ({guarantee.accountant})")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "secure-fed"}):
        figure.savefig(buffer, format="svg")
    svg = buffer.getvalue()
    # Drop the XML prolog and DOCTYPE (which names an external DTD) so the SVG can sit inline.
    return presentational(svg[svg.index("<svg") :])


_SVG_STYLE = re.compile(r'<style type="text/css">\*\{([^}<]*)\}</style>')
_STYLE_ATTR = re.compile(r'\sstyle="([^"]*)"')


def presentational(svg: str) -> str:
    """The SVG with its CSS as presentation attributes: the page's CSP allows no inline style but
    its own stylesheet (by hash), so a `style` attribute or matplotlib's `*{…}` block would be
    dropped by the browser, and the plot drawn without its colours."""

    def attributes(css: str) -> str:
        pairs = (item.split(":", 1) for item in css.split(";") if ":" in item)
        return "".join(f' {name.strip()}="{html.escape(value.strip())}"' for name, value in pairs)

    defaults = _SVG_STYLE.search(svg)
    svg = _SVG_STYLE.sub("", svg)
    svg = _STYLE_ATTR.sub(lambda match: attributes(match.group(1)), svg)
    if defaults is not None:  # `*{…}` applied to every element: inherited from the root instead
        svg = svg.replace("<svg ", "<svg" + attributes(defaults.group(1)) + " ", 1)
    return svg


def _names(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "none logged"


def _rounds(rounds: Sequence[int]) -> str:
    return ("round " if len(rounds) == 1 else "rounds ") + ", ".join(map(str, rounds))


def _spans(rounds: Sequence[int]) -> str:
    """1, 2, 3, 5 → '1–3, 5': a cell that stays short however many rounds a run has."""
    spans: list[list[int]] = []
    for value in sorted(set(rounds)):
        if spans and value == spans[-1][1] + 1:
            spans[-1][1] = value
        else:
            spans.append([value, value])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in spans)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _group(by_site: Mapping[str, Any]) -> dict[Any, list[str]]:
    """Sites that share a finding, in first-seen order: one sentence per finding, not per site."""
    groups: dict[Any, list[str]] = {}
    for site, key in by_site.items():
        groups.setdefault(key, []).append(site)
    return groups


def _codes(counts: Mapping[str, int]) -> str:
    return ", ".join(
        f"{code} ×{n}" if n > 1 else code
        for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def _mark(said: Verdict) -> str:
    """The prefix of every finding on a page whose logs did not verify."""
    return "" if said.verified else "<b class='unv'>Unverified:</b> "


def _headline(data: ReportData, rows: list[SiteRow]) -> str:
    """What the run released, and whether differential privacy covered it: one sentence or two."""
    period = f" ({_e(data.period[0][:19])} to {_e(data.period[1][:19])} UTC)" if data.period else ""
    run = f"run <b>{_e(', '.join(data.run_ids))}</b>{period}"
    # a site named only by its refusals released nothing: it is neither exposed nor protected
    active = [row for row in rows if row.released]
    exposed = [row.site for row in active if not row.dp]
    covered = [row.site for row in active if row.dp]
    count = _plural(len(active), "site")
    if not rows:
        return (
            f"The logs of {run} name no site that took part and hold no privacy record: they show no "
            "release of patient data, and no protection of one either."
        )
    if not active:
        return (
            f"The logs of {run} name {_plural(len(rows), 'site')}, none of which took part in a round or "
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
            f"Patient data of {_e(', '.join(exposed))} was released without differential privacy (ε = ∞) "
            f"in {run}, as listed below; the releases of training data of the other "
            f"{_plural(len(covered), 'site')} are covered by differential privacy, as the table shows."
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
        norms.append(f"<li><b>{_e(what)}</b> ({who}): {_e(how)}.{uncovered}</li>")
        for (other, _), names in ordered[1:]:
            exceptions.append(f"{_e(', '.join(names))}: {_e(what)} {_e(other)}.")
        released = {site for _, names in groups.items() for site in names}
        without = [site.site for site in taking_part if site.site not in released]
        if without and what == "test-set scores":
            exceptions.append(
                f"{_e(', '.join(without))} released no test-set scores (no scoring in the site's log)."
            )
        elif without:
            exceptions.append(f"{_e(', '.join(without))}: no {_e(what)} recorded in the logs given.")
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
        for rounds, names in _group(bare).items():
            if rounds:
                which = "that round" if len(rounds) == 1 else "those rounds"
                out.append(
                    f"{_e(', '.join(names))} took part in {_rounds(list(rounds))}, but no privacy record "
                    f"covers {which}: what it released there is bounded by no ε (ε = ∞)."
                )
            else:
                out.append(f"No privacy record covers what {_e(', '.join(names))} released (ε = ∞).")
    exceeded = [row.site for row in rows if row.exceeded]
    if exceeded:
        out.append(f"<b>Privacy budget EXCEEDED at {_e(', '.join(exceeded))}</b> (see the table).")
    declined: dict[str, tuple[str, tuple[int, ...]]] = {}
    for refusal in data.refusals:
        site = str(refusal.get("site", refusal.get("party")))
        reason = str(refusal.get("reason") or "it would have exceeded its privacy budget")
        rounds = declined.get(site, (reason, ()))[1]
        declined[site] = (reason, (*rounds, refusal.get("round")))
    for (reason, rounds), names in _group(declined).items():
        said = (
            _rounds([r for r in rounds if r is not None]) if any(r is not None for r in rounds) else "a round"
        )
        out.append(f"{_e(', '.join(names))} declined {_e(said)}: {_e(reason)}.")
    dropped = {c.party: c.dropped_in for c in data.courses if c.dropped_in is not None}
    for round_, names in _group(dict(sorted(dropped.items()))).items():
        logs = "its log stops" if len(names) == 1 else "their logs stop"
        out.append(
            f"<b>{_e(', '.join(names))} dropped out in round {_e(round_)}</b>: {logs} there without a head "
            "record, as the server's signed log of that round says (a site that left, not tampering)."
        )
    for attribute, verb in (
        ("refused_instructions", "refused"),
        ("failed_instructions", "could not complete"),
    ):
        counts = {
            s.site: tuple(sorted(getattr(s, attribute).items())) for s in data.sites if getattr(s, attribute)
        }
        for key, names in _group(counts).items():
            total = sum(n for _, n in key)
            each = " each" if len(names) > 1 else ""
            noun = "server instruction" if total == 1 else "server instructions"
            out.append(f"{_e(', '.join(names))}{each} {verb} {total} {noun}: {_e(_codes(dict(key)))}.")
    unlogged = [g.site for g in protected(data) if g.lifetime_start is not None and g.lifetime is None]
    if unlogged:
        out.append(
            f"The ledger total after this run of {_e(', '.join(unlogged))} was not logged (the run did not "
            "reach its end): the table shows what earlier runs had spent, and no bound across runs."
        )
    _, differing = _release_norms(data)
    out += differing
    unsupplied = data.verification.get("unsupplied") or []
    if unsupplied:
        # Refusals live only in a site's own log; silence about them would read as "none".
        out.append(
            f"Which server instructions {_e(', '.join(unsupplied))} refused is not known: their own logs "
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
    return "<p id='words'><b>In plain words.</b> " + " ".join(_e(w) for w in words) + "</p>"


def _whose(population: str | None) -> str:
    """' (training patients)': whose ε a cell's figure is."""
    return f" ({_e(population_words(population))})" if population else ""


def _epsilon_cell(row: SiteRow) -> str:
    if row.epsilon_run is None:
        return "—"
    if math.isinf(row.epsilon_run):
        return "<b>∞</b> (no DP)"
    return _num(row.epsilon_run, 3) + _whose(row.epsilon_population)


def _all_runs_cell(row: SiteRow) -> str:
    if row.epsilon_all_runs is not None:
        return _num(row.epsilon_all_runs, 3) + _whose(row.all_runs_population)
    if row.epsilon_before is not None:
        return f"{_num(row.epsilon_before, 3)} before this run; total not logged"
    return "—"


def _budget_cell(row: SiteRow) -> str:
    if not row.dp:
        return "—"
    if row.budget is None:
        return "none set"
    text = _num(row.budget) + (" (all runs)" if row.budget_all_runs else "")
    return text + (" <b>EXCEEDED</b>" if row.exceeded else "")


def _refusals_cell(row: SiteRow) -> str:
    parts = []
    if row.declined_rounds:
        parts.append(f"declined {_rounds(row.declined_rounds)}")
    for counts, verb in (
        (row.refused_instructions, "refused"),
        (row.failed_instructions, "could not complete"),
    ):
        if counts:
            parts.append(f"{verb} {_plural(sum(counts.values()), 'instruction')} ({_codes(counts)})")
    if not row.instructions_known:
        parts.append("instructions not known (own log not given)")
    return _e("; ".join(parts) or "none")


def _site_table(rows: list[SiteRow], said: Verdict) -> str:
    """One row per site: the same figures as report.csv."""
    dp = any(row.dp for row in rows)
    ledger = any(row.epsilon_before is not None for row in rows)
    columns: list[tuple[str, Any]] = [("site", lambda r: f"<b>{_e(r.site)}</b>")]
    if any(row.patients_train or row.patients_validation for row in rows):
        # the ranges come from privacy records: a run without DP has none, and a column of "— / —"
        # on every row would read as sites without patients
        columns.append(
            (
                "patients (train / validation)",
                lambda r: (
                    f"{_e(r.patients_train or 'not logged')} / {_e(r.patients_validation or 'not logged')}"
                ),
            )
        )
    columns += [
        (
            "rounds taken part in",
            lambda r: (
                _e(_spans(r.rounds) or "none")
                + (f" (left in {_e(r.dropped_in)})" if r.dropped_in is not None else "")
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
            ("accountant", lambda r: _e(r.accountant)),
        ]
    columns += [
        (
            "what left the site: protection",
            lambda r: _e("; ".join(f"{what}: {how}" for what, how in r.released) or "nothing recorded"),
        ),
        ("refusals", _refusals_cell),
    ]
    head = "".join(f"<th>{_e(title)}</th>" for title, _ in columns)
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
    caption = f"{_mark(said)}{_plural(len(rows), 'site')}, one row each (the same figures as report.csv)"
    return f"<table id='sites'><caption>{caption}</caption><tr>{head}</tr>{body}</table>"


def _summary(data: ReportData, said: Verdict, rows: list[SiteRow]) -> str:
    mark = _mark(said)
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
    parts += [f"<p id='{key}'>{mark}{text}</p>" for key, text in _course(data)]
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


def _skipped(item: Mapping[str, Any]) -> str:
    """One skipped round: who left, and who declined and why (the server's round_skipped record)."""
    dropped = item.get("dropped")
    gone = ", ".join(map(str, dropped)) if isinstance(dropped, list) and dropped else "none"
    text = f"round {item.get('round')} (sites gone: {gone}"
    declined = item.get("declined")
    if isinstance(declined, dict) and declined:
        text += "; declined: " + ", ".join(f"{site} ({reason})" for site, reason in declined.items())
    return text + ")"


def _signal_words(signal: Any) -> str:
    return f" by {signal}" if isinstance(signal, str) and signal else ""


def _course(data: ReportData) -> list[tuple[str, str]]:
    """How the run went, from the logs alone, as (id, paragraph) pairs: finished, interrupted (and
    resumed), aborted, or logs that simply stop; why it stopped early, who was absent, what was skipped."""
    out: list[tuple[str, str]] = []
    parts = []
    for item in data.resumed:
        where = f" in round {item['round']}" if item.get("round") is not None else ""
        parts.append(
            f"The run was interrupted{_e(_signal_words(item.get('signal')))}{_e(where)} and resumed: "
            f"the log of {_e(item['party'])} goes on after its signed run_aborted record."
        )
    if data.aborted is not None:
        where = f" in round {data.aborted['round']}" if data.aborted.get("round") is not None else ""
        signal = data.aborted.get("signal")
        what = "interrupted" + _signal_words(signal) if signal else "aborted"
        reason = f": {data.aborted['reason']}" if data.aborted.get("reason") else ""
        out.append(
            (
                "aborted",
                f"<b>The run was {_e(what)}{_e(where)} and did not finish</b>{_e(reason)}. "
                "The logs that record it show no release after it.",
            )
        )
    stops = [
        course
        for course in data.courses
        if not course.closed and course.dropped_in is None and course.end not in ("run_end", "run_aborted")
    ]
    for last, parties in _group({c.party: c.last_round for c in stops}).items():
        after = f" after round {last}" if last is not None else ""
        logs = (
            f"The log of {parties[0]} stops"
            if len(parties) == 1
            else f"The logs of {', '.join(parties)} stop"
        )
        parts.append(
            f"<b>{_e(logs)}{_e(after)} with no end record</b>: the run was interrupted there (its process "
            "ended, or the log was cut short) and what followed is not recorded."
        )
    if data.aborted is None and not stops:
        done = data.rounds_done
        planned = f" of {data.planned_rounds} planned" if data.planned_rounds is not None else ""
        if done:
            parts.append(f"The server's log records the sums of {_rounds(done)}{_e(planned)}.")
        short = (
            data.planned_rounds is not None
            and (done or data.skipped_rounds)
            and len(done) < data.planned_rounds
        )
        if data.model_hash is not None and short:
            # the same words as `secure-fed run`'s exit 3: not the run that was asked for
            parts.append(
                f"It closes with the released model's hash after {len(done)} of {_e(data.planned_rounds)} "
                "planned rounds: the run ended short of its plan (INCOMPLETE)."
            )
        elif data.model_hash is not None:
            parts.append("It closes with the released model's hash: the run finished.")
    if parts:
        out.append(("course", " ".join(parts)))
    if data.stopped is not None:
        out.append(("stopped", f"The run ended before its planned rounds: {_e(data.stopped)}"))
    if data.absent is not None:
        present = [str(s) for s in data.absent.get("present", [])]
        out.append(
            (
                "absent",
                f"{len(present)} of {_e(data.absent.get('expected'))} configured sites came to this run "
                f"({_e(', '.join(present))}); each absent site counts as a dropout.",
            )
        )
    charged: dict[int, list[str]] = {}
    for site in data.sites:
        for round_ in site.charged_unreleased:
            charged.setdefault(round_, []).append(site.site)
    if charged:
        which = "; ".join(f"round {r} at {', '.join(names)}" for r, names in sorted(charged.items()))
        out.append(
            (
                "charged",
                f"Charged, not released: {_e(which)}. Each site is charged a round's ε when it is admitted "
                "to train, before anything leaves it; the ε in the table counts these rounds, but no sum of "
                "them was formed, so nothing of them left the site.",
            )
        )
    if data.skipped_rounds:
        rounds = "; ".join(_skipped(item) for item in data.skipped_rounds)
        # only a DP run charged the skipped rounds' releases; a run without DP has no ε to count them in
        charged = " A skipped round's DP releases are still counted in ε." if data.mechanisms else ""
        out.append(
            (
                "skipped",
                "Skipped because sites left or declined mid-round, with no aggregate released and the "
                f"model kept: {_e(rounds)}.{charged}",
            )
        )
    return out


def _head_cell(log: Mapping[str, Any]) -> str:
    if log.get("closed"):
        return "yes"
    if log.get("dropped_in") is not None:
        return f"none: dropped out in round {_e(log['dropped_in'])}"
    if log.get("interrupted_by") is not None:
        return f"none: interrupted by {_e(log['interrupted_by'])}"
    return "missing"


def _verification_html(data: ReportData) -> str:
    """The verdict's evidence (the verdict itself leads the page): every problem, every warning,
    and how each log ends."""
    verdict = data.verification
    problems = "".join(f"<li><code>{_e(problem)}</code></li>" for problem in verdict.get("problems", []))
    warnings = "".join(f"<li>{_e(warning)}</li>" for warning in verdict.get("warnings", []))
    logs = "".join(
        f"<tr><td>{_e(log['path'])}</td><td>{_e(log['party'])}</td><td class='num'>{log['records']}</td>"
        f"<td>{_head_cell(log)}</td></tr>"
        for log in verdict.get("logs", [])
    )
    table = (
        f"<table><tr><th>log</th><th>party</th><th>records</th><th>head record</th></tr>{logs}</table>"
        if logs
        else ""
    )
    listed = f"<p>Problems found:</p><ul id='problems'>{problems}</ul>" if problems else ""
    notes = (
        f"<p>Warnings (they limit what was checked):</p><ul id='warnings'>{warnings}</ul>" if warnings else ""
    )
    return listed + notes + table


# Short cells only, so that every column fits a 1280 px window: the mechanisms in words are listed
# under the table, once each, not repeated on every row.
_COLUMNS: list[tuple[str, str]] = [
    ("site", "site"),
    ("population", "patient group"),
    ("population_size", "group size"),
    ("round", "round"),
    ("mechanism", "mechanism"),
    ("sampling_rate", "q"),
    ("noise_multiplier", "σ"),
    ("clip_norm", "C"),
    ("steps", "releases"),
    ("delta", "δ"),
    ("epsilon_rdp", "cumulative ε RDP (logged)"),
    ("rederived_rdp", "ε RDP (re-derived)"),
    ("epsilon_prv", "cumulative ε PRV (logged)"),
    ("rederived_pld", "ε PLD (re-derived)"),
    ("budget", "budget ε"),
    ("matches", "re-derived ε matches"),
]

# Each mechanism in words, for a reader who does not know the symbols.
MECHANISM_WORDS: dict[str, str] = {
    "dp_sgd": (
        "training of the shared model (DP-SGD): each step samples each patient with probability q, "
        "clips the patient's gradient to norm C and adds Gaussian noise of σ·C"
    ),
    "gmm_histogram": (
        "counts of patients per age band and sex, released once with Gaussian noise of σ per count, "
        "from which the site fits its patient groups"
    ),
    "alpha_scalars": (
        "how much each of the site's validation patients favours each time step (α hypergradients): "
        "clipped per patient to C, Gaussian noise of σ·C"
    ),
}
# How the α scalars were summed, by the run's logged `he` setting (None: no run_config logged).
_ALPHA_SUM: dict[bool | None, str] = {
    True: ", then summed with the other sites under CKKS encryption (the server saw only the total)",
    False: ", then sent as plain values for the server to sum (no encryption: it saw this site's values)",
    None: "; how they were summed is not recorded in the logs given",
}


# How a distributed run's ε counted the patients' Poisson sampling (its logged dp.amplification).
_AMPLIFICATION_WORDS: dict[str | None, str] = {
    "symmetric": (
        "; ε counts the sampling with the exact expansion used for sampled Gaussian noise, valid "
        "for this noise because it is symmetric about zero (proof: docs/THREAT_MODEL.md)"
    ),
    "general": (
        "; ε counts the sampling with Zhu & Wang's general bound, valid for any noise and looser "
        "(more noise for the same ε)"
    ),
}


def mechanism_words(mechanism: str, settings: Mapping[str, Any] | None) -> str:
    """The mechanism in words, as this run ran it (its logged settings, not the default)."""
    words = MECHANISM_WORDS.get(mechanism, "a noisy release (see the mechanism's parameters)")
    if mechanism == "dp_sgd" and settings is not None and settings.get("noise") == "distributed":
        h, c = settings.get("honest_min"), settings.get("colluders")
        words = (
            "training of the shared model with distributed noise: each round is one step over every "
            "site's patients, each sampled with probability q and its gradient clipped to norm C; each "
            "site added only an integer share of Skellam noise inside SecAgg+, sized so that the honest "
            f"sites among any h = {'all sites but c' if h is None else h} survivors carry the whole "
            f"noise even when c = {c} of them collude with the server and remove their own shares; "
            "sites refuse to unmask a sum with fewer than h survivors (σ: the released sum's noise "
            "over C)"
        )
        words += _AMPLIFICATION_WORDS.get(settings.get("amplification"), "")
    if mechanism == "alpha_scalars":
        words += _ALPHA_SUM[None if settings is None else settings.get("he")]
    return words


def _cell(row: MechanismRow, name: str) -> str:
    value = getattr(row, name)
    if name == "matches":
        return "—" if value is None else ("✓" if value else "✗ MISMATCH")
    if isinstance(value, float):
        return _num(value)
    return _e(value)


def _mechanism_table(rows: list[MechanismRow], settings: Mapping[str, Any] | None) -> str:
    header = "".join(f"<th>{_e(title)}</th>" for _, title in _COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(row, name)}</td>" for name, _ in _COLUMNS) + "</tr>" for row in rows
    )
    words = "".join(
        f"<li><b>{_e(mechanism)}</b>: {_e(mechanism_words(mechanism, settings))}</li>"
        for mechanism in dict.fromkeys(row.mechanism for row in rows)
    )
    return (
        f"<table id='mechanisms'><tr>{header}</tr>{body}</table>"
        f"<p>What each mechanism released, in words:</p><ul id='mechanism-words'>{words}</ul>"
    )


def _events_html(data: ReportData) -> str:
    parts = []
    if data.secagg_rounds:
        rows = "".join(
            f"<tr><td>{_e(item.get('round'))}</td><td>{_e(item.get('mode'))}</td>"
            f"<td>{_e(', '.join(map(str, item.get('participants', []))))}</td>"
            f"<td>{_e(', '.join(map(str, item.get('dropped', []))) or 'none')}</td></tr>"
            for item in data.secagg_rounds
        )
        parts.append(
            "<h3>Aggregation rounds: participants and dropouts</h3>"
            f"<table><tr><th>round</th><th>sum</th><th>participants</th><th>dropped</th></tr>{rows}</table>"
        )
    if data.survivor_sets:
        parts.append(_survivors_html(data.survivor_sets))
    if data.refusals:
        rows = "".join(
            f"<tr><td>{_e(item.get('site', item.get('party')))}</td><td>{_e(item.get('round'))}</td>"
            f"<td>{_refused_epsilon(item, data.accountant)}</td><td>{_e(item.get('budget'))}</td>"
            f"<td>{_e(item.get('reason'))}</td></tr>"
            for item in data.refusals
        )
        parts.append(
            "<h3>Budget refusals</h3><table><tr><th>site</th><th>round</th><th>ε if it had taken part "
            f"(whose, by which accountant)</th><th>budget</th><th>reason</th></tr>{rows}</table>"
        )
    else:
        parts.append("<p>No budget refusals were logged.</p>")
    if data.instructions:
        rows = "".join(
            f"<tr><td>{_e(item.get('site'))}</td><td>{_e(item.get('round'))}</td><td>{_e(item.get('phase'))}</td>"
            f"<td>{_e(item.get('outcome'))}</td><td>{_e(item.get('code'))}</td>"
            f"<td><code>{_e(str(item.get('digest', ''))[:16])}…</code></td></tr>"
            for item in data.instructions
        )
        parts.append(
            "<h3>Server instructions the sites refused or could not complete</h3><table><tr>"
            "<th>site</th><th>round</th><th>phase</th><th>outcome</th><th>code</th><th>request digest</th>"
            f"</tr>{rows}</table>"
        )
    if data.alpha is not None:
        parts.append(f"<p>Aggregated α (the last round's): {_alpha_words(data.alpha)}</p>")
    parts.append(alpha_report_html(alpha_path(data.alpha_events)))  # by round, flagged outside [0.1, 0.9]
    if data.model_hash is not None:
        parts.append(f"<p>Released model: {_model_words(data.model_hash)}</p>")
    return "".join(parts)


def _refused_epsilon(item: Mapping[str, Any], accountant: str) -> str:
    """'8.31 (validation patients, PRV)': the ε a refused round would have brought, whose it is and
    by which accountant, as the site signed them; a record without its accountant (written before
    it was signed) says what its site's guard used: the run's accountant, RDP where it had none."""
    value = item.get("epsilon_after")
    if not isinstance(value, int | float) or isinstance(value, bool):
        return _e(value)
    whose = [population_words(item["population"])] if item.get("population") else []
    signed = item.get("accountant")
    if signed in ("rdp", "prv"):
        whose.append(str(signed).upper())
    else:
        whose.append("RDP" if accountant == "rdp" else "PRV, or RDP where it had none")
    return f"{_num(float(value), 4)} ({_e(', '.join(whose))})"


def _alpha_words(payload: Any) -> str:
    """The α weights as numbers, not the record's JSON."""
    values = payload.get("alpha") if isinstance(payload, dict) else payload
    if isinstance(values, list) and all(isinstance(v, int | float) for v in values):
        return ", ".join(f"{v:.3g}" for v in values)
    return f"<code>{_e(json.dumps(payload))}</code>"  # a shape no party writes: shown as logged


def _model_words(payload: Any) -> str:
    """What was released and its SHA-256, not the record's JSON."""
    digest = payload.get("sha256") if isinstance(payload, dict) else None
    if not isinstance(digest, str):
        return f"<code>{_e(json.dumps(payload))}</code>"  # a shape no party writes: shown as logged
    what = payload.get("what")
    return (f"{_e(what)}, " if isinstance(what, str) and what else "") + f"SHA-256 <code>{_e(digest)}</code>"


def survivor_rounds(sets: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per round of distributed DP: how many sites the confirmed survivor set holds against h, which
    sites confirmed it, and whether every site confirmed the same set (what makes the round's ε a bound)."""
    by_round: dict[Any, list[Mapping[str, Any]]] = {}
    for item in sets:
        by_round.setdefault(item.get("round"), []).append(item)
    out = []
    for round_, items in sorted(by_round.items(), key=lambda kv: (kv[0] is None, kv[0])):
        views = {tuple(map(str, item.get("survivors") or [])) for item in items}
        largest = max(views, key=len)
        hs = {item.get("honest_min") for item in items if isinstance(item.get("honest_min"), int)}
        out.append(
            {
                "round": round_,
                "survivors": len(largest),
                "honest_min": min(hs) if hs else None,
                "confirmed_by": sorted(str(item.get("site")) for item in items),
                "one_set": len(views) == 1,
                "holds": len(views) == 1 and (not hs or len(largest) >= min(hs)),
            }
        )
    return out


def _survivors_html(sets: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{_e(r['round'])}</td><td>{_e(r['survivors'])}</td><td>{_e(r['honest_min'])}</td>"
        f"<td>{_e(', '.join(r['confirmed_by']))}</td>"
        f"<td>{'yes' if r['holds'] else 'NO'}</td></tr>"
        for r in survivor_rounds(sets)
    )
    return (
        "<h3>Distributed DP: the survivor set each round, against h</h3>"
        "<p class='muted'>Each site's noise share carries part of the noise; the sum carries all of it only "
        "if at least h sites' shares are in it. Before anything was unmasked, every surviving site confirmed "
        "the survivor set it was shown; a round holds when all confirmed one set of at least h sites.</p>"
        "<table><tr><th>round</th><th>survivors</th><th>h</th><th>confirmed by</th><th>holds</th></tr>"
        f"{rows}</table>"
    )


def _plot_caption(data: ReportData) -> str:
    if not protected(data):
        return ""
    return (
        "<p class='muted'>Each point is the cumulative ε after that round; the dotted red line is the "
        "site's budget. Train and validation patients are different people, so a patient's loss is that "
        "of their own group. Sites without differential privacy have no panel: their ε is unbounded.</p>"
    )


def _mechanisms_html(rows: list[MechanismRow], settings: Mapping[str, Any] | None = None) -> str:
    if not rows:
        return (
            "<p>No privacy mechanism was logged: nothing released in this run carries a "
            "differential-privacy guarantee.</p>"
        )
    return _mechanism_table(rows, settings) + (
        "<p class='muted'>Patient group: training or validation patients (different people, so a patient's "
        "ε is that of their own group); group size: a power-of-two range, never the exact count. "
        "q: the chance each patient is sampled in a step (1: every patient, every time); σ: noise "
        "multiplier (noise standard deviation / C); C: the most one patient can change the released value "
        "(clipping bound; — where the sensitivity is fixed by the mechanism); releases: how many noisy "
        "steps this row adds. ε columns are cumulative for the (site, group) after this row, as the site "
        "logged them, and as re-derived independently with Google's dp_accounting (RDP on Opacus' orders; "
        "PLD for the tight value).</p>"
    )


_AUDITED = {
    "dp_sgd": "its DP-SGD training over all rounds",
    "alpha_scalars": "one release of its α scalars",
    "gmm_histogram": "its GMM histogram release",
}


def _empirical_html(data: ReportData, said: Verdict) -> str:
    """ε̂ beside ε per audited site, with what a measured lower bound does and does not say."""
    if not data.empirical_audits:
        return ""
    items = []
    for audit in data.empirical_audits:
        stated, measured = audit.get("stated_epsilon"), audit.get("epsilon_hat")
        again = audit.get("rederived_epsilon_hat")
        check = (
            "re-derived from the logged counts by the verifier"
            if again is not None
            else "not re-derived (verification did not run or could not read the record)"
        )
        verdict = ""
        what = _AUDITED.get(str(audit.get("mechanism")), "its releases")
        if isinstance(stated, int | float) and isinstance(measured, int | float):
            if measured > stated:
                level = _num(100 * (1 - float(audit.get("confidence", 0))), 3)
                verdict = (
                    " <b>The measured lower bound EXCEEDS the stated ε: evidence that the training code "
                    "leaks more than its accountant says (a bug in noise, clipping or accounting).</b> "
                    f"A correct implementation shows this in at most {level} % of audits; rerun the "
                    "audit (it draws a fresh secret seed): a real leak shows again."
                )
            elif isinstance(ceiling := audit.get("epsilon_hat_max"), int | float) and ceiling <= stated:
                # the ceiling is what every guess right would give: an audit that could not fail
                verdict = (
                    f" <b>Inconclusive</b>: with these canaries and guesses the largest ε̂ this audit "
                    f"can report is {_num(ceiling, 3)}, not above the stated ε, so even training "
                    "with no noise at all would have shown no violation; rerun with more canaries."
                )
            else:
                verdict = f" ε̂ / ε = {measured / stated:.2f} (1 would be a perfectly tight audit)."
        items.append(
            f"<li><b>{_e(audit.get('site'))}</b>: measured ε̂ = <b>{_num(measured, 3)}</b> beside the stated "
            f"ε = <b>{_num(stated, 3)}</b>{_stated_whose(audit)} for {_e(what)} "
            f"(δ = {_e(audit.get('delta'))}); "
            f"{_e(audit.get('correct'))} of {_e(audit.get('guesses'))} guesses about "
            f"{_e(audit.get('canaries'))} planted canaries were right, at "
            f"{_num(100 * float(audit.get('confidence', 0)), 3)} % confidence; ε̂ {check}.{verdict}</li>"
        )
    return (
        f"{_h2('Empirical privacy audit', said)}<div id='empirical'>"
        "<p>An audit run planted artificial test patients (canaries) in a site's own training code, each "
        "included or not by a coin flip, and then tried to tell from what the training released which "
        "ones had been included. How often it was right gives ε̂, a <b>measured lower bound</b>: the "
        "true privacy loss is at least ε̂ (at the stated confidence). A correct implementation must keep "
        "ε̂ at or below the stated ε, which is an upper bound proved from the mechanism's settings; "
        "ε̂ above ε is evidence of a bug (a correct implementation shows it in at most 1 − confidence of "
        "audits: 5 % at 95 %). ε̂ below ε does not prove the code right, it only finds no leak "
        "larger than ε̂.</p>"
        f"<ul>{''.join(items)}</ul></div>"
    )


def _stated_whose(audit: Mapping[str, Any]) -> str:
    """' (training patients, RDP)': whose the audit's stated ε is, and by which accountant."""
    whose = stated_whose(audit)
    return f" ({_e(whose)})" if whose else ""


def _code_html(data: ReportData, said: Verdict) -> str:
    """Code each site ran: the FAB it approved and the digest of its installed package."""
    if not data.code:
        return ""
    rows = "".join(
        f"<tr><td>{_e(item.get('site', item['party']))}</td>"
        f"<td>{'ran' if item['event'] == 'code' else '<b>refused</b> (not approved)'}</td>"
        f"<td><code>{_e(item.get('fab_sha256'))}</code></td><td><code>{_e(item.get('package_digest'))}</code></td>"
        f"<td>{_e(item.get('version'))}</td></tr>"
        for item in data.code
    )
    return (
        f"{_h2('Code each site ran', said)}<table id='code'><tr><th>site</th><th>run</th><th>FAB SHA-256</th>"
        f"<th>installed package digest</th><th>version</th></tr>{rows}</table>"
    )


def _h2(title: str, said: Verdict) -> str:
    return f"<h2>{_e(title)}{'' if said.verified else ' (unverified)'}</h2>"


def render_html(data: ReportData) -> str:
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    said = verdict(data.verification, run_facts(data))
    rows = site_rows(data, said.verified)
    # Only this stylesheet may style the page: markup that got in through a log could not add any.
    style = "'sha256-" + base64.b64encode(hashlib.sha256(_CSS.encode("utf-8")).digest()).decode() + "'"
    shade = tone(said)
    title = said.line if said.privacy else f"{said.word} — privacy compliance report"
    notes = ""
    unsupplied = data.verification.get("unsupplied") or []
    if unsupplied:
        notes = (
            f"<p class='muted' id='verdict-notes'>The logs of {_e(', '.join(unsupplied))} "
            "were not supplied: their records were checked only as copied into the logs that were.</p>"
        )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src {style}; "
        'img-src data:">'
        f"<title>{_e(said.word)} — privacy compliance report — {_e(', '.join(data.run_ids))}</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<h1 id='title'>{_e(title)}</h1>"
        f"<p class='verdict {shade}' id='verdict'><b>{_e(said.word)}</b>: {_e(said.why)}.</p>{notes}"
        f"<p class='muted'>Generated {generated} by secure-fed audit report from "
        f"the audit logs of {len(data.parties)} {'party' if len(data.parties) == 1 else 'parties'} "
        "(listed under Verification).</p>"
        f"{_h2('Summary', said)}{_summary(data, said, rows)}"
        f"{_empirical_html(data, said)}"
        f"{_h2('Privacy loss over rounds', said)}<div class='plot' id='plot'>{plot_svg(data)}</div>"
        f"{_plot_caption(data)}"
        f"<h2>Verification</h2>{_verification_html(data)}"
        f"{_h2('Every mechanism that touched patient data', said)}"
        f"{_mechanisms_html(data.mechanisms, data.settings)}"
        f"{_h2('Dropouts and refusals', said)}{_events_html(data)}"
        f"{_code_html(data, said)}"
        "</body></html>"
    )


def _csv(names: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(names), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: ("" if value is None else value) for key, value in row.items()})
    return buffer.getvalue()


def _site_csv_row(row: SiteRow) -> dict[str, Any]:
    """A table row as flat cells: lists ';'-joined, instruction counts as 'code×n', ∞ as 'inf'."""
    flat: dict[str, Any] = finite_json(asdict(row))
    flat["rounds"] = ";".join(map(str, row.rounds))
    flat["declined_rounds"] = ";".join(map(str, row.declined_rounds))
    flat["released"] = "; ".join(f"{what}: {how}" for what, how in row.released)
    for name in ("refused_instructions", "failed_instructions"):
        flat[name] = ";".join(f"{code}×{n}" for code, n in sorted(getattr(row, name).items()))
    return flat


def mechanisms_csv_path(out_html: Path | str) -> Path:
    """Where the mechanism table goes beside the report: <stem>-mechanisms.csv."""
    out_html = Path(out_html)
    return out_html.with_name(out_html.stem + "-mechanisms.csv")


def write_report(
    paths: Sequence[Path | str],
    out_html: Path | str,
    public_keys: Mapping[str, Ed25519PublicKey] | None = None,
) -> tuple[Path, Path, Path]:
    """Verify the logs, then write out_html and beside it the same figures: .json (everything),
    .csv (the summary's table, one row per site) and -mechanisms.csv (every privacy record)."""
    verification = verify_logs(paths, public_keys)
    data = collect(paths, verification)
    facts = run_facts(data)
    said = verdict(data.verification, facts)
    rows = site_rows(data, said.verified)
    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_html.with_suffix(".json"), out_html.with_suffix(".csv")
    out_html.write_text(render_html(data), encoding="utf-8")
    content = {
        "verdict": said.to_json(),
        "run": finite_json(facts),
        "site_table": [finite_json(asdict(row)) for row in rows],
    }
    content |= data.to_json()
    json_path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    site_names = [item.name for item in fields(SiteRow)]
    csv_path.write_text(_csv(site_names, [_site_csv_row(row) for row in rows]), encoding="utf-8")
    mechanism_names = [item.name for item in fields(MechanismRow)]
    mechanisms_csv_path(out_html).write_text(
        _csv(mechanism_names, [asdict(row) for row in data.mechanisms]), encoding="utf-8"
    )
    return out_html, json_path, csv_path


def report_main(
    paths: Sequence[Path | str], out: Path | str, keys_dir: Path | str | None, console: Console | None = None
) -> int:
    """`secure-fed audit report`: writes the report in every case; prints the verdict the report
    leads with, in `audit verify`'s words, and exits as it does (0 VERIFIED, 3 VERIFIED WITH A
    DROPOUT, 4 INCOMPLETE, 1 FAILED or NOT VERIFIED)."""
    console = console or Console(soft_wrap=True)
    ok, public_keys = keys_for_cli(keys_dir, console, "")
    if not ok:
        return 1
    html_path, json_path, csv_path = write_report(paths, out, public_keys)
    written = json.loads(json_path.read_text(encoding="utf-8"))
    said = verdict(written["verification"], written["run"])
    console.print(
        f"Wrote {html_path}, {json_path}, {csv_path}, {mechanisms_csv_path(html_path)}",
        markup=False,
        highlight=False,
    )
    console.print(verdict_markup(said), highlight=False)
    return said.exit_code
