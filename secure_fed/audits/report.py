"""`audit report`: one self-contained HTML page for a compliance officer, plus JSON and CSV.

Self-contained means no network fetch of any kind: inline CSS, the plot as inline SVG (a bare
matplotlib Figure, no pyplot or GUI backend, glyphs as paths), no scripts. The JSON holds every
figure on the page; the CSV is the mechanism table.
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
from rich.markup import escape

from secure_fed.audits.keys import keys_for_cli
from secure_fed.audits.report_data import (
    Guarantee,
    MechanismRow,
    ReportData,
    SiteReport,
    collect,
    epsilon_series,
    lifetime_epsilon,
)
from secure_fed.audits.verify import EXIT_DROPOUT, EXIT_INTERRUPTED, verify_logs

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #1d2430; line-height: 1.5; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
.muted { color: #5b6575; font-size: .9rem; }
.verdict { padding: .8rem 1rem; border-radius: 6px; font-weight: 600; }
.ok { background: #e3f5e8; border: 1px solid #58a86b; }
.bad { background: #fbe5e5; border: 1px solid #c84a4a; }
.summary { background: #f3f6fa; border-left: 4px solid #3b6fb6; padding: .8rem 1.2rem; }
table { border-collapse: collapse; font-size: .85rem; width: 100%; }
th, td { border: 1px solid #d5dae2; padding: .3rem .5rem; text-align: left; }
th { background: #eef1f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
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


def plot_svg(data: ReportData) -> str:
    """ε over rounds, one panel per protected site, each population a line, the site's budget dotted."""
    series = epsilon_series(data.mechanisms)
    guarantees = protected(data)
    if not guarantees:
        return "<p>No site's releases are covered by differential privacy: there is no ε to plot.</p>"
    figure = Figure(figsize=(5.2 * len(guarantees), 3.6))
    axes = figure.subplots(1, len(guarantees), squeeze=False)[0]
    for axis, guarantee in zip(axes, guarantees, strict=True):
        ledger = guarantee.lifetime_start is not None
        last = 0
        for (site, population), points in sorted(series.items()):
            if site == guarantee.site:
                style = "-o" if population == "train" else "--s"
                label = f"{'this run: ' if ledger else ''}{population} patients"
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


def _guarantee_sentence(g: Guarantee, refusals: list[dict[str, Any]]) -> str:
    sizes = ", ".join(f"{size} {pop} patients" for pop, size in g.population_sizes.items())
    data = f" ({sizes})" if sizes else ""
    mechanisms = _e(", ".join(g.mechanisms))
    if g.lifetime is not None:
        # The budget belongs to the patients' data: earlier runs on it count, so the headline is
        # the ledger's total and this run's ε its share.
        sentence = (
            f"<li><b>{_e(g.site)}</b>{_e(data)}: across every run on this data set, each patient's "
            f"privacy loss is at most <b>(ε = {_num(g.lifetime, 3)}, δ = {g.delta:g}) per patient at "
            f"{_e(g.site)}</b> by the {_e(g.accountant)} accountant, as the site's persistent ledger "
            f"logged it; earlier runs had spent ε = {_num(g.lifetime_start or 0.0, 3)}, this run's "
            f"releases ({mechanisms}) alone ε = {_num(g.epsilon, 3)}. "
        )
        limit = g.lifetime_budget
    elif g.lifetime_start is not None:
        sentence = (
            f"<li><b>{_e(g.site)}</b>{_e(data)}: earlier runs on this data set had spent ε = "
            f"{_num(g.lifetime_start, 3)} per patient (δ = {g.delta:g}, {_e(g.accountant)}); this run's "
            f"releases ({mechanisms}) alone ε = {_num(g.epsilon, 3)}. <b>The ledger's total after this "
            "run was not logged (the run did not reach its end)</b>, so no bound across runs is shown. "
        )
        limit = None
    else:
        sentence = (
            f"<li><b>{_e(g.site)}</b>{_e(data)}: each patient's privacy loss in this run is at most "
            f"<b>(ε = {_num(g.epsilon, 3)}, δ = {g.delta:g}) per patient at {_e(g.site)}</b> "
            f"by the {_e(g.accountant)} accountant, the one its budget was enforced with "
            "(the value `secure-fed run` prints last), "
            f"over every release that touched patient data ({mechanisms}); the logs hold no ledger "
            "of earlier runs on the same data. "
        )
        limit = g.budget
    if g.exceeded:
        shown = limit if limit is not None else g.budget
        sentence += f"<b>Its budget of ε = {_num(shown)} was EXCEEDED.</b> "
    elif limit is None and g.lifetime_start is None:
        sentence += "No budget was set in the log. "
    elif limit is not None:
        sentence += f"This is within its budget of ε = {_num(limit)}"
        sentence += " for all runs together. " if g.lifetime is not None else ". "
    declined = [r for r in refusals if r.get("site", r.get("party")) == g.site]
    for refusal in declined:
        reason = refusal.get("reason", "it would have exceeded its privacy budget")
        sentence += f"It declined round {_e(refusal.get('round'))}: {_e(reason)}. "
    return sentence + "</li>"


