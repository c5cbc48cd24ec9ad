"""`secure-fed`: thin command line over the packages (parse, load config, call, report)."""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import shlex
import shutil
import signal
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, NoReturn

import click
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from secure_fed.config import ConfigError, RunConfig, load_config
from secure_fed.console import Terminated
from secure_fed.stops import forget_stop, raise_remembered

_OS_FIXES: tuple[tuple[type[OSError], str], ...] = (
    (PermissionError, "fix its permissions or choose a path you can write to"),
    (FileNotFoundError, "correct the path or create the folder it should be in"),
    (NotADirectoryError, "a part of the path is a file, not a folder: choose another path"),
    (IsADirectoryError, "it is a folder: give a file name"),
    (FileExistsError, "it exists already: choose a new path"),
)


def os_error_line(err: OSError) -> str:
    """One operator-facing line for a file-system error: the path, the reason and the fix."""
    if isinstance(err, shutil.SameFileError):
        return f"{err}; choose a different destination"
    fix = next((hint for kind, hint in _OS_FIXES if isinstance(err, kind)), "check the path and the disk")
    if err.filename is None:
        return f"{err}; {fix}"
    return f"{err.filename}: {err.strerror or err}; {fix}"


def _whole_sentences(text: str) -> str:
    """Help as sentences: a docstring's paragraphs without their line breaks (rich keeps them in
    the command list and in later paragraphs, where they cut sentences and example commands in
    two), except before an `Example:` line; and "[" escaped, which rich read as markup ("[deploy]"
    vanished from a help line)."""
    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not line.startswith("Example:"):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.strip())
        paragraphs.append("\n".join(lines))
    return escape("\n\n".join(paragraphs))


class _Commands(TyperGroup):
    """Commands refuse the errors they foresee with their own message; a file-system error none of
    them foresaw (an output folder that cannot be written, a path that is a file) is still the
    operator's to fix, so it gets one line naming the path, never a traceback. Their help is
    printed as whole sentences (`_whole_sentences`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            if getattr(command, "_whole_sentences", False):  # escaped once, never twice
                continue
            command._whole_sentences = True  # type: ignore[attr-defined]
            if command.help:
                command.help = _whole_sentences(command.help)
            for param in command.params:
                if getattr(param, "help", None):
                    param.help = escape(param.help)  # type: ignore[attr-defined]

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as err:
            _fail(os_error_line(err))


app = typer.Typer(
    cls=_Commands,
    no_args_is_help=True,
    add_completion=False,
    # A crash report must not print local variables: they can hold key material and patient data.
    pretty_exceptions_show_locals=False,
    help="Privacy-hardened FedTAR: federated longitudinal report generation.",
)
data_app = typer.Typer(cls=_Commands, no_args_is_help=True, help="Make or check cohorts.")
keys_app = typer.Typer(cls=_Commands, no_args_is_help=True, help="Provision keys.")
audit_app = typer.Typer(
    cls=_Commands, no_args_is_help=True, help="Verify audit logs and write the compliance report."
)
app.add_typer(data_app, name="data")
app.add_typer(keys_app, name="keys")
app.add_typer(audit_app, name="audit")
certs_app = typer.Typer(
    cls=_Commands, no_args_is_help=True, help="TLS certificates and SuperNode keys for a deployment."
)
app.add_typer(certs_app, name="certs")
ledger_app = typer.Typer(
    cls=_Commands, no_args_is_help=True, help="A site's persistent privacy ledger (ε across runs)."
)
app.add_typer(ledger_app, name="ledger")
code_app = typer.Typer(
    cls=_Commands,
    no_args_is_help=True,
    help="The code a deployed site runs: review a run's FAB, approve (pin) its hash.",
)
app.add_typer(code_app, name="code")
# soft_wrap: a path is printed whole on one line (a hard wrap at the terminal's width cut run
# folders in two in a captured log, where no one can copy them back)
# emoji off: a `path:100:` in a message is rich's emoji code :100:, and must print as digits
console = Console(stderr=True, soft_wrap=True, emoji=False)


def _say(message: str) -> None:
    # plain text: a config table's name ("[dp]") is what the operator must read, not markup
    console.print(message, markup=False, highlight=False, soft_wrap=True)


def _fail(message: str, code: int = 2) -> None:
    # Not wrapped (a log line per problem, greppable) and not read as markup (paths, "[data]").
    console.print(Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _config_problem(problem: str, path: Path | None, overrides: dict[str, Any]) -> str:
    """`file: key: what is wrong; fix` for one line of a ConfigError."""
    key = problem.split(": ", 1)[0]
    fix = ""
    if ": unknown key" in problem:  # the nearest known key, if any, is already named
        fix = "; remove or respell it (secure_fed/config/ defines every key)"
    elif problem.endswith("no such config file"):
        fix = "; pass an existing TOML file to --config"
    elif path is not None and problem.startswith(f"{path}: ") and "(at line" in problem:
        fix = "; fix the TOML there"
    elif overrides.get(key) is not None:
        fix = " (set on the command line)"
    if path is None or problem.startswith(f"{path}: ") or overrides.get(key) is not None:
        return problem + fix
    return f"{path}: {problem}{fix}"


def _config(path: Path | None, overrides: dict[str, Any]) -> RunConfig:
    try:
        return load_config(path, overrides)
    except ConfigError as err:
        # one line per problem (greppable), each naming the file and key and, where it helps, the fix
        problems = str(err).replace("<root>: ", "").replace("Value error, ", "").splitlines()
        lines = [_config_problem(problem, path, overrides) for problem in problems]
        for line in lines[:-1]:
            console.print(Text.assemble(("error:", "red"), " ", line), highlight=False, soft_wrap=True)
        _fail(lines[-1])
        raise  # unreachable
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        _fail(f"{path}: cannot read the configuration ({reason}); pass a readable TOML file to --config")
        raise  # unreachable


def _set_options(given: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` options as config overrides, each VALUE read as a TOML value (a bare word
    that is not one, e.g. `site`, as the string)."""
    overrides: dict[str, Any] = {}
    for item in given:
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key or not raw:
            _fail(f"--set {item}: give KEY=VALUE, e.g. --set dp.sample_rate=0.02")
        try:
            overrides[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            overrides[key] = raw
    return overrides


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
    from secure_fed.audits.alpha_path import alpha_path, summary_lines

    # FedTAR: α's path over the rounds, flagged where it left the write-up's [0.1, 0.9]
    for line in summary_lines(alpha_path(metrics.get("per_round") or [])):
        Console().print(line, style="bold red" if "LEFT" in line else None, markup=False, highlight=False)


def _run_in_folder(folder: Path) -> str | None:
    """What shows `folder` holds a run (the run id runner/folder.py gives it, configuration, logs,
    checkpoint, results)."""
    marks = ("run_id", "config.json", "audit", "checkpoint", "metrics.json")
    found = [name for name in marks if (folder / name).exists()]
    return ", ".join(f"{n}/" if (folder / n).is_dir() else n for n in found) or None


def _enclosing_run(folder: Path) -> Path | None:
    """The run folder `folder` lies inside, if any: a run's own folder (its audit/, checkpoint/)
    is its run's, and a new run written there mixed its logs with the run's."""
    for parent in folder.resolve().parents:
        held = _run_in_folder(parent) or ""
        if "config.json" in held and held != "config.json":
            return parent
    return None


_Terminated = Terminated


def _raise_terminated(signum: int, frame: object) -> None:
    raise_remembered(_Terminated())


def _raise_interrupted(signum: int, frame: object) -> None:
    raise_remembered(KeyboardInterrupt())


@contextlib.contextmanager
def _stop_signals() -> Iterator[None]:
    """SIGTERM (a service manager's stop) ends a command as Ctrl-C does; both are kept for the
    run's safe points, should code that clears errors swallow them (secure_fed.stops). A Ctrl-C
    ignored at the start (a background job) stays ignored."""
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _raise_interrupted)
    try:
        yield
    finally:
        forget_stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stopped(err: KeyboardInterrupt, how_to_go_on: str | None) -> NoReturn:
    """Ctrl-C or SIGTERM: what stopped the command and how to go on (None: said already), then its
    signal's exit code."""
    terminated = isinstance(err, _Terminated)
    if how_to_go_on is not None:
        console.print(
            f"{'terminated' if terminated else 'interrupted'}; {how_to_go_on}",
            highlight=False,
            soft_wrap=True,
        )
    raise typer.Exit(128 + (signal.SIGTERM if terminated else signal.SIGINT)) from None


