"""`secure-fed audit verify` on a console: the verifier's result as a table, then the verdict the
report leads with, word for word. Apart from `verify.py` because the verdict needs the report's
facts (`report_data`), which are read with the verifier's result: the verifier itself knows
nothing of the report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from secure_fed.audits.keys import keys_for_cli
from secure_fed.verifier.report_data import ReportData, collect, run_facts
from secure_fed.verifier.verdict import population_words, stated_whose, verdict, verdict_markup
from secure_fed.verifier.verify import verification_json, verify_logs


def _print_empirical(console: Console, data: ReportData) -> None:
    """Each re-derived ε̂, whose patients it measured, beside the stated ε and its accountant."""
    for audit in data.empirical_audits:
        value = audit.get("rederived_epsilon_hat")
        if not isinstance(value, int | float):
            continue
        whose = f" of {audit.get('site')}'s {population_words(audit.get('population', 'train'))}"
        stated = audit.get("stated_epsilon")
        # whose patients is said once, before; what computed the stated ε beside it
        by = stated_whose({k: v for k, v in audit.items() if k != "population"})
        beside = ""
        if isinstance(stated, int | float):
            beside = f"; the stated ε is {stated:.3f}" + (f", {by}" if by else "")
        console.print(
            f"empirical lower bound{escape(whose)}: ε̂ = {value:.3f} re-derived from the logged canary counts "
            f"(a measured lower bound on ε{beside})",
            highlight=False,
        )


def verify_main(
    paths: Sequence[Path | str], keys_dir: Path | str | None, console: Console | None = None
) -> int:
    """Print a readable verdict for `secure-fed audit verify`, in the words the report leads with:
    VERIFIED 0, VERIFIED WITH A DROPOUT 3, INCOMPLETE 4 (interrupted by a signal, resumable),
    FAILED or NOT VERIFIED (no --keys: signatures not checked) 1."""
    # emoji off: a problem's `path:100:` holds rich's emoji code :100:, printed as a symbol
    console = console or Console(soft_wrap=True, emoji=False)
    ok, public_keys = keys_for_cli(keys_dir, console, "")
    if not ok:
        return 1
    result = verify_logs(paths, public_keys)
    table = Table(title="Audit logs")
    for column in ("log", "party", "records", "privacy records", "head"):
        table.add_column(column)
    for log in result.logs:
        table.add_row(
            log.path,
            log.party or "?",
            str(log.records),
            str(log.privacy_records),
            "yes"
            if log.closed
            else f"[yellow]none: dropped out in round {log.dropped_in}[/]"
            if log.dropped_in is not None
            else f"[yellow]none: interrupted by {log.interrupted_by}[/]"
            if log.interrupted_by is not None
            else "[red]missing[/]",
        )
    console.print(table)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    data = collect(paths, result)
    _print_empirical(console, data)
    # the report's verdict, word for word: the logs' integrity and the privacy they record
    said = verdict(verification_json(result), run_facts(data))
    console.print(verdict_markup(said), highlight=False)
    if not result.keys_checked:
        # The one place that says how to check them; the verifier never trusts a key from a log.
        console.print(
            "  The verifier trusts only public keys you supply (KEYS/signing/<party>.pub, or the folder"
            " `secure-fed keys export-public` writes), never keys found inside a log.",
            highlight=False,
        )
    for item in [*result.problems, *result.interruptions, *result.dropouts]:
        console.print(f"  {item}", markup=False, highlight=False)
    return said.exit_code