def _names(items: list[str]) -> str:
    return ", ".join(items) if items else "none logged"


def _rounds(rounds: list[int]) -> str:
    return ("round " if len(rounds) == 1 else "rounds ") + ", ".join(map(str, rounds))


def _no_dp_reasons(exposed: list[SiteReport], data: ReportData) -> str:
    if data.settings is not None and data.settings.get("dp") is False:
        return "the run was configured without differential privacy"
    reasons = []
    for site in exposed:
        if site.uncovered_rounds:
            which = "that round" if len(site.uncovered_rounds) == 1 else "those rounds"
            rounds = _rounds(site.uncovered_rounds)
            reasons.append(f"{site.site} took part in {rounds}, but no privacy record covers {which}")
        else:
            reasons.append(f"no privacy record covers what {site.site} released")
    return "; ".join(reasons)


def _release_item(site: SiteReport) -> str:
    if site.dp:
        status = "covered by differential privacy, except as marked"
    else:
        status = "<b>no differential privacy: ε = ∞</b>"
    rounds = f"took part in {_rounds(site.rounds)}; " if site.rounds else ""
    # At a site without DP nothing is covered, which its status already says once.
    releases = "; ".join(
        f"<b>{_e(release.what)}</b> — {_e(release.how)}"
        + ("" if release.covered or not site.dp else " [not covered by ε]")
        for release in site.releases
    )
    return (
        f"<li><b>{_e(site.site)}</b> ({rounds}{status}): {releases or 'not recorded in the logs given'}.</li>"
    )


def _instruction_line(data: ReportData) -> str:
    lines = []
    for site in data.sites:
        for counts, verb in (
            (site.refused_instructions, "refused"),
            (site.failed_instructions, "could not complete"),
        ):
            if counts:
                total = sum(counts.values())
                codes = ", ".join(
                    f"{code} ×{n}" if n > 1 else code
                    for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
                )
                noun = "server instruction" if total == 1 else "server instructions"
                lines.append(f"{_e(site.site)} {verb} {total} {noun}: {_e(codes)}.")
    if not lines and any(site.instructions_logged for site in data.sites):
        lines.append("No site refused a server instruction.")
    unsupplied = data.verification.get("unsupplied") or []
    if unsupplied:
        # Refusals live only in a site's own log; silence about them would read as "none".
        lines.append(
            f"Which server instructions {_e(', '.join(unsupplied))} refused is not known: "
            "their own logs were not supplied."
        )
    return "<p>" + " ".join(lines) + "</p>" if lines else ""


