"""`secure-fed`: thin command line over the packages (parse, load config, call, report)."""

from __future__ import annotations

import json
import logging
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from secure_fed.config import ConfigError, RunConfig, load_config

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Privacy-hardened FedTAR: federated longitudinal report generation.",
)
data_app = typer.Typer(no_args_is_help=True, help="Make or check cohorts.")
keys_app = typer.Typer(no_args_is_help=True, help="Provision keys.")
audit_app = typer.Typer(no_args_is_help=True, help="Verify audit logs and write the compliance report.")
app.add_typer(data_app, name="data")
app.add_typer(keys_app, name="keys")
app.add_typer(audit_app, name="audit")
console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def _config(path: Path | None, overrides: dict[str, Any]) -> RunConfig:
    try:
        return load_config(path, overrides)
    except ConfigError as err:
        _fail(f"invalid configuration:\n{err}")
        raise  # unreachable


def _progress_printer(total_rounds: int) -> Any:
    def show(round_id: int, rounds: int, result: Any) -> None:
        alpha = "" if result.alpha is None else " α=[" + ", ".join(f"{a:.3f}" for a in result.alpha) + "]"
        eps = ""
        if result.epsilon:
            eps = " ε=" + ", ".join(f"{s}:{v['rdp']:.2f}" for s, v in sorted(result.epsilon.items()))
        loss = f" val_loss={result.val_loss:.4f}" if result.val_loss is not None else ""
        declined = f" declined={sorted(result.declined)}" if result.declined else ""
        console.print(
            f"[bold]round {round_id}/{rounds}[/bold] sites={len(result.participants)}{loss}{alpha}{eps}"
            f"{declined}"
        )

    return show


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


@app.command()
def run(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML file (RunConfig tree)")] = None,
    method: Annotated[
        str | None,
        typer.Option(
            help="fedtar, fedtar-no-gmm, fedtar-no-temporal, fedavg, fedprox, fedadam, scaffold, drfa"
        ),
    ] = None,
    rounds: Annotated[int | None, typer.Option(help="federated rounds")] = None,
    sites: Annotated[int | None, typer.Option(help="synthetic sites")] = None,
    seed: Annotated[int | None, typer.Option(help="run seed")] = None,
    dp: Annotated[bool | None, typer.Option("--dp/--no-dp", help="patient-level DP")] = None,
    target_epsilon: Annotated[float | None, typer.Option(help="ε target per patient (with --dp)")] = None,
    delta: Annotated[float | None, typer.Option(help="δ (default min(1e-5, 1/(10n)))")] = None,
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
    if resume is not None and config is None and (resume / "config.json").exists():
        saved = json.loads((resume / "config.json").read_text())
        cfg = _config(None, {})
        cfg = RunConfig.model_validate(saved)
    else:
        cfg = _config(config, overrides)
    folder = Path(folder or cfg.out)
    cfg = cfg.model_copy(update={"out": folder})
    folder.mkdir(parents=True, exist_ok=True)
    if resume is None:
        (folder / "config.json").write_text(cfg.model_dump_json(indent=1))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from secure_fed.runner import run_federated

    console.print(
        f"secure-fed: {cfg.fed.method}, {cfg.fed.rounds} rounds, engine={cfg.fed.engine}, "
        f"dp={'on' if cfg.dp.enabled else 'off'}, secagg={'on' if cfg.secagg_on else 'off'}, "
        f"he={'on' if cfg.he.enabled else 'off'} → {folder}"
    )
    try:
        outcome = run_federated(
            cfg, folder, resume=resume is not None, progress=_progress_printer(cfg.fed.rounds)
        )
    except (ValueError, FileNotFoundError, PermissionError, KeyError) as err:
        _fail(str(err), 1)
        raise
    _print_metrics(outcome.metrics)
    if outcome.stopped_early:
        console.print(f"[yellow]stopped early:[/yellow] {outcome.stopped_early}")
    console.print(f"wrote {folder / 'metrics.json'}")
    report = folder / "report.html"
    if report.exists():
        console.print(f"wrote {report}")


@app.command()
def sweep(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="TOML file (RunConfig tree)")] = None,
    methods: Annotated[str, typer.Option(help="comma-separated methods")] = "fedtar,fedavg",
    seeds: Annotated[str, typer.Option(help="comma-separated seeds")] = "0,1,2",
    epsilons: Annotated[str, typer.Option(help="comma-separated ε targets; 'inf' = no DP")] = "inf",
    rounds: Annotated[int | None, typer.Option(help="federated rounds")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="sweep folder")] = Path("runs/sweep"),
) -> None:
    """Methods × seeds × ε on the same data; writes results.json and a mean ± std table (results.md).

    Example: secure-fed sweep --methods fedtar,fedavg --seeds 0,1,2 --epsilons inf,8,4,1 -o runs/sweep
    """
    from secure_fed.sweep import sweep as run_sweep

    cfg = _config(config, {"fed.rounds": rounds, "fed.engine": "inprocess"})
    eps = [None if e.strip() in ("inf", "∞") else float(e) for e in epsilons.split(",")]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    results = run_sweep(
        cfg,
        [m.strip() for m in methods.split(",")],
        [int(s) for s in seeds.split(",")],
        eps,
        out,
        log=console.print,
    )
    Console().print((out / "results.md").read_text())
    console.print(f"wrote {out / 'results.json'} ({len(results['runs'])} runs)")