@app.command()
def run(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML file (RunConfig tree)")] = None,
    method: Annotated[
        str | None,
        typer.Option(
            help="fedtar, fedtar-no-gmm, fedtar-no-temporal, fedavg, fedprox, fedadam, scaffold, drfa; "
            "on imaging data (data.kind = imaging): fm2, fedavg, fedprox, fedrep, fedbn"
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
    folder = resume or out
    if resume is not None and not (resume / "config.json").is_file():
        _fail(
            f"--resume {resume}: no run to continue there (no config.json); pass the folder an earlier"
            " `secure-fed run --out DIR` wrote, or use --out for a new run"
        )
    if resume is not None and (resume / "metrics.json").is_file():
        # its logs end with their head records: a closed log is never reopened
        _fail(f"--resume {resume}: that run finished (metrics.json is written); start a new run with --out")
    if resume is not None and config is None and (resume / "config.json").exists():
        given = {
            "--method": method, "--rounds": rounds, "--sites": sites, "--seed": seed, "--dp/--no-dp": dp,
            "--target-epsilon": target_epsilon, "--delta": delta, "--secagg/--no-secagg": secagg,
            "--he/--no-he": he, "--keys": keys, "--engine": engine, "--out": out,
        }  # fmt: skip
        ignored = [flag for flag, value in given.items() if value is not None]
        if ignored:
            # the run goes on as DIR/config.json says; a flag that would not be applied must not look applied
            _fail(
                f"--resume {resume} continues the run as {resume / 'config.json'} has it; "
                f"{', '.join(ignored)} would not apply: drop it, or start a new run with --out"
            )
        try:
            cfg = RunConfig.model_validate(json.loads((resume / "config.json").read_text()))
        except ValueError as err:  # JSON and pydantic errors alike
            _fail(f"{resume / 'config.json'}: not a run configuration ({err}); start a new run with --out")
            raise
    else:
        cfg = _config(config, overrides)
        if sites is not None and cfg.data.kind == "imaging":
            cfg.data.imaging.sites = sites
        _refuse_unapplied_privacy(cfg, {"--target-epsilon": target_epsilon, "--delta": delta})
    folder = Path(folder or cfg.out)
    cfg = cfg.model_copy(update={"out": folder})
    held = _run_in_folder(folder) if resume is None else None
    if held:
        # a second run here appended to the first one's closed logs, which then stopped verifying
        way_on = (
            "that run finished:"
            if (folder / "metrics.json").is_file()
            else f"`secure-fed run --resume {folder}` continues it, or"
        )
        _fail(f"--out {folder}: holds a run already ({held}); {way_on} give another --out for a new run")
    inside = _enclosing_run(folder) if resume is None else None
    if inside is not None:
        _fail(
            f"--out {folder}: lies inside the run folder {inside}, which belongs to that run; give an --out "
            "outside it for a new run"
        )
    if resume is not None:
        from secure_fed.resume_check import ResumeRefused, check_resume

        try:
            # every file the resumed run needs, before anything starts or any log is touched
            check_resume(cfg, folder)
        except ResumeRefused as err:
            _fail(str(err))
    for flag, given in (("--keys", keys), ("he.keys_dir", cfg.he.keys_dir if cfg.he.enabled else None)):
        if given is not None and not Path(given).is_dir():
            _fail(f"{flag} {given}: no such key folder; make one with `secure-fed keys init --out {given}`")
    from secure_fed.model.device import DeviceUnavailable, resolve_device

    try:
        resolve_device(cfg.train.device)  # a missing GPU is a start-up error, not a mid-round one
    except DeviceUnavailable as err:
        _fail(str(err))
    from secure_fed.console import privacy_line, quiet_frameworks, run_progress

    quiet_frameworks(verbose)  # before the frameworks are imported: some read their settings then
    from secure_fed.data.manifest import DataValidationError
    from secure_fed.runner import preflight

    try:
        preflight(cfg)  # refuse bad data before the run folder or anything slow exists
    except DataValidationError as err:
        _fail(f"the run's data cannot be used ({len(err.problems)} problem(s)):\n" + "\n".join(err.problems))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if resume is None:
            (folder / "config.json").write_text(cfg.model_dump_json(indent=1))
    except OSError as err:
        _fail(f"--out {folder}: cannot write the run folder ({err.strerror}); choose a writable folder")
    from secure_fed.audits.log import AuditLogError
    from secure_fed.runner import SimulationFailed, run_federated
    from secure_fed.server.orchestrator import MachineryFailed, SitesLost
    from secure_fed.superlink import SuperLinkError

    console.print(
        f"secure-fed: {cfg.fed.method}, {cfg.fed.rounds} rounds, engine={cfg.fed.engine}, "
        f"dp={_dp_state(cfg)}, secagg={'on' if cfg.secagg_on else 'off'}, "
        f"he={'on' if cfg.he.enabled else 'off'} → {folder}",
        soft_wrap=True,
    )
    if cfg.dp.enabled and not cfg.dp.noise_free_reference:
        _say(_ledger_note(cfg))
    # a service manager stops a run with SIGTERM: end it as Ctrl-C does, with the same way back
    try:
        with _stop_signals(), run_progress(console, cfg.fed.rounds, _round_line) as shown:
            outcome = run_federated(
                cfg, folder, resume=resume is not None, progress=shown.on_round, on_phase=shown.on_phase
            )
    except (SitesLost, MachineryFailed) as err:
        from secure_fed.runner import report_after_stop

        # the run is not over (every log stays open for --resume), but the officer's report of how
        # far it got is written now, as after a stop signal
        written = report_after_stop(cfg, folder)
        if written:
            _say(written)
        _fail(err.console_line(folder), 1)
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
        _fail(str(err), 1)
        raise
    except KeyboardInterrupt as err:
        # Click would swallow it with a bare newline; say what happened, what the stop cost (the
        # round's ε the sites were charged) and how to go on, then write the report the officer reads
        from secure_fed.runner import report_after_stop, stop_words

        word = "terminated" if isinstance(err, _Terminated) else "interrupted"
        console.print(f"{word} {stop_words(folder)}", highlight=False, soft_wrap=True, markup=False)
        written = report_after_stop(cfg, folder)
        if written:
            _say(written)
        _stopped(err, None)
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
        from secure_fed.runner import report_line

        # the report's verdict beside the console's: both say whether the run was the one asked for
        _say(report_line(report))
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
                _fail(
                    f"{flag} {value:g} applies only with DP, which is off: add --dp "
                    f"(or [dp] enabled = true), or drop {flag}"
                )
        if cfg.dp.budget_epsilon is not None:
            _fail(
                f"dp.budget_epsilon = {cfg.dp.budget_epsilon:g} limits DP releases, but DP is off: add --dp "
                "(or [dp] enabled = true), or remove dp.budget_epsilon"
            )
    elif cfg.dp.budget_epsilon is not None and cfg.dp.ledger_dir is None and _real_data(cfg):
        _fail(
            f"dp.budget_epsilon = {cfg.dp.budget_epsilon:g} is these patients' budget over all runs: set "
            "dp.ledger_dir to the folder that keeps their ledger across runs (a deployed node's is "
            "<out>/ledgers)"
        )


def _real_data(cfg: RunConfig) -> bool:
    """Patients' records (a manifest or an annotation file), not a generated benchmark."""
    if cfg.data.kind == "imaging":
        return cfg.data.imaging.path is not None
    return cfg.data.source != "synthetic"


def _dp_state(cfg: RunConfig) -> str:
    if cfg.dp.noise_free_reference:
        return "OFF (noise-free reference: clipped, un-noised, ε = ∞)"
    return "on" if cfg.dp.enabled else "off"


def _ledger_note(cfg: RunConfig) -> str:
    if cfg.dp.ledger_dir is not None:
        return f"lifetime ledger: {cfg.dp.ledger_dir} (every run on these patients is charged there)"
    if _real_data(cfg):
        return "lifetime ledger: none ([dp] ledger_dir unset): ε below is this run's only, not the patients'"
    return "lifetime ledger: none (synthetic benchmark, [dp] ledger_dir unset): ε below is this run's only"


@app.command(
    hidden=True,
    add_help_option=False,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def sweep(ctx: typer.Context) -> None:
    """Moved: the research harness is `secure-fed-lab`, outside the code a site approves."""
    # one line, the operator's own arguments carried over: the sweeps left the package a hospital
    # reviews (secure_fed/lab, not in the FAB), and this command must not import them
    _fail(
        "`secure-fed sweep` moved to the research harness, outside the code a site approves: run "
        f"`{shlex.join(['secure-fed-lab', 'sweep', *ctx.args])}` (same options)"
    )


@app.command()
def client(
    site: Annotated[str, typer.Option(help="this hospital's site name (as in the cohort)")],
    config: Annotated[
        Path, typer.Option("--config", "-c", help="the SITE's own policy TOML (RunConfig tree)")
    ],
    superlink: Annotated[
        str, typer.Option(help="SuperLink address host:port (its --port; Flower's default is 8000)")
    ] = "127.0.0.1:8000",
    keys: Annotated[
        Path | None, typer.Option(help="this site's key folder (signing key for its audit log)")
    ] = None,
    root_certificates: Annotated[
        Path | None, typer.Option(help="CA certificate of the SuperLink (TLS)")
    ] = None,
    auth_key: Annotated[
        Path | None, typer.Option(help="SuperNode private key (SuperNode authentication)")
    ] = None,
    insecure: Annotated[bool, typer.Option(help="no TLS (local tests only)")] = False,
    runtime_port: Annotated[
        int,
        typer.Option(help="port of the node's local Runtime API (127.0.0.1 only; one per node on a host)"),
    ] = 9094,
    dry_run: Annotated[bool, typer.Option(help="print the command instead of running it")] = False,
    prepare_only: Annotated[
        bool, typer.Option(help="check, fill the model and data caches, and exit (no node)")
    ] = False,
) -> None:
    """Run this hospital's hardened node: a Flower SuperNode whose ClientApp takes every privacy
    setting from the site's own --config, never from the server, with telemetry off.

    Example: secure-fed client --site site0 --config site0.toml --superlink link.hospital.net:8000
    --root-certificates ca.crt --auth-key node.key --keys keys
    """
    import os
    import shutil

    from secure_fed.clients.preflight import PreflightError, check_connection, check_node

    policy = _config(config, {})  # fail here, not mid-round, on a bad policy file
    if not insecure and root_certificates is None and not prepare_only:
        _fail("TLS needs --root-certificates (or pass --insecure for a local test)")
    try:  # seconds, before any SuperNode, Flower or pretraining starts
        check_connection(superlink, runtime_port, insecure, root_certificates)
        check_node(policy, config, site, keys, root_certificates, auth_key)
    except PreflightError as err:
        _fail(str(err))
    approvals = None if prepare_only else _approved_fabs(policy, config)
    # Absolute paths: the SuperNode's ClientApp processes and a service file run from other folders.
    node_config = f"site='{site}' config-file='{config.resolve()}'"
    if keys is not None:
        node_config += f" keys-dir='{keys.resolve()}'"
    if approvals is not None:
        node_config += f" approved-fabs='{approvals}'"
    root_certificates = root_certificates.resolve() if root_certificates is not None else None
    auth_key = auth_key.resolve() if auth_key is not None else None
    beside = Path(sys.executable).parent / "flower-supernode"
    exe = str(beside) if beside.exists() else shutil.which("flower-supernode") or "flower-supernode"
    # The Runtime API (ClientApp processes ↔ SuperNode) stays on loopback, whatever Flower's default.
    cmd = [exe, "--superlink", superlink, "--node-config", node_config]
    cmd += ["--host", "127.0.0.1", "--port", str(runtime_port)]
    cmd += ["--insecure"] if insecure else ["--root-certificates", str(root_certificates)]
    if auth_key is not None:
        cmd += ["--auth-supernode-private-key", str(auth_key)]
    from secure_fed.clients.approved_app import launcher_text, node_path, write_launcher

    # Flower's SuperExec starts `flwr-clientapp` from PATH for every message; ours comes first, and
    # runs the site's installed code for approved FABs only (secure_fed/clients/approved_app.py).
    node_bin = Path(policy.out).resolve() / "node-bin"
    env = {**os.environ, "PATH": node_path(node_bin, os.environ.get("PATH"))}
    if not prepare_only:
        write_launcher(node_bin)
    if dry_run:
        import shlex

        typer.echo(f"# {node_bin / 'flwr-clientapp'}: {launcher_text().splitlines()[-1]}")
        from secure_fed._env import node_environment

        # quoted, unwrapped, with the hardening a service file would not get: ready to paste
        hardening = [f"{key}={value}" for key, value in node_environment().items()]
        # the service's PATH, not this shell's: the operator's own folders have no place in a unit file
        service = node_path(node_bin, _SERVICE_PATH)
        typer.echo(shlex.join(["env", *hardening, f"PATH={service}", *cmd]))
        return
    from secure_fed.clients.preflight import prepare_site
    from secure_fed.clients.supervise import run_node

    # The base model and the site's data are ready before the node connects, not in its first
    # message: the first pretraining takes minutes on a CPU.
    console.print(
        f"{site}: preparing the model base and the site's data (cache {policy.model.cache_dir.resolve()})"
    )
    try:
        prepare_site(policy, site)
    except (OSError, ValueError) as err:
        _fail(f"{site}: {err}")
    if prepare_only:
        console.print(f"{site}: ready")
        return
    # The SuperNode process does not import secure_fed itself: hand it the hardened environment.
    # Its SuperExec child would outlive it; run_node ends the whole process group with it.
    tls = "without TLS" if insecure else f"with TLS (CA {root_certificates})"
    console.print(f"{site}: SuperNode dialling SuperLink {superlink} {tls}")
    status = run_node(cmd, env=env)
    if status not in (0, 130, 143):  # not a clean end, nor Ctrl-C / SIGTERM from the operator
        console.print(
            f"[red]error:[/red] {site}: the SuperNode dialling {superlink} {tls} ended with status "
            f"{status}; its reason is in the lines above (refused: register the node's .pub with "
            "`flwr supernode register`; unreachable: the SuperLink's --port and this address must "
            "match; certificate: it must name the host in --superlink)"
        )
    raise typer.Exit(status)


# systemd's PATH for a service: what a node's unit runs with after the launcher and the venv
_SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _approved_fabs(policy: RunConfig, config: Path) -> Path:
    """The site's approval list, absolute; refused when it pins no FAB (the node would run nothing)."""
    from secure_fed.clients.approved_app import ApprovalError, approved_hashes

    if policy.deploy.approved_fabs is None:
        _fail(
            f"{config}: [deploy] approved_fabs is not set: name the file that pins the FABs this site "
            f"runs, then `secure-fed code review FAB` and `secure-fed code approve FAB --config {config}`"
        )
    approvals = Path(str(policy.deploy.approved_fabs)).resolve()
    try:
        pinned = approved_hashes(approvals)
    except ApprovalError as err:
        _fail(str(err))
    if not pinned:
        _fail(
            f"{approvals}: this site has approved no FAB: review the run's FAB with `secure-fed code "
            f"review FAB`, then `secure-fed code approve FAB --config {config}`"
        )
    return approvals


@data_app.command("synth")
def data_synth(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="folder for manifest.jsonl, labels.jsonl, images/")
    ],
    sites: Annotated[int, typer.Option(min=1, max=64)] = 3,
    patients: Annotated[int, typer.Option(min=1, help="patients per site")] = 60,
    visits: Annotated[int, typer.Option(min=1, max=16, help="maximum visits per patient")] = 5,
    seed: int = 0,
    image_size: Annotated[int, typer.Option(min=16, max=256)] = 32,
    kind: Annotated[
        str, typer.Option(help="reports (longitudinal cohort) or multimodal (FM2's imaging benchmark)")
    ] = "reports",
    per_class: Annotated[int, typer.Option(min=4, help="multimodal: images per (modality, class)")] = 40,
    split: Annotated[str, typer.Option(help="multimodal: overlapped (Dirichlet label skew) or disjoint")] = (
        "overlapped"
    ),
    phi: Annotated[
        float, typer.Option(min=0.001, help="multimodal: Dirichlet φ of the overlapped split")
    ] = 0.3,
) -> None:
    """Make a synthetic longitudinal cohort, or FM2's multi-modality imaging benchmark dealt to sites.

    Example: secure-fed data synth --out data/synth --sites 3
    Example: secure-fed data synth --kind multimodal --out data/mm --sites 4 --phi 0.1
    """
    if kind not in ("reports", "multimodal"):
        _fail(f"--kind {kind}: choose reports or multimodal")
    if kind == "multimodal":
        from secure_fed.data.multimodal import synthesize_sited

        if split not in ("overlapped", "disjoint"):
            _fail(f"--split {split}: choose overlapped or disjoint")
        try:
            manifest, counts = synthesize_sited(out, sites, per_class, split, phi, image_size, seed)
        except OSError as err:
            _fail(f"--out {out}: cannot write the benchmark ({err.strerror}); choose a writable folder")
            raise
        except ValueError as err:
            _fail(f"--sites {sites}: {err}")
            raise
        console.print(
            f"wrote {manifest} ({sum(counts.values())} images: "
            + ", ".join(f"{s} {n}" for s, n in counts.items())
            + ")"
        )
        return
    from secure_fed.data.synthetic import synthesize

    try:
        manifest = synthesize(
            out, sites=sites, patients=patients, visits=visits, seed=seed, image_size=image_size
        )
    except OSError as err:
        _fail(f"--out {out}: cannot write the cohort ({err.strerror}); choose a writable folder")
        raise
    console.print(f"wrote {manifest} ({sum(1 for _ in manifest.open())} visits)")


@data_app.command("check")
def data_check(
    path: Annotated[Path, typer.Argument(help="manifest.jsonl, annotation.json or a folder")],
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="run TOML whose data.val_fraction, data.test_fraction apply"),
    ] = None,
) -> None:
    """Validate a manifest: fields, images, visit dates in order, sites large enough to split.

    Prints every problem as file:line: field: problem (or file: field: problem), exits 2 if any.
    Example: secure-fed data check data/synth/manifest.jsonl
    """
    from secure_fed.data.cohort import check_main

    data = _config(config, {}).data
    raise typer.Exit(check_main(path, data.val_fraction, data.test_fraction))


