"""`secure-fed audit` (verify the signed logs, write the compliance report) and `secure-fed ledger`
(a site's lifetime privacy ledger)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from secure_fed.cli.common import (
    Commands,
    console,
    fail,
    read_config,
)
from secure_fed.config import RunConfig

audit_app = typer.Typer(
    cls=Commands, no_args_is_help=True, help="Verify audit logs and write the compliance report."
)
ledger_app = typer.Typer(
    cls=Commands, no_args_is_help=True, help="A site's persistent privacy ledger (ε across runs)."
)


def _known_site(cfg: RunConfig, site: str, config: Path) -> None:
    """A misspelt site has no ledger, which must not read as "this site spent no ε"."""
    from secure_fed.launch.preflight import PreflightError, check_site_name

    try:
        check_site_name(cfg, site, config)
    except PreflightError as err:
        fail(str(err))


@ledger_app.command("show")
def ledger_show(
    site: Annotated[str, typer.Option(help="the site whose ledger to show")],
    config: Annotated[Path, typer.Option("--config", "-c", help="the site's own policy TOML")],
) -> None:
    """Every run charged to this site's data set and the ε spent, per run and in all.

    Example: secure-fed ledger show --site site0 --config site0.toml
    """
    from secure_fed.site.lifetime import site_ledger_of

    cfg = read_config(config, {})
    _known_site(cfg, site, config)
    store = site_ledger_of(cfg, site)
    delta = cfg.dp.delta if cfg.dp.delta is not None else 1e-5
    deltas = {"train": delta, "validation": delta}
    if not store.runs:
        console.print(f"{store.path.resolve()}: no release charged to {site}'s data yet")
        return
    table = Table(title=f"{site}: {store.path.resolve()} (ε at δ = {delta:g})")
    for column in ("run", "releases", "ε train", "ε validation"):
        table.add_column(column)
    rows = [(run, store.epsilon(deltas, run), len(store.runs[run])) for run in store.runs]
    for run, eps, count in [*rows, ("all runs", store.epsilon(deltas), sum(r[2] for r in rows))]:
        cells = [f"{eps[p]['rdp']:.3f}" if p in eps else "0" for p in ("train", "validation")]
        table.add_row(run, str(count), *cells)
    Console().print(table)


@ledger_app.command("reset")
def ledger_reset(
    site: Annotated[str, typer.Option(help="the site whose ledger to delete")],
    config: Annotated[Path, typer.Option("--config", "-c", help="the site's own policy TOML")],
    keys: Annotated[Path, typer.Option(help="the site's key folder (signs the record of the reset)")],
    reason: Annotated[str, typer.Option(help="why (kept in the signed record)")],
    yes: Annotated[bool, typer.Option("--yes", help="confirm: the patients' spent ε is forgotten")] = False,
) -> None:
    """Delete a site's persistent ledger: an operator's decision, signed and logged beside it.

    Example: secure-fed ledger reset --site site0 --config site0.toml --keys keys --reason "new cohort" --yes
    """
    from secure_fed.site.lifetime import reset_site_ledger, site_ledger_of

    cfg = read_config(config, {})
    _known_site(cfg, site, config)
    if not yes:
        store = site_ledger_of(cfg, site)
        fail(
            f"{store.path.resolve()} holds {len(store.runs)} run(s) of {site}'s spent ε; "
            "add --yes to delete it"
        )
    try:
        store, record = reset_site_ledger(cfg, site, keys, reason)
    except (OSError, ValueError) as err:
        fail(str(err))
        raise
    console.print(f"deleted {store.path.resolve()}; signed record in {record.resolve()}")


@audit_app.command("verify")
def audit_verify(
    logs: Annotated[list[Path], typer.Argument(help="audit logs (*.jsonl)")],
    keys: Annotated[
        Path | None,
        typer.Option(help="folder of the parties' <party>.pub public keys (`keys export-public`)"),
    ] = None,
) -> None:
    """Check chains, signatures, completeness and re-derive every ε. Exit 0 (VERIFIED) only if all
    hold; 3 (VERIFIED WITH A DROPOUT) if all hold but a site dropped out (its log stops where the
    server's signed log says it left); 4 (INCOMPLETE) if all hold but the run was interrupted (each
    log ends with its party's signed stop); 1 on any problem (FAILED) or without --keys (NOT
    VERIFIED: signatures not checked).

    Example: secure-fed audit verify runs/demo/audit/*.jsonl --keys runs/demo/public-keys
    """
    from secure_fed.verifier.verify_console import verify_main

    raise typer.Exit(verify_main(logs, keys))


@audit_app.command("report")
def audit_report(
    logs: Annotated[list[Path], typer.Argument(help="audit logs (*.jsonl)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="report.html (json and csv beside it)")] = Path(
        "report.html"
    ),
    keys: Annotated[
        Path | None,
        typer.Option(help="folder of the parties' <party>.pub public keys (`keys export-public`)"),
    ] = None,
) -> None:
    """Write the compliance report (HTML + JSON + CSV), led by the verdict `audit verify` gives, with
    its exit code.

    Example: secure-fed audit report runs/demo/audit/*.jsonl -o report.html --keys runs/demo/public-keys
    """
    from secure_fed.verifier.report import report_main

    missing = [str(log) for log in logs if not log.is_file()]
    if missing:  # a report on logs that are not there would only list that they are not
        fail(f"{missing[0]}: no such audit log; pass the run's audit/*.jsonl (nothing was written)")
    if out.suffix.lower() in (".json", ".csv"):
        # the .json and .csv go beside the HTML under its stem: this name would overwrite the HTML
        fail(
            f"--out {out}: name the HTML report (e.g. {out.with_suffix('.html')}); "
            "the JSON and CSV go beside it"
        )
    # emoji off: the verdict's first problem (`log.jsonl:100: …`) holds rich's emoji code :100:
    raise typer.Exit(report_main(logs, out, keys, Console(soft_wrap=True, emoji=False)))


@audit_app.command(
    "empirical",
    hidden=True,
    add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def audit_empirical(ctx: typer.Context) -> None:
    """Renamed: `secure-fed lower-bound`; `audit` is for the signed logs only."""
    fail(
        "`secure-fed audit empirical` is now `secure-fed lower-bound` (it measures a lower bound on ε; "
        f"`audit` names the signed logs only): run `{shlex.join(['secure-fed', 'lower-bound', *ctx.args])}` "
        "(same options)"
    )