def _summary(data: ReportData) -> str:
    period = f" from {_e(data.period[0][:19])} to {_e(data.period[1][:19])} UTC" if data.period else ""
    run = f"the federated training run <b>{_e(', '.join(data.run_ids))}</b>{period}"
    verdict = data.verification
    recomputed = (
        ", and every privacy figure was recomputed independently and matches"
        if data.mechanisms
        else "; they hold no privacy figure to recompute"
    )
    dropouts = verdict.get("dropouts") or []
    stops = verdict.get("interruptions") or []
    if verdict.get("ok") and stops:
        integrity = (
            "The audit logs were checked: they are unmodified and every entry carries a valid signature of "
            f"the party that wrote it{recomputed}. They end with each party's signed record of the stop "
            f"({_e(_stop_words(stops))}): the run was interrupted, not tampered with, and their records up "
            "to there count."
        )
    elif verdict.get("ok") and dropouts:
        gone = ", ".join(f"{d['site']} (round {d['round']})" for d in dropouts)
        integrity = (
            "The audit logs were checked: they are unmodified and every entry carries a valid signature of "
            f"the party that wrote it{recomputed}. The logs of sites that dropped out ({_e(gone)}) stop "
            "where the server's signed log says they left: their records up to there count."
        )
    elif verdict.get("ok"):
        integrity = (
            "The audit logs were checked: they are complete and unmodified, every entry carries a valid "
            f"signature of the party that wrote it{recomputed}."
        )
    else:
        integrity = (
            "<b>The audit logs did NOT pass verification</b> (see below), so the figures in this report "
            "cannot be relied on as they stand."
        )
    if verdict.get("unsupplied"):
        integrity += (
            f" The logs of {_e(', '.join(verdict['unsupplied']))} were not supplied: their records were "
            "checked only as copied into the logs that were."
        )
    exposed = [site for site in data.sites if not site.dp]
    guarantees = protected(data)
    covered = [g.site for g in guarantees]
    parts = []
    if not exposed and not covered:
        parts.append(
            f"<p>This report covers {run}. The logs name no hospital that took part and hold no privacy "
            "record: they show no release of patient data, and no protection of one either.</p>"
        )
    elif exposed and not covered:
        parts.append(
            f"<p>Patient data was released without differential privacy (ε = ∞) in {run}: nothing bounds "
            "what could be learned about an individual patient from what the hospitals taking part "
            f"({_e(_names([site.site for site in data.sites]))}) sent out. Each trained the shared model on "
            "its own patients' records and images, which stayed at the hospital; what did leave it "
            f"is listed below ({_e(_no_dp_reasons(exposed, data))}).</p>"
        )
    else:
        if exposed:
            names = ", ".join(site.site for site in exposed)
            parts.append(
                f"<p>Patient data of {_e(names)} was released without differential privacy (ε = ∞) in "
                f"{run}: {_e(_no_dp_reasons(exposed, data))}. At the other "
                f"hospitals ({_e(', '.join(covered))}), "
            )
        else:
            parts.append(
                f"<p>This report covers {run}. The hospitals taking part ({_e(_names(covered))}) each "
                "trained the shared model on their own patients' records and images; patient data "
                "never left a hospital, and "
            )
        parts.append(
            "what did leave during training (model updates and a few statistics) was deliberately blurred "
            "with random noise so that no individual patient can be singled out. "
            f"{_scores_sentence(data)}</p>"
            "<p>How strong that protection is, per hospital — ε measures the most anyone could learn about "
            "one patient from everything released (smaller is stronger; below about 1 is very strong, "
            "around 10 is weak), and δ is the tiny chance that this bound does not hold:</p>"
            f"<ul>{''.join(_guarantee_sentence(g, data.refusals) for g in guarantees)}</ul>"
        )
        exceeded = [g.site for g in guarantees if g.exceeded]
        if exceeded:
            budget_line = f"<b>Privacy budget exceeded at: {_e(', '.join(exceeded))}.</b>"
        elif exposed:  # a site with ε = ∞ has no budget it could be said to keep
            budget_line = f"None of {_e(', '.join(covered))} exceeded its privacy budget."
        else:
            budget_line = "No site exceeded its privacy budget."
        refusal_line = (
            f" {len(data.refusals)} training round(s) were declined by a site (its reason is given above)."
            if data.refusals
            else " No site had to decline a round."
        )
        parts.append(f"<p>{budget_line}{refusal_line}</p>")
    parts.append(_course(data))
    if data.stopped is not None:
        parts.append(f"<p id='stopped'>The run ended before its planned rounds: {_e(data.stopped)}</p>")
    if data.absent is not None:
        present = [str(s) for s in data.absent.get("present", [])]
        parts.append(
            f"<p id='absent'>{len(present)} of {_e(data.absent.get('expected'))} configured sites came to "
            f"this run ({_e(', '.join(present))}); each absent site counts as a dropout.</p>"
        )
    if data.skipped_rounds:
        rounds = "; ".join(_skipped(item) for item in data.skipped_rounds)
        # only a DP run charged the skipped rounds' releases; a run without DP has no ε to count them in
        charged = " A skipped round's DP releases are still counted in ε." if data.mechanisms else ""
        parts.append(
            "<p id='skipped'>Skipped because sites left or declined mid-round, with no aggregate released "
            f"and the model kept: {_e(rounds)}.{charged}</p>"
        )
    if data.site_budgets:
        parts.append(_lifetime_line(data))
    items = "".join(_release_item(site) for site in data.sites)
    parts.append(f"<p>What left each hospital:</p><ul id='releases'>{items}</ul>")
    parts.append(_instruction_line(data))
    parts.append(f"<p>{integrity}</p>")
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