@keys_app.command("init")
def keys_init(
    out: Annotated[Path, typer.Option("--out", "-o", help="key folder to create")],
    sites: Annotated[int, typer.Option(help="number of sites (site0..)")] = 3,
    parties: Annotated[
        str | None, typer.Option(help="comma-separated party names (overrides --sites)")
    ] = None,
    force: Annotated[bool, typer.Option(help="replace existing keys")] = False,
    coordinator: Annotated[
        str, typer.Option(help="the party that runs the server (one of the parties; never a SecAgg+ peer)")
    ] = "server",
) -> None:
    """CKKS contexts (secret for sites, public for the server), Ed25519 signing keys, fingerprints.

    Example: secure-fed keys init --out keys --sites 3
    """
    from secure_fed.crypto.keys import keys_init_main

    if parties is not None:
        names = [p.strip() for p in parties.split(",") if p.strip()]
        if len(names) < 2:
            _fail(
                f"--parties {parties!r}: name the server and at least one site, "
                "e.g. --parties server,site0,site1"
            )
    elif sites < 1:
        _fail(f"--sites {sites}: a federation needs at least one site")
    else:
        names = ["server", *(f"site{k}" for k in range(sites))]
    raise typer.Exit(keys_init_main(out, names, force, coordinator))


def _ceremony(step: Any, *args: Any) -> Any:
    from secure_fed.crypto.keys import KeyMaterialError

    try:
        return step(*args)
    except (KeyMaterialError, ValueError) as err:
        _fail(str(err))