@app.command()
def client(
    site: Annotated[str, typer.Option(help="this hospital's site name (as in the cohort)")],
    config: Annotated[
        Path, typer.Option("--config", "-c", help="the SITE's own policy TOML (RunConfig tree)")
    ],
    superlink: Annotated[str, typer.Option(help="SuperLink Fleet API address host:port")] = "127.0.0.1:9092",
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
) -> None:
    """Run this hospital's hardened node: a Flower SuperNode whose ClientApp takes every privacy
    setting from the site's own --config, never from the server, with telemetry off.

    Example: secure-fed client --site site0 --config site0.toml --superlink link.hospital.net:9092
    --root-certificates ca.crt --auth-key node.key --keys keys
    """
    import os
    import shutil

    _config(config, {})  # fail here, not mid-round, on a bad policy file
    if not insecure and root_certificates is None:
        _fail("TLS needs --root-certificates (or pass --insecure for a local test)")
    node_config = f"site='{site}' config-file='{config.resolve()}'"
    if keys is not None:
        node_config += f" keys-dir='{keys.resolve()}'"
    beside = Path(sys.executable).parent / "flower-supernode"
    exe = str(beside) if beside.exists() else shutil.which("flower-supernode") or "flower-supernode"
    # The Runtime API (ClientApp processes ↔ SuperNode) stays on loopback, whatever Flower's default.
    cmd = [exe, "--superlink", superlink, "--node-config", node_config]
    cmd += ["--host", "127.0.0.1", "--port", str(runtime_port)]
    cmd += ["--insecure"] if insecure else ["--root-certificates", str(root_certificates)]
    if auth_key is not None:
        cmd += ["--auth-supernode-private-key", str(auth_key)]
    if dry_run:
        import shlex

        typer.echo(shlex.join(cmd))  # quoted, unwrapped: ready to paste into a service file
        return
    from secure_fed.clients.supervise import run_node

    # The SuperNode process does not import secure_fed itself: hand it the hardened environment.
    # Its SuperExec child would outlive it; run_node ends the whole process group with it.
    raise typer.Exit(run_node(cmd, env=os.environ))


@data_app.command("synth")
def data_synth(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="folder for manifest.jsonl, labels.jsonl, images/")
    ],
    sites: int = 3,
    patients: int = 60,
    visits: int = 5,
    seed: int = 0,
    image_size: int = 32,
) -> None:
    """Make a synthetic longitudinal cohort. Example: secure-fed data synth --out data/synth --sites 3"""
    from secure_fed.data.synthetic import synthesize

    manifest = synthesize(
        out, sites=sites, patients=patients, visits=visits, seed=seed, image_size=image_size
    )
    console.print(f"wrote {manifest} ({sum(1 for _ in manifest.open())} visits)")


@data_app.command("check")
def data_check(
    path: Annotated[Path, typer.Argument(help="manifest.jsonl, annotation.json or a folder")],
) -> None:
    """Validate a manifest; prints every problem as file:line: field: problem, exits 2 if any.

    Example: secure-fed data check data/synth/manifest.jsonl
    """
    from secure_fed.data.manifest import check_main

    raise typer.Exit(check_main(path))


@keys_app.command("init")
def keys_init(
    out: Annotated[Path, typer.Option("--out", "-o", help="key folder to create")],
    sites: Annotated[int, typer.Option(help="number of sites (site0..)")] = 3,
    parties: Annotated[
        str | None, typer.Option(help="comma-separated party names (overrides --sites)")
    ] = None,
    force: Annotated[bool, typer.Option(help="replace existing keys")] = False,
) -> None:
    """CKKS contexts (secret for sites, public for the server), Ed25519 signing keys, fingerprints.

    Example: secure-fed keys init --out keys --sites 3
    """
    from secure_fed.crypto.keys import keys_init_main

    names = parties.split(",") if parties else ["server", *(f"site{k}" for k in range(sites))]
    raise typer.Exit(keys_init_main(out, names, force))


@audit_app.command("verify")
def audit_verify(
    logs: Annotated[list[Path], typer.Argument(help="audit logs (*.jsonl)")],
    keys: Annotated[Path | None, typer.Option(help="key folder with the parties' public keys")] = None,
) -> None:
    """Check chains, signatures, completeness and re-derive every ε. Exit 0 only if all hold.

    Example: secure-fed audit verify runs/demo/audit/*.jsonl --keys runs/demo/keys
    """
    from secure_fed.audits.verify import verify_main

    raise typer.Exit(verify_main(logs, keys))


@audit_app.command("report")
def audit_report(
    logs: Annotated[list[Path], typer.Argument(help="audit logs (*.jsonl)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="report.html (json and csv beside it)")] = Path(
        "report.html"
    ),
    keys: Annotated[Path | None, typer.Option(help="key folder with the parties' public keys")] = None,
) -> None:
    """Write the compliance report (HTML + JSON + CSV).

    Example: secure-fed audit report runs/demo/audit/*.jsonl -o report.html --keys runs/demo/keys
    """
    from secure_fed.audits.report import report_main

    raise typer.Exit(report_main(logs, out, keys))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        console.print("interrupted; `secure-fed run --resume DIR` continues from the last checkpoint")
        sys.exit(130)


if __name__ == "__main__":
    main()