def _scores_sentence(data: ReportData) -> str:
    """Test-set scores, as each site's own log records them: never claimed where none is logged."""
    scored = [site.site for site in data.sites if site.evaluated]
    unscored = [site.site for site in data.sites if site.evaluated is False]
    unknown = [site.site for site in data.sites if site.evaluated is None]
    parts = []
    if scored:
        parts.append(
            f"The exception is the test-set scores of {_e(', '.join(scored))}: corpus-level figures of the "
            "final model, released once at the end of the run (as each site's log records), carry no noise "
            "and are not covered by ε."
        )
    if unscored:
        parts.append(f"{_e(', '.join(unscored))} released no test-set scores (no scoring in their logs).")
    if unknown:
        parts.append(
            f"Whether {_e(', '.join(unknown))} released test-set scores is not known: the site's own log, "
            "which records the scoring, was not given."
        )
    return " ".join(parts)


def _signal_words(signal: Any) -> str:
    return f" by {signal}" if isinstance(signal, str) and signal else ""


def _course(data: ReportData) -> str:
    """How the run went, from the logs alone: finished, interrupted (and resumed), aborted, or a
    log that simply stops; a site that dropped out, as the server's signed log says."""
    parts = []
    aborted = ""
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
        aborted = (
            f"<p id='aborted'><b>The run was {_e(what)}{_e(where)} and did not finish</b>{_e(reason)}. "
            "The logs that record it show no release after it.</p>"
        )
    dropped = {course.party: course for course in data.courses if course.dropped_in is not None}
    for site, course in sorted(dropped.items()):
        parts.append(
            f"<b>{_e(site)} dropped out in round {_e(course.dropped_in)}</b>: its log stops there without a "
            "head record, as the server's signed log of that round says (a site that left, not tampering)."
        )
    stops = [
        course
        for course in data.courses
        if not course.closed and course.dropped_in is None and course.end not in ("run_end", "run_aborted")
    ]
    for course in stops:
        after = f" after round {course.last_round}" if course.last_round is not None else ""
        parts.append(
            f"<b>The log of {_e(course.party)} stops{_e(after)} with no end record</b>: the run was "
            "interrupted there (its process ended, or the log was cut short) and what followed is not "
            "recorded."
        )
    if data.aborted is None and not stops:
        done = data.rounds_done
        planned = f" of {data.planned_rounds} planned" if data.planned_rounds is not None else ""
        if done:
            parts.append(f"The server's log records the sums of {_rounds(done)}{_e(planned)}.")
        if data.model_hash is not None:
            parts.append("It closes with the released model's hash: the run finished.")
    text = " ".join(parts)
    return aborted + (f"<p id='course'>{text}</p>" if text else "")


def _lifetime_line(data: ReportData) -> str:
    """Each site's ε across every run on its data set (its persistent ledger), beside this run's."""

    def worst(by_population: Any) -> float | None:
        return lifetime_epsilon(by_population, data.accountant)

    items = []
    for site, b in sorted(data.site_budgets.items()):
        start, run, total = worst(b.get("lifetime_start")), worst(b.get("run")), worst(b.get("lifetime"))
        budget = b.get("budget")
        text = f"{site}: ε = {start or 0:.2f} spent by earlier runs on the same data set"
        if total is not None:
            text += f", {run or 0:.2f} by this run, {total:.2f} in all"
        else:
            text += " (this run's end was not logged)"
        text += f" of its budget {budget:g}" if isinstance(budget, int | float) else ", no budget set"
        items.append(f"<li>{_e(text)}</li>")
    return (
        "<p>Across runs — a site's budget belongs to its data, not to one run (persistent site ledger, "
        f"ε per patient, {_e(data.accountant.upper())} accountant):</p>"
        f"<ul id='lifetime'>{''.join(items)}</ul>"
    )