@keys_app.command("new")
def keys_new(
    party: Annotated[str, typer.Option(help="this party's name: server, or the site's name")],
    out: Annotated[Path, typer.Option("--out", "-o", help="this party's own key folder")],
) -> None:
    """Make this party's signing key on its own machine; publish only signing/PARTY.pub.

    Example: secure-fed keys new --party site0 --out site0-keys
    """
    from secure_fed.crypto.key_ceremony import new_signing_key

    fingerprint = _ceremony(new_signing_key, out, party)
    typer.echo(f"{party}: {out / 'signing' / (party + '.pem')} stays here (0600)")
    typer.echo(f"{party}: publish {out / 'signing' / (party + '.pub')}  sha256 {fingerprint}")


@keys_app.command("he-init")
def keys_he_init(
    out: Annotated[Path, typer.Option("--out", "-o", help="the CKKS key holder's (a site's) key folder")],
) -> None:
    """Make the CKKS contexts, at one site: he/secret.tenseal goes to the other sites only.

    Example: secure-fed keys he-init --out site0-keys
    """
    from secure_fed.crypto.key_ceremony import new_he_context

    fingerprint = _ceremony(new_he_context, out)
    secret = out / "he" / "secret.tenseal"
    typer.echo(f"{secret}: give to every other site over its own channel, never to the server")
    typer.echo(f"{out / 'he' / 'public.tenseal'}: publish  sha256 {fingerprint}")


