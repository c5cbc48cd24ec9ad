"""`secure-fed run`: one federated experiment, its run folder's rules (a new run never writes into
another's folder; `--resume` only continues one that started and has not finished) and its console."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from secure_fed.cli.common import (
    console,
    fail,
    read_config,
    real_data,
    say,
    stop_signals,
    stopped,
)
from secure_fed.config import RunConfig
from secure_fed.launch.console import Terminated


def _round_line(round_id: int, rounds: int, result: Any) -> str:
    alpha = "" if result.alpha is None else " α=[" + ", ".join(f"{a:.3f}" for a in result.alpha) + "]"
    eps = ""
    if result.epsilon:
        eps = " ε=" + ", ".join(f"{s}:{v['rdp']:.2f}" for s, v in sorted(result.epsilon.items()))
    loss = f" val_loss={result.val_loss:.4f}" if result.val_loss is not None else ""
    declined = f" declined={sorted(result.declined)}" if result.declined else ""
    # the sites that delivered the whole round: a site whose worker ended after the sum sent no α
    trained = len(result.participants)
    delivered = trained if getattr(result, "delivered", None) is None else len(result.delivered)
    sites = f"sites={delivered}"
    kept = bool(getattr(result, "alpha_kept", False))
    if delivered < trained or kept:
        sites += f" (of {trained} that trained{'; α kept, none summed' if kept else ''})"
    return f"[bold]round {round_id}/{rounds}[/bold] {sites}{loss}{alpha}{eps}{declined}"


def _print_metrics(metrics: dict[str, Any]) -> None:
    table = Table(title=f"test metrics — {metrics['method']} (seed {metrics['seed']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in metrics["test"].items():
        table.add_row(
            name,
            "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4f}",
        )
    Console().print(table)
    from secure_fed.verifier.alpha_path import alpha_path, summary_lines

    # FedTAR: α's path over the rounds, flagged where it left the write-up's [0.1, 0.9]
    for line in summary_lines(alpha_path(metrics.get("per_round") or [])):
        Console().print(line, style="bold red" if "LEFT" in line else None, markup=False, highlight=False)


def run(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML file (RunConfig tree)")] = None,
    method: Annotated[
        str | None,
        typer.Option(
            help="the method (fed.method), one the algorithm folders register; `secure-fed methods` lists "
            "them with the data each runs on"
        ),
    ] = None,
    rounds: Annotated[int | None, typer.Option(help="federated rounds")] = None,
    sites: Annotated[int | None, typer.Option(help="synthetic sites")] = None,
    seed: Annotated[int | None, typer.Option(help="run seed")] = None,
    dp: Annotated[bool | None, typer.Option("--dp/--no-dp", help="patient-level DP")] = None,
    target_epsilon: Annotated[float | None, typer.Option(help="ε target per patient (with --dp)")] = None,
    delta: Annotated[
        float | None, typer.Option(help="δ (default min(1e-5, 1/(10 B)), B = n rounded up to a power of ten)")
    ] = None,
    secagg: Annotated[
        bool | None, typer.Option("--secagg/--no-secagg", help="SecAgg+ for the updates")
    ] = None,
    he: Annotated[bool | None, typer.Option("--he/--no-he", help="CKKS for the α scalars")] = None,
    keys: Annotated[
        Path | None, typer.Option(help="key folder from `secure-fed keys init` (for --he)")
    ] = None,
    engine: Annotated[str | None, typer.Option(help="simulation (Flower + Ray) or inprocess")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="run folder")] = None,
    resume: Annotated[Path | None, typer.Option(help="continue the run in this folder")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="also show Flower's, Ray's and our INFO logs")
    ] = False,
) -> None:
    """Run one federated experiment; writes OUT/metrics.json, checkpoint/, audit/ and report.html.

    Example: secure-fed run --method fedtar --rounds 3 --dp --target-epsilon 8 --out runs/dp8
    """
    overrides = {
        "fed.method": method,
        "fed.rounds": rounds,
        "data.synth.sites": sites,
        "seed": seed,
        "dp.enabled": dp,
        "dp.target_epsilon": target_epsilon,
        "dp.delta": delta,
        "secagg.enabled": secagg,
        "he.enabled": he,
        "he.keys_dir": str(keys) if keys else None,
        "fed.engine": engine,
    }
    from secure_fed.launch.runner.folder import (
        RunFolderRefused,
        check_new_folder,
        check_resumable,
        resumed_config,
    )

    given = {
        "--method": method, "--rounds": rounds, "--sites": sites, "--seed": seed, "--dp/--no-dp": dp,
        "--target-epsilon": target_epsilon, "--delta": delta, "--secagg/--no-secagg": secagg,
        "--he/--no-he": he, "--keys": keys, "--engine": engine, "--out": out,
    }  # fmt: skip
    try:  # the run folder's rules are the runner's (launch); here only their one line
        if resume is not None:
            check_resumable(resume)
        if resume is not None and config is None:
            cfg = resumed_config(resume, given)
        else:
            cfg = _new_config(
                config, overrides, sites, {"--target-epsilon": target_epsilon, "--delta": delta}
            )
        folder = Path(resume or out or cfg.out)
        cfg = cfg.model_copy(update={"out": folder})
        if resume is None:
            check_new_folder(folder)
    except RunFolderRefused as err:
        fail(str(err))
        raise
    _prepare(cfg, folder, resume is not None, keys, verbose)
    outcome = _federate(cfg, folder, resume is not None)
    _report_outcome(cfg, folder, outcome)


def _new_config(
    config: Path | None, overrides: dict[str, Any], sites: int | None, privacy: dict[str, float | None]
) -> RunConfig:
    cfg = read_config(config, overrides)
    if sites is not None and cfg.data.kind == "imaging":
        cfg.data.imaging.sites = sites
    _refuse_unapplied_privacy(cfg, privacy)
    return cfg


def _prepare(cfg: RunConfig, folder: Path, resumed: bool, keys: Path | None, verbose: bool) -> None:
    """Everything refusable is refused before the run folder or anything slow exists; then the
    folder and its config.json are written."""
    if resumed:
        from secure_fed.launch.resume_check import ResumeRefused, check_resume

        try:
            # every file the resumed run needs, before anything starts or any log is touched
            check_resume(cfg, folder)
        except ResumeRefused as err:
            fail(str(err))
    for flag, given in (("--keys", keys), ("he.keys_dir", cfg.he.keys_dir if cfg.he.enabled else None)):
        if given is not None and not Path(given).is_dir():
            fail(f"{flag} {given}: no such key folder; make one with `secure-fed keys init --out {given}`")
    from secure_fed.model.device import DeviceUnavailable, resolve_device

    try:
        resolve_device(cfg.train.device)  # a missing GPU is a start-up error, not a mid-round one
    except DeviceUnavailable as err:
        fail(str(err))
    from secure_fed.launch.console import quiet_frameworks

    quiet_frameworks(verbose)  # before the frameworks are imported: some read their settings then
    from secure_fed.data.manifest import DataValidationError
    from secure_fed.launch.runner import preflight

    try:
        preflight(cfg)  # refuse bad data before the run folder or anything slow exists
    except DataValidationError as err:
        fail(f"the run's data cannot be used ({len(err.problems)} problem(s)):\n" + "\n".join(err.problems))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not resumed:
            (folder / "config.json").write_text(cfg.model_dump_json(indent=1))
    except OSError as err:
        fail(f"--out {folder}: cannot write the run folder ({err.strerror}); choose a writable folder")


def _federate(cfg: RunConfig, folder: Path, resumed: bool) -> Any:
    """The run itself, its progress on the console; a failure or a stop is one line and an exit."""
    from secure_fed.audits.log import AuditLogError
    from secure_fed.launch.console import run_progress
    from secure_fed.launch.runner import SimulationFailed, run_federated
    from secure_fed.launch.superlink import SuperLinkError
    from secure_fed.server.orchestrator import MachineryFailed, SitesLost

    console.print(
        f"secure-fed: {cfg.fed.method}, {cfg.fed.rounds} rounds, engine={cfg.fed.engine}, "
        f"dp={_dp_state(cfg)}, secagg={'on' if cfg.secagg_on else 'off'}, "
        f"he={'on' if cfg.he.enabled else 'off'} → {folder}",
        soft_wrap=True,
    )
    if cfg.dp.enabled and not cfg.dp.noise_free_reference:
        say(_ledger_note(cfg))
    # a service manager stops a run with SIGTERM: end it as Ctrl-C does, with the same way back
    try:
        with stop_signals(), run_progress(console, cfg.fed.rounds, _round_line) as shown:
            return run_federated(
                cfg, folder, resume=resumed, progress=shown.on_round, on_phase=shown.on_phase
            )
    except (SitesLost, MachineryFailed) as err:
        from secure_fed.launch.runner import report_after_stop

        # the run is not over (every log stays open for --resume), but the officer's report of how
        # far it got is written now, as after a stop signal
        written = report_after_stop(cfg, folder)
        if written:
            say(written)
        fail(err.console_line(folder), 1)
        raise
    except (
        ValueError,
        FileNotFoundError,
        PermissionError,
        KeyError,
        AuditLogError,
        SuperLinkError,
        SimulationFailed,
    ) as err:
        fail(str(err), 1)
        raise
    except KeyboardInterrupt as err:
        # Click would swallow it with a bare newline; say what happened, what the stop cost (the
        # round's ε the sites were charged) and how to go on, then write the report the officer reads
        from secure_fed.launch.runner import report_after_stop, stop_words

        word = "terminated" if isinstance(err, Terminated) else "interrupted"
        console.print(f"{word} {stop_words(folder)}", highlight=False, soft_wrap=True, markup=False)
        written = report_after_stop(cfg, folder)
        if written:
            say(written)
        stopped(err, None)


def _report_outcome(cfg: RunConfig, folder: Path, outcome: Any) -> None:
    """The finished run on the console: metrics, privacy, report; exit 1 for a log without its
    end record, 3 for fewer rounds than configured."""
    from secure_fed.launch.console import privacy_line

    _print_metrics(outcome.metrics)
    if outcome.stopped_early:
        console.print(f"[yellow]stopped early:[/yellow] {outcome.stopped_early}")
    budget = (cfg.dp.budget_epsilon or cfg.dp.target_epsilon) if cfg.dp.enabled else None
    closing = privacy_line(outcome.metrics, cfg.dp.accountant, budget)
    if cfg.dp.noise_free_reference:
        closing = "privacy: NONE, noise-free reference (clipped, un-noised updates: ε = ∞)"
    console.print(closing or "privacy: DP off, no ε accounted (--dp turns it on)", soft_wrap=True)
    console.print(f"wrote {folder / 'metrics.json'}")
    report = folder / "report.html"
    if report.exists():
        from secure_fed.launch.runner import report_line

        # the report's verdict beside the console's: both say whether the run was the one asked for
        say(report_line(report))
    if outcome.unfinished:
        # a site log without its end record does not verify: the run is not the one asked for
        for site, why in sorted(outcome.unfinished.items()):
            path = folder / "audit" / f"{site}.jsonl"
            console.print(
                Text.assemble(("error:", "red"), f" {path}: {site}'s log lacks its end record: {why}"),
                highlight=False,
                soft_wrap=True,
            )
        raise typer.Exit(1)
    short = _short_of_rounds(outcome.metrics, cfg.fed.rounds)
    if short:
        # fewer rounds than configured is not the run that was asked for: a script must not read
        # it as one (exit 3)
        console.print(Text.assemble(("incomplete:", "yellow"), " ", short), highlight=False, soft_wrap=True)
        raise typer.Exit(3)


def _short_of_rounds(metrics: dict[str, Any], rounds: int) -> str | None:
    """Why a run completed fewer rounds than configured (skipped rounds, an early stop), or None."""
    done = int(metrics.get("rounds", rounds))
    if done >= rounds:
        return None
    why = []
    for skip in metrics.get("skipped_rounds") or []:
        declined = sorted((skip.get("declined") or {}).items())
        parts = [f"{site} declined ({reason})" for site, reason in declined]
        parts += [f"{site} gone" for site in skip.get("dropped") or []]
        why.append(f"round {skip['round']} skipped: {', '.join(parts) or skip.get('reason')}")
    if metrics.get("stopped_early"):
        why.append(f"stopped early: {metrics['stopped_early']}")
    return (
        f"{done} of {rounds} rounds completed ({'; '.join(why) or 'see above'}); the model, metrics.json "
        "and the report cover those rounds"
    )


def _refuse_unapplied_privacy(cfg: RunConfig, flags: dict[str, float | None]) -> None:
    """Privacy settings that would not apply are refused, never ignored (a run without DP would
    otherwise go ahead non-private with the ε the operator asked for nowhere)."""
    if not cfg.dp.enabled:
        for flag, value in flags.items():
            if value is not None:
                fail(
                    f"{flag} {value:g} applies only with DP, which is off: add --dp "
                    f"(or [dp] enabled = true), or drop {flag}"
                )
        if cfg.dp.budget_epsilon is not None:
            fail(
                f"dp.budget_epsilon = {cfg.dp.budget_epsilon:g} limits DP releases, but DP is off: add --dp "
                "(or [dp] enabled = true), or remove dp.budget_epsilon"
            )
    elif cfg.dp.budget_epsilon is not None and cfg.dp.ledger_dir is None and real_data(cfg):
        fail(
            f"dp.budget_epsilon = {cfg.dp.budget_epsilon:g} is these patients' budget over all runs: set "
            "dp.ledger_dir to the folder that keeps their ledger across runs (a deployed node's is "
            "<out>/ledgers)"
        )


def _dp_state(cfg: RunConfig) -> str:
    if cfg.dp.noise_free_reference:
        return "OFF (noise-free reference: clipped, un-noised, ε = ∞)"
    return "on" if cfg.dp.enabled else "off"


def _ledger_note(cfg: RunConfig) -> str:
    if cfg.dp.ledger_dir is not None:
        return f"lifetime ledger: {cfg.dp.ledger_dir} (every run on these patients is charged there)"
    if real_data(cfg):
        return "lifetime ledger: none ([dp] ledger_dir unset): ε below is this run's only, not the patients'"
    return "lifetime ledger: none (synthetic benchmark, [dp] ledger_dir unset): ε below is this run's only"