def _head_cell(log: Mapping[str, Any]) -> str:
    if log.get("closed"):
        return "yes"
    if log.get("dropped_in") is not None:
        return f"none: dropped out in round {_e(log['dropped_in'])}"
    if log.get("interrupted_by") is not None:
        return f"none: interrupted by {_e(log['interrupted_by'])}"
    return "missing"


def _stop_words(stops: list[dict[str, Any]]) -> str:
    """'SIGINT in round 2: server, site0, site1' — who signed which stop."""
    groups: dict[str, list[str]] = {}
    for stop in stops:
        where = f" in round {stop['round']}" if stop.get("round") is not None else ""
        groups.setdefault(f"{stop['signal']}{where}", []).append(str(stop["party"]))
    return "; ".join(f"{what}: {', '.join(parties)}" for what, parties in groups.items())


def _verification_html(data: ReportData) -> str:
    verdict = data.verification
    rederived = "every ε re-derived" if data.mechanisms else "no privacy record, so no ε to re-derive"
    dropouts = verdict.get("dropouts") or []
    stops = verdict.get("interruptions") or []
    if verdict.get("ok") and stops:
        head = (
            f'<p class="verdict ok">Verified, interrupted: logs unmodified, signed; {_e(rederived)}. '
            f"Each ends with its party's signed record of the stop ({_e(_stop_words(stops))}); the run "
            "did not finish.</p>"
        )
    elif verdict.get("ok") and dropouts:
        gone = "; ".join(
            f"{d['site']} in round {d['round']} ({d['records']} records, then no head record)"
            for d in dropouts
        )
        head = (
            f'<p class="verdict ok">Verified, with a dropout: logs unmodified, signed; {_e(rederived)}. '
            f"Dropped out, as the server's signed log says: {_e(gone)}.</p>"
        )
    elif verdict.get("ok"):
        head = f'<p class="verdict ok">Verified: logs complete, unmodified, signed; {_e(rederived)}.</p>'
    else:
        head = (
            f'<p class="verdict bad">Verification FAILED ({len(verdict.get("problems", []))} problem(s)).</p>'
        )
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
    notes = f"<p>Warnings (the logs still verify):</p><ul id='warnings'>{warnings}</ul>" if warnings else ""
    return head + (f"<ul>{problems}</ul>" if problems else "") + notes + table


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
    if data.refusals:
        rows = "".join(
            f"<tr><td>{_e(item.get('site', item.get('party')))}</td><td>{_e(item.get('round'))}</td>"
            f"<td>{_e(item.get('epsilon_after'))}</td><td>{_e(item.get('budget'))}</td>"
            f"<td>{_e(item.get('reason'))}</td></tr>"
            for item in data.refusals
        )
        parts.append(
            "<h3>Budget refusals</h3><table><tr><th>site</th><th>round</th><th>ε if it had taken part</th>"
            f"<th>budget</th><th>reason</th></tr>{rows}</table>"
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
        parts.append(f"<p>Aggregated α: <code>{_e(json.dumps(data.alpha))}</code></p>")
    if data.model_hash is not None:
        parts.append(f"<p>Released model: <code>{_e(json.dumps(data.model_hash))}</code></p>")
    return "".join(parts)


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


def _empirical_html(data: ReportData) -> str:
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
            f"ε = <b>{_num(stated, 3)}</b> for {_e(what)} "
            f"(δ = {_e(audit.get('delta'))}); "
            f"{_e(audit.get('correct'))} of {_e(audit.get('guesses'))} guesses about "
            f"{_e(audit.get('canaries'))} planted canaries were right, at "
            f"{_num(100 * float(audit.get('confidence', 0)), 3)} % confidence; ε̂ {check}.{verdict}</li>"
        )
    return (
        "<h2>Empirical privacy audit</h2><div id='empirical'>"
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


def _code_html(data: ReportData) -> str:
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
        "<h2>Code each site ran</h2><table id='code'><tr><th>site</th><th>run</th><th>FAB SHA-256</th>"
        f"<th>installed package digest</th><th>version</th></tr>{rows}</table>"
    )