@keys_app.command("assemble")
def keys_assemble(
    keys: Annotated[Path, typer.Option(help="this party's key folder")],
    public: Annotated[
        Path, typer.Option(help="folder of every party's published .pub and he/public.tenseal")
    ],
    expect: Annotated[
        Path,
        typer.Option(
            help="parties.json agreed out of band, not via the server: "
            '{"he_public": sha256, "signing": {party: sha256}, "coordinator": party} as keys new / '
            "he-init printed them, the coordinator being the party that runs the server"
        ),
    ],
    expect_digest: Annotated[
        str | None,
        typer.Option(help="the ceremony digest the parties agreed on; refused if these keys give another"),
    ] = None,
) -> None:
    """Pin exactly the expected parties' published keys and the CKKS public context in this kit.

    Example: secure-fed keys assemble --keys site0-keys --public published --expect parties.json
    """
    from secure_fed.crypto.key_ceremony import assemble, ceremony_digest, load_expectation

    expected = _ceremony(load_expectation, expect)
    fingerprints = _ceremony(assemble, keys, public, expected, expect_digest)
    typer.echo(f"{keys / 'fingerprints.json'}: he_public {fingerprints['he_public']}")
    for party, fingerprint in fingerprints["signing"].items():
        typer.echo(f"  {party}  {fingerprint}")
    typer.echo(f"  coordinator {fingerprints['coordinator']}  (runs the server; never counted as a site)")
    typer.echo(f"ceremony digest {ceremony_digest(fingerprints)}")
    typer.echo("  compare it with every other party out of band (a call, a letter): all must read the same")


