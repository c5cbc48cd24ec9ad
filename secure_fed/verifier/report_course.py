"""How the run went, from the logs alone (finished, interrupted and resumed, aborted, cut short,
rounds skipped or charged only), and the Verification section: every problem, warning and log end."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from secure_fed.verifier.report_markup import (
    esc,
    grouped,
    rounds_words,
)
from secure_fed.verifier.report_types import ReportData


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


def run_course(data: ReportData) -> list[tuple[str, str]]:
    """How the run went, from the logs alone, as (id, paragraph) pairs: finished, interrupted (and
    resumed), aborted, or logs that simply stop; why it stopped early, who was absent, what was skipped."""
    out: list[tuple[str, str]] = []
    parts = []
    for item in data.resumed:
        where = f" in round {item['round']}" if item.get("round") is not None else ""
        parts.append(
            f"The run was interrupted{esc(_signal_words(item.get('signal')))}{esc(where)} and resumed: "
            f"the log of {esc(item['party'])} goes on after its signed run_aborted record."
        )
    if data.aborted is not None:
        where = f" in round {data.aborted['round']}" if data.aborted.get("round") is not None else ""
        signal = data.aborted.get("signal")
        what = "interrupted" + _signal_words(signal) if signal else "aborted"
        reason = f": {data.aborted['reason']}" if data.aborted.get("reason") else ""
        out.append(
            (
                "aborted",
                f"<b>The run was {esc(what)}{esc(where)} and did not finish</b>{esc(reason)}. "
                "The logs that record it show no release after it.",
            )
        )
    stops = [
        course
        for course in data.courses
        if not course.closed and course.dropped_in is None and course.end not in ("run_end", "run_aborted")
    ]
    for last, parties in grouped({c.party: c.last_round for c in stops}).items():
        after = f" after round {last}" if last is not None else ""
        logs = (
            f"The log of {parties[0]} stops"
            if len(parties) == 1
            else f"The logs of {', '.join(parties)} stop"
        )
        parts.append(
            f"<b>{esc(logs)}{esc(after)} with no end record</b>: the run was interrupted there (its process "
            "ended, or the log was cut short) and what followed is not recorded."
        )
    if data.aborted is None and not stops:
        done = data.rounds_done
        planned = f" of {data.planned_rounds} planned" if data.planned_rounds is not None else ""
        if done:
            parts.append(f"The server's log records the sums of {rounds_words(done)}{esc(planned)}.")
        short = (
            data.planned_rounds is not None
            and (done or data.skipped_rounds)
            and len(done) < data.planned_rounds
        )
        if data.model_hash is not None and short:
            # the same words as `secure-fed run`'s exit 3: not the run that was asked for
            parts.append(
                f"It closes with the released model's hash after {len(done)} of {esc(data.planned_rounds)} "
                "planned rounds: the run ended short of its plan (INCOMPLETE)."
            )
        elif data.model_hash is not None:
            parts.append("It closes with the released model's hash: the run finished.")
    if parts:
        out.append(("course", " ".join(parts)))
    if data.stopped is not None:
        out.append(("stopped", f"The run ended before its planned rounds: {esc(data.stopped)}"))
    if data.absent is not None:
        present = [str(s) for s in data.absent.get("present", [])]
        out.append(
            (
                "absent",
                f"{len(present)} of {esc(data.absent.get('expected'))} configured sites came to this run "
                f"({esc(', '.join(present))}); each absent site counts as a dropout.",
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
                f"Charged, not released: {esc(which)}. Each site is charged a round's ε when it is admitted "
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
                f"model kept: {esc(rounds)}.{charged}",
            )
        )
    return out


def _head_cell(log: Mapping[str, Any]) -> str:
    if log.get("closed"):
        return "yes"
    if log.get("dropped_in") is not None:
        return f"none: dropped out in round {esc(log['dropped_in'])}"
    if log.get("interrupted_by") is not None:
        return f"none: interrupted by {esc(log['interrupted_by'])}"
    return "missing"


def verification_html(data: ReportData) -> str:
    """The verdict's evidence (the verdict itself leads the page): every problem, every warning,
    and how each log ends."""
    verdict = data.verification
    problems = "".join(f"<li><code>{esc(problem)}</code></li>" for problem in verdict.get("problems", []))
    warnings = "".join(f"<li>{esc(warning)}</li>" for warning in verdict.get("warnings", []))
    logs = "".join(
        f"<tr><td>{esc(log['path'])}</td><td>{esc(log['party'])}</td><td class='num'>{log['records']}</td>"
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