def render_html(data: ReportData) -> str:
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    # Only this stylesheet may style the page: markup that got in through a log could not add any.
    style = "'sha256-" + base64.b64encode(hashlib.sha256(_CSS.encode("utf-8")).digest()).decode() + "'"
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src {style}; "
        'img-src data:">'
        f"<title>Privacy compliance report — {_e(', '.join(data.run_ids))}</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<h1>Privacy compliance report</h1><p class='muted'>Generated {generated} by secure-fed audit "
        "report "
        f"from the signed audit logs of: {_e(', '.join(data.parties))}.</p>"
        f"<h2>Summary</h2>{_summary(data)}"
        f"{_empirical_html(data)}"
        f"<h2>Privacy loss over rounds</h2><div class='plot' id='plot'>{plot_svg(data)}</div>"
        f"{_plot_caption(data)}"
        f"<h2>Verification</h2>{_verification_html(data)}"
        "<h2>Every mechanism that touched patient data</h2>"
        f"{_mechanisms_html(data.mechanisms, data.settings)}"
        f"<h2>Dropouts and refusals</h2>{_events_html(data)}"
        f"{_code_html(data)}"
        "</body></html>"
    )


def _csv(rows: list[MechanismRow]) -> str:
    buffer = io.StringIO()
    names = [item.name for item in fields(MechanismRow)]
    writer = csv.DictWriter(buffer, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: ("" if value is None else value) for key, value in asdict(row).items()})
    return buffer.getvalue()


def write_report(
    paths: Sequence[Path | str],
    out_html: Path | str,
    public_keys: Mapping[str, Ed25519PublicKey] | None = None,
) -> tuple[Path, Path, Path]:
    """Verify the logs, then write out_html and the same figures as .json and .csv beside it."""
    verification = verify_logs(paths, public_keys)
    data = collect(paths, verification)
    out_html = Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_html.with_suffix(".json"), out_html.with_suffix(".csv")
    out_html.write_text(render_html(data), encoding="utf-8")
    json_path.write_text(json.dumps(data.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    csv_path.write_text(_csv(data.mechanisms), encoding="utf-8")
    return out_html, json_path, csv_path


def report_main(
    paths: Sequence[Path | str], out: Path | str, keys_dir: Path | str | None, console: Console | None = None
) -> int:
    """`secure-fed audit report`: writes the report in every case; exits as `audit verify` does (0 the
    logs verified, 3 they verified but a site dropped out, 4 they verified but the run was interrupted
    by a signal, 1 they did not)."""
    console = console or Console(soft_wrap=True)
    ok, public_keys = keys_for_cli(
        keys_dir,
        console,
        "[yellow]No --keys DIR given: the report will say that signatures were not checked.[/]",
    )
    if not ok:
        return 1
    html_path, json_path, csv_path = write_report(paths, out, public_keys)
    verdict = json.loads(json_path.read_text(encoding="utf-8"))["verification"]
    console.print(f"Wrote {html_path}, {json_path}, {csv_path}", markup=False, highlight=False)
    if verdict["ok"] and verdict.get("interruptions"):
        console.print(
            f"[yellow]Logs verified, interrupted (exit {EXIT_INTERRUPTED}): the run was stopped by a "
            f"signal ({escape(_stop_words(verdict['interruptions']))}) and did not finish.[/]"
        )
        return EXIT_INTERRUPTED
    if verdict["ok"] and verdict["dropouts"]:
        gone = ", ".join(f"{d['site']} (round {d['round']})" for d in verdict["dropouts"])
        console.print(
            f"[yellow]Logs verified, with a dropout (exit {EXIT_DROPOUT}): {escape(gone)} left the run, "
            "as the server's signed log says.[/]"
        )
        return EXIT_DROPOUT
    if verdict["ok"]:
        console.print("[green]Logs verified.[/]")
        return 0
    console.print(
        f"[red]Logs did not verify: {len(verdict['problems'])} problem(s), listed in the report.[/]"
    )
    return 1