@keys_app.command("export-public")
def keys_export_public(
    keys: Annotated[Path, typer.Option(help="a key folder (kept private)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="folder to publish or give a verifier")],
) -> None:
    """Copy only the public part of a kit: .pub keys, he/public.tenseal, fingerprints.json.

    Example: secure-fed keys export-public --keys keys --out public-keys
    """
    from secure_fed.crypto.key_ceremony import export_public

    for path in _ceremony(export_public, keys, out):
        typer.echo(str(path))


@certs_app.command("init")
def certs_init(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="folder for ca.crt, superlink.pem/.key, node keys")
    ],
    host: Annotated[
        list[str] | None,
        typer.Option(help="an address the nodes dial, repeatable (the certificate's SAN)"),
    ] = None,
    nodes: Annotated[
        str, typer.Option(help="comma-separated node names: one OpenSSH ECDSA key pair each (NAME-node.key)")
    ] = "",
    days: Annotated[int, typer.Option(help="validity in days")] = 365,
    force: Annotated[bool, typer.Option(help="replace existing files")] = False,
) -> None:
    """A CA, a SuperLink certificate naming the dialled addresses, and SuperNode key pairs.

    Example: secure-fed certs init --out certs --host 127.0.0.1 --host localhost --nodes site0,site1,site2
    """
    from secure_fed.certs import DEFAULT_HOSTS, CertsError, init_certs

    names = [n.strip() for n in nodes.split(",") if n.strip()]
    try:
        kit = init_certs(out, host or list(DEFAULT_HOSTS), names, days, force)
    except CertsError as err:
        _fail(str(err))
        raise
    console.print(
        f"wrote {kit.ca} (give to every node and to `flwr`), {kit.cert} + {kit.key} (SuperLink only)"
    )
    for name, (private, public) in kit.nodes.items():
        console.print(f"wrote {private} ({name} only) and {public} (`flwr supernode register`)")


def _known_site(cfg: RunConfig, site: str, config: Path) -> None:
    """A misspelt site has no ledger, which must not read as "this site spent no ε"."""
    from secure_fed.clients.preflight import PreflightError, check_site_name

    try:
        check_site_name(cfg, site, config)
    except PreflightError as err:
        _fail(str(err))


@ledger_app.command("show")
def ledger_show(
    site: Annotated[str, typer.Option(help="the site whose ledger to show")],
    config: Annotated[Path, typer.Option("--config", "-c", help="the site's own policy TOML")],
) -> None:
    """Every run charged to this site's data set and the ε spent, per run and in all.

    Example: secure-fed ledger show --site site0 --config site0.toml
    """
    from secure_fed.clients.lifetime import site_ledger_of

    cfg = _config(config, {})
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
    from secure_fed.clients.lifetime import reset_site_ledger, site_ledger_of

    cfg = _config(config, {})
    _known_site(cfg, site, config)
    if not yes:
        store = site_ledger_of(cfg, site)
        _fail(
            f"{store.path.resolve()} holds {len(store.runs)} run(s) of {site}'s spent ε; "
            "add --yes to delete it"
        )
    try:
        store, record = reset_site_ledger(cfg, site, keys, reason)
    except (OSError, ValueError) as err:
        _fail(str(err))
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
    from secure_fed.audits.verify_console import verify_main

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
    from secure_fed.audits.report import report_main

    missing = [str(log) for log in logs if not log.is_file()]
    if missing:  # a report on logs that are not there would only list that they are not
        _fail(f"{missing[0]}: no such audit log; pass the run's audit/*.jsonl (nothing was written)")
    if out.suffix.lower() in (".json", ".csv"):
        # the .json and .csv go beside the HTML under its stem: this name would overwrite the HTML
        _fail(
            f"--out {out}: name the HTML report (e.g. {out.with_suffix('.html')}); "
            "the JSON and CSV go beside it"
        )
    # emoji off: the verdict's first problem (`log.jsonl:100: …`) holds rich's emoji code :100:
    raise typer.Exit(report_main(logs, out, keys, Console(soft_wrap=True, emoji=False)))


@audit_app.command("empirical")
def audit_empirical(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML file (RunConfig tree)")] = None,
    canaries: Annotated[
        int | None,
        typer.Option(
            help="M: canaries, each included with probability ½; default: the fewest whose ceiling "
            "ε̂_max clears the stated ε (3,000 at ε = 4)"
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="audit run folder")] = None,
    site: Annotated[
        list[str] | None, typer.Option(help="site to audit (repeatable); default: every site")
    ] = None,
    guesses: Annotated[
        int | None, typer.Option(help='guesses: "in" for the top-scoring canaries; default M/10')
    ] = None,
    target_epsilon: Annotated[
        float | None, typer.Option(help="turn DP on at this ε (else the config's dp section)")
    ] = None,
    rounds: Annotated[int | None, typer.Option(help="federated rounds")] = None,
) -> None:
    """One-run privacy audit: plant M gradient canaries in each site's own DP-SGD, measure the lower
    bound ε̂ and log it beside the stated ε; writes OUT/audit/*.jsonl and OUT/report.html. With
    dp.noise = "distributed" the canaries are patients of the honest sites in the run plan's rounds
    and the guesses come from the decoded ring sum.

    Example: secure-fed audit empirical --config configs/empirical_audit.toml --canaries 1000 -o runs/audit
    """
    import os

    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    overrides: dict[str, Any] = {"fed.rounds": rounds}
    if target_epsilon is not None:
        overrides |= {"dp.enabled": True, "dp.target_epsilon": target_epsilon}
    cfg = _config(config, overrides)
    where = str(config) if config else "the default configuration"
    if not cfg.dp.enabled:
        _fail(
            f"{where}: dp.enabled is false, so there is no mechanism to audit; set [dp] enabled = true "
            "and target_epsilon, or pass --target-epsilon"
        )
    if canaries is not None and canaries < 2:
        _fail(f"--canaries must be at least 2, got {canaries}")
    if guesses is not None and canaries is not None and not 1 <= guesses <= canaries:
        _fail(f"--guesses must lie in [1, {canaries}] (the number of canaries), got {guesses}")
    folder = Path(out or cfg.out)
    if (folder / "sites").exists() or any((folder / "audit").glob("*.jsonl")):
        # a second audit there would resume the first one's ledgers and logs
        _fail(f"{folder}: already holds a run; give a new --out folder")
    from secure_fed.clients.empirical_audit import run_empirical_audit, write_audit_report
    from secure_fed.data.sites import site_names

    names = site_names(cfg)
    chosen = site or names
    unknown = [name for name in chosen if name not in names]
    if unknown:
        _fail(f"--site {unknown[0]}: not a site of {where} (sites: {', '.join(names)})")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    table = Table(title="empirical privacy audit")
    columns = ("site", "mechanism", "ε̂ (95 %)", "ceiling ε̂_max", "stated ε", "verdict", "correct / guesses")
    for column in (*columns, "canaries", "seconds"):
        table.add_column(column)
    violations = 0
    for name in chosen:
        try:
            result = run_empirical_audit(cfg, name, canaries, folder, guesses=guesses)
        except (ValueError, FileNotFoundError, PermissionError) as err:
            _fail(str(err), 1)
            raise
        for row in (result.payload(), *result.releases):
            violations += row["verdict"] == "violation"
            table.add_row(
                name,
                str(row["mechanism"]) + (f" ({result.steps} steps)" if row["mechanism"] == "dp_sgd" else ""),
                f"{row['epsilon_hat']:.3f}",
                f"{row['epsilon_hat_max']:.3f}",
                f"{row['stated_epsilon']:.3f}",
                # inconclusive: the ceiling is at or below ε, so no mechanism could have failed it
                str(row["verdict"]),
                f"{row['correct']} / {row['guesses']}",
                str(row["canaries"]),
                f"{result.seconds:.0f}" if row["mechanism"] == "dp_sgd" else "",
            )
    Console().print(table)
    if violations:
        console.print(
            f"{violations} violation(s): evidence of a leak above the stated ε, not proof: a correct "
            "implementation shows one in at most 5 % of audits at 95 % confidence. Rerun the audit in "
            "a new --out folder (a fresh secret seed); a real leak shows again."
        )
    report = write_audit_report(cfg.model_copy(update={"out": folder}), names)
    if report is not None:
        console.print(
            f"wrote {report}; check with: secure-fed audit verify {folder}/audit/*.jsonl --keys {folder}/keys"
        )


def _approvals_of(config: Path) -> Path:
    policy = _config(config, {})
    if policy.deploy.approved_fabs is None:
        _fail(f"{config}: [deploy] approved_fabs is not set: name the file that pins the FABs it approves")
    return Path(str(policy.deploy.approved_fabs))


@code_app.command("review")
def code_review(
    fab: Annotated[Path, typer.Argument(help="the run's FAB (`flwr build` makes it from the project)")],
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="the site's policy: also say whether it is approved")
    ] = None,
) -> None:
    """List the FAB's files against the site's installed secure_fed and print its SHA-256.

    The node never runs the FAB's code: for an approved FAB it runs the site's installed package.
    Files that differ show where the coordinator's release and this site's install part.
    """
    from secure_fed.clients.approved_app import ApprovalError, approved_hashes, package_digest, review_fab

    try:
        found = review_fab(fab)
        pinned = approved_hashes(_approvals_of(config)) if config is not None else None
    except ApprovalError as err:
        _fail(str(err))
    for name, status in found.files:
        typer.echo(f"  {status:<26} {name}")
    for name in found.missing:
        typer.echo(f"  {'missing from the FAB':<26} {name}")
    differ = sum(status != "same" for _, status in found.files if status != "not code") + len(found.missing)
    typer.echo(f"{len(found.files)} files; {differ} differ from the site's installed secure_fed")
    typer.echo(f"installed package digest {package_digest()} (the code the node runs)")
    state = "" if pinned is None else (" (approved)" if found.sha256 in pinned else " (not approved)")
    typer.echo(f"FAB sha256 {found.sha256}{state}")


@code_app.command("approve")
def code_approve(
    fab: Annotated[Path, typer.Argument(help="the FAB reviewed with `secure-fed code review`")],
    config: Annotated[Path, typer.Option("--config", "-c", help="the site's policy: [deploy] approved_fabs")],
    note: Annotated[str, typer.Option(help="why, e.g. the release or ticket it belongs to")] = "",
    by: Annotated[str | None, typer.Option(help="who approves (default: the login name)")] = None,
) -> None:
    """Pin the FAB's SHA-256 in the site's approval list: the node runs runs of it, and no other.

    Example: secure-fed code approve secure-fed.secure-fed.0-1-0.1a2b3c4d.fab --config site0.toml
    """
    import getpass

    from secure_fed.clients.approved_app import ApprovalError, approve_fab

    approvals = _approvals_of(config)
    try:
        sha, added = approve_fab(approvals, fab, by or getpass.getuser(), note)
    except ApprovalError as err:
        _fail(str(err))
    typer.echo(f"{approvals}: FAB sha256 {sha} {'approved' if added else 'was already approved'}")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        # `run` says how to go on itself; any other command has nothing to resume
        console.print("interrupted")
        sys.exit(130)
